"""wse at this checkout against wse at another git revision (and eager), in alternating blocks.

A change worth a few percent of a step cannot be seen between two runs of run.py on this VM:
its speed drifts by tens of percent over minutes (three runs of one revision gave eager's
transformer step medians of 158, 188 and 275 ms in one afternoon). Here three processes, as
paired.py's: eager, wse at this checkout, and wse at `--rev` (built in a temporary git
worktree), warm up, then take turns at short blocks of steps in rotating order. Each block is
divided by the block of the other revision (or of eager) in the same round, and the medians of
those ratios are printed: the two revisions see the same machine.

    python benchmarks/revisions.py --rev HEAD~3 --workload mlp [--rounds 12] [--steps N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from paired import BLOCK_S, MIN_STEPS, blocks  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _worktree(rev: str, where: str) -> str:
    """A checkout of `rev` in `where`, its C extensions built in place (so that PYTHONPATH at
    it imports that revision's lazydev and runtime, whatever is installed)."""
    for cmd, cwd in ((["git", "-C", ROOT, "worktree", "add", "--detach", where, rev], ROOT),
                     ([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], where)):
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.strip()[-800:]}")
    return where


def _compare(a, other: str) -> dict:
    """Block medians (ms) of eager, wse here and wse at the checkout `other`."""
    serving = {"eager": (ROOT, "eager"), "wse here": (ROOT, "wse"),
               f"wse at {a.rev}": (other, "wse")}
    return blocks(serving, a.workload, a.warmup, a.rounds, a.steps)[0]


def _ratio(a: list, b: list) -> float:
    return statistics.median(x / y for x, y in zip(a, b))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", required=True, help="the git revision to compare with")
    p.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps", type=int, help="steps per block (default: about "
                   f"{BLOCK_S} s of the slowest process's steps, at least {MIN_STEPS})")
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args(argv)
    if a.rounds < 1 or (a.steps is not None and a.steps < 1) or a.warmup < 0:
        p.error("--rounds and --steps must be >= 1 and --warmup >= 0")
    with tempfile.TemporaryDirectory(prefix="lazydev-rev-") as tmp:
        other = os.path.join(tmp, "checkout")
        try:
            ms = _compare(a, _worktree(a.rev, other))
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", other],
                           capture_output=True)
            subprocess.run(["git", "-C", ROOT, "worktree", "prune"], capture_output=True)
    here, there = ms["wse here"], ms[f"wse at {a.rev}"]
    for name, v in ms.items():
        print(f"{a.workload} {name}: median block {statistics.median(v):.2f} ms, "
              f"{_ratio(v, ms['eager']):.3f}x eager")
    print(f"{a.workload} here / {a.rev}: {_ratio(here, there):.3f} (median of {a.rounds} "
          "rounds; below 1 is faster here)")


if __name__ == "__main__":
    main()
