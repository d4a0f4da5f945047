"""benchmarks/gpu/latency_ab.py: its settings' parsing, and a tiny run on the
simulated GPU with two daemons (a variant with a tokend flag has its own),
so the A/B a device session runs cannot rot between runs on a GPU. Figures
are not judged here."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
AB = ROOT / "benchmarks" / "gpu" / "latency_ab.py"
sys.path.insert(0, str(AB.parent))

import latency_ab  # noqa: E402


def test_a_variant_s_settings_go_to_the_neighbour_the_bursts_or_tokend():
    v = latency_ab.parse_variant("x=GSLICE_A=1,burst:GSLICE_B=0,--preempt-handover=at-release,--flag")
    assert v == {"name": "x", "neighbour_env": {"GSLICE_A": "1"}, "burst_env": {"GSLICE_B": "0"},
                 "tokend_args": ["--preempt-handover", "at-release", "--flag"]}
    assert latency_ab.parse_variant("plain=") == {"name": "plain", "neighbour_env": {}, "burst_env": {},
                                                   "tokend_args": []}
    for bad in ("noname", "=A=1", "x=A", "x=burst:=1"):
        with pytest.raises(ValueError, match="variant"):
            latency_ab.parse_variant(bad)


def test_latency_ab_runs_each_variant_beside_its_own_neighbour_and_daemon(tmp_path):
    before = set(Path(tempfile.gettempdir()).glob("latency-ab-*"))
    result = subprocess.run([sys.executable, str(AB), "--gpu", "sim", "--shapes", "i", "--rounds", "1",
                             "--bursts", "12", "--variant", "default=",
                             "--variant", "release=--preempt-handover=at-release,burst:GSLICE_LOG_LEVEL=debug",
                             "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    report = json.loads((tmp_path / "latency_ab.json").read_text())
    shape = report["shapes"]["i_4096_sync4"]
    (only_round,) = shape["rounds"]
    assert list(only_round["beside"]) == ["bare", "default", "release"]
    assert all(len(s["latencies_ms"]) == 12 and s["neighbour"]["iterations"] > 0
               for s in only_round["beside"].values())
    assert set(only_round["neighbour_alone"]) == {"default", "release"}
    table = shape["summary"]
    assert set(table) == {"alone_bare", "bare", "default", "release"}
    for name in ("default", "release"):
        assert 0 < table[name]["gpu_busy_estimate"] and table[name]["neighbour_share_of_idle"] > 0
        assert table[name]["nvml_util_pct"] is not None
    # The noise beside the differences: the bare reference per round, and
    # the neighbour alone, last round over first (one round here: 1).
    assert [set(r) for r in table["alone_bare"]["by_round"]] == [{"p50", "p99"}]
    assert table["default"]["neighbour_rate_alone_last_over_first"] is None
    assert "by round, the bare-against-bare noise" in result.stdout
    # The burst setting reached the variant's bursts only, and the logs were kept.
    assert (tmp_path / "latency_ab_logs.tar.gz").stat().st_size > 0
    import tarfile
    with tarfile.open(tmp_path / "latency_ab_logs.tar.gz") as tar:
        logs = {m.name: tar.extractfile(m).read().decode(errors="replace") for m in tar if m.isfile()}
    assert "gslice[" in logs["worker-burst-release.log"] and " debug " in logs["worker-burst-release.log"]
    assert " debug " not in logs["worker-burst-default.log"]
    # Two daemons, the second started with the flag (a flag tokend refuses fails the run).
    tokend_logs = [text for name, text in logs.items() if "tokend" in name]
    assert len(tokend_logs) == 2, list(logs)
    assert report["variants"]["release"]["tokend_args"] == ["--preempt-handover", "at-release"]
    assert set(Path(tempfile.gettempdir()).glob("latency-ab-*")) == before   # the work folder is gone


def test_the_summary_reads_each_setting_beside_the_rounds_noise():
    """Two rounds: the bare reference by round (bare against bare), and the
    neighbour's rate alone, the second round's over the first (the noise of
    its part of the GPU)."""
    def round_(alone_ms, nb_alone_its, beside_ms):
        run = lambda its: {"iterations": its, "seconds": 1.0, "burst_seconds": 1.0}  # noqa: E731
        return {"alone_bare": alone_ms, "neighbour_alone": {"x": run(nb_alone_its)},
                "beside": {"x": {"latencies_ms": beside_ms, "neighbour": run(450)}}}

    shape = {"rounds": [round_([1.6] * 9 + [1.8], 500, [2.0] * 10), round_([1.7] * 9 + [1.9], 490, [2.1] * 10)]}
    table = latency_ab.summarise(shape)
    assert table["alone_bare"]["by_round"] == [{"p50": 1.6, "p99": 1.8}, {"p50": 1.7, "p99": 1.9}]
    assert table["x"]["neighbour_rate_alone_last_over_first"] == pytest.approx(0.98)
    assert table["x"]["neighbour_rate_alone"] == pytest.approx(495)
    assert [r["p50_added_ms"] for r in table["x"]["by_round"]] == pytest.approx([0.4, 0.4])
