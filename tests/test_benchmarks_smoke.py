"""The benchmark command and what makes its figures trustworthy.

- The smoke run: `benchmarks/run.py --smoke` runs the short versions of the
  experiments and writes one JSON per experiment with named figures, the
  commit measured and typed targets; its exit status says whether a target
  was missed (a slow machine may miss speed targets: the status must then
  be 1, and the missed figures listed; the suite does not ask them to be met).
- The runner's exit logic against a fake experiment (fast).
- Targets: two-sided where asked, one type.
- The report: a result measured before a change to hook/, tokend/ or
  simgpu/ (or with no commit) is stale and never listed as current.
- launch_overhead.c fails loudly on a refused launch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import report  # noqa: E402
import results_io  # noqa: E402
from results_io import Result, Target, at_least, at_most, within  # noqa: E402


# -- targets -------------------------------------------------------------------------------------------

def test_a_within_target_misses_on_both_sides():
    cap = within(30, 1.5)   # a 30% limit: 16.7% misses it as surely as 35% does
    assert [cap.met(v) for v in (16.7, 28.4, 28.5, 30.0, 31.5, 31.6, 35.0)] == \
        [False, False, True, True, True, False, False]
    assert str(cap) == "30 ± 1.5"
    assert at_least(97).met(97) and not at_least(97).met(96.9)
    assert at_most(10).met(10) and not at_most(10).met(10.01)
    assert not at_most(10).met(float("nan")) and not within(0, 1).met(float("inf"))


def test_targets_are_one_type_and_bad_ones_are_refused():
    result = Result("fake", device="none")
    with pytest.raises(TypeError, match="must be a results_io.Target"):
        result.add("old_style", 1.0, "x", "<= 31.5")
    with pytest.raises(ValueError, match="not one of"):
        Target("below", 1.0)
    with pytest.raises(ValueError, match="tolerance"):
        within(30, -1)
    # Older result files hold text; they still read, as the same type.
    assert Target.from_json("<= 31.5") == at_most(31.5)
    assert Target.from_json(">= 97") == at_least(97)
    assert Target.from_json("== 0") == within(0, 0)
    assert Target.from_json(within(30, 3).to_json()) == within(30, 3)
    assert Target.from_json("") is None


def test_a_comparison_against_bare_needs_its_noise_figure():
    result = Result("fake", device="none")
    result.add("x/shim_vs_bare", 99.5, "%", at_least(99))
    assert result.problems() and "noise" in result.problems()[0]
    result = Result("fake", device="none")
    result.add("x/shim_vs_bare", 99.5, "%", at_least(99), noise="x/bare_again_vs_bare")
    assert "not among" in result.problems()[0]
    result.add("x/bare_again_vs_bare", 100.2, "%")
    assert result.problems() == []


# -- the runner's exit logic, on a fake experiment -----------------------------------------------------

def _fake(value: float, noise: bool = True):
    def experiment():
        result = Result("fake", device="none (fake)")
        result.add("cap/busy", value, "%", within(30, 1.5))
        result.add("x/shim_vs_bare", 100.0, "%", at_least(99), noise="x/bare_again_vs_bare" if noise else "")
        result.add("x/bare_again_vs_bare", 100.1, "%")
        return result
    return {"fake": (experiment, experiment)}


@pytest.fixture
def run_main():
    import run
    return run.main


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "benchmarks.md"
    path.write_text(f"# Benchmarks\n\nprose\n\n{report.BEGIN}\nold figures\n{report.END}\n\nmore prose\n")
    return path


def test_runner_exits_1_on_a_missed_target_and_leaves_the_docs(run_main, tmp_path, doc, capsys):
    out = tmp_path / "results"
    assert run_main(["--out", str(out), "--docs", str(doc)], experiments=_fake(16.7)) == 1
    assert "old figures" in doc.read_text()
    printed = capsys.readouterr().out
    assert "MISS cap/busy = 16.7 % 30 ± 1.5" in printed and "fake: cap/busy" in printed
    saved = json.loads((out / "fake.json").read_text())   # the result is written as measured
    assert saved["metrics"][0]["met"] is False
    assert saved["metrics"][0]["target"] == {"kind": "within", "bound": 30.0, "tolerance": 1.5}


def test_runner_writes_the_docs_anyway_only_when_asked(run_main, tmp_path, doc):
    out = tmp_path / "results"
    assert run_main(["--out", str(out), "--docs", str(doc), "--write-docs-anyway"], experiments=_fake(16.7)) == 1
    text = doc.read_text()
    assert "old figures" not in text and "| cap/busy | 16.7 % | 30 ± 1.5 | **no**" in text
    assert text.startswith("# Benchmarks\n\nprose") and text.endswith("more prose\n")


def test_runner_exits_0_and_writes_the_docs_when_every_target_is_met(run_main, tmp_path, doc):
    out = tmp_path / "results"
    assert run_main(["--out", str(out), "--docs", str(doc)], experiments=_fake(30.4)) == 0
    text = doc.read_text()
    assert "| cap/busy | 30.4 % | 30 ± 1.5 | yes" in text
    # the noise figure beside its comparison ("yes (stale)" while this tree has uncommitted changes)
    row = next(line for line in text.splitlines() if line.startswith("| x/shim_vs_bare |"))
    assert row.startswith("| x/shim_vs_bare | 100 % | >= 99 | yes") and row.endswith("| 100.1 % |"), row


def test_runner_exits_1_for_a_comparison_without_noise_and_for_a_crash(run_main, tmp_path, doc):
    out = tmp_path / "results"
    assert run_main(["--out", str(out), "--docs", str(doc)], experiments=_fake(30.0, noise=False)) == 1

    def crash():
        raise RuntimeError("workload failed")
    assert run_main(["--out", str(out), "--docs", str(doc)], experiments={"fake": (crash, crash)}) == 1
    assert "old figures" in doc.read_text()


# -- the report: stale results ------------------------------------------------------------------------

def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def _result(name: str, source: dict | None) -> dict:
    result = Result(name, device="none")
    result.add("figure", 1.0, "x", at_most(2))
    payload = results_io.to_json(result)
    if source is None:
        del payload["source"]
    else:
        payload["source"] = source
    return payload


def test_report_marks_a_result_stale_after_a_change_to_the_measured_code(tmp_path):
    repo = tmp_path / "repo"
    (repo / "hook").mkdir(parents=True)
    (repo / "docs").mkdir()
    (repo / "hook" / "gate.c").write_text("int gate;\n")
    (repo / "docs" / "a.md").write_text("a\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "one")
    measured = results_io.source_state(repo)
    assert measured["commit"] == _git(repo, "rev-parse", "HEAD").strip() and measured["dirty"] is False
    assert report.freshness(_result("r", measured), repo).current
    (repo / "docs" / "a.md").write_text("b\n")
    _git(repo, "commit", "-qam", "docs only")
    assert report.freshness(_result("r", measured), repo).current, "a docs change does not make figures stale"
    (repo / "hook" / "gate.c").write_text("int gate = 1;\n")
    _git(repo, "commit", "-qam", "shim change")
    state = report.freshness(_result("r", measured), repo)
    assert not state.current and "1 commit to hook/ tokend/ simgpu/" in state.why
    unknown = report.freshness(_result("r", None), repo)
    assert not unknown.current and unknown.why == "unknown commit, stale"
    # measured with an uncommitted change, later committed as it was: current
    (repo / "hook" / "gate.c").write_text("int gate = 2;\n")
    dirty = results_io.source_state(repo)
    assert dirty["dirty_measured_paths"] == ["hook/gate.c"]
    assert not report.freshness(_result("r", dirty), repo).current
    _git(repo, "commit", "-qam", "the measured change")
    assert report.freshness(_result("r", dirty), repo).current


def test_report_never_lists_a_stale_result_as_current():
    text = report.figures_markdown([_result("old_one", None)])
    current, _, stale = text.partition("### Stale figures")
    assert "#### old_one" not in current and "#### old_one (unknown commit, stale)" in stale
    assert "| old_one |" in current and "unknown commit, stale" in current   # the summary says so too
    assert "yes (stale)" in stale
    smoke = _result("smoke_one", None)
    smoke["smoke"] = True
    text = report.figures_markdown([smoke])
    assert "| smoke_one |" in text and "not a figure" in text and "#### smoke_one" not in text


# -- launch_overhead.c fails loudly --------------------------------------------------------------------

def test_launch_overhead_fails_loudly_when_a_launch_is_refused():
    simgpu = pytest.importorskip("gslice.simgpu")
    import native_build
    stub_dir = native_build.stub_libcuda()
    program = native_build.launch_overhead(simgpu.lib_dir())   # linked as the benchmark links it; run on the stub
    env = dict(os.environ, LD_LIBRARY_PATH=str(stub_dir))
    env.pop("LD_PRELOAD", None)
    ok = subprocess.run([str(program), "3", "100"], env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "min_ns=" in ok.stdout, ok.stderr
    # launch 150: in the first timed batch (100 warm-up launches come first)
    refused = subprocess.run([str(program), "3", "100"], env=dict(env, GSLICE_STUB_FAIL_LAUNCH="150"),
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1, refused.stdout
    assert "cuLaunchKernel failed with 719 at launch 49 of batch 0" in refused.stderr
    assert "min_ns" not in refused.stdout


# -- the smoke run -------------------------------------------------------------------------------------

def test_benchmark_smoke_run_writes_results_and_its_exit_status_says_what_missed(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--smoke", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    log = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "crashed" not in proc.stdout and "BAD " not in proc.stdout, log
    written = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    expected = {"micro", "launch_overhead", "rpc_roundtrip", "share_accuracy", "memory_races",
                "memory_kill_reclaim", "startup", "throughput", "busy", "long_work", "smooth_cap", "latency"}
    assert expected <= set(written), f"missing results: {expected - set(written)}\n{log}"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    missed = []
    for name, result in written.items():
        assert result["metrics"], f"{name} has no figures"
        assert result["device"] and result["machine"]["cores"], name
        assert result["smoke"] is True and result["source"]["commit"] == head, (name, result["source"])
        assert isinstance(result["source"]["dirty"], bool) and result["source"]["measured_fingerprint"], name
        names = {m["name"] for m in result["metrics"]}
        for metric in result["metrics"]:
            assert isinstance(metric["value"], float) and metric["unit"] is not None, (name, metric)
            target = Target.from_json(metric["target"])
            assert metric["target"] is None or isinstance(metric["target"], dict), (name, metric)
            assert metric["met"] == (None if target is None else target.met(metric["value"])), (name, metric)
            if results_io.is_bare_comparison(metric["name"]):
                assert metric["noise"] in names, f"{name}/{metric['name']} has no bare-against-bare figure"
            if metric["met"] is False:
                missed.append(f"{name}: {metric['name']} =")
        for plot in result["plots"]:
            assert (out / plot).stat().st_size > 1000, f"{name}: plot {plot} is empty"
    # The exit status and the printed list say exactly what missed.
    assert proc.returncode == (1 if missed else 0), log
    for line in missed:
        assert line in proc.stdout, (line, log)
    # The checks the docs promise are made in code: micro's round trip p50.
    micro = {m["name"]: m for m in written["micro"]["metrics"]}
    assert micro["test_acquire_release_round_trip/median"]["target"] == at_most(1000).to_json()
    # Correctness holds on any machine, busy or not (speed targets are the
    # benchmark report's business, not the suite's):
    races = {m["name"]: m["value"] for m in written["memory_races"]["metrics"]}
    assert all(v == 0 for k, v in races.items() if k.endswith("over_quota")), races
    assert all(v == 256 << 20 for k, v in races.items() if k.endswith("min_bytes_held")), races  # quota reached
