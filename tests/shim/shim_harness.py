"""Fixtures for the shim's tests: the real libgslice.so over the simulated
GPU, with a real tokend. Everything a test starts (daemons, probe
processes, simulated-GPU shared memory) is cleaned up by finalizers."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
# GSLICE_SHIM_LIBRARY points the whole folder (and gslice.testing,
# gslice.experiment) at another build of the shim: tests/packaging runs it
# against the one inside the wheel.
SHIM_OVERRIDE = os.environ.get("GSLICE_SHIM_LIBRARY")
SHIM = Path(SHIM_OVERRIDE) if SHIM_OVERRIDE else ROOT / "python" / "gslice" / "lib" / "libgslice.so"


def _ensure_shim() -> Path:
    if SHIM_OVERRIDE and not SHIM.is_file():
        raise FileNotFoundError(f"GSLICE_SHIM_LIBRARY={SHIM_OVERRIDE} is not a file")
    if not SHIM.exists():
        subprocess.run([sys.executable, str(ROOT / "tools" / "build_native.py"), "hook"], check=True, cwd=ROOT)
    return SHIM


@pytest.fixture(scope="session")
def shim_path() -> Path:
    return _ensure_shim()


# Test-only builds with one feature cut out (hook/build.py TEST_CUTS): a
# check named for the feature must fail on them. A test takes one with
# @pytest.mark.parametrize("shim_build", ["normal", GATE_CUT], indirect=True)
# and puts its feature check under `with shim_build.expect_feature():`.
GATE_CUT = "gate"                      # launches never wait for or take tokens
LEDGER_REFUSAL_CUT = "ledger_refusal"  # allocations over the quota go through
UNMEASURED_CUT = "unmeasured_one_at_a_time"   # a process's first launches queue freely
LENGTHS_CUT = "lengths_with_the_ask"          # a token is asked for before drained lengths are in
RING_AT_LEASE_CUT = "ring_at_lease_resume"    # a lease resumes past a ring it heard while idle
COPY_KEYS_CUT = "copy_work_keys"              # copies and fills have no length estimate of their own
RING_READ_CUT = "ring_read_at_launch"         # only the listener thread acts on a ring
ALONE_QUEUE_CUT = "alone_queue"               # a holder alone queues no deeper than a shared one
WRAP_UP_CUT = "wrap_up_at_work_end"           # a wrap-up waits for the renewal point, the work done or not


def build_cut_shim(cut: str, out_dir: Path) -> Path:
    """libgslice.so with `cut` cut out, built into out_dir (never into the package)."""
    out = Path(out_dir) / f"cut-{cut}" / "libgslice.so"   # the name tests check a pointer's object by
    env = {**os.environ, "GSLICE_TEST_CUT": cut, "GSLICE_TEST_CUT_OUTPUT": str(out)}
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_native.py"), "hook"], check=True, cwd=ROOT, env=env)
    return out


@pytest.fixture(scope="session")
def cut_shims(build_dir):
    """cut_shims(name) -> the cut build's path; each is built once per run, on first use."""
    built: dict[str, Path] = {}

    def get(cut: str) -> Path:
        if cut not in built:
            built[cut] = build_cut_shim(cut, build_dir)
        return built[cut]
    return get


@dataclass(frozen=True)
class ShimBuild:
    path: Path
    cut: str | None   # None: the normal build

    def expect_feature(self):
        """Around a feature's check: the normal build must pass it; a cut
        build must fail it (AssertionError), or the check cannot see the feature."""
        if self.cut is None:
            return contextlib.nullcontext()
        return pytest.raises(AssertionError)


@pytest.fixture
def shim_build(request, shim_path, cut_shims) -> ShimBuild:
    """The shim the runner preloads: the normal build, or a cut one by indirect parameter."""
    cut = getattr(request, "param", "normal")
    if cut == "normal":
        return ShimBuild(shim_path, None)
    if SHIM_OVERRIDE:
        pytest.skip(f"a build with {cut} cut comes from the sources, not from GSLICE_SHIM_LIBRARY: "
                    "the in-tree run checks it")
    return ShimBuild(cut_shims(cut), cut)


@pytest.fixture(scope="session")
def sim_lib_dir(build_dir) -> Path:
    """The simulated libcuda.so.1 / libnvidia-ml.so.1 (built by tools/build_native.py)."""
    import gslice.simgpu as simgpu
    return Path(simgpu.lib_dir())


def _build_program(name: str, build_dir: Path, sim_lib_dir: Path) -> Path:
    """tests/shim/programs/<name>.c, linked with -lcuda against the sim."""
    out = build_dir / name
    subprocess.run(["gcc", "-O2", "-Wall", f"-I{ROOT / 'include'}", str(PROGRAMS / f"{name}.c"),
                    f"-L{sim_lib_dir}", "-l:libcuda.so.1", "-ldl", "-o", str(out)], check=True)
    return out


@pytest.fixture(scope="session")
def probe(build_dir, sim_lib_dir) -> Path:
    """tests/shim/programs/cuda_probe.c."""
    return _build_program("cuda_probe", build_dir, sim_lib_dir)


@pytest.fixture(scope="session")
def memory_probe(build_dir, sim_lib_dir) -> Path:
    """tests/shim/programs/memory_probe.c (memory routes, context growth)."""
    return _build_program("memory_probe", build_dir, sim_lib_dir)


@pytest.fixture
def sim_name():
    """A private simulated GPU per test; its shared memory is removed after."""
    name = f"shimtest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield name
    try:
        os.unlink(f"/dev/shm/gslice-sim-{name}")
    except FileNotFoundError:
        pass


class ProbeRunner:
    """Runs cuda_probe with the shim preloaded; kills what it started."""

    def __init__(self, probe: Path, shim: Path, sim_lib_dir: Path, sim_name: str):
        self.probe = probe
        self.base_env = dict(os.environ)
        for key in list(self.base_env):
            if key.startswith("GSLICE_"):
                del self.base_env[key]
        self.base_env.update({
            # A sanitizer build's runtime must come first (scripts/test-sanitized).
            "LD_PRELOAD": ":".join(filter(None, [os.environ.get("GSLICE_SANITIZER_RUNTIME"), str(shim)])),
            "LD_LIBRARY_PATH": str(sim_lib_dir),
            "GSLICE_SIM_NAME": sim_name,
            # Byte-exact quota tests: no per-context reserve and no simulated
            # context memory unless a test asks for them (test_overhead.py).
            "GSLICE_CONTEXT_RESERVE_MIB": "0",
            "GSLICE_SIM_CONTEXT_MEMORY": "0",
        })
        self.procs: list[subprocess.Popen] = []

    def env(self, **extra) -> dict:
        env = dict(self.base_env)
        env.update({k: str(v) for k, v in extra.items() if v is not None})
        return env

    def run(self, *args, timeout=60, **env) -> tuple[int, dict, str]:
        r = subprocess.run([str(self.probe), *map(str, args)], env=self.env(**env), capture_output=True,
                           text=True, timeout=timeout)
        return r.returncode, parse_kv(r.stdout), r.stderr

    def start(self, *args, stdin: bool = False, **env) -> subprocess.Popen:
        p = subprocess.Popen([str(self.probe), *map(str, args)], env=self.env(**env), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            try:
                p.communicate(timeout=10)
            except Exception:
                pass


def parse_kv(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float = 30.0, collect: bool = False) -> str:
    """Reads proc's stdout until a line starts with prefix; returns that line
    (collect: every line read up to and including it). Reads the raw fd, so
    no line is left behind in a Python buffer that select cannot see."""
    import select

    fd = proc.stdout.fileno()
    pending = getattr(proc, "_gs_pending", b"")
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            text = line.decode(errors="replace") + "\n"
            seen.append(text)
            if text.startswith(prefix):
                proc._gs_pending = pending
                return "".join(seen) if collect else text
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], min(left, 0.2))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        pending += chunk
    proc._gs_pending = pending
    raise AssertionError(f"no line starting {prefix!r} from pid {proc.pid} within {timeout} s "
                         f"(exit {proc.poll()}; read so far: {''.join(seen)!r})")


@pytest.fixture
def runner(probe, shim_build, sim_lib_dir, sim_name):
    r = ProbeRunner(probe, shim_build.path, sim_lib_dir, sim_name)
    yield r
    r.close()


@pytest.fixture
def tokend(tmp_path, sim_lib_dir):
    """A real tokend (fake GPU description: the shim tests need only its
    scheduler and ledger; the work runs on the simulated libcuda)."""
    from gslice.testing import TokendProcess

    t = TokendProcess(tmp_path, gpu="fake", fake_gpu_memory=16 << 30)
    t.start()
    yield t
    t.close()


def group_env(tokend, name: str, secret: str, **extra) -> dict:
    env = {"GSLICE_SOCKET": str(tokend.client_socket), "GSLICE_GROUP": name, "GSLICE_GROUP_SECRET": secret}
    env.update(extra)
    return env


def assert_charged_for(admin, group: str, gpu_seconds: float) -> None:
    """Launches take tokens: the group's charge in tokend's window covers the
    GPU time its launches used (a launch run outside a slice is charged to
    nobody). Not tokens_granted: a lease at start grants a token at attach,
    before any launch, and a lease accrues nothing until a launch uses it."""
    status = admin.status()
    charged = status.group(group).share * status.window_seconds
    assert charged >= 0.95 * gpu_seconds, (
        f"group {group} was charged {charged:.4f} s for {gpu_seconds:.4f} s of GPU time "
        f"(expected at least 95% of it)")


def sim_busy_seconds(sim_name: str, label: str) -> float:
    """GPU time the simulated engine ran for processes labelled `label` (GSLICE_GROUP)."""
    import gslice.simgpu as simgpu

    with simgpu.SimGpu(sim_name) as sim:
        return sim.busy_ns_by_label().get(label, 0) / 1e9
