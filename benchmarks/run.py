"""Benchmark wse against CPU eager, torch._lazy (TorchScript) and torch.compile.

    python benchmarks/run.py [--workloads a,b] [--backends eager,lazy_ts,compile,wse]
                             [--steps N] [--repeat N] [--json out.json]

One command runs everything; each (workload, backend) pair runs in its own worker process
(benchmarks/worker.py) so it gets its own peak RSS and cold caches, and a backend that fails or
hangs is reported in the table instead of ending the run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from rich.console import Console

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import report  # noqa: E402
from worker import MARKER  # noqa: E402

WORKLOADS = list(report.ISSUE_WORKLOADS)     # the default: the issue's workloads
EXTRA = ["mlp_amp"]     # on request only (--workloads): not among the issue's targets
BACKENDS = ["eager", "lazy_ts", "compile", "wse"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help=f"comma-separated, from {','.join(WORKLOADS + EXTRA)}")
    p.add_argument("--backends", default=",".join(BACKENDS),
                   help=f"comma-separated, from {','.join(BACKENDS)}")
    p.add_argument("--steps", type=int, default=20, help="timed steps (after the warm-up)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps after the first step")
    p.add_argument("--repeat", type=int, default=1,
                   help="run every (workload, backend) this many times, interleaved (eager, ..., "
                        "wse, eager, ...), and keep each pair's fastest run: this machine's speed "
                        "drifts by tens of percent over minutes, and noise only adds time")
    p.add_argument("--paired-rounds", type=int, default=8,
                   help="rounds of the paired eager/wse measurement (benchmarks/paired.py), run "
                        "for each workload with a ratio target when eager and wse are both "
                        "asked for; 0 skips it")
    p.add_argument("--json", help="also write all results to this file")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds before one (workload, backend) worker is stopped")
    p.add_argument("--warm-cache", action="store_true",
                   help="use the user's lazydev and inductor disk caches (default: fresh empty "
                        "caches, so the first step includes a real compile)")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0 or a.repeat < 1 or a.paired_rounds < 0:
        p.error("--steps and --repeat must be >= 1, --warmup and --paired-rounds >= 0")
    a.workloads = _choices(a.workloads, WORKLOADS + EXTRA)
    a.backends = _choices(a.backends, BACKENDS)
    return a


def _choices(value: str, allowed: list) -> list:
    names = [n.strip() for n in value.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad:
        raise SystemExit(f"unknown {bad}; choose from {allowed}")
    return names


def worker_env(cache_dir) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    if cache_dir is not None:
        # Fresh disk caches per worker: otherwise a program compiled by an earlier run (or by
        # the tests) makes the "first step" a cache hit and hides the compile time.
        env["LAZYDEV_CACHE_DIR"] = os.path.join(cache_dir, "lazydev")
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache_dir, "inductor")
    return env


def _parse(proc) -> dict:
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    # No result line: the worker died (a crash in C code, an abort, an OOM kill).
    tail = proc.stderr.strip().splitlines()[-1:] or [""]
    return {"error": f"worker exited with code {proc.returncode}: {tail[0][:200]}",
            "traceback": proc.stderr[-4000:]}


def _warnings(stderr: str) -> list:
    # lazydev explains itself through warnings (tracing-bound steps, recompiles); keep them.
    return sorted({line.strip() for line in stderr.splitlines() if "lazydev:" in line})


def _worker(script: str, options: list, args, cache_root) -> dict:
    """Run one worker script and parse its result line (or say how it failed)."""
    cache = None if cache_root is None else tempfile.mkdtemp(dir=cache_root)
    cmd = [sys.executable, os.path.join(HERE, script), *options]
    try:
        proc = subprocess.run(cmd, env=worker_env(cache), capture_output=True, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout: still running after {args.timeout:.0f} s"}
    result = _parse(proc)
    result["warnings"] = _warnings(proc.stderr)
    return result


def run_job(workload: str, backend: str, args, cache_root) -> dict:
    result = _worker("worker.py", ["--workload", workload, "--backend", backend, "--steps",
                                   str(args.steps), "--warmup", str(args.warmup)],
                     args, cache_root)
    result.update(workload=workload, backend=backend)
    return result


def run_paired(results: list, args, cache_root, console) -> None:
    """The paired ratio (benchmarks/paired.py) of each workload with a ratio target, stored in
    its wse result as "paired"."""
    if args.paired_rounds == 0 or not {"eager", "wse"} <= set(args.backends):
        return
    by = report.index(results)
    for workload in args.workloads:
        wse = by.get((workload, "wse"))
        if workload not in report.RATIO_TARGETS or wse is None or "error" in wse:
            continue
        t0 = time.perf_counter()
        wse["paired"] = r = _worker("paired.py", ["--workload", workload, "--rounds",
                                                  str(args.paired_rounds), "--warmup",
                                                  str(args.warmup)], args, cache_root)
        status = f"[red]{r['error'][:100]}[/]" if "error" in r else f"wse / eager {r['ratio']:.2f}x"
        console.print(f"paired: {workload:>15} {time.perf_counter() - t0:6.1f} s  {status}")


def _progress(console, i: int, n: int, r: dict, seconds: float) -> None:
    if "error" in r:
        status = f"[red]{r['error'][:100]}[/]"
    else:
        status = f"first {r['first_step_s']:.2f} s, steady {r['median_s'] * 1e3:.1f} ms"
    console.print(f"[{i}/{n}] {r['workload']:>15} {r['backend']:<8} {seconds:6.1f} s  {status}")


def run_all(args, console) -> list:
    jobs = [(w, b) for w in args.workloads for _ in range(args.repeat) for b in args.backends]
    runs: dict = {}
    with tempfile.TemporaryDirectory(prefix="lazydev-bench-") as tmp:
        cache_root = None if args.warm_cache else tmp
        for i, (workload, backend) in enumerate(jobs, 1):
            t0 = time.perf_counter()
            r = run_job(workload, backend, args, cache_root)
            runs.setdefault((workload, backend), []).append(r)
            _progress(console, i, len(jobs), r, time.perf_counter() - t0)
        results = [_fastest(rs) for rs in runs.values()]
        run_paired(results, args, cache_root, console)
    return results


def _fastest(runs: list) -> dict:
    """The run with the lowest steady median, with every run's steady median beside it."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    best = dict(min(ok, key=lambda r: r["median_s"]))
    best["repeats_median_s"] = [r.get("median_s") for r in runs]
    return best


def revision() -> str:
    """The lazydev code measured: commit, and whether lazydev/ or csrc/ has local changes."""
    def git(*cmd):
        out = subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""
    head = git("rev-parse", "--short", "HEAD") or "unknown commit"
    dirty = git("status", "--porcelain", "--", "lazydev", "csrc")
    return head + (" + uncommitted changes" if dirty else "")


def machine(args) -> dict:
    import torch
    return {"revision": revision(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version(), "steps": args.steps, "warmup": args.warmup,
            "cache": "warm (user's)" if args.warm_cache else "cold (fresh per worker)",
            "repeat": args.repeat, "paired_rounds": args.paired_rounds,
            "loadavg_start": os.getloadavg()}


def main(argv=None) -> None:
    args = parse_args(argv)
    # Wide enough for the table when piped to a file (rich assumes 80 columns off a terminal).
    console = Console(width=None if sys.stdout.isatty() else 200)
    meta = machine(args)
    t0 = time.perf_counter()
    results = run_all(args, console)
    meta.update(loadavg_end=os.getloadavg(), wall_s=time.perf_counter() - t0)
    targets = report.check_targets(results)
    report.print_report(results, targets, meta, console)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results, "targets": targets}, f, indent=1)
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
