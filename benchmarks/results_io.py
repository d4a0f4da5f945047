"""Where benchmark figures go: one JSON per experiment in benchmarks/results/,
each figure a named metric with its value, unit and target, plus the
machine, the device (simulated GPU or the real GPU's name) and the source
it measured (commit, whether the tree was dirty, a fingerprint of the
measured code), so that benchmarks/report.py can tell a current figure from
a stale one.

Targets are one type, `Target`, made by `at_least`, `at_most` or `within`.
A figure that can miss both ways (a 30% cap delivering 16.7% misses as
surely as one delivering 35%) takes `within(30, 1.5)`, never `at_most(31.5)`.

A figure compared against a bare run (its name says `vs_bare` or
`over_bare`) names, with `noise=`, the figure of the same run that compares
bare against bare again: the comparison's noise floor, shown beside it."""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import platform
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"
# The code a figure measures: a change here after a result's commit makes it stale.
MEASURED_PATHS = ("hook", "tokend", "simgpu")


@dataclass(frozen=True)
class Target:
    """kind "min": value >= bound; "max": value <= bound; "within": |value - bound| <= tolerance."""
    kind: str
    bound: float
    tolerance: float = 0.0

    KINDS = ("min", "max", "within")

    def __post_init__(self):
        if self.kind not in self.KINDS:
            raise ValueError(f"target kind {self.kind!r} is not one of {self.KINDS}")
        if not math.isfinite(self.bound):
            raise ValueError(f"target bound must be a finite number, got {self.bound!r}")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"target tolerance must be a finite number >= 0, got {self.tolerance!r}")
        if self.kind != "within" and self.tolerance:
            raise ValueError(f"only a 'within' target has a tolerance; {self.kind!r} got {self.tolerance!r}")

    def met(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.kind == "min":
            return value >= self.bound
        if self.kind == "max":
            return value <= self.bound
        return abs(value - self.bound) <= self.tolerance

    def __str__(self) -> str:
        if self.kind == "min":
            return f">= {self.bound:g}"
        if self.kind == "max":
            return f"<= {self.bound:g}"
        return f"{self.bound:g} ± {self.tolerance:g}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "bound": self.bound, "tolerance": self.tolerance}

    @classmethod
    def from_json(cls, stored) -> Target | None:
        """A target as a result file holds it: a dict (this format), or the
        text of older files ("<= 31.5", ">= 97", "== 0"; "" for none)."""
        if not stored:
            return None
        if isinstance(stored, dict):
            return cls(stored["kind"], float(stored["bound"]), float(stored.get("tolerance", 0.0)))
        match = re.fullmatch(r"\s*(<=|>=|==)\s*(\S+)\s*", str(stored))
        if not match:
            raise ValueError(f"unreadable target {stored!r}: expected a dict or '<= X', '>= X', '== X'")
        op, bound = match.group(1), float(match.group(2))
        return {"<=": at_most, ">=": at_least, "==": lambda b: within(b, 0.0)}[op](bound)


def at_least(bound: float) -> Target:
    return Target("min", float(bound))


def at_most(bound: float) -> Target:
    return Target("max", float(bound))


def within(center: float, tolerance: float) -> Target:
    return Target("within", float(center), float(tolerance))


@dataclass
class Metric:
    name: str
    value: float
    unit: str
    target: Target | None = None
    met: bool | None = None   # None when there is no target
    noise: str = ""           # name of this run's bare-against-bare figure for this comparison


@dataclass
class Result:
    experiment: str
    device: str
    metrics: list[Metric] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)

    def add(self, name: str, value: float, unit: str, target: Target | None = None, noise: str = "") -> Metric:
        if target is not None and not isinstance(target, Target):
            raise TypeError(f"{self.experiment}/{name}: target must be a results_io.Target (at_least, at_most, "
                            f"within), got {target!r}")
        value = float(value)
        metric = Metric(name, value, unit, target, None if target is None else target.met(value), noise)
        self.metrics.append(metric)
        return metric

    def missed(self) -> list[Metric]:
        return [m for m in self.metrics if m.met is False]

    def problems(self) -> list[str]:
        """What makes this result untrustworthy besides missed targets: a
        comparison against bare without its bare-against-bare noise figure."""
        names = {m.name for m in self.metrics}
        found = []
        for m in self.metrics:
            if m.noise and m.noise not in names:
                found.append(f"{m.name}: its noise figure {m.noise!r} is not among this result's figures")
            elif is_bare_comparison(m.name) and not m.noise:
                found.append(f"{m.name} compares against bare but names no bare-against-bare figure (noise=)")
        return found


def is_bare_comparison(name: str) -> bool:
    """A figure against a bare run, other than the bare-again noise figure itself."""
    return bool(re.search(r"(vs|over)_bare", name)) and "bare_again" not in name


def _git(*args: str, root: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True,
                          timeout=60).stdout


def worktree_fingerprint(root: Path = ROOT) -> str:
    """sha1 over (path, blob id) of the measured paths' files as they are on
    disk (tracked and untracked, not ignored): equal to head_fingerprint()
    exactly when the measured code is the code HEAD holds."""
    listed = _git("ls-files", "-z", "-co", "--exclude-standard", "--", *MEASURED_PATHS, root=root)
    paths = sorted({p for p in listed.split("\0") if p and (root / p).is_file()})
    blobs = subprocess.run(["git", "hash-object", "--stdin-paths"], cwd=root, input="\n".join(paths) + "\n",
                           capture_output=True, text=True, check=True, timeout=60).stdout.split() if paths else []
    return _fingerprint(zip(paths, blobs))


def head_fingerprint(rev: str = "HEAD", root: Path = ROOT) -> str:
    listed = _git("ls-tree", "-r", "-z", rev, "--", *MEASURED_PATHS, root=root)
    entries = []
    for entry in listed.split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            _, kind, blob = meta.split()
            if kind == "blob":
                entries.append((path, blob))
    return _fingerprint(sorted(entries))


def _fingerprint(entries) -> str:
    return hashlib.sha1("".join(f"{path} {blob}\n" for path, blob in entries).encode()).hexdigest()


def source_state(root: Path = ROOT) -> dict:
    """The commit a result measured, whether the tree differed from it, and
    the measured code's fingerprint; {"commit": None, "error": ...} outside
    a git checkout."""
    try:
        commit = _git("rev-parse", "HEAD", root=root).strip()
        status = _git("status", "--porcelain", "--untracked-files=normal", root=root).splitlines()
        dirty_paths = [line[3:] for line in status]
        return {"commit": commit, "dirty": bool(dirty_paths), "dirty_paths": dirty_paths[:40],
                "dirty_measured_paths": [p for p in dirty_paths if p.split("/", 1)[0] in MEASURED_PATHS][:40],
                "measured_paths": list(MEASURED_PATHS), "measured_fingerprint": worktree_fingerprint(root)}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"commit": None, "error": f"no git checkout at {root}: {exc}"}


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"hostname": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release(), "load_average_1_5_15": load, "gpu": real_gpu_name()}


def real_gpu_name() -> str | None:
    """nvidia-smi's "name, driver_version" of GPU 0, or None without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def to_json(result: Result, smoke: bool = False) -> dict:
    """The record written for `result`: its figures, the machine, the time
    and the source it measured. Every experiment's file is made here."""
    payload = asdict(result)
    for stored, metric in zip(payload["metrics"], result.metrics):
        stored["target"] = metric.target.to_json() if metric.target else None
    payload["machine"] = machine()
    payload["source"] = source_state()
    payload["smoke"] = smoke
    payload["recorded_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return payload


def write(result: Result, out_dir: Path = RESULTS_DIR, smoke: bool = False) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{result.experiment}.json"
    path.write_text(json.dumps(to_json(result, smoke), indent=2) + "\n")
    return path


def load_all(out_dir: Path = RESULTS_DIR) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out_dir.glob("*.json"))]
