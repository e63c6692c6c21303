"""Ctrl-C held over the few lines that must run whole (Note [Ctrl-C while a step is queued] in
trace/sync.py, Note [A claimed job runs] in runtime/queue.py).

Python raises KeyboardInterrupt in the main thread at the next line after SIGINT. Where a
state change spans several lines (a job taken off the queue and started; a step's program
queued and its storages bound to their new buffers), an interrupt between two of them lost
values or hung every later read. `Held` swaps Python's handler for one that only notes the
signal, and gives the interrupt back on release, for the caller to raise once the state is
whole again. Other threads never get KeyboardInterrupt, and a handler the user installed is
theirs to run: both are left alone.
"""
from __future__ import annotations

import contextlib
import signal
import threading


class Held:
    __slots__ = ("_on", "_got")

    def __init__(self):
        self._got: list = []
        self._on = (signal.getsignal(signal.SIGINT) is signal.default_int_handler
                    and threading.current_thread() is threading.main_thread())
        if self._on:
            signal.signal(signal.SIGINT, lambda signum, frame: self._got.append(signum))

    def release(self) -> KeyboardInterrupt | None:
        """Python's handler again; the interrupt that came meanwhile, if one did (once: a
        second release gives None)."""
        if self._on:
            self._on = False
            signal.signal(signal.SIGINT, signal.default_int_handler)
        got, self._got = self._got, []
        return KeyboardInterrupt() if got else None


@contextlib.contextmanager
def held():
    """The block runs whole; a Ctrl-C that came during it is raised after it."""
    hold = Held()
    try:
        yield
    finally:
        interrupt = hold.release()
    if interrupt is not None:
        raise interrupt
