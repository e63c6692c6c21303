"""`python -m lazydev demo`: train two small models on wse and on CPU eager, compare the losses.

The wse run and the CPU run are the same `examples.train(...)` call from the same seed, so any
difference in the loss curves is the device's doing. Exit status 0 means every model's losses
agree with CPU to within TOLERANCE (relative) at every step.
"""
from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field

import lazydev
from lazydev import examples, log
from lazydev.config import checked

# Relative, per step. Float32 with a different summation order drifts by ~1e-7 over 20 steps;
# 1e-4 leaves room for that while still catching a wrong kernel (which is off by far more).
TOLERANCE = 1e-4


@dataclass(frozen=True)
class Model:
    kind: str        # examples.train's `kind`
    title: str
    optimizer: str


MODELS = (Model("mlp", "MLP", "sgd"), Model("lm", "transformer", "adamw"))


@dataclass
class Result:
    model: Model
    wse: list
    cpu: list
    wse_s: float
    cpu_s: float
    counters: dict = field(default_factory=dict)   # what the wse run alone added

    @property
    def max_rel_diff(self) -> float:
        return max_rel_diff(self.wse, self.cpu)

    @property
    def ok(self) -> bool:
        return self.max_rel_diff <= TOLERANCE   # False for NaN too, on purpose


def add_arguments(parser) -> None:
    parser.add_argument("--steps", type=int, default=20, help="training steps per model (20)")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and data (0)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bars, no logs, no counter report: just the summary")
    parser.add_argument("--log", default=None, metavar="CHANNELS", type=_channels,
                        help="lazydev log channels, e.g. 'trace,cache' (default: 'cache', "
                             "or LAZYDEV_LOG if set; none with --quiet)")


def _channels(text: str) -> str:
    """--log's value, checked as lazydev.config checks it (argparse reports the error)."""
    try:
        return checked("log", text, "--log {!r}")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def max_rel_diff(a, b) -> float:
    """Largest |a - b| / |b| over the steps; inf if a run is missing steps, so it fails."""
    if len(a) != len(b) or not a:
        return math.inf
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def _choose_log(args) -> None:
    # An explicit --log wins; then a user's LAZYDEV_LOG (already read by lazydev.config); else
    # the demo shows the cache channel, so that every compile and recompile is visible.
    if args.log is not None:
        lazydev.config(log=args.log)
    elif args.quiet:
        lazydev.config(log="")
    elif not lazydev.config.log:
        lazydev.config(log="cache")


def _progress(quiet: bool):
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    # The log console, so log lines print above the live bars instead of tearing them.
    return Progress(TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("loss [bold]{task.fields[loss]}"), TimeElapsedColumn(),
                    console=log.console(), disable=quiet)


def _timed_train(model: Model, device: str, args, progress):
    task = progress.add_task(f"{model.title} on {device}", total=args.steps, loss="-")

    def on_step(i, loss):
        progress.update(task, completed=i + 1, loss=f"{loss:.6f}")

    t0 = time.perf_counter()
    losses = examples.train(model.kind, device, steps=args.steps, seed=args.seed,
                            optimizer=model.optimizer, on_step=on_step)
    return losses, time.perf_counter() - t0


def _delta(before: dict, after: dict) -> dict:
    """Counters are process-wide and cumulative; a model's share is the difference."""
    out = {k: v - before.get(k, 0) for k, v in after.items() if k != "fallbacks"}
    fb_before = before.get("fallbacks", {})
    out["fallbacks"] = {op: n - fb_before.get(op, 0) for op, n in after["fallbacks"].items()
                        if n != fb_before.get(op, 0)}
    return out


def run_model(model: Model, args, progress) -> Result:
    before = lazydev.metrics.counters()
    wse, wse_s = _timed_train(model, "wse", args, progress)
    counters = _delta(before, lazydev.metrics.counters())
    cpu, cpu_s = _timed_train(model, "cpu", args, progress)
    return Result(model, wse, cpu, wse_s, cpu_s, counters)


def _fallback_cell(fallbacks: dict) -> str:
    if not fallbacks:
        return "0"
    ops = ", ".join(f"{op}×{n}" for op, n in sorted(fallbacks.items(), key=lambda kv: -kv[1]))
    return f"[yellow]{sum(fallbacks.values())}[/] ({ops})"


def _rows(r: Result) -> dict:
    c = r.counters
    disk = f" (+{c['disk_cache_hits']} from disk)" if c.get("disk_cache_hits") else ""
    colour = "green" if r.ok else "bold red"
    return {"steps": str(len(r.wse)),
            "final loss wse": f"{r.wse[-1]:.6f}",
            "final loss cpu": f"{r.cpu[-1]:.6f}",
            "max rel diff (all steps)": f"[{colour}]{r.max_rel_diff:.2e}[/]",
            "wall time wse / cpu": f"{r.wse_s:.2f} s / {r.cpu_s:.2f} s",
            "compilations": f"{c.get('compilations', 0)}{disk}",
            "cache hits": str(c.get("cache_hits", 0)),
            "fallbacks": _fallback_cell(c.get("fallbacks", {}))}


def summary_table(results):
    """One combined table, a column per model: it stays readable in 80 columns (a CI log),
    which a row per model with ten columns does not."""
    from rich.table import Table
    table = Table(title=f"wse vs CPU eager, tolerance {TOLERANCE:g} relative")
    table.add_column("model")
    for r in results:
        table.add_column(f"{r.model.title} ({r.model.optimizer})", justify="right")
    rows = [_rows(r) for r in results]
    for name in rows[0]:
        table.add_row(name, *(row[name] for row in rows))
    return table


def main(args) -> int:
    from rich.console import Console
    if args.steps < 1:
        raise SystemExit("--steps must be at least 1")
    _choose_log(args)
    lazydev.metrics.reset()   # so the closing report covers the demo only
    with _progress(args.quiet) as progress:
        results = [run_model(m, args, progress) for m in MODELS]
    console = Console()
    console.print(summary_table(results))
    if not args.quiet:
        lazydev.metrics.report(console)
    bad = [r for r in results if not r.ok]
    for r in bad:
        console.print(f"[bold red]FAIL[/] {r.model.title}: wse losses differ from CPU by up to "
                      f"{r.max_rel_diff:.2e} relative (tolerance {TOLERANCE:g})")
    if not bad:
        console.print(f"[bold green]OK[/] wse matches CPU eager within {TOLERANCE:g} "
                      f"on every step of every model")
    return 1 if bad else 0
