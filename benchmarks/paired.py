"""wse against eager in alternating blocks of steps, each in its own process: the paired ratio.

This VM's speed drifts by tens of percent over seconds to minutes (eager's MLP step ran at
12-23 ms within one day), and run.py's workers for eager and wse run tens of seconds apart, so
their ratio carries that drift. Here two processes, one per backend, build and warm up their
steps, then take turns at short blocks (eager then wse, then wse then eager, ...): each wse block
is divided by the eager block beside it, and the median of those ratios is the paired ratio.
run.py runs this for every workload with a ratio target when eager and wse are both asked for.

The backends do not share a process. Eager's 20-op chain, run in blocks between wse blocks in
one process, took 1.1-1.7x as long as in a process of its own (median ratio of 8 rounds, three
runs); its slow blocks had 2-5x the page faults and system time: the runtime's buffers share
glibc's heap with torch's, whose 16 MB results then come back as fresh pages.

    python benchmarks/paired.py --workload mlp [--rounds 8] [--steps N] [--warmup 3]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from worker import MARKER, error_result, run_pipelined, run_steps  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

# A block runs at least MIN_STEPS steps and about BLOCK_S seconds: the first steps after the
# process waited for its turn run slower (its OpenMP team asleep, its caches refilled after the
# other's), and in a block of 5 CNN steps (12 ms each) that decided the block's median.
BLOCK_S = 0.5
MIN_STEPS = 5

# Between blocks: the process that ran last keeps its OpenMP team spinning for about 5 ms
# (Note [Releasing the team] in csrc/wse_runtime.c), which would take a core from the next block.
SETTLE_S = 0.05


def block(step, backend, steps: int, pipelined: bool = False) -> float:
    """Median step time of `steps` steps (read each step), or with `pipelined` when each step's
    value is read one step late, in ms: as benchmarks/run.py times them."""
    if pipelined:
        return run_pipelined(step, backend, 0, steps) * 1e3
    return statistics.median(r["step_s"] for r in run_steps(step, backend, 0, steps)) * 1e3


def serve(workload: str, backend_name: str, warmup: int) -> None:
    """One backend's side: build and warm up the step, then run a block of the number of steps
    each stdin line asks for and answer with its median, until stdin closes."""
    import torch
    import backends
    torch.set_num_threads(2)
    backend = backends.make(backend_name)
    torch.manual_seed(0)            # after backend init, as run.py's workers do
    step = WORKLOADS[workload](backend.device, backend.wrap)
    warm = run_steps(step, backend, 0, 1 + warmup)   # compiles (wse), optimizer state
    print(MARKER + json.dumps({"step_s": min(r["step_s"] for r in warm)}), flush=True)
    for line in sys.stdin:
        print(MARKER + json.dumps({"ms": block(step, backend, int(line))}), flush=True)


def _answer(proc, err) -> dict:
    """The next result line of a serving process; `err` is the file its stderr goes to."""
    for line in proc.stdout:
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    err.seek(0)
    last = (err.read().strip().splitlines() or [""])[-1]
    raise RuntimeError(f"the {proc.args[-1]} process exited with code {proc.wait()}: {last[:300]}")


def bench_paired(workload: str, rounds: int, steps: int | None, warmup: int) -> dict:
    """`steps` per block, or None: enough for BLOCK_S of the slower backend's steps."""
    ms, steps = blocks({"eager": (None, "eager"), "wse": (None, "wse")}, workload, warmup,
                       rounds, steps)
    ratios = [w / e for w, e in zip(ms["wse"], ms["eager"])]
    return {"ratio": statistics.median(ratios), "ratios": ratios, "eager_ms": ms["eager"],
            "wse_ms": ms["wse"], "rounds": rounds, "steps": steps}


def blocks(serving: dict, workload: str, warmup: int, rounds: int, steps: int | None) -> tuple:
    """({name: block medians in ms}, steps per block) of one process per `serving` entry,
    name -> (checkout root or None, backend) as `spawn` takes them, taking turns (take_turns);
    the processes are stopped whatever happens."""
    # stderr to files: lazydev's warnings must not fill a pipe nobody reads while blocks run.
    errs = {name: tempfile.TemporaryFile("w+") for name in serving}
    procs = {}
    try:
        for name, (root, backend) in serving.items():
            procs[name] = spawn(root, backend, workload, warmup, errs[name])
        return take_turns(procs, errs, rounds, steps)
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
        for err in errs.values():
            err.close()


def spawn(root: str | None, backend: str, workload: str, warmup: int, err):
    """A process serving `backend`'s blocks (`serve`): this file's, or with `root` the
    paired.py of the checkout at `root`, importing that checkout's lazydev (benchmarks/
    revisions.py)."""
    script, env, cwd = os.path.abspath(__file__), None, None
    if root is not None:
        script = os.path.join(root, "benchmarks", "paired.py")
        env, cwd = dict(os.environ, PYTHONPATH=root), tempfile.gettempdir()
    return subprocess.Popen([sys.executable, script, "--workload", workload, "--warmup",
                             str(warmup), "--serve", backend], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=cwd)


def take_turns(procs: dict, errs: dict, rounds: int, steps: int | None) -> tuple:
    """({name: block medians in ms}, steps per block) after each process's warm-up: `rounds`
    rounds, the order rotated by one each round (two processes: A then B, then B then A)."""
    # One at a time: warm-ups must not overlap blocks.
    step_s = max(_answer(proc, errs[name])["step_s"] for name, proc in procs.items())
    steps = steps or max(MIN_STEPS, math.ceil(BLOCK_S / step_s))
    names, ms = list(procs), {name: [] for name in procs}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            time.sleep(SETTLE_S)
            procs[name].stdin.write(f"{steps}\n")
            procs[name].stdin.flush()
            ms[name].append(_answer(procs[name], errs[name])["ms"])
    return ms, steps


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--steps", type=int, help=f"steps per block (default: at least {MIN_STEPS} "
                   f"and about {BLOCK_S} s of the slower backend's steps)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--serve", choices=("eager", "wse"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.rounds < 1 or (a.steps is not None and a.steps < 1) or a.warmup < 0:
        p.error("--rounds and --steps must be >= 1 and --warmup >= 0")
    if a.serve:
        serve(a.workload, a.serve, a.warmup)
        return
    t0 = time.perf_counter()
    try:
        result = bench_paired(a.workload, a.rounds, a.steps, a.warmup)
    except Exception as exc:      # a failure is a result, not a crash of the run
        result = error_result(exc)
    result.update(workload=a.workload, wall_s=time.perf_counter() - t0)
    print(MARKER + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
