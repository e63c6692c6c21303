"""Who runs a step's program, and when: the host (the thread that traces and reads) or the
queue's worker (Note [Who runs a program] in lazydev/runtime/queue.py), on a benchmark workload.

Runs the workload's steps as benchmarks/run.py does (read every step, or with --pipelined each
step's value one step late), records every stretch of program a thread ran (which kernel calls,
how long) and prints, for the fastest, median and slowest steps, the step's phases (tracing,
mark_step, the read) beside those stretches, then per-step medians: the host's own program time,
the worker's, and the time the host's read spent neither tracing nor running (waiting for the
worker to reach a point where it can stop).

    python benchmarks/timeline.py --workload mlp [--steps 40] [--pipelined]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import lazydev  # noqa: E402
import lazydev.compile as lz_compile  # noqa: E402
from workloads import WORKLOADS  # noqa: E402


def record_runs() -> list:
    """Wrap the queue's job so every stretch of a run is logged: (host?, start, seconds, first
    call, call reached, finished)."""
    runs: list = []
    resume = lz_compile._Job.resume
    host = threading.get_ident()

    def logged(job, unpause=False, limit_us=0, until=0, budget_us=0):
        t0, first = time.perf_counter(), job.run.position()[0]
        finished = resume(job, unpause, limit_us, until, budget_us)
        runs.append((threading.get_ident() == host, t0, time.perf_counter() - t0, first,
                     job.run.position()[0], finished))
        return finished
    lz_compile._Job.resume = logged
    return runs


def run_steps(step, steps: int, pipelined: bool) -> list:
    """(start, traced, queued, read) per step."""
    marks, late = [], None
    for i in range(steps):
        t0 = time.perf_counter()
        out = step(i)
        t1 = time.perf_counter()
        lazydev.mark_step()
        t2 = time.perf_counter()
        if not pipelined:
            out.reshape(-1)[:1].item()
        elif late is not None:
            late.reshape(-1)[:1].item()
        late = out
        marks.append((t0, t1, t2, time.perf_counter()))
    return marks


def show_step(console: Console, k: int, mark: tuple, runs: list) -> None:
    t0, traced, queued, read = mark
    ms = [f"{(t - t0) * 1e3:.2f}" for t in (traced, queued, read)]
    table = Table(title=f"step {k}: {ms[2]} ms (tracing to {ms[0]}, mark_step to {ms[1]}, "
                        f"read to {ms[2]})")
    for col in ("thread", "from ms", "ran ms", "kernel calls", "finished"):
        table.add_column(col, justify="right")
    for host, start, dt, first, reached, finished in runs:
        if start < read and start + dt > t0:    # ran during the step, wherever it began
            table.add_row("host" if host else "worker", f"{(start - t0) * 1e3:.2f}",
                          f"{dt * 1e3:.2f}", f"{first} -> {reached}", str(finished))
    console.print(table)


def summary(marks: list, runs: list) -> dict:
    """Per-step medians (ms): step, host-run and worker-run program time, and the read's time
    beyond the host's own runs."""
    rows = []
    for t0, traced, queued, read in marks:
        mine = [r for r in runs if t0 <= r[1] < read]
        host = sum(r[2] for r in mine if r[0])
        worker = sum(r[2] for r in mine if not r[0])
        in_read = sum(r[2] for r in mine if r[0] and r[1] >= queued)
        rows.append((read - t0, host, worker, read - queued - in_read))
    names = ("step", "host runs", "worker runs", "read, not running")
    return {n: statistics.median(r[i] for r in rows) * 1e3 for i, n in enumerate(names)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="mlp", choices=sorted(WORKLOADS))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--pipelined", action="store_true", help="read each value one step late")
    args = ap.parse_args()
    torch.set_num_threads(2)
    step = WORKLOADS[args.workload]("wse", lambda m: m)
    run_steps(step, 5, args.pipelined)              # compile and warm up
    lazydev.wait()
    runs = record_runs()
    marks = run_steps(step, args.steps, args.pipelined)
    console = Console()
    order = sorted(range(len(marks)), key=lambda k: marks[k][3] - marks[k][0])
    for k in (order[0], order[len(order) // 2], order[-1]):
        show_step(console, k, marks[k], runs)
    console.print(", ".join(f"{n} {v:.2f} ms" for n, v in summary(marks, runs).items()),
                  "(medians per step)")


if __name__ == "__main__":
    main()
