"""What an op costs to record on wse against what PyTorch charges any Python tensor subclass.

For a few ops, in one process: the op on a wse tensor, and the same call on a bare wrapper
subclass whose __torch_dispatch__ does nothing but return (a) a tensor made once, or (b) a new
wrapper tensor (`_make_wrapper_subclass`). (b) was the floor of Python recording until lazydev
made its results itself (wse_make_tensor, Note [Native tensor objects] in csrc/wse_hooks.cpp,
about 1.5 µs less), so wse minus (b) is lazydev's recording less what its maker saves. The
fastest of several rounds is kept (noise only adds time).

A second table times one call after the CPU has spun for a while in a loop that touches almost
no memory, beside a plain Python list comprehension timed the same way: how much of an op's cost
inside a real step (where each op's code last ran milliseconds ago) is the host core's caches
being refilled, which lazydev's code shares with any Python (Note [Cold code] below).

    python benchmarks/dispatch_floor.py [--rounds 7] [--calls 2000] [--trials 40]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from rich.console import Console
from rich.table import Table

import lazydev  # noqa: F401  (registers the wse device)
from lazydev.trace.build import contiguous_strides

WSE = torch.device("wse", 0)
_wrap = torch.Tensor._make_wrapper_subclass


def _bare(shape):
    return _wrap(_Bare, shape, contiguous_strides(shape), 0, None, torch.float32,
                 torch.strided, WSE)


class _Bare(torch.Tensor):
    """A wrapper subclass that records nothing: `result` picks what dispatch returns."""
    result = None
    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return cls.result()


def _ops(x, w):
    return {"add": lambda: x + x, "mul by a float": lambda: x * 0.5,
            "relu": lambda: torch.relu(x), "mm": lambda: torch.mm(x, w),
            "t (a view)": lambda: x.t(), "view": lambda: x.view(256, 128),
            "detach": lambda: x.detach()}


def _best(fn, rounds: int, calls: int, after=None) -> float:
    best = float("inf")
    for _ in range(rounds):
        for _ in range(20):
            fn()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        if after is not None:
            after()
    return best


# Note [Cold code]
# On this 2-core VM a list comprehension of ten ints costs 0.5-1 µs run back to back, 3-8 µs
# after 1 ms of a spin loop and 22-42 µs after 10 ms, the same whether the other vCPU idles,
# spins or streams memory (pinned with taskset): something outside the guest evicts the core's
# caches over milliseconds. PyTorch's own dispatch of an add to a bare subclass goes from 7-14 µs
# to 150-240 µs after 10 ms, lazydev's recorded ops alike. A training step runs each op's
# recording code milliseconds after its last run, so the benchmark's record µs/op (worker.py)
# pays for refills that a back-to-back loop like the first table's never sees.
COLD_AFTER_MS = (0.0, 1.0, 10.0)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _after_spin(fn, ms: float, trials: int, before=None) -> float:
    """Median µs of one fn() call made `ms` after a warm-up call, the gap spent spinning."""
    times = []
    for _ in range(trials):
        if before is not None:
            before()
        fn()
        _spin(ms / 1000)
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def _cold_table(wse: dict, bare: dict, trials: int) -> Table:
    table = Table(title="µs for one call, made after the CPU spun for a while (median)")
    table.add_column("call")
    for ms in COLD_AFTER_MS:
        table.add_column("right after the last" if ms == 0 else f"after {ms:g} ms",
                         justify="right")
    _Bare.result = staticmethod(lambda: _bare((128, 256)))
    rows = {"Python: [i for i in range(10)]": (lambda: [i for i in range(10)], None),
            "bare wrapper: add": (bare["add"], None)}
    rows.update({f"wse: {name}": (wse[name], lazydev.mark_step)
                 for name in ("add", "relu", "mm", "t (a view)")})
    for label, (fn, before) in rows.items():
        table.add_row(label, *(f"{_after_spin(fn, ms, trials, before):.1f}"
                               for ms in COLD_AFTER_MS))
    return table


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--trials", type=int, default=40, help="calls per cell of the second table")
    a = p.parse_args(argv)
    wse = _ops(torch.randn(128, 256).to("wse"), torch.randn(256, 256).to("wse"))
    bare = _ops(_bare((128, 256)), _bare((256, 256)))
    made = _bare((128, 256))
    table = Table(title="µs per op (fastest round)")
    for col in ("op", "bare: returns a made tensor", "bare: makes a wrapper", "wse",
                "wse - bare wrapper"):
        table.add_column(col, justify="left" if col == "op" else "right")
    for name in wse:
        _Bare.result = staticmethod(lambda: made)
        ready = _best(bare[name], a.rounds, a.calls) if name not in ("t (a view)", "view",
                                                                      "detach") else None
        _Bare.result = staticmethod(lambda: _bare((128, 256)))
        fresh = _best(bare[name], a.rounds, a.calls)
        rec = _best(wse[name], a.rounds, a.calls, after=lazydev.mark_step)
        table.add_row(name, "-" if ready is None else f"{ready:.2f}", f"{fresh:.2f}",
                      f"{rec:.2f}", f"{rec - fresh:.2f}")
    Console().print(table)
    Console().print("A view must return a new tensor (autograd refuses one it has seen), so "
                    "its first column is empty.")
    Console().print(_cold_table(wse, bare, a.trials))


if __name__ == "__main__":
    main()
