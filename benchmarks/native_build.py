"""Builds the C benchmark programs in hook/bench/ into a cache folder."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
NANOPB = ROOT / "build" / "native" / "nanopb"


def rpc_client_sources() -> list[Path]:
    """The shim's RPC client without CUDA (hook/build.py's RPC_CLIENT_SOURCES):
    built alone into rpc_roundtrip here and into the C RPC tests' driver."""
    spec = importlib.util.spec_from_file_location("gslice_hook_build", ROOT / "hook" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [ROOT / "hook" / name for name in module.RPC_CLIENT_SOURCES]


def _gcc(args: list[str]) -> None:
    subprocess.run(["gcc", "-O2", "-std=gnu11", *args], check=True, cwd=ROOT)


def launch_overhead(sim_lib_dir: Path) -> Path:
    out = BUILD / "launch_overhead"
    BUILD.mkdir(parents=True, exist_ok=True)
    _gcc(["-Iinclude", "hook/bench/launch_overhead.c", "-o", str(out), f"-L{sim_lib_dir}", "-lcuda"])
    return out


def stub_libcuda() -> Path:
    """A libcuda.so.1 whose launches return at once (only the shim's cost remains)."""
    lib_dir = BUILD / "stub"
    lib_dir.mkdir(parents=True, exist_ok=True)
    _gcc(["-shared", "-fPIC", "-Iinclude", "hook/bench/stub_libcuda.c", "-o", str(lib_dir / "libcuda.so.1"),
          "-ldl"])
    return lib_dir


def socket_echo(out: Path | None = None) -> Path:
    out = out or BUILD / "socket_echo"
    out.parent.mkdir(parents=True, exist_ok=True)
    _gcc(["hook/bench/socket_echo.c", "-lpthread", "-o", str(out)])
    return out


def rpc_roundtrip(out: Path | None = None, static: bool = False) -> Path:
    """static: nghttp2 linked in too (for the real-GPU check's bundle: the
    GPU machine has no libnghttp2)."""
    out = out or BUILD / "rpc_roundtrip"
    out.parent.mkdir(parents=True, exist_ok=True)
    sources = ["hook/bench/rpc_roundtrip.c", *map(str, rpc_client_sources()),
               str(NANOPB / "gslice/v1/client.pb.c"), str(NANOPB / "gslice/v1/common.pb.c")]
    runtime = subprocess.run(["gcc", "-print-file-name=libprotobuf-nanopb.a"], capture_output=True, text=True,
                             check=True).stdout.strip()
    _gcc(["-Ihook", f"-I{NANOPB}", *sources, runtime, "-l:libnghttp2.a" if static else "-lnghttp2", "-lpthread",
          "-o", str(out)])
    return out
