"""Tables for people (rich) and the targets from the performance issue, checked against wse."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

# (workload, metric, bound): the issue's goals for wse. "ratio" is steady median / eager steady
# median (lower is faster); first_step_s and us_per_op apply to every workload of the issue.
RATIO_TARGETS = {"mlp": 0.85, "transformer": 0.75, "cnn": 1.0, "ew_chain": 0.2}
# The issue's workloads; the others (mlp_amp) are measured but have no targets: mlp_amp's first
# wse step also builds autocast's policies, once per cache directory.
ISSUE_WORKLOADS = ("mlp", "cnn", "transformer", "ew_chain", "ln_gelu_softmax")
FIRST_STEP_TARGET_S = 2.0
TRACE_TARGET_US = 10.0

# A wse loss must match eager's to this relative tolerance (same seed, same weights, same data);
# a larger gap means a wrong answer, which would make its timing meaningless.
VALUE_RTOL = 1e-3

# A row whose median step is this much slower than its fastest step was disturbed (other
# processes on the cores); its ratios are flagged rather than trusted.
NOISY = 1.5


def index(results: list) -> dict:
    return {(r["workload"], r["backend"]): r for r in results}


def ratio(by: dict, r: dict, key: str = "median_s"):
    """r's time / eager's time for the same workload (lower is faster); None without both."""
    eager = by.get((r["workload"], "eager"))
    if "error" in r or eager is None or "error" in eager:
        return None
    if r.get(key) is None or eager.get(key) is None:
        return None
    return r[key] / eager[key]


def noisy(r: dict) -> bool:
    return "error" not in r and r["median_s"] > NOISY * r["min_s"]


def _ms(s):
    return f"{s * 1e3:.1f} ms"


def _notes(by: dict, r: dict) -> str:
    """Why a number may not mean what it seems: failures, wrong values, steady-state recompiles,
    CPU fallbacks, syncs inside the step."""
    if "error" in r:
        return f"[red]fails: {r['error'][:120]}[/]"
    notes = []
    eager = by.get((r["workload"], "eager"))
    if eager and "error" not in eager and r["backend"] != "eager":
        a, b = r["first_value"], eager["first_value"]
        if abs(a - b) > VALUE_RTOL * max(abs(b), 1e-6):
            notes.append(f"[red]value {a:.5g} != eager {b:.5g}[/]")
    if r.get("steady_compilations"):
        notes.append(f"[yellow]{r['steady_compilations']} recompiles in steady state[/]")
    if r.get("fallbacks"):
        notes.append(f"[yellow]fallbacks {r['fallbacks']}[/]")
    if r.get("partial_traces"):
        notes.append(f"[yellow]{r['partial_traces']} steps cut by implicit syncs[/]")
    if noisy(r):
        notes.append(f"[yellow]noisy: median {r['median_s'] / r['min_s']:.1f}x min[/]")
    if r.get("median_execute_s") is not None:
        notes.append(f"execute {_ms(r['median_execute_s'])}, {r['aten_ops']} ops -> "
                     f"{r['trace_nodes']:.0f} nodes")
    if r.get("record_first_us") is not None and r.get("record_rest_us_per_op") is not None:
        notes.append(f"recording: first op {r['record_first_us']:.0f} µs, the others "
                     f"{r['record_rest_us_per_op']:.1f} µs/op")
    if r.get("device_peak_mb") is not None:
        notes.append(f"device peak {r['device_peak_mb']:.0f} MB")
    return "; ".join(notes)


def _x(v):
    return "" if v is None else f"{v:.2f}x"


def _us(v):
    return "" if v is None else f"{v:.0f}"


def _us1(v):
    return "" if v is None else f"{v:.1f}"


COLUMNS = ("workload", "backend", "first step", "step 2", "steady", "min", "vs eager",
           "vs eager (min)", "vs eager (paired)", "pipelined", "vs eager (pipel.)", "peak RSS",
           "Δ RSS", "trace µs/op", "record µs/op", "notes")


def _row(by: dict, r: dict) -> list:
    if "error" in r:
        return [r["workload"], r["backend"]] + [""] * (len(COLUMNS) - 3) + [_notes(by, r)]
    second = f"{r['warmup_s'][0]:.2f} s" if r.get("warmup_s") else ""
    return [r["workload"], r["backend"], f"{r['first_step_s']:.2f} s", second, _ms(r["median_s"]),
            _ms(r["min_s"]), _x(ratio(by, r)), _x(ratio(by, r, "min_s")), _x(_paired(r)),
            _ms(r.get("pipelined_s")), _x(ratio(by, r, "pipelined_s")),
            f"{r['peak_rss_mb']:.0f} MB", f"+{r['rss_delta_mb']:.0f} MB",
            _us(r.get("us_per_op")), _us1(r.get("record_us_per_op")), _notes(by, r)]


def _paired(r: dict):
    """The paired ratio (benchmarks/paired.py) run.py stored in a wse result, if it ran."""
    return (r.get("paired") or {}).get("ratio")


def results_table(results: list) -> Table:
    by = index(results)
    t = Table(title="Per-step times (steady = median of the timed steps; vs eager = steady / "
                    "eager steady)")
    for col in COLUMNS:
        t.add_column(col, justify="left" if col in ("workload", "backend", "notes") else "right")
    for r in results:
        t.add_row(*_row(by, r))
    return t


def _check(workload, metric, bound, value, fmt, is_noisy=False) -> dict:
    met = None if value is None else value <= bound
    return {"workload": workload, "metric": metric, "target": f"<= {fmt(bound)}",
            "measured": None if value is None else fmt(value), "value": value, "met": met,
            "noisy": is_noisy}


def check_targets(results: list) -> list:
    """One row per (wse workload, target); `met` is None when wse or eager did not run."""
    by = index(results)
    rows = []
    for (workload, backend), r in by.items():
        if backend != "wse" or workload not in ISSUE_WORKLOADS:
            continue
        ok = "error" not in r
        if workload in RATIO_TARGETS:
            eager = by.get((workload, "eager"), {"error": "missing"})
            rows.append(_check(workload, "steady / eager", RATIO_TARGETS[workload],
                               ratio(by, r), lambda v: f"{v:.2f}x", noisy(r) or noisy(eager)))
            if "paired" in r:
                rows.append(_check(workload, "steady / eager, paired blocks",
                                   RATIO_TARGETS[workload], _paired(r), lambda v: f"{v:.2f}x"))
        rows.append(_check(workload, "first step", FIRST_STEP_TARGET_S,
                           r["first_step_s"] if ok else None, lambda v: f"{v:.2f} s"))
        rows.append(_check(workload, "recording per aten op", TRACE_TARGET_US,
                           r.get("record_us_per_op") if ok else None, lambda v: f"{v:.1f} µs"))
        if workload in RATIO_TARGETS:
            rows.append(_check(workload, "pipelined / eager pipelined", RATIO_TARGETS[workload],
                               ratio(by, r, "pipelined_s"), lambda v: f"{v:.2f}x"))
    return rows


def targets_table(rows: list) -> Table:
    t = Table(title="wse against the issue's targets")
    for col in ("workload", "metric", "target", "wse", "status"):
        t.add_column(col, justify="left" if col in ("workload", "metric") else "right")
    status = {True: "[green]met[/]", False: "[red]not met[/]", None: "[yellow]n/a (failed)[/]"}
    for row in rows:
        flag = " [yellow](noisy)[/]" if row["noisy"] else ""
        t.add_row(row["workload"], row["metric"], row["target"], row["measured"] or "",
                  status[row["met"]] + flag)
    return t


def _repeats(meta: dict) -> str:
    n = meta.get("repeat", 1)
    return f", fastest of {n} interleaved runs per pair" if n > 1 else ""


def print_report(results: list, targets: list, meta: dict, console: Console) -> None:
    console.print(results_table(results))
    console.print(targets_table(targets))
    load0, load1 = meta["loadavg_start"], meta["loadavg_end"]
    console.print(
        f"[bold]Machine:[/] {meta['cpus']} CPUs, torch {meta['torch']}, {meta['steps']} timed "
        f"steps after {meta['warmup']} warm-up steps"
        f"{_repeats(meta)}"
        f", caches {meta['cache']}, lazydev at "
        f"{meta['revision']}. Load average "
        f"{load0[0]:.2f} at start, {load1[0]:.2f} at end: with a load near or above the CPU "
        "count, other processes share the cores and every time here is noisy.")
    console.print(
        "Tracing µs/op = median time from step start to the sync call, divided by the aten ops "
        "the step dispatches (counted by a TorchDispatchMode in an extra untimed step): it "
        "includes the framework's own Python (modules, autograd, optimizer). Record µs/op = time "
        "inside lazydev's __torch_dispatch__ per op it receives (median of 5 extra steps, "
        "instrumented), "
        "not counting PyTorch's C++ dispatch into Python (~2.5 µs). Pipelined = median step time "
        "(one step's start to the next's) when each step's value is read one step late (wse "
        "then traces step i+1 while step i executes). Paired = the median, over rounds, of a "
        "block of wse steps over the block of "
        "eager steps run just before or after it, by two processes taking turns "
        "(benchmarks/paired.py): the machine's drift between workers does not enter it. "
        "Peak RSS is the "
        "worker's ru_maxrss; Δ is from after its imports. (noisy): median step > "
        f"{NOISY}x the fastest step, for wse or eager; compare the min columns.")
