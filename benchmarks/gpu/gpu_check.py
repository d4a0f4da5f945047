"""The real-GPU check's driver: runs each section in a process of its own with
its own time budget and a hard timeout (the whole process group is killed
at the timeout), records what each measured (or why it failed or was
skipped) and goes on; the combined result is rewritten after every section.

    python gpu_check.py run [--backend auto|torch|driver] [--gpu real|sim] [--short]
                            [--budget SECONDS] [--results-dir DIR] [--no-pytest]
    python gpu_check.py section NAME ...     (internal: one section)
    python gpu_check.py summary FILE.json    (a recorded run's summary again)

Normally started by scripts/gpu-check, which installs the wheel first and
puts it on PYTHONPATH. Results: RESULTS_DIR/gpu_check_<UTC time>.json, and
when $OUT is set: $OUT/gpu_check.json, gpu_check_summary.txt, pytest_gpu.log."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

# name -> (module, function, budget in seconds on a GPU, budget in the short form, what)
SECTIONS = {
    "throughput": ("sec_throughput", "run", 80, 30, "a+b: lone-tenant throughput (also with host stalls) and "
                   "per-launch overhead"),
    "shares": ("sec_sharing", "shares", 45, 20, "c: shares 30/70, work done per process"),
    "caps": ("sec_sharing", "caps", 75, 25, "d: limit 30% alone, short and long kernels"),
    "latency": ("sec_latency", "run", 100, 30, "e: high-priority bursts beside a low-priority neighbour"),
    "quotas": ("sec_memory", "quotas", 70, 20, "f: memory quotas per allocator (and JAX)"),
    "capture": ("sec_capture", "run", 50, 20, "g: graph capture and replay beside a busy group"),
    "reclaim": ("sec_memory", "kill_reclaim", 40, 20, "h: kill -9 reclaim against NVML"),
    "rpc": ("sec_rpc", "run", 20, 20, "i: the shim's RPC round trips to tokend, beside the machine's echo floor"),
}
PYTEST_MIN_SECONDS = 40
# A timed-out section gets this long after SIGTERM to clean up, then SIGKILL.
SECTION_TERM_GRACE_S = 5.0


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(message: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def command_output(argv: list[str], timeout: float = 20.0, cwd=None) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd)
        return out.stdout.strip() if out.returncode == 0 else f"(exit {out.returncode}: {out.stderr.strip()[-300:]})"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({type(exc).__name__}: {exc})"


def facts(backend: str, gpu: str) -> dict:
    """What was measured, on what, when: device, driver, CUDA, versions, commit."""
    out = {"time_utc": now_utc(), "backend": backend, "gpu": gpu, "python": sys.version.split()[0],
           "hostname": os.uname().nodename, "cpu_count": os.cpu_count()}
    out["commit"] = command_output(["git", "rev-parse", "HEAD"], cwd=ROOT)
    dirty = command_output(["git", "status", "--porcelain"], cwd=ROOT)
    out["dirty"] = bool(dirty.strip())
    out["git_status_porcelain"] = dirty.splitlines()[:50]
    bundle = Path(os.environ.get("GSLICE_GPU_CHECK_BUNDLE", ROOT / "build" / "gpu-check"))
    manifest = bundle / "manifest.json"
    if manifest.exists():
        out["wheel_manifest"] = json.loads(manifest.read_text())
    if "wheel_manifest" in out:
        # The shim, tokend and workloads that ran came from the wheel, so the
        # commit it was built from is what was measured. The tree's own git can
        # disagree: the device tool copies the work tree with a stale .git.
        out["tree_commit"], out["tree_dirty"] = out["commit"], out["dirty"]
        out["commit_source"] = f"wheel manifest (git in this tree said {out['commit']})"
        out["commit"] = out["wheel_manifest"]["commit"]
        out["dirty"] = out["wheel_manifest"]["dirty"]
    else:
        out["commit_source"] = "git rev-parse HEAD of this tree"
    if gpu == "real":
        out["nvidia_smi"] = command_output(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,uuid,"
                                            "clocks.max.sm,power.limit,compute_mode", "--format=csv,noheader"])
        header = command_output(["nvidia-smi"])
        out["cuda_version"] = next((part.split(":")[1].strip().split()[0] for line in header.splitlines()
                                    for part in [line[line.find("CUDA Version"):]] if "CUDA Version" in line), None)
    probe = ("import json, sys\nout = {}\n"
             "for name in ('torch', 'cupy', 'jax', 'grpc', 'google.protobuf', 'pynvml', 'gslice'):\n"
             "    try:\n        m = __import__(name, fromlist=['_']); out[name] = getattr(m, '__version__', 'present')\n"
             "    except Exception as exc:\n        out[name] = f'missing ({type(exc).__name__}: {exc})'[:200]\n"
             "try:\n    import torch; out['torch_cuda'] = torch.version.cuda\n"
             "    out['torch_device'] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None\n"
             "except Exception:\n    pass\n"
             "import gslice; out['gslice_from'] = gslice.__file__\n"
             "print(json.dumps(out))\n")
    versions = command_output([sys.executable, "-c", probe], timeout=60)
    try:
        out["versions"] = json.loads(versions.splitlines()[-1])
    except (ValueError, IndexError):
        out["versions"] = versions
    return out


def torch_usable() -> bool:
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=120).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def run_section(name: str, args, timeout: float, work_root: Path) -> dict:
    """One section in a new session; killed (with everything it started) at `timeout`."""
    module, function, *_ , what = SECTIONS[name]
    record = work_root / f"{name}.json"
    work_dir = work_root / name
    work_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "section", name, "--backend", args.backend,
            "--gpu", args.gpu, "--seconds", str(timeout), "--record", str(record), "--work-dir", str(work_dir)]
    if args.short:
        argv.append("--short")
    started = time.monotonic()
    log_path = work_root / f"{name}.log"
    with open(log_path, "w") as section_log:
        proc = subprocess.Popen(argv, stdout=section_log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout)
            status = "ok" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            status = f"timed out after {timeout:.0f} s (killed)"
            # SIGTERM first: the section then leaves its `with` blocks, so its
            # tokend closes and unlinks its simulated GPU's shared memory.
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(SECTION_TERM_GRACE_S)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # whatever it left: workers, tokend, samplers
            except ProcessLookupError:
                pass
            proc.wait()
    result = {"what": what, "status": status, "seconds": round(time.monotonic() - started, 1),
              "budget_s": round(timeout)}
    try:
        result["results"] = json.loads(record.read_text())
    except (OSError, ValueError):
        result["results"] = {}
    if status != "ok":
        result["log_tail"] = log_path.read_text(errors="replace")[-3000:]
    return result


def section_main(args) -> int:
    """Internal: run one section in this process (started by run_section)."""
    import importlib
    from harness import Context, Record
    module, function, *_ = SECTIONS[args.name]
    record = Record(Path(args.record))
    ctx = Context(backend=args.backend, gpu=args.gpu, short=args.short,
                  deadline=time.monotonic() + args.seconds - 3, record=record, work_dir=Path(args.work_dir))
    os.environ["GSLICE_GPU_CHECK_SECTION"] = args.name  # harness.wait_ready's fault injection reads it
    # Stopped at its timeout (run_section): unwind, so daemons and shared memory are cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        getattr(importlib.import_module(module), function)(ctx)
    except Exception as exc:
        record.set("error", f"{type(exc).__name__}: {exc}"[:3000])
        record.set("trace", traceback.format_exc()[-3000:])
        traceback.print_exc()
        return 1
    return 0


def targets(result: dict) -> list[tuple[str, dict]]:
    """Every {"value", "met"} verdict inside a section's results, with its path."""
    found = []

    def walk(node, path):
        if isinstance(node, dict):
            if "met" in node and "value" in node:
                found.append((path, node))
                return
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else k)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(result.get("results", {}), "")
    return found


def _fmt(value, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def highlights(name: str, res: dict) -> list[str]:
    """The figures a reader wants beside the verdicts (all of them are in the JSON)."""
    out = []
    try:
        if name == "throughput":
            for key in ("lone_throughput", "lone_throughput_host_stalls", "launch_overhead"):
                if key in res:
                    r = res[key]
                    out.append(f"{key}: shim/bare median {_fmt(r['shim_over_bare'].get('median'), 4)} "
                               f"{r['shim_over_bare'].get('values')}; bare B/bare A {r['bare_b_over_bare_a'].get('values')}"
                               + (f"; added ns median {_fmt(r['added_ns'].get('median'))}" if "added_ns" in r else ""))
        elif name == "shares" and "shares_30_70" in res:
            r = res["shares_30_70"]
            out.append(f"iterations {r['iterations']}; together {_fmt(r['together_over_bare_alone'])} of bare alone; "
                       f"tokend window shares {r['tokend_window_share']}")
        elif name == "caps":
            for key in ("cap30_mm4096h", "cap30_mm16384bf"):
                if key in res:
                    r = res[key]
                    k = r["kernel_ms"]
                    out.append(f"{key}: GPU time {_fmt(r.get('gpu_time_fraction'), 4)} (the target), "
                               f"work {_fmt(r['fraction_of_bare'], 4)} of bare, per second "
                               f"{[round(x, 3) for x in r['fraction_per_second']]}, tokend share "
                               f"{_fmt(r.get('tokend_share_last'))}, shim used/wall {_fmt(r.get('shim_used_fraction_of_wall'))}, "
                               f"kernel p50 ms bare {_fmt(k['bare_before'].get('p50'))} capped {_fmt(k['capped'].get('p50'))}, "
                               f"bare after/before {_fmt(r['bare_after_over_bare_before'], 4)}")
            for row in res.get("nvml_by_run", []):
                out.append(f"nvml {row['unit']} {row['run']}: SM {_fmt(row['sm_clock_mhz_median'])} MHz, "
                           f"{_fmt(row['power_w_mean'])} W, util {_fmt(row['util_pct_mean'])}%")
        elif name == "latency":
            for key, r in res.items():
                if key.startswith("bursts_") and "latency_ms" in r:
                    l = r["latency_ms"]
                    out.append(f"{key}: p50/p99 ms alone bare {_fmt(l['alone_bare']['p50'])}/{_fmt(l['alone_bare']['p99'])}, "
                               f"alone shim {_fmt(l['alone_shim']['p50'])}/{_fmt(l['alone_shim']['p99'])}, beside "
                               f"{_fmt(l['beside']['p50'])}/{_fmt(l['beside']['p99'])} (n={l['beside']['n']}); neighbour "
                               f"kept {_fmt(r['neighbour_share_of_idle'])} of the idle GPU; GPU busy "
                               f"{_fmt(r.get('gpu_busy_estimate'))} by the throughputs (neighbour alone, last over "
                               f"first run: {_fmt(r.get('neighbour_rate_alone_last_over_first'))})"
                               + (f" ({r['gpu_time_figures']})" if "gpu_time_figures" in r else "")
                               + (f", NVML util {_fmt(r['nvml_util_pct_beside'])}% beside, "
                                  f"{_fmt(r.get('nvml_util_pct_neighbour_alone'))}% with the neighbour alone"
                                  if "nvml_util_pct_beside" in r else ""))
        elif name == "quotas":
            for key, r in res.items():
                if key.startswith("quota_") and "shim" in r:
                    out.append(f"{key}: allocated {r['shim'].get('allocated', 0) >> 20} MiB, NVML "
                               f"{(r['nvml_used'] or 0) >> 20} MiB, charged {r['charged'] >> 20} MiB, quota "
                               f"{r['quota'] >> 20} MiB; bare got past the quota: {r['bare_got_past_quota']}")
        elif name == "reclaim":
            for t in res.get("trials", []):
                out.append(f"kill -9 of {t.get('allocated', 0) >> 20} MiB (charged {t.get('charged_before', 0) >> 20} MiB): "
                           f"NVML gone after {_fmt(t.get('nvml_gone_after_kill_ms'))} ms, charge dropped after "
                           f"{_fmt(t.get('charge_dropped_after_kill_ms'))} ms (polls {_fmt(t.get('nvml_poll_ms'))} / "
                           f"{_fmt(t.get('charge_poll_ms'))} ms)")
        elif name == "rpc" and "series" in res.get("round_trips", {}):
            r = res["round_trips"]["series"]
            out.append(f"p50/p99 us: acquire+release {_fmt(r['acquire_release']['p50_us'])}/"
                       f"{_fmt(r['acquire_release']['p99_us'])}, reserve+release "
                       f"{_fmt(r['reserve_release_memory']['p50_us'])}/{_fmt(r['reserve_release_memory']['p99_us'])}; "
                       f"echo floor p50 {res.get('echo_floor_p50_us')}")
        elif name == "capture":
            for key, r in res.items():
                if key == "capture_global_beside_own_launches":
                    out.append(f"{key}: {r.get('skipped') or r.get('error') or 'ok'} (the other thread launched "
                               f"{r.get('shim', {}).get('own_thread_launches')} under gslice)")
                elif key.startswith("capture_"):
                    out.append(f"{key}: tokens around replays {r.get('tokens_around_replays')}, "
                               f"{r.get('skipped') or r.get('error') or 'ok'}")
    except (KeyError, TypeError, AttributeError) as exc:
        out.append(f"(highlights incomplete: {type(exc).__name__}: {exc})")
    return out


def summary_text(report: dict) -> str:
    f = report["facts"]
    lines = [f"gslice gpu-check {f['time_utc']} commit {f.get('commit')} dirty={f.get('dirty')} "
             f"backend={f['backend']} gpu={f['gpu']}",
             f"device: {f.get('nvidia_smi', '(simulated)')}; CUDA {f.get('cuda_version')}; "
             f"versions {json.dumps(f.get('versions'))[:400]}", ""]
    for name, result in report["sections"].items():
        lines.append(f"[{name}] {result['status']} in {result['seconds']} s (budget {result['budget_s']} s): "
                     f"{result['what']}")
        res = result.get("results", {})
        if "error" in res:
            lines.append(f"    error: {res['error'][:400]}")
        for line in highlights(name, res):
            lines.append(f"    {line}")
        for path, v in targets(result):
            value = v["value"]
            shown = f"{value:.4g}" if isinstance(value, (int, float)) else repr(value)
            lines.append(f"    {'MET   ' if v['met'] else 'MISSED'} {path} = {shown} (target {v['low']}..{v['high']})")
        for key, val in res.items():
            if isinstance(val, dict) and ("skipped" in val or "error" in val):
                lines.append(f"    {key}: {str(val.get('skipped') or val.get('error'))[:300]}")
    if "pytest" in report:
        p = report["pytest"]
        lines.append(f"[pytest -m gpu tests/gpu] {p['status']} in {p['seconds']} s: {p.get('summary')}")
        lines.extend(f"    {line[:300]}" for line in p.get("lines", [])[:60])
    return "\n".join(lines) + "\n"


def run_pytest(timeout: float, log_path: Path) -> dict:
    started = time.monotonic()
    # Most telling first: PyTorch (capture, allocators, cap, shares, overhead), then the driver API, then CuPy.
    files = ["tests/gpu/test_torch_under_shim.py", "tests/gpu/test_driver_api_real_gpu.py",
             "tests/gpu/test_cupy_under_shim.py"]
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", *files, "-p", "no:cacheprovider", "-rA", "-s", "-v",
            "-o", "addopts=", "--strict-markers", f"--junitxml={log_path.with_suffix('.xml')}"]
    with open(log_path, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout)
            status = f"exit {code}"
        except subprocess.TimeoutExpired:
            status = f"timed out after {timeout:.0f} s (killed)"
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    text = log_path.read_text(errors="replace")
    tail = [l for l in text.splitlines() if l.startswith("=") and (" passed" in l or " failed" in l or " skipped" in l
                                                                   or " error" in l)]
    results = [l for l in text.splitlines() if l.startswith(("PASSED", "FAILED", "SKIPPED", "ERROR", "gpu-result:"))
               or l.rstrip().endswith((" PASSED", " FAILED", " SKIPPED", " ERROR")) or " PASSED " in l
               or " FAILED " in l]
    return {"status": status, "seconds": round(time.monotonic() - started, 1), "summary": tail[-1] if tail else None,
            "lines": results[:80]}


def pack_logs(work_root: Path, path: Path, per_file: int = 256 * 1024) -> None:
    """Every log the sections left (theirs, the workers', tokend's), each cut to
    its last `per_file` bytes, in one archive (the device tool brings back few files)."""
    import io
    import tarfile
    with tarfile.open(path, "w:gz") as tar:
        for log_file in sorted(work_root.rglob("*.log")):
            data = log_file.read_bytes()[-per_file:]
            info = tarfile.TarInfo(str(log_file.relative_to(work_root)))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def results_fields(report: dict) -> dict:
    """The fields every file in benchmarks/results/ has (benchmarks/results_io.py),
    so report.py can list this one too: each verdict as a metric."""
    f = report["facts"]
    metrics = []
    for name, result in report["sections"].items():
        for path, v in targets(result):
            if isinstance(v["value"], (int, float)) and not isinstance(v["value"], bool):
                bounds = [f">= {v['low']}" if v["low"] is not None else "", f"<= {v['high']}" if v["high"] is not None else ""]
                metrics.append({"name": f"{name}.{path}", "value": float(v["value"]), "unit": "",
                                "target": " and ".join(b for b in bounds if b), "met": v["met"]})
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "") if Path("/proc/cpuinfo").exists() else ""
    return {"experiment": "gpu_check_short" if f.get("short") else "gpu_check",
            "device": f.get("nvidia_smi") or f"simulated GPU ({f['backend']} workloads)",
            "machine": {"hostname": f.get("hostname"), "cpu": cpu, "cores": f.get("cpu_count")},
            "recorded_at": f["time_utc"], "commit": f.get("commit"), "metrics": metrics, "plots": []}


def write_report(report: dict, results_path: Path, out_dir: Path | None) -> None:
    report.update(results_fields(report))
    text = json.dumps(report, indent=1, default=str)
    tmp = results_path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, results_path)
    summary = summary_text(report)
    if out_dir:
        (out_dir / "gpu_check.json").write_text(text)
        (out_dir / "gpu_check_summary.txt").write_text(summary)


def summary_main(args) -> int:
    """A recorded run's summary, as `run` wrote it, with the latency
    section's GPU-time figures computed from its recorded rates where the
    run predates them (marked in the section's results)."""
    import sec_latency

    report = json.loads(Path(args.file).read_text())
    latency = report.get("sections", {}).get("latency", {}).get("results", {})
    for key, r in latency.items():
        if key.startswith("bursts_") and "neighbour_runs" in r and "gpu_busy_estimate" not in r:
            figures = sec_latency.gpu_time_figures(r["latency_ms"]["alone_bare"]["p50"], len(r["latencies_ms"]["beside"]),
                                                   r["neighbour_runs"])
            r.update(figures, **sec_latency.gpu_time_verdicts(figures), gpu_time_figures="recomputed by gpu_check.py summary")
    sys.stdout.write(summary_text(report))
    return 0


def run_main(args) -> int:
    started = time.monotonic()
    deadline = started + args.budget
    if args.backend == "auto":
        args.backend = "torch" if args.gpu == "real" and torch_usable() else "driver"
    results_dir = Path(args.results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    results_path = results_dir / f"gpu_check_{'short_' if args.short else ''}{stamp}.json"
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    if args.work_dir:
        work_root = Path(args.work_dir)
        work_root.mkdir(parents=True, exist_ok=True)
    else:
        work_root = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    log(f"backend {args.backend} on the {args.gpu} GPU, budget {args.budget:.0f} s; results {results_path}")
    report = {"facts": {**facts(args.backend, args.gpu), "short": args.short}, "budget_s": args.budget,
              "sections": {}}
    write_report(report, results_path, out_dir)
    names = [n for n in SECTIONS if not args.only or n in args.only]
    for i, name in enumerate(names):
        left = deadline - time.monotonic()
        budget = SECTIONS[name][3 if args.short else 2] * args.timeout_scale
        later = sum(SECTIONS[n][3 if args.short else 2] for n in names[i + 1:]) * 0.3 * args.timeout_scale
        timeout = min(budget, left - later - (0 if args.no_pytest else PYTEST_MIN_SECONDS * 0.5))
        if timeout < 10:
            report["sections"][name] = {"what": SECTIONS[name][4], "status": f"skipped: {left:.0f} s left",
                                        "seconds": 0, "budget_s": budget, "results": {}}
            log(f"{name}: skipped ({left:.0f} s left)")
            continue
        log(f"{name}: {SECTIONS[name][4]} (timeout {timeout:.0f} s)")
        report["sections"][name] = run_section(name, args, timeout, work_root)
        log(f"{name}: {report['sections'][name]['status']} in {report['sections'][name]['seconds']} s")
        write_report(report, results_path, out_dir)
    if not args.no_pytest:
        left = deadline - time.monotonic() - 5
        pytest_log = (out_dir or work_root) / "pytest_gpu.log"
        if left >= PYTEST_MIN_SECONDS:
            log(f"pytest -m gpu tests/gpu (timeout {left:.0f} s)")
            report["pytest"] = run_pytest(left, pytest_log)
            log(f"pytest: {report['pytest']['status']}: {report['pytest']['summary']}")
        else:
            report["pytest"] = {"status": f"skipped: {left:.0f} s left", "seconds": 0}
    report["total_seconds"] = round(time.monotonic() - started, 1)
    write_report(report, results_path, out_dir)
    print(summary_text(report), flush=True)
    if out_dir:
        pack_logs(work_root, out_dir / "gpu_check_logs.tar.gz")
    if args.keep_work or args.work_dir:
        log(f"work files kept in {work_root}")
    else:
        shutil.rmtree(work_root, ignore_errors=True)
    failed = [n for n, r in report["sections"].items() if r["status"] != "ok"]
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("--backend", choices=("auto", "torch", "driver"), default="auto")
    p_run.add_argument("--gpu", choices=("real", "sim"), default="real")
    p_run.add_argument("--short", action="store_true", help="tiny runs that prove the plumbing (simulated GPU)")
    p_run.add_argument("--budget", type=float, default=440.0,
                       help="seconds for the sections and pytest (default 440; install and facts add ~20-30 s)")
    p_run.add_argument("--results-dir", default=str(ROOT / "benchmarks" / "results" / "gpu"))
    p_run.add_argument("--only", nargs="*", choices=sorted(SECTIONS), help="run only these sections")
    p_run.add_argument("--no-pytest", action="store_true")
    p_run.add_argument("--keep-work", action="store_true", help="keep the sections' logs and worker logs")
    p_run.add_argument("--work-dir", help="where sections keep their logs and daemons' state (default: a temp folder)")
    p_run.add_argument("--timeout-scale", type=float, default=1.0,
                       help="multiply every section's time budget (e.g. 1.5 on a slow machine)")
    p_sec = sub.add_parser("section")
    p_sec.add_argument("name", choices=sorted(SECTIONS))
    p_sec.add_argument("--backend", required=True)
    p_sec.add_argument("--gpu", required=True)
    p_sec.add_argument("--seconds", type=float, required=True)
    p_sec.add_argument("--record", required=True)
    p_sec.add_argument("--work-dir", required=True)
    p_sec.add_argument("--short", action="store_true")
    p_sum = sub.add_parser("summary", help="print a recorded run's summary (GPU-time figures recomputed where missing)")
    p_sum.add_argument("file", help="a gpu_check_<time>.json")
    args = parser.parse_args(argv)
    return {"run": run_main, "section": section_main, "summary": summary_main}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
