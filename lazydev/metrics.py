"""Counters, timings, the sync ledger and per-step time split.

`counters()` is for scripts and tests; `report()` prints everything as rich tables for people.
"""
from __future__ import annotations

import warnings
from collections import Counter, defaultdict, deque

from .log import user_stacklevel

_counts: Counter = Counter()
_fallbacks: Counter = Counter()
_times: defaultdict = defaultdict(float)
_ledger: Counter = Counter()          # (reason, source line) -> implicit syncs
# (reason, source line) -> [steps it synced in, the last of them]: a count, not a set of steps
# (a loop that reads its loss before mark_step added one per step for ever).
_ledger_steps: defaultdict = defaultdict(lambda: [0, None])
_steps: deque = deque(maxlen=1000)     # per-step time split, newest last
_warned: set = set()


def count(name: str, n: int = 1) -> None:
    _counts[name] += n


def syncs() -> int:
    """Syncs so far (cheap: for telling whether a call read values)."""
    return _counts["syncs"]


def fallback(op_name: str) -> None:
    _fallbacks[op_name] += 1


def add_time(name: str, seconds: float) -> None:
    _times[name] += seconds


def ledger(reason: str, where: str, step: int) -> None:
    _ledger[(reason, where)] += 1
    seen = _ledger_steps[(reason, where)]
    if seen[1] != step:
        seen[0] += 1
        seen[1] = step


def step(record: dict) -> None:
    _steps.append(record)


def warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=user_stacklevel())


def counters() -> dict:
    """A snapshot: compilations, cache_hits, cache_misses, disk_cache_hits, syncs, executions,
    fallbacks (per op, a dict), sync_<reason> per implicit sync kind, bytes moved."""
    out = {k: 0 for k in ("compilations", "cache_hits", "cache_misses", "disk_cache_hits",
                          "syncs", "executions")}
    out.update(_counts)
    out["fallbacks"] = dict(_fallbacks)
    return out


def timings() -> dict:
    return dict(_times)


def sync_ledger() -> dict:
    """(reason, user source line) -> number of implicit syncs there."""
    return dict(_ledger)


def steps() -> list:
    """Per mark_step: trace_s, compile_s, execute_s, transfer_s, total_s, implicit_syncs."""
    return list(_steps)


def reset() -> None:
    for c in (_counts, _fallbacks, _times, _ledger, _ledger_steps, _warned):
        c.clear()
    _steps.clear()


def _table(title, columns, rows):
    from rich.table import Table
    t = Table(title=title)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


def report(console=None) -> None:
    """Print counters, fallbacks, the sync ledger, the compile-cache table and timings."""
    from rich.console import Console
    from . import compile as _compile
    console = console or Console()
    console.print(_table("lazydev counters", ["counter", "value"],
                         [(k, v) for k, v in sorted(counters().items()) if k != "fallbacks"]))
    if _fallbacks:
        console.print(_table("CPU fallbacks", ["op", "count"], _fallbacks.most_common()))
    if _ledger:
        rows = [(r, w, n, _ledger_steps[(r, w)][0]) for (r, w), n in _ledger.most_common()]
        console.print(_table("implicit syncs (sync ledger)",
                             ["reason", "source line", "syncs", "steps"], rows))
    progs = _compile.programs()
    if progs:
        rows = [(p.get("key"), p.get("where"), p["nodes"], p["kernels"], p.get("source"),
                 f"{p.get('compile_s', 0) * 1e3:.1f}", p["hits"], p["runs"],
                 f"{p['execute_s'] * 1e3:.2f}") for p in progs]
        console.print(_table("compile cache (this process)",
                             ["graph", "first cut at", "nodes", "kernels", "built", "compile ms",
                              "hits", "runs", "execute ms"], rows))
    if _steps:
        last = list(_steps)[-5:]
        rows = [(s["step"], *(f"{s[k] * 1e3:.2f}" for k in
                ("trace_s", "compile_s", "execute_s", "transfer_s", "total_s")),
                 s["implicit_syncs"]) for s in last]
        console.print(_table("last steps (ms)", ["step", "trace", "compile", "execute",
                                                 "transfer", "total", "implicit syncs"], rows))
    console.print(_table("time (s)", ["phase", "seconds"],
                         [(k, f"{v:.4f}") for k, v in sorted(_times.items())]))
