"""The execution queue: programs run in order on one worker thread, off the GIL.

Note [Async execution]
`submit` returns at once with a Ticket, so mark_step() returns as soon as the step's program is
queued and Python traces the next step while the C code runs (cffi releases the GIL for the
call). Jobs run strictly in submission order, so a program reading a buffer written by an earlier
program needs no other synchronisation. The host waits only where it reads memory: a download
waits for the ticket of the buffer it reads. After a job fails, the jobs queued behind it are
cancelled (their inputs may be garbage) and every failed or cancelled ticket is reported, once,
at the next wait, oldest first, so the caller can restore the values those jobs would have
replaced.
"""
from __future__ import annotations

import atexit
import queue
import threading
import time


class Cancelled(RuntimeError):
    pass


class Ticket:
    __slots__ = ("done", "error", "seconds", "context", "holds")

    def __init__(self, context=None, holds=None):
        self.done = threading.Event()
        self.error = None
        self.seconds = 0.0
        self.context = context          # what the submitter needs to undo this job on failure
        self.holds = holds              # the buffers the job runs on (until it has run)


class ExecQueue:
    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = None
        self._failed = False
        self._lock = threading.Lock()
        self._unreported: list = []     # failed/cancelled tickets not yet reported
        self._last = None
        self._inflight: list = []       # tickets submitted, maybe not yet run

    def references(self, obj) -> int:
        """References to `obj` held for jobs not yet finished: their buffer lists and undo
        records. A job that finishes meanwhile only drops them, so a caller that reads the
        object's refcount first and this second never undercounts other holders."""
        n = 0
        for t in list(self._inflight):
            holds, context = t.holds, t.context
            if t.done.is_set():
                continue
            n += sum(b is obj for b in holds or ())
            n += sum((old is obj) + (new is obj) for _, old, new in context or ())
        return n

    def submit(self, job, context=None, holds=None) -> Ticket:
        ticket = Ticket(context, holds)
        self._inflight = [t for t in self._inflight if not t.done.is_set()] + [ticket]
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="lazydev-exec", daemon=True)
            self._thread.start()
        self._last = ticket
        self._jobs.put((job, ticket))
        return ticket

    def _work(self) -> None:
        while True:
            job, ticket = self._jobs.get()
            if job is None:
                ticket.done.set()
                return
            t0 = time.perf_counter()
            if self._failed:
                ticket.error = Cancelled("cancelled: an earlier wse program in the queue failed")
            else:
                try:
                    job()
                except BaseException as e:   # reported to the host at its next wait
                    ticket.error = e
                    self._failed = True
            ticket.seconds = time.perf_counter() - t0
            if ticket.error is not None:
                with self._lock:
                    self._unreported.append(ticket)
            else:
                # The undo record holds the buffers this run replaced; once it succeeded they
                # are garbage (kept, each run would keep its predecessors' buffers alive).
                ticket.context = None
            ticket.holds = None
            ticket.done.set()
            # Drop the finished job now, not when the next one arrives: its closure holds the
            # run's buffers, and a buffer something still holds is never donated (Note
            # [Donation] in compile/program.py).
            job = ticket = None

    def wait(self, ticket: Ticket | None = None) -> list:
        """Wait for `ticket` (or for everything queued); returns the failed and cancelled
        tickets not reported before, oldest first. The queue accepts work again after."""
        target = ticket if ticket is not None else self._last
        if target is not None:
            target.done.wait()
        if ticket is None or ticket.error is not None:
            if self._last is not None:
                self._last.done.wait()     # a failure cancels the rest: let them drain
            with self._lock:
                failed, self._unreported = self._unreported, []
            self._failed = False
            return failed
        return []

    def shutdown(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self.wait()
            done = Ticket()
            self._jobs.put((None, done))
            done.done.wait()


EXEC = ExecQueue()
atexit.register(EXEC.shutdown)     # never leave C code running while the interpreter exits
