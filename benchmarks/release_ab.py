"""The host's team released or kept (Note [Releasing the team] in csrc/wse_runtime.c), A/B in
one process beside eager.

This VM's speed drifts by a third between runs (eager's MLP step 12-23 ms in one day), far more
than the change measured here, so separate runs of benchmarks/run.py cannot compare the two.
Here one process alternates blocks of steps: eager, wse with the release (lazydev's default),
wse with the team kept (the queue's release_team replaced by a no-op), `--rounds` times; the
table gives each block's median step and its ratio to the eager block beside it.

    python benchmarks/release_ab.py --workload mlp [--steps 15] [--rounds 8] [--pipelined]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from backends import make  # noqa: E402
from lazydev.runtime import queue  # noqa: E402
from worker import run_pipelined, run_steps  # noqa: E402
from workloads import WORKLOADS  # noqa: E402


def block(step, backend, steps: int, pipelined: bool) -> float:
    """Median step time of `steps` steps (read each step), or with `pipelined` the mean step
    time when each step's value is read one step late, in ms: as benchmarks/run.py times them."""
    if pipelined:
        return run_pipelined(step, backend, 0, steps) * 1e3
    return statistics.median(r["step_s"] for r in run_steps(step, backend, 0, steps)) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="mlp", choices=sorted(WORKLOADS))
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--pipelined", action="store_true")
    a = p.parse_args()
    release = queue.release_team
    eager, wse = make("eager"), make("wse")
    workload = WORKLOADS[a.workload]
    configs = {"eager": (workload(eager.device, eager.wrap), eager, None),
               "wse, team released": (workload(wse.device, wse.wrap), wse, release),
               "wse, team kept": (workload(wse.device, wse.wrap), wse, lambda: None)}
    for step, backend, rel in configs.values():     # warm-up: compiles, caches
        if rel is not None:
            queue.release_team = rel
        block(step, backend, 3, a.pipelined)
    ms = {name: [] for name in configs}
    for _ in range(a.rounds):
        for name, (step, backend, rel) in configs.items():
            if rel is not None:
                queue.release_team = rel
            ms[name].append(block(step, backend, a.steps, a.pipelined))
    queue.release_team = release
    table = Table(title=f"{a.workload}: {a.rounds} rounds of {a.steps} steps"
                  + (", pipelined" if a.pipelined else ""))
    for col in ("", "median ms", "ratio to eager (median of rounds)", "per round"):
        table.add_column(col, justify="left" if col in ("", "per round") else "right")
    for name, v in ms.items():
        ratio = statistics.median(x / e for x, e in zip(v, ms["eager"]))
        table.add_row(name, f"{statistics.median(v):.2f}", f"{ratio:.3f}x",
                      " ".join(f"{x:.1f}" for x in v))
    Console().print(table)


if __name__ == "__main__":
    main()
