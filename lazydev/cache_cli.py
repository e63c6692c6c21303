"""`python -m lazydev cache ls | show KEY | clear | stats`: look into the on-disk compile cache."""
from __future__ import annotations

import datetime
import json

from rich.console import Console
from rich.table import Table

from .compile import cache
from .config import config


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=["ls", "show", "clear", "stats"])
    parser.add_argument("key", nargs="?", help="entry key (a unique prefix is enough) for show; "
                        "for clear, the entries whose keys start with it (default: all)")


def _when(ts) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def _ls(console) -> int:
    items = sorted(cache.entries(), key=lambda e: -e["used"])
    table = Table(title=f"lazydev compile cache: {config.cache_dir}")
    for col in ("key", "bytes", "nodes", "kernels", "first cut at", "built", "last used"):
        table.add_column(col)
    for e in items:
        table.add_row(e["key"][:16], str(e["bytes"]), str(e.get("nodes", "-")),
                      str(e.get("kernels", "-")), str(e.get("where") or "-"),
                      _when(e.get("built")), _when(e["used"]))
    console.print(table)
    console.print(f"{len(items)} entries, {sum(e['bytes'] for e in items)} bytes "
                  f"(cap {config.cache_max_bytes})")
    return 0


def _show(console, key) -> int:
    found = [e for e in cache.entries() if key and e["key"].startswith(key)]
    if len(found) != 1:
        console.print(f"[red]{'no' if not found else 'several'} entries match {key!r}[/]; "
                      "see `python -m lazydev cache ls`")
        return 1
    console.print_json(json.dumps({k: v for k, v in found[0].items()}, default=str))
    return 0


def _stats(console) -> int:
    totals = cache.persisted_stats()
    items = cache.entries()
    table = Table(title="compile cache, all runs")
    table.add_column("counter")
    table.add_column("value", justify="right")
    for k in ("processes", "compilations", "disk_hits", "memory_hits"):
        table.add_row(k, str(totals.get(k, 0)))
    table.add_row("entries", str(len(items)))
    table.add_row("bytes", str(sum(e["bytes"] for e in items)))
    console.print(table)
    return 0


def main(args) -> int:
    console = Console()
    if args.key is not None and args.action in ("ls", "stats"):
        console.print(f"[red]{args.action} takes no KEY[/] (got {args.key!r}): "
                      "`python -m lazydev cache show KEY` shows one entry")
        return 2
    if args.action == "ls":
        return _ls(console)
    if args.action == "show":
        if not args.key:
            console.print("[red]show needs a KEY[/] (a unique prefix is enough): "
                          "`python -m lazydev cache ls` lists them")
            return 2
        return _show(console, args.key)
    if args.action == "stats":
        return _stats(console)
    if args.key == "":
        console.print("[red]an empty key would match every entry[/]: leave it out to clear all")
        return 1
    n = cache.clear(args.key)
    console.print(f"removed {n} entries from {config.cache_dir}")
    return 0 if n or args.key is None else 1
