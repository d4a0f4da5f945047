"""An echo server written as tokend's calls socket reads (tokend/calls_socket.py:
asyncio streams, a 5-byte prefix then the message, each answer written and
drained): the floor under the daemon's round trips on this machine, for
hook/bench/socket_echo.c. Usage: python socket_echo_server.py SOCKET; prints
"ready" once it listens, and serves until killed."""
from __future__ import annotations

import asyncio
import struct
import sys

FRAME = struct.Struct(">BI")


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            header = await reader.readexactly(FRAME.size)
            body = await reader.readexactly(FRAME.unpack(header)[1])
            writer.write(header + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(path: str) -> None:
    server = await asyncio.start_unix_server(echo, path=path)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
