"""Build gslice's generated and native parts in place.

Everything here is derived from files in the repository, so a clean
checkout rebuilds bit-for-bit the same outputs:

  proto    proto/gslice/v1/*.proto -> python/gslice/v1/*_pb2*.py (grpcio-tools, pinned:
           GRPC_TOOLS_VERSION)
           proto/gslice/v1/client.proto -> build/native/nanopb/*.pb.[ch] (nanopb, for the shim)
  simgpu   simgpu/*.c -> python/gslice/simgpu/libcuda.so.1, libnvidia-ml.so.1
  hook     hook/*.c + third_party/nghttp2 -> python/gslice/lib/libgslice.so
           (+ gslice._shim_api, the tests' handle)

`setup.py` runs all of it for a wheel (`wheel_parts`: every native part with
the manylinux toolchain, no test module); developers rebuild one part with
`python tools/build_native.py hook` (or proto, simgpu, all). Compilers and
glibc baselines: tools/toolchain.py.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import toolchain  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
PROTO_FILES = ["gslice/v1/common.proto", "gslice/v1/client.proto", "gslice/v1/admin.proto",
               # the kubelet's APIs, for the DRA plugin (gslice.kubernetes)
               "gslice/kubelet/pluginregistration_v1.proto", "gslice/kubelet/dra_v1.proto",
               "gslice/kubelet/dra_v1beta1.proto"]
# The shim speaks only the client service; admin.proto uses proto3 `optional`.
NANOPB_FILES = ["gslice/v1/common.proto", "gslice/v1/client.proto"]
PYTHON_ROOT = ROOT / "python"
PACKAGE_DIR = PYTHON_ROOT / "gslice"
WORK_DIR = ROOT / "build" / "native"
NANOPB_DIR = WORK_DIR / "nanopb"


# The Python stubs are generated with this grpcio-tools, the oldest gslice
# supports, never with whatever the build machine has: newer generators
# stamp their own version into the code, which then refuses to import under
# an older grpcio ("depends on grpcio>=...") or protobuf (gencode version
# check). 1.60.0's stubs carry no such check; they are protobuf 4.25.0
# gencode, so the runtime floors are grpcio>=1.60.0 and protobuf>=4.25.0
# (pyproject.toml [project] dependencies; docs/packaging.md).
GRPC_TOOLS_VERSION = "1.60.0"
GRPC_TOOLS_DIR = ROOT / "build" / f"grpcio-tools-{GRPC_TOOLS_VERSION}"

# Runs protoc from the grpc_tools first on sys.path (the pinned one); not
# through grpc_tools.protoc, which imports pkg_resources in 1.60.
_PROTOC = """
import importlib.metadata, os, sys
import grpc_tools
from grpc_tools import _protoc_compiler
found = importlib.metadata.version("grpcio-tools")
if found != sys.argv[1]:
    sys.exit(f"grpcio-tools {found} found at {grpc_tools.__file__}; the stubs need {sys.argv[1]}")
include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
sys.exit(_protoc_compiler.run_main([a.encode() for a in ["protoc", "-I" + include, *sys.argv[2:]]]))
"""


def grpc_tools_path() -> Path | None:
    """Where grpcio-tools==GRPC_TOOLS_VERSION lives: None when this
    interpreter has it (a wheel build: pyproject.toml [build-system] pins
    it), else a private copy under build/ (a developer's venv keeps its own
    grpcio-tools for nanopb), installed on first use."""
    try:
        if importlib.metadata.version("grpcio-tools") == GRPC_TOOLS_VERSION:
            return None
    except importlib.metadata.PackageNotFoundError:
        pass
    if not (GRPC_TOOLS_DIR / "grpc_tools").is_dir():
        print(f"[build_native] installing grpcio-tools=={GRPC_TOOLS_VERSION} into {GRPC_TOOLS_DIR} "
              "(the generator of the Python stubs)", file=sys.stderr)
        tmp = GRPC_TOOLS_DIR.with_name(GRPC_TOOLS_DIR.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        "--target", str(tmp), f"grpcio-tools=={GRPC_TOOLS_VERSION}"], check=True)
        shutil.rmtree(GRPC_TOOLS_DIR, ignore_errors=True)
        os.replace(tmp, GRPC_TOOLS_DIR)
    return GRPC_TOOLS_DIR


def build_proto() -> None:
    tools = grpc_tools_path()
    env = dict(os.environ)
    if tools is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tools), *filter(None, [env.get("PYTHONPATH")])])
    args = [
        f"-I{PROTO_DIR}",
        f"--python_out={PYTHON_ROOT}",
        f"--pyi_out={PYTHON_ROOT}",
        f"--grpc_python_out={PYTHON_ROOT}",
        *[str(PROTO_DIR / f) for f in PROTO_FILES],
    ]
    result = subprocess.run([sys.executable, "-c", _PROTOC, GRPC_TOOLS_VERSION, *args], env=env)
    if result.returncode != 0:
        raise RuntimeError(f"protoc (grpcio-tools {GRPC_TOOLS_VERSION}) failed on {PROTO_FILES}")
    (PACKAGE_DIR / "v1" / "__init__.py").write_text(
        '"""Generated gRPC/protobuf code for the gslice.v1 contract (see proto/)."""\n'
    )
    (PACKAGE_DIR / "kubelet" / "__init__.py").write_text(
        '"""Generated gRPC/protobuf code for the kubelet\'s plugin registration and DRA APIs (see proto/)."""\n'
    )

    NANOPB_DIR.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-W", "ignore", "-c",
        "from nanopb.generator.nanopb_generator import main_cli; main_cli()",
        "-q", f"-I{PROTO_DIR}", "-D", str(NANOPB_DIR),
        "-f", str(PROTO_DIR / "gslice/v1/client.options"),
        *NANOPB_FILES,
    ]
    subprocess.run(cmd, check=True, cwd=PROTO_DIR)


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"_gslice_build_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def version() -> str:
    """The one version of gslice: __version__ in python/gslice/__init__.py."""
    text = (PACKAGE_DIR / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, flags=re.M).group(1)


def build_simgpu(chain: str = "native") -> None:
    """The simulated GPU; developers build it with the system gcc, the wheel
    with the manylinux toolchain (simgpu/build.py takes $CC as one word).

    Each compiler builds into its own folder, named by a digest of its
    command and its --version (so its build stamps name the compiler), and
    the result is then copied into the package: the package's libraries are
    always the last requested compiler's, never a stale build of another
    whose stamp happens to match (a wheel built after a test run would
    otherwise ship the system gcc's libraries under a manylinux tag)."""
    command = toolchain.compiler(chain, toolchain.SIMGPU_GLIBC)
    probe = subprocess.run([*command, "--version"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} --version failed ({probe.returncode}): {probe.stderr.strip()}")
    key = hashlib.sha256("\0".join([*command, probe.stdout]).encode()).hexdigest()[:12]
    work_dir = WORK_DIR / "simgpu" / f"{chain}-{key}"
    built_dir = work_dir / "out"
    cc = toolchain.compiler_script(chain, toolchain.SIMGPU_GLIBC, WORK_DIR / "toolchain")
    saved = os.environ.get("CC")
    os.environ["CC"] = cc
    try:
        simgpu = _load(ROOT / "simgpu" / "build.py")
        simgpu.build(out_dir=built_dir, work_dir=work_dir)
    finally:
        if saved is None:
            os.environ.pop("CC", None)
        else:
            os.environ["CC"] = saved
    package_dir = PACKAGE_DIR / "simgpu"
    for name, spec in simgpu.LIBRARIES.items():
        _install_file(built_dir / name, package_dir / name)
        link = package_dir / spec["link"]
        if not (link.is_symlink() and os.readlink(link) == name):
            link.unlink(missing_ok=True)
            link.symlink_to(name)


def _install_file(source: Path, target: Path) -> None:
    """Copies source over target unless equal, atomically (running
    processes keep the old inode)."""
    data = source.read_bytes()
    if target.exists() and not target.is_symlink() and target.read_bytes() == data:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o755)
    os.replace(tmp, target)


def build_hook(chain: str | None = None, shim_api: bool = True) -> None:
    if not (NANOPB_DIR / "gslice/v1/client.pb.c").exists():
        build_proto()
    chain = chain or toolchain.shim_toolchain()
    _load(ROOT / "hook" / "build.py").build(
        package_dir=PACKAGE_DIR, nanopb_dir=NANOPB_DIR, work_dir=WORK_DIR / "hook",
        cc=toolchain.compiler(chain, toolchain.SHIM_GLIBC), version=version(), shim_api=shim_api,
    )


TARGETS = {"proto": build_proto, "simgpu": build_simgpu, "hook": build_hook}


def build_all() -> None:
    for step in TARGETS.values():
        step()


def build_wheel_parts() -> None:
    """What a wheel carries: generated code, and the native libraries built
    for old glibc (tools/toolchain.py), without the tests' CPython module."""
    build_proto()
    build_simgpu("manylinux")
    build_hook("manylinux", shim_api=False)


def main(argv: list[str]) -> int:
    names = argv or ["all"]
    for name in names:
        if name == "all":
            build_all()
        elif name in TARGETS:
            TARGETS[name]()
        else:
            print(f"unknown target {name!r}; expected one of: all, {', '.join(TARGETS)}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
