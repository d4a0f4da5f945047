"""An echo server written as tokend's calls socket reads (tokend/calls_socket.py:
an asyncio Protocol that takes each 5-byte prefix and its message from the
bytes as they arrive and writes the answer in the same callback): the
floor under the daemon's round trips on this machine, for
hook/bench/socket_echo.c. Usage: python socket_echo_server.py SOCKET; prints
"ready" once it listens, and serves until killed."""
from __future__ import annotations

import asyncio
import struct
import sys

FRAME = struct.Struct(">BI")


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.received = bytearray()

    def data_received(self, data: bytes) -> None:
        received = self.received
        received += data
        taken = 0
        while len(received) - taken >= FRAME.size:
            end = taken + FRAME.size + FRAME.unpack_from(received, taken)[1]
            if len(received) < end:
                break
            self.transport.write(bytes(received[taken:end]))
            taken = end
        del received[:taken]


async def main(path: str) -> None:
    server = await asyncio.get_running_loop().create_unix_server(Echo, path=path)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
