"""Tables for people (rich) and the targets from the performance issue, checked against wse."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

# (workload, metric, bound): the goals for wse. "ratio" is steady median / eager steady
# median (lower is faster); first_step_s and us_per_op apply to every workload.
RATIO_TARGETS = {"mlp": 0.85, "transformer": 0.75, "cnn": 1.0, "ew_chain": 0.2}
FIRST_STEP_TARGET_S = 2.0
TRACE_TARGET_US = 10.0

# A wse loss must match eager's to this relative tolerance (same seed, same weights, same data);
# a larger gap means a wrong answer, which would make its timing meaningless.
VALUE_RTOL = 1e-3


def index(results: list) -> dict:
    return {(r["workload"], r["backend"]): r for r in results}


def ratio(by: dict, r: dict):
    eager = by.get((r["workload"], "eager"))
    if "error" in r or eager is None or "error" in eager:
        return None
    return r["median_s"] / eager["median_s"]


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
    if r["backend"] == "wse" and r.get("median_execute_s") is not None:
        notes.append(f"execute {_ms(r['median_execute_s'])}")
    return "; ".join(notes)


def _trace_cell(r: dict) -> str:
    if r.get("us_per_op") is None:
        return ""
    return (f"{r['us_per_op']:.0f} / {r['us_per_node']:.0f}  "
            f"({r['aten_ops']} ops, {r['trace_nodes']:.0f} nodes)")


def results_table(results: list) -> Table:
    by = index(results)
    t = Table(title="Per-step times (steady = median of the timed steps)")
    for col in ("workload", "backend", "first step", "steady", "p90", "vs eager",
                "peak RSS (Δ)", "trace µs/op | µs/node", "notes"):
        t.add_column(col, justify="left" if col in ("workload", "backend", "notes") else "right")
    for r in results:
        if "error" in r:
            t.add_row(r["workload"], r["backend"], "", "", "", "", "", "", _notes(by, r))
            continue
        x = ratio(by, r)
        t.add_row(r["workload"], r["backend"], f"{r['first_step_s']:.2f} s", _ms(r["median_s"]),
                  _ms(r["p90_s"]), f"{x:.2f}x" if x is not None else "",
                  f"{r['peak_rss_mb']:.0f} MB (+{r['rss_delta_mb']:.0f})", _trace_cell(r),
                  _notes(by, r))
    return t


def _check(workload, metric, bound, value, fmt) -> dict:
    met = None if value is None else value <= bound
    return {"workload": workload, "metric": metric, "target": f"<= {fmt(bound)}",
            "measured": None if value is None else fmt(value), "value": value, "met": met}


def check_targets(results: list) -> list:
    """One row per (wse workload, target); `met` is None when wse or eager did not run."""
    by = index(results)
    rows = []
    for (workload, backend), r in by.items():
        if backend != "wse":
            continue
        ok = "error" not in r
        if workload in RATIO_TARGETS:
            rows.append(_check(workload, "steady / eager", RATIO_TARGETS[workload],
                               ratio(by, r), lambda v: f"{v:.2f}x"))
        rows.append(_check(workload, "first step", FIRST_STEP_TARGET_S,
                           r["first_step_s"] if ok else None, lambda v: f"{v:.2f} s"))
        rows.append(_check(workload, "tracing per aten op", TRACE_TARGET_US,
                           r.get("us_per_op") if ok else None, lambda v: f"{v:.1f} µs"))
    return rows


def targets_table(rows: list) -> Table:
    t = Table(title="wse against the issue's targets")
    for col in ("workload", "metric", "target", "wse", "status"):
        t.add_column(col, justify="left" if col in ("workload", "metric") else "right")
    status = {True: "[green]met[/]", False: "[red]not met[/]", None: "[yellow]n/a (failed)[/]"}
    for row in rows:
        t.add_row(row["workload"], row["metric"], row["target"], row["measured"] or "",
                  status[row["met"]])
    return t


def print_report(results: list, targets: list, meta: dict, console: Console) -> None:
    console.print(results_table(results))
    console.print(targets_table(targets))
    load0, load1 = meta["loadavg_start"], meta["loadavg_end"]
    console.print(
        f"[bold]Machine:[/] {meta['cpus']} CPUs, torch {meta['torch']}, {meta['steps']} timed "
        f"steps after {meta['warmup']} warm-up steps, caches {meta['cache']}. Load average "
        f"{load0[0]:.2f} at start, {load1[0]:.2f} at end: with a load near or above the CPU "
        "count, other processes share the cores and every time here is noisy.")
    console.print(
        "Tracing µs/op = median time from step start to the sync call, divided by the aten ops "
        "the step dispatches (counted by a TorchDispatchMode in an extra untimed step); µs/node "
        "divides by lazydev's trace nodes instead (ops after decomposition). Peak RSS is the "
        "worker's ru_maxrss; Δ is from after its imports.")
