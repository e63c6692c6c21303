"""rich-formatted logs, off unless a channel is enabled (lazydev.config / LAZYDEV_LOG)."""
from __future__ import annotations

import functools
import os
import sys

from .config import config

_console = None
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
# Frames inside these are lazydev's or torch's own; examples.py and demo.py are user code.
_SKIP = tuple(os.path.join(_PKG_DIR, d) + os.sep for d in ("tensor", "trace", "compile", "runtime")) \
    + tuple(os.path.join(_PKG_DIR, f) for f in ("__init__.py", "log.py", "metrics.py")) \
    + (os.path.dirname(os.path.abspath(__import__("torch").__file__)),)


def console():
    global _console
    if _console is None:
        from rich.console import Console
        # Logs piped to a file or captured keep whole lines (rich would wrap them at 80).
        _console = Console(stderr=True, width=None if sys.stderr.isatty() else 240)
    return _console


def enabled(channel: str) -> bool:
    return config.logs(channel)


def emit(channel: str, message) -> None:
    if config.logs(channel):
        console().print(f"[bold cyan]lazydev[/] [magenta]{channel}[/] ", message, sep="",
                        soft_wrap=True)


@functools.lru_cache(maxsize=256)
def _relpath(fn: str) -> str:
    # Every upload records where it came from; relpath is ~10 us, the frame walk is ~1 us.
    return fn if fn.startswith("<") else os.path.relpath(fn)


def user_stacklevel() -> int:
    """warnings.warn's stacklevel, from the function that calls this one, for the user's line
    (the frame user_frame names): a warning raised deep in a sync points at the user's code."""
    f, level = sys._getframe(1), 1
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_SKIP) and not fn.startswith("<frozen"):
            return level
        f, level = f.f_back, level + 1
    return 1


def user_frame() -> str:
    """file:line of the innermost frame outside lazydev and torch (the user's source line)."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_SKIP) and not fn.startswith("<frozen"):
            return f"{_relpath(fn)}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"
