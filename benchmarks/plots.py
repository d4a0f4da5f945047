"""PNG plots of benchmark results, written next to their JSON."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from results_io import Target  # noqa: E402


def share_accuracy(result: dict, out_dir: Path) -> list[str]:
    runs = {k: v for k, v in result["details"].items() if k != "timeline"}
    fig, ax = plt.subplots(figsize=(11, 4.5))
    labels, requested, achieved = [], [], []
    for run_name, run in runs.items():
        for group, request in run["requests"].items():
            labels.append(f"{run_name}\n{group}")
            requested.append(request * 100)
            achieved.append(run["achieved"][group] * 100)
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], requested, width=0.4, label="request")
    ax.bar([x + 0.2 for x in xs], achieved, width=0.4, label="achieved")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax.set_ylabel("share of GPU time (%)")
    ax.set_title(f"Share accuracy ({result['device']})")
    ax.legend()
    fig.tight_layout()
    paths = [_save(fig, out_dir / "share_accuracy.png")]
    if "timeline" in result["details"]:
        paths.append(timeline(result["details"]["timeline"], out_dir / "share_timeline.png", result["device"]))
    return paths


def timeline(points: list[dict], path: Path, device: str) -> str:
    groups = sorted({g for p in points for g in p["shares"]})
    ts = [p["t"] for p in points]
    series = [[p["shares"].get(g, 0) * 100 for p in points] for g in groups]
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.stackplot(ts, series, labels=groups, step="pre")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("share of GPU time per 0.25 s (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Time slicing at work: groups 10/20/30/40, 5 ms kernels ({device})")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def metrics_bar(result: dict, out_dir: Path) -> list[str]:
    """A generic chart: each metric against its target."""
    metrics = result["metrics"]
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(metrics)))
    names = [f"{m['name']} ({m['unit']})" for m in metrics]
    colors = ["tab:green" if m["met"] else ("tab:red" if m["met"] is False else "tab:gray") for m in metrics]
    ax.barh(names, [m["value"] for m in metrics], color=colors)
    for i, m in enumerate(metrics):
        ax.text(m["value"], i, f" {m['value']:.4g} {Target.from_json(m['target']) or ''}", va="center", fontsize=7)
    ax.set_title(f"{result['experiment']} ({result['device']}): green met, red missed, grey no target")
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    return [_save(fig, out_dir / f"{result['experiment']}.png")]


def smooth_cap(result: dict, out_dir: Path) -> list[str]:
    """Per-second share of a group capped at 30% (band: 27-33%)."""
    points = result["details"]["timeline"]
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.axhspan(27, 33, color="tab:green", alpha=0.15, label="27-33% (target per 1 s window)")
    ax.step([p["t"] for p in points], [p["shares"]["capped"] * 100 for p in points], where="post",
            label="capped group, GPU time per second")
    ax.set_ylim(0, 100)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("% of each second")
    ax.set_title(f"Smooth cap: limit 30% alone, 1 ms kernels ({result['device']})")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return [_save(fig, out_dir / "smooth_cap_timeline.png"), *metrics_bar(result, out_dir)]


PLOTTERS = {"share_accuracy": share_accuracy, "smooth_cap": smooth_cap}


def plot(result: dict, out_dir: Path) -> list[str]:
    return PLOTTERS.get(result["experiment"], metrics_bar)(result, out_dir)


def _save(fig, path: Path) -> str:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
