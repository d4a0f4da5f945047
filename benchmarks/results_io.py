"""Where benchmark figures go: one JSON per experiment in benchmarks/results/,
each figure a named metric with its value, unit and target, plus the
machine and the device (simulated GPU or the real GPU's name)."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass
class Metric:
    name: str
    value: float
    unit: str
    target: str = ""          # e.g. "<= 10"; empty when the figure has no target
    met: bool | None = None   # None when there is no target


@dataclass
class Result:
    experiment: str
    device: str
    metrics: list[Metric] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)

    def add(self, name: str, value: float, unit: str, target: str = "") -> Metric:
        metric = Metric(name, float(value), unit, target, check_target(value, target))
        self.metrics.append(metric)
        return metric


def check_target(value: float, target: str) -> bool | None:
    if not target:
        return None
    op, _, bound = target.partition(" ")
    bound_value = float(bound)
    return {"<=": value <= bound_value, ">=": value >= bound_value, "==": value == bound_value}[op]


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"hostname": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release()}


def real_gpu_name() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def write(result: Result, out_dir: Path = RESULTS_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = asdict(result)
    payload["machine"] = machine()
    payload["recorded_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    path = out_dir / f"{result.experiment}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def load_all(out_dir: Path = RESULTS_DIR) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out_dir.glob("*.json"))]
