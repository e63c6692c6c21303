"""Counters and timings. `counters()` for scripts and tests, `report()` for people."""
from __future__ import annotations

from collections import Counter, defaultdict

_counts: Counter = Counter()
_fallbacks: Counter = Counter()
_times: defaultdict = defaultdict(float)


def count(name: str, n: int = 1) -> None:
    _counts[name] += n


def fallback(op_name: str) -> None:
    _fallbacks[op_name] += 1


def add_time(name: str, seconds: float) -> None:
    _times[name] += seconds


def counters() -> dict:
    """A snapshot: compilations, cache_hits, cache_misses, syncs, executions, fallbacks (per op,
    a dict), and the rest of what was counted."""
    out = {k: 0 for k in ("compilations", "cache_hits", "cache_misses", "disk_cache_hits",
                          "syncs", "executions")}
    out.update(_counts)
    out["fallbacks"] = dict(_fallbacks)
    return out


def timings() -> dict:
    return dict(_times)


def reset() -> None:
    _counts.clear()
    _fallbacks.clear()
    _times.clear()


def report(console=None) -> None:
    """Print counters, fallbacks and timings as rich tables."""
    from rich.console import Console
    from rich.table import Table
    console = console or Console()
    table = Table(title="lazydev counters")
    table.add_column("counter")
    table.add_column("value", justify="right")
    for k, v in sorted(counters().items()):
        if k != "fallbacks":
            table.add_row(k, str(v))
    console.print(table)
    if _fallbacks:
        fb = Table(title="CPU fallbacks")
        fb.add_column("op")
        fb.add_column("count", justify="right")
        for k, v in _fallbacks.most_common():
            fb.add_row(k, str(v))
        console.print(fb)
    tt = Table(title="time (s)")
    tt.add_column("phase")
    tt.add_column("seconds", justify="right")
    for k, v in sorted(_times.items()):
        tt.add_row(k, f"{v:.4f}")
    console.print(tt)
