"""Where a step's recording time goes, op by op: the record µs/op figure of run.py split by aten
op, so that the ops worth a faster path show themselves.

Runs a workload's steps on wse as run.py's worker does (first step, warm-up), then times every
dispatch into lazydev's __torch_dispatch__ over a few more steps (worker.recording_cost) and
prints each op's calls, µs per step and per op, and share, with the step's first dispatch,
which also refills the caches the previous step's program flushed (Note [First op after a sync]
in worker.py).

The "warm" column times the same ops with the host's caches warm and the other core idle: each
of those steps is recorded right after an untimed one, in the same trace, once the queue has run
every program, so no program runs beside it or between the two to flush the caches. (The two
steps are not quite alike: the second reads the parameters and optimizer state the first left
pending, not values on the device.) The difference between the columns is what the step's
program costs the next step's recording: the host's code and data evicted from the caches, and
the rest of the program, which the queue's worker runs on the other core while the host records
(Note [Who runs a program] in lazydev/runtime/queue.py).

    python benchmarks/record_by_op.py --workload mlp [--steps 5] [--warmup 5] [--top 25]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import backends  # noqa: E402
import lazydev  # noqa: E402
from worker import recording_cost, run_steps  # noqa: E402
from workloads import WORKLOADS  # noqa: E402


def _totals(by_op: dict) -> tuple:
    """(seconds, ops) over every op of a recording_cost `by_op` table."""
    return sum(s for s, _ in by_op.values()), sum(n for _, n in by_op.values())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    p.add_argument("--steps", type=int, default=5, help="instrumented steps")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args(argv)
    torch.set_num_threads(2)
    backend = backends.make("wse")
    torch.manual_seed(0)
    step = WORKLOADS[a.workload](backend.device, backend.wrap)
    run_steps(step, backend, 0, 1 + a.warmup)
    by_op: dict = {}
    costs = [recording_cost(step, backend, 1 + a.warmup + k, by_op) for k in range(a.steps)]
    warm: dict = {}
    for k in range(a.steps):
        i = 1 + a.warmup + a.steps + 2 * k
        lazydev.wait()
        step(i)                     # untimed, unsynced: the timed step follows in its trace
        recording_cost(step, backend, i + 1, warm)
    total_s, ops = _totals(by_op)
    table = Table(title=f"{a.workload}: recording by aten op ({a.steps} steps)")
    for col in ("op", "ops/step", "µs/step", "µs/op", "warm µs/op", "share"):
        table.add_column(col, justify="left" if col == "op" else "right")
    ranked = sorted(by_op.items(), key=lambda kv: -kv[1][0])
    for name, (s, n) in ranked[:a.top]:
        ws, wn = warm.get(name, (0.0, 0))
        table.add_row(name, f"{n / a.steps:.0f}", f"{s / a.steps * 1e6:.0f}",
                      f"{s / n * 1e6:.1f}", f"{ws / wn * 1e6:.1f}" if wn else "-",
                      f"{s / total_s:.0%}")
    console = Console()
    console.print(table)
    first = statistics.median(c[2] for c in costs)
    console.print(f"{ops / a.steps:.0f} ops/step, {total_s / a.steps * 1e3:.2f} ms/step, "
                  f"{total_s / ops * 1e6:.1f} µs/op; the step's first dispatch {first:.0f} µs "
                  f"(median); {len(ranked) - min(a.top, len(ranked))} more ops not shown")
    warm_s, warm_ops = _totals(warm)
    if warm_ops:
        console.print(f"warm (the next step in the same trace): {warm_s / a.steps * 1e3:.2f} "
                      f"ms/step, {warm_s / warm_ops * 1e6:.1f} µs/op")


if __name__ == "__main__":
    main()
