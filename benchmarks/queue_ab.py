"""A switch of the execution queue on and off, A/B in one process beside eager: the host's team
released or kept (`--switch release`, Note [Releasing the team] in csrc/wse_runtime.c), the
worker's budget for long calls or none (`--switch budget`, Note [Worker's budget] in
lazydev/runtime/queue.py), or the worker held while the host's team spins or not (`--switch
hold`, Note [Team hold] there).

This VM's speed drifts by a third between runs (eager's MLP step 12-23 ms in one day), far more
than the changes measured here, so separate runs of benchmarks/run.py cannot compare the two.
Here one process alternates blocks of steps: eager, wse with the switch on (lazydev's default),
wse with it off, `--rounds` times; the table gives each block's median step and its ratio to
the eager block beside it. That eager runs in lazydev's process, which can slow it (1.1-1.7x on
the elementwise chain, benchmarks/paired.py): the ratios compare the two settings, and
paired.py, with a process per backend, compares wse with eager.

    python benchmarks/queue_ab.py --workload mlp [--switch release|budget|hold] [--steps 15]
        [--rounds 8] [--pipelined]
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
from paired import block  # noqa: E402
from workloads import WORKLOADS  # noqa: E402


def _switches() -> dict:
    """--switch name -> {label: set the queue's module state} for on (the default) and off."""
    release, budget, spin = queue.release_team, queue.WORKER_BUDGET, queue.TEAM_SPIN_S

    def setting(name, value):
        return lambda: setattr(queue, name, value)
    return {"release": {"team released": setting("release_team", release),
                        "team kept": setting("release_team", lambda: None)},
            "budget": {f"worker budget {budget}": setting("WORKER_BUDGET", budget),
                       "no budget": setting("WORKER_BUDGET", 0.0)},
            "hold": {f"worker held {spin * 1e3:g} ms": setting("TEAM_SPIN_S", spin),
                     "not held": setting("TEAM_SPIN_S", 0.0)}}


def main() -> None:
    switches = _switches()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="mlp", choices=sorted(WORKLOADS))
    p.add_argument("--switch", default="release", choices=sorted(switches))
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--pipelined", action="store_true")
    a = p.parse_args()
    eager, wse = make("eager"), make("wse")
    workload = WORKLOADS[a.workload]
    on = next(iter(switches[a.switch].values()))
    configs = {"eager": (workload(eager.device, eager.wrap), eager, on)}
    for label, setup in switches[a.switch].items():
        configs["wse, " + label] = (workload(wse.device, wse.wrap), wse, setup)
    for step, backend, setup in configs.values():     # warm-up: compiles, caches
        setup()
        block(step, backend, 3, a.pipelined)
    ms = {name: [] for name in configs}
    for _ in range(a.rounds):
        for name, (step, backend, setup) in configs.items():
            setup()
            ms[name].append(block(step, backend, a.steps, a.pipelined))
    on()
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
