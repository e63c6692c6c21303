"""The execution queue: programs run in order, off the GIL, on one worker thread or on the host
thread that waits for them (Note [Who runs a program]).

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
import collections
import threading
import time


# Note [Who runs a program]
# A program run by the worker thread took 1.5-2x as long as the same program run by the host
# thread (CNN step: 5.2 vs 2.9 ms; a bare loop of 75 OpenMP regions called through ctypes: 7-11
# vs 4.3 ms). Not because of the thread itself: beside an idle main thread the MLP's program
# takes the same time on either (8.8 ms, `benchmarks/kernel_profile.py --thread`). Beside a main
# thread running Python it takes 20.8 ms: the worker's OpenMP team shares a core with the
# tracing thread, and a thread woken while the host runs Python waits up to the interpreter's
# switch interval (5 ms) for the GIL before it can start or finish a job. So the host runs what
# it waits for:
# - a job the worker has not started, the host takes whole; the worker leaves each job
#   HOST_GRACE seconds before starting it, so "mark_step(), then read the loss" never splits;
# - a job the worker is running, the host asks to pause (the program stops between two kernel
#   calls, csrc/wse_prefix.h) and runs on from the first call not run. Pipelined CNN steps (loss
#   read a step late): 6.8-7.8 -> 5.3-5.8 ms; MLP unchanged (its kernels are a few long GEMMs).
# A worker on one thread, leaving the other core to tracing, measured slower in both (MLP 14-15
# ms: the host then waits for a single-threaded GEMM before it can take over).
# A job has `resume(unpause) -> finished` and `pause()`; a plain callable runs whole. A paused job
# nobody takes (its host's wait was interrupted) goes back to the worker after ORPHAN_GRACE, so
# the queue never stalls with every later step's buffers held.
HOST_GRACE = 0.0003
ORPHAN_GRACE = 0.05


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


class _Whole:
    """A plain callable as a job: it runs whole, so a pause asks nothing of it."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def pause(self) -> None:
        pass

    def resume(self, unpause: bool = False) -> bool:
        self.fn()
        return True


class ExecQueue:
    def __init__(self):
        self._pending: collections.deque = collections.deque()   # (job, ticket, queued at, paused)
        self._cv = threading.Condition()
        self._running = False           # a job is running (on the worker or a waiting host)
        self._thread = None
        self._failed = False
        self._lock = threading.Lock()
        self._unreported: list = []     # failed/cancelled tickets not yet reported
        self._last = None
        self._inflight: list = []       # tickets submitted, maybe not yet run
        self._worker_job = None         # the job the worker is running

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
        """Queue `job`: a callable, or a resumable job (Note [Who runs a program])."""
        if not hasattr(job, "pause"):
            job = _Whole(job)
        ticket = Ticket(context, holds)
        self._inflight = [t for t in self._inflight if not t.done.is_set()] + [ticket]
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="lazydev-exec", daemon=True)
            self._thread.start()
        self._last = ticket
        with self._cv:
            self._pending.append((job, ticket, time.perf_counter(), False))
            self._cv.notify_all()
        return ticket

    def _claim(self, host: bool):
        """Take the oldest job if nothing runs (caller holds the lock): jobs run one at a time,
        in order. The worker leaves a job HOST_GRACE seconds to a host that may wait for it,
        and a job paused for the host ORPHAN_GRACE (Note [Who runs a program]); returns (job,
        ticket, paused), or the seconds to wait before asking again (None: until notified)."""
        if self._running or not self._pending:
            return None
        job, ticket, queued, paused = self._pending[0]
        if host and job is None:
            return None                     # the shutdown marker is the worker's
        if not host and job is not None:
            left = queued + (ORPHAN_GRACE if paused else HOST_GRACE) - time.perf_counter()
            if left > 0:
                return left
        self._pending.popleft()
        self._running = True
        if not host:
            self._worker_job = job
        return job, ticket, paused

    def _work(self) -> None:
        while True:
            with self._cv:
                got = self._claim(host=False)
                while not isinstance(got, tuple):
                    self._cv.wait(got)
                    got = self._claim(host=False)
            job, ticket, paused = got
            if job is None:
                self._finish(ticket)
                return
            self._run(job, ticket, unpause=paused)
            job = ticket = got = None

    def _finish(self, ticket: Ticket) -> None:
        ticket.done.set()
        self._release()

    def _release(self, paused=None) -> None:
        """Let the next job run; `paused` (a paused job and its ticket) goes back to the front
        of the queue first, for the host that asked for it."""
        with self._cv:
            if paused is not None:
                self._pending.appendleft(paused + (time.perf_counter(), True))
            self._running = False
            self._worker_job = None
            self._cv.notify_all()

    def _run(self, job, ticket: Ticket, unpause: bool) -> None:
        t0 = time.perf_counter()
        finished = True
        if self._failed:
            ticket.error = Cancelled("cancelled: an earlier wse program in the queue failed")
        else:
            try:
                finished = job.resume(unpause)
            except BaseException as e:   # reported to the host at its next wait
                ticket.error = e
                self._failed = True
        ticket.seconds += time.perf_counter() - t0
        if not finished:
            self._release((job, ticket))
            return
        if ticket.error is not None:
            with self._lock:
                self._unreported.append(ticket)
        else:
            # The undo record holds the buffers this run replaced; once it succeeded they
            # are garbage (kept, each run would keep its predecessors' buffers alive).
            ticket.context = None
        ticket.holds = None
        # The caller drops the job right after: its closure holds the run's buffers, and a
        # buffer something still holds is never donated (Note [Donation] in compile/program.py).
        self._finish(ticket)

    def _await(self, target: Ticket) -> None:
        """Block until `target` has run, running the jobs up to it on this thread: those the
        worker has not started, and the rest of the one it is running once it pauses."""
        while not target.done.is_set():
            with self._cv:
                if target.done.is_set():
                    return
                got = self._claim(host=True)
                if got is None:
                    if self._worker_job is not None:
                        self._worker_job.pause()    # it comes back to us (_release)
                    self._cv.wait()
                    continue
            job, ticket, _ = got
            self._run(job, ticket, unpause=True)
            job = ticket = got = None

    def wait(self, ticket: Ticket | None = None) -> list:
        """Wait for `ticket` (or for everything queued); returns the failed and cancelled
        tickets not reported before, oldest first. The queue accepts work again after."""
        target = ticket if ticket is not None else self._last
        if target is not None:
            self._await(target)
        if ticket is None or ticket.error is not None:
            if self._last is not None:
                self._await(self._last)     # a failure cancels the rest: let them drain
            with self._lock:
                failed, self._unreported = self._unreported, []
            self._failed = False
            return failed
        return []

    def shutdown(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self.wait()
            done = Ticket()
            with self._cv:
                self._pending.append((None, done, 0.0, False))
                self._cv.notify_all()
            done.done.wait()


EXEC = ExecQueue()
atexit.register(EXEC.shutdown)     # never leave C code running while the interpreter exits
