"""Measure one (workload, backend) pair in this process and print the result as one JSON line.

run.py starts one worker process per pair, so each backend gets its own peak RSS, its own cold
in-memory caches, and a crash or hang in one backend cannot take the others down.

    python benchmarks/worker.py --workload mlp --backend wse --steps 20
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import traceback
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import backends  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

MARKER = "BENCH_RESULT "


def maxrss_mb() -> float:
    # ru_maxrss is the process's high-water mark in KiB on Linux; it includes C allocations
    # (device buffers, OpenBLAS, inductor's kernels) that tracemalloc cannot see.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def read(out) -> float:
    """Read one value back, the same sync work on every backend: the loss, or the first element
    of a forward result (the whole result was already computed by the backend's sync)."""
    return (out if out.numel() == 1 else out.reshape(-1)[:1]).item()


def _trace_mark(backend):
    state = backend.extra.get("state")
    if state is None:
        return None
    tr = state.current()
    return tr, tr.nodes


def _trace_nodes(backend, mark):
    """Ops lazydev recorded since `mark`, or None if a sync inside the step started a new trace
    (then the count would be partial, and the implicit sync is itself worth reporting)."""
    if mark is None:
        return None
    tr, n0 = mark
    return tr.nodes - n0 if backend.extra["state"].current() is tr else None


def run_steps(step, backend, start: int, count: int) -> list:
    """Run `count` steps; per step: total wall time, time to record it (until the sync is
    called), lazydev trace nodes recorded, and the value read."""
    records = []
    for i in range(start, start + count):
        t0 = time.perf_counter()
        mark = _trace_mark(backend)
        out = step(i)
        t1 = time.perf_counter()
        nodes = _trace_nodes(backend, mark)
        backend.sync()
        value = read(out)
        t2 = time.perf_counter()
        records.append({"step_s": t2 - t0, "record_s": t1 - t0, "nodes": nodes, "value": value})
    return records


def run_pipelined(step, backend, start: int, count: int) -> float:
    """Median step time when each step's value is read one step late, as a training loop that
    logs its loss without stalling does: the time from one step's start to the next's, which
    includes the read of the step before. A backend that executes asynchronously (wse's
    mark_step only queues the program) overlaps tracing step i+1 with executing step i; a
    synchronous backend gets exactly its per-step time. A median, as the steady step is: a few
    of this VM's slow steps (16-18 ms among 11 for the MLP) weigh in the mean this once was,
    not in a median. The first step (no read before it) and the last (two reads) are the
    extremes a median leaves out."""
    times, pending = [], None
    t0 = time.perf_counter()
    for i in range(start, start + count):
        out = step(i)
        backend.sync()
        if pending is not None:
            read(pending)
        pending = out
        now = time.perf_counter()
        times.append(now - t0)
        t0 = now
    read(pending)
    times[-1] += time.perf_counter() - t0      # the last step's read
    return statistics.median(times)


RECORD_STEPS = 5     # instrumented steps behind the record µs/op figure


def recording_cost(step, backend, i: int, by_op: dict | None = None):
    """(µs per aten op inside lazydev's __torch_dispatch__, ops, µs and ops of the step's first
    dispatch) over one extra, untimed step: the cost of recording itself (argument walk, plan
    lookup or lowering, node creation, hash, wrapping), without the framework code around it
    (modules, autograd, optimizer) and without PyTorch's C++ dispatch into Python (about 2.5 µs
    per op on this machine). The first dispatch after the previous step's sync is reported on its
    own because it also pays for refilling the host core's caches, which the program run by the
    sync has just flushed (Note [First op after a sync]). `by_op`, if given, gathers seconds and
    ops per aten op name: {name: [s, ops]}."""
    cls = backend.extra["tensor_class"]
    orig = cls.__dict__["__torch_dispatch__"]
    inner = orig.__func__
    acc = {"s": 0.0, "n": 0, "depth": 0, "first": None}

    def timed(c, func, types, args=(), kwargs=None):
        acc["depth"] += 1
        t0 = time.perf_counter()
        try:
            return inner(c, func, types, args, kwargs)
        finally:
            acc["depth"] -= 1
            if acc["depth"] == 0:
                dt, n = time.perf_counter() - t0, _elements(func, args)
                acc["s"] += dt
                acc["n"] += n
                if acc["first"] is None:
                    acc["first"] = (dt, n)
                if by_op is not None:
                    total = by_op.setdefault(func.name(), [0.0, 0])
                    total[0] += dt
                    total[1] += n
    cls.__torch_dispatch__ = classmethod(timed)
    try:
        out = step(i)
    finally:
        cls.__torch_dispatch__ = orig
    backend.sync()
    read(out)
    if not acc["n"]:
        return None, 0, None, 0
    return acc["s"] / acc["n"] * 1e6, acc["n"], acc["first"][0] * 1e6, acc["first"][1]


# Note [First op after a sync]
# The benchmark reads each step's value, so the host runs the step's program (with the OpenMP
# team) just before recording the next step, and the program's data (16-32 MB for the chain and
# the LayerNorm block) evicts the host core's 2 MB L2. The next step's first dispatch then
# refills the caches with the interpreter's, PyTorch's and lazydev's working set: 60-100 µs
# against 8-20 for the same op later in the step; a plain 32 MB copy before the step costs the
# same. For a workload of few ops per step that alone is several µs per op, so the report shows
# the first dispatch and the average of the others beside the figure the target is checked on.

def _elements(func, args) -> int:
    """Ops one dispatch records: a _foreach_ op (multi-tensor optimizers) records one per
    element of its list, each as much work as the single-tensor op it replaces."""
    if func.name().startswith("aten::_foreach_") and args and isinstance(args[0], (list, tuple)):
        return max(len(args[0]), 1)
    return 1


class OpCounter(TorchDispatchMode):
    """Counts the aten ops a step dispatches, as the user's program issues them (before any
    decomposition a backend does inside its own dispatch)."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += _elements(func, args)
        return func(*args, **(kwargs or {}))


def count_ops(step, backend, i: int) -> Counter:
    """One extra, untimed step under OpCounter (the mode's Python overhead must not inflate
    the timed steps)."""
    with OpCounter() as counter:
        out = step(i)
    backend.sync()
    read(out)
    return counter.ops


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(first: dict, timed: list) -> dict:
    steps = sorted(r["step_s"] for r in timed)
    return {
        "first_step_s": first["step_s"],
        "median_s": statistics.median(steps),
        "min_s": steps[0],
        "p90_s": steps[int(0.9 * (len(steps) - 1))],
        "first_value": first["value"],
        "last_value": timed[-1]["value"],
        "median_record_s": _median(r["record_s"] for r in timed),
    }


def wse_stats(backend, timed: list, before: dict, step, i: int) -> dict:
    """lazydev-only numbers: tracing overhead per op, recompiles and fallbacks in steady state,
    and lazydev's own per-step split (trace / compile / execute)."""
    metrics = backend.extra["metrics"]
    after = metrics.counters()
    split = metrics.steps()[-len(timed):]
    ops = count_ops(step, backend, i)
    # Medians of several instrumented steps: one step's figure swings by a third here.
    costs = [recording_cost(step, backend, i + 1 + k) for k in range(RECORD_STEPS)]
    record_us = _median(c[0] for c in costs)
    first_us = _median(c[2] for c in costs)
    rest_us = _median((c[0] * c[1] - c[2]) / (c[1] - c[3]) for c in costs if c[1] > c[3])
    record = _median(r["record_s"] for r in timed)
    nodes = _median(r["nodes"] for r in timed)
    n_ops = sum(ops.values())
    peak = backend.extra["device_peak_bytes"]()
    return {
        "device_peak_mb": None if peak is None else peak / 2**20,
        "aten_ops": n_ops,
        "trace_nodes": nodes,
        "us_per_op": record / n_ops * 1e6 if n_ops else None,
        "record_us_per_op": record_us,
        "record_first_us": first_us,
        "record_rest_us_per_op": rest_us,
        "us_per_node": record / nodes * 1e6 if nodes else None,
        "partial_traces": sum(r["nodes"] is None for r in timed),
        "steady_compilations": after["compilations"] - before["compilations"],
        "compilations": after["compilations"],
        "fallbacks": after["fallbacks"],
        "implicit_syncs": {k: v for k, v in after.items() if k.startswith("sync_")},
        "median_execute_s": _median(s.get("execute_s") for s in split),
        "median_trace_s": _median(s.get("trace_s") for s in split),
        "top_ops": dict(ops.most_common(8)),
    }


def bench(workload: str, backend_name: str, steps: int, warmup: int) -> dict:
    torch.set_num_threads(2)
    backend = backends.make(backend_name)
    base_rss = maxrss_mb()
    torch.manual_seed(0)        # after backend init, so every backend builds the same weights
    step = WORKLOADS[workload](backend.device, backend.wrap)
    first = run_steps(step, backend, 0, 1)[0]
    warm = run_steps(step, backend, 1, warmup)
    metrics = backend.extra.get("metrics")
    before = metrics.counters() if metrics else None
    timed = run_steps(step, backend, 1 + warmup, steps)
    result = summarise(first, timed)
    result["pipelined_s"] = run_pipelined(step, backend, 1 + warmup + steps, steps)
    # Step 2 matters too: an optimizer's first step creates its state (momentum, Adam moments),
    # so the second step is a different graph and may compile again.
    result["warmup_s"] = [r["step_s"] for r in warm]
    if metrics:
        result.update(wse_stats(backend, timed, before, step, 1 + warmup + 2 * steps))
    result.update(peak_rss_mb=maxrss_mb(), base_rss_mb=base_rss)
    result["rss_delta_mb"] = result["peak_rss_mb"] - base_rss
    return result


def error_result(exc: BaseException) -> dict:
    # The last frames say where it broke; run.py shows the one-line summary in the table.
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
    lines = str(exc).strip().splitlines()
    first = lines[0][:300] if lines else ""
    return {"error": f"{type(exc).__name__}: {first}", "traceback": "".join(frames)[-4000:]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    p.add_argument("--backend", required=True, choices=sorted(backends.BACKENDS))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    try:
        result = bench(a.workload, a.backend, a.steps, a.warmup)
    except Exception as exc:      # a failing backend is a result, not a crash of the run
        result = error_result(exc)
    result.update(workload=a.workload, backend=a.backend, wall_s=time.perf_counter() - t0)
    print(MARKER + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
