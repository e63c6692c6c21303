"""The execution queue: programs run in order, off the GIL, on one worker thread or on the host
thread that waits for them (Note [Who runs a program]).

Note [Async execution]
`submit` returns at once with a Ticket, so mark_step() returns as soon as the step's program is
queued and Python traces the next step while the C code runs (cffi releases the GIL for the
call). Jobs run strictly in submission order, so a program reading a buffer written by an earlier
program needs no other synchronisation. The host waits only where it reads memory: a download
waits for the ticket of the buffer it reads, and only until that job has run the kernel call
that writes the buffer (Note [Early reads] in compile/passes.py). After a job fails, the jobs
queued behind it are cancelled (their inputs may be garbage) and every failed or cancelled
ticket is reported, once, at the next wait, oldest first, so the caller can restore the values
those jobs would have replaced.
"""
from __future__ import annotations

import atexit
import collections
import os
import sys
import threading
import time

from .. import interrupts
from .device import owns_team, release_team


# Note [Who runs a program]
# Only the host forks OpenMP teams (Note [One OpenMP team] in csrc/wse_runtime.c; `Run.resume`
# in device.py): a worker team of its own would throttle every team in the process. So the
# worker runs on one thread, beside the host's tracing on the other core, and the host runs
# what it waits for with both:
# - a job the worker has not started, the host takes whole; the worker leaves each job
#   HOST_GRACE seconds before starting it, so "mark_step(), then read the loss" never splits;
# - a job the worker is running, the host asks to pause (the program stops between two kernel
#   calls, csrc/wse_prefix.h) and runs on from the first call not run.
# The host can take over only between calls, so the worker does not start a call whose last run
# took more than WORKER_LIMIT_US: it pauses there and leaves the job to the host (a one-thread
# GEMM or the 20-op chain's single loop ran 2-9 ms while the host waited: pipelined MLP 11.7
# and chain 17.5 ms, against 7.4 and 9.2 synchronous). GEMMs are the exception: the worker
# starts them however long, since it can pause inside one between slices of 0.25-1 ms
# (Note [Sliced GEMM] in csrc/wse_kernels.c). So while the host traces step i + 1, the worker
# runs step i's program on one core up to its first long loop, and the host, reading step i's
# loss, takes over from there on both cores: benchmarks/run.py's pipelined transformer step,
# 117-119 ms before, is 110.6 ms. The limit is 1 ms, not 0.5: a call the host ran in 0.3-0.5 ms
# (GELU over 1M floats) takes the worker twice that, and stopping there left the worker idle
# for the rest of the transformer's tracing.
# A host that needs only what a job's first calls write (Note [Early reads] in
# compile/passes.py) waits until the job has run them, wherever it runs: a job the worker is
# past them in it does not wait at all; one it takes, it runs up to there and hands back to the
# worker at once, which goes on with the rest while the host traces on (once the host's team
# is released, Note [Team hold]).
# A job has `resume(unpause, limit_us, until) -> finished`, `pause()`, `reached(calls)` and may
# have `forks` (Note [Team hold]); a plain callable runs whole.
# A paused job nobody takes (its host's wait was interrupted, or it stopped at a long call and
# no host came) goes back to the worker after ORPHAN_GRACE, without the limit, so the queue never
# stalls with every later step's buffers held.
# The worker runs at the lowest priority (nice 19, its thread only): it is a helper, and the
# host takes over whatever it waits for. After each parallel region the host's OpenMP team
# thread spins for about 5 ms (libgomp's 300000 rounds), so the worker, the host's tracing and
# that spinning thread compete for two cores; at equal priority the scheduler often put the
# worker on the tracing host's core: MLP steps of 10-28 ms among 7 ms ones, CNN steps 6.4 ms
# against 4.9 at nice 19 (medians of three runs of 60 steps, the two settings alternating).
# At nice 19 the spinning thread kept the worker off the other core instead (it ran 0 ms of a
# median MLP step, benchmarks/timeline.py), so a host that leaves work queued for the worker
# ends its idle team (Note [Releasing the team] in csrc/wse_runtime.c): the worker then runs
# 5-8 ms of the MLP step while the host traces. Blocks of 15 steps, with and without,
# alternating 8 times in one process beside eager's: MLP 0.92x eager against 1.09x (with Note
# [Tiles for the worker] in csrc/wse_kernels.c), CNN 0.72x against 0.83x; the transformer and
# the 20-op chain, which leave the worker little, unchanged.
# Note [Release when tracing]
# The release waits for the host to turn to tracing: a wait that returns with work left marks
# it due, and the host's next recorded value (trace/state.py) calls leave_to_worker. Released
# as each wait returned, a burst of reads (12 .item()s after a step) paused the worker and
# restarted the team at each read: 21.6 -> 28.1 ms a step. Released only by a wait that came
# 1 ms or more after the last one returned, a loss read one step late (mark_step's wait for
# the oldest step, then at once the read) kept the team spinning through the next step's
# tracing. Blocks of 20 MLP steps alternating 8 times in one process beside eager's: read one
# step late, 1.07x eager with that rule against 0.91x released at the next recorded value;
# read at once, 0.88x against 0.89x. A burst of reads records nothing, so it releases nothing.
# Note [Worker's budget]
# WORKER_LIMIT_US keeps the host from waiting long for a call the worker started, but a
# transformer step's tracing takes the host 42-53 ms, and the worker stopped at the first long
# call of the step's backward after 0-11 ms of it (benchmarks/timeline.py): the other core sat
# idle for the rest. The host's tracing takes about as long every step, so the queue keeps how
# long the host last traced (from leave_to_worker to its next wait) and the worker may start a
# long call if twice its last run (it may have had the host's two threads) ends within
# WORKER_BUDGET of that, less what has passed (the budget, csrc/wse_prefix.h).
# Note [Team hold]
# The host's team thread spins on the other core for about TEAM_SPIN_S after each region the host
# ran, and a worker started on that core then (a job handed back once the host had run as far as
# its read needed) takes slices of it at nice 19: the spinning thread, preempted, came late to the
# release that ends it (Note [Releasing the team]), and the host waited. Most releases took 60-180
# us, one in seven or eight of an MLP step's 1-4 ms (a mean of 250-780 us a step, inside what
# benchmarks/timeline.py counts as tracing). So after the host has run a program on its team, the
# worker starts nothing until the host releases the team or TEAM_SPIN_S has passed; on that core
# it would have got only slivers anyway. Releases since: 60-180 us, none longer in 70. What that
# does to a step's median is within this VM's noise: blocks of steps alternating in one process
# gave the MLP 0.967x, 0.987x, 0.970x and 1.015x (benchmarks/queue_ab.py --switch hold: 1.00x,
# 1.01x), the CNN 1.01x, the transformer 0.976x; the tail it removes is in the mean. Only a job
# that may have forked the team holds the worker (its `forks`, compile/program.py's Layout; a job
# without one may): after a program too small for any parallel loop or library call, held, the
# worker waited up to TEAM_SPIN_S for a team that was not spinning.
HOST_GRACE = 0.0003
WORKER_BUDGET = 0.75
ORPHAN_GRACE = 0.05
TEAM_SPIN_S = 0.005
WORKER_LIMIT_US = 1000
WORKER_NICE = 19


# Note [Forked children]
# A process forked from one that used wse (multiprocessing's default on Linux) inherits the
# queue's state but not its threads: no worker, and an OpenMP team whose threads exist only in
# the parent, so the first program the child ran forked onto them and hung for ever (libgomp
# has no fork handler). The child may read values already computed (their bytes came with the
# fork), but running a program raises, as CUDA's "Cannot re-initialize CUDA in forked
# subprocess" does.
_PID = os.getpid()


def _refuse_forked() -> None:
    if _PID != os.getpid():
        raise RuntimeError(
            "wse programs cannot run in a process forked from the one that used the wse "
            "device: its runtime threads do not survive fork(). Start child processes with "
            "multiprocessing's 'spawn' or 'forkserver' method "
            "(multiprocessing.set_start_method('spawn'), DataLoader(multiprocessing_context="
            "'spawn')), or give them CPU tensors (tensor.cpu()) made before they start.")


def _lower_priority() -> None:
    """WORKER_NICE for the calling thread: Linux applies setpriority to one thread (elsewhere
    it would lower the whole process, so it is left alone there)."""
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICE)
        except OSError:
            pass


class Cancelled(RuntimeError):
    pass


class Ticket:
    __slots__ = ("done", "error", "seconds", "context", "holds", "job")

    def __init__(self, context=None, holds=None):
        self.done = threading.Event()
        self.error = None
        self.seconds = 0.0
        self.context = context          # what the submitter needs to undo this job on failure
        self.holds = holds              # the buffers the job runs on (until it has run)
        self.job = None                 # the job until it has run, or failed: how far it got


class _Whole:
    """A plain callable as a job: it runs whole, so a pause asks nothing of it."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def pause(self) -> None:
        pass

    def reached(self, calls: int) -> bool:
        return False

    def resume(self, unpause: bool = False, limit_us: int = 0, until: int = 0,
               budget_us: int = 0) -> bool:
        self.fn()
        return True

    def interrupted(self) -> bool:
        """A Ctrl-C stopped the callable itself, at a point nobody knows: it failed."""
        raise RuntimeError("a wse job was interrupted (KeyboardInterrupt) while it ran")


# Note [A claimed job runs]
# A host waiting for a ticket takes the oldest job off the queue and runs it (Note [Who runs a
# program]). A Ctrl-C between the two, the job taken and not yet started, left it in no one's
# hands with the queue marked busy: every later read hung. SIGINT is held from the claim until
# the run starts (lazydev/interrupts.py), and one that came meanwhile is raised when the run
# returns, as one during the run is; the run itself stays interruptible.
def _raise(interrupt) -> None:
    if interrupt is not None:
        raise interrupt


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
        self._release_due = False       # Note [Release when tracing]
        self._left = None               # when the host turned to tracing, until its next wait
        self._traced = 0.0              # how long it traced then (Note [Worker's budget])
        self._team_hold = 0.0           # the worker starts nothing before (Note [Team hold])

    def references(self, objs: list) -> list:
        """Per object of `objs`, the references to it outside `objs` and the jobs not yet
        finished (their buffer lists and undo records). Counted under the lock the worker
        lets go of a job's references under: a job finishing between a refcount and the
        count of its jobs' references would make a sole holder look shared (CI caught a
        parameter not donated). One pass over the jobs: a step asks about every parameter
        and optimizer state it updates, and asking job by job cost 3 ms a step with a
        transformer's program in flight."""
        listed = collections.Counter(map(id, objs))
        with self._lock:
            queued = self._held()
            # getrefcount's own argument and the comprehension's name: 2 more
            return [sys.getrefcount(o) - 2 - listed[id(o)] - queued.get(id(o), 0)
                    for o in objs]

    def _held(self) -> dict:
        """{id(obj): references to obj} held for jobs not yet finished (caller holds the
        lock)."""
        counts: dict = {}
        get = counts.get
        for t in self._inflight:
            holds, context = t.holds, t.context
            if t.done.is_set():
                continue
            for b in holds or ():
                counts[id(b)] = get(id(b), 0) + 1
            for _, old, new in context or ():
                counts[id(old)] = get(id(old), 0) + 1
                counts[id(new)] = get(id(new), 0) + 1
        return counts

    def failed(self) -> bool:
        """Whether a job failed and its failure has not been reported yet (every job after it
        is cancelled until then)."""
        return self._failed or bool(self._unreported)

    def backlog(self, keep: int):
        """The ticket to wait for so that at most `keep` jobs stay unfinished (the newest
        `keep` run on), or None if no more than that are."""
        live = [t for t in self._inflight if not t.done.is_set()]
        return live[-keep - 1] if len(live) > keep else None

    def submit(self, job, context=None, holds=None) -> Ticket:
        """Queue `job`: a callable, or a resumable job (Note [Who runs a program])."""
        _refuse_forked()
        if not hasattr(job, "pause"):
            job = _Whole(job)
        ticket = Ticket(context, holds)
        ticket.job = job
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
        and a job paused for the host ORPHAN_GRACE (Note [Who runs a program]); returns [job,
        ticket, paused] as a list, or the seconds to wait before asking again (None: until
        notified)."""
        if self._running or not self._pending:
            return None
        job, ticket, queued, paused = self._pending[0]
        if host and job is None:
            return None                     # the shutdown marker is the worker's
        if not host and job is not None:
            now = time.perf_counter()
            left = max(queued + (ORPHAN_GRACE if paused else HOST_GRACE), self._team_hold) - now
            if left > 0:
                return left
        self._pending.popleft()
        self._running = True
        if not host:
            self._worker_job = job
        return [job, ticket, paused]     # a list: _run takes the job out of it

    def _work(self) -> None:
        _lower_priority()
        while True:
            with self._cv:
                got = self._claim(host=False)
                while not isinstance(got, list):
                    self._cv.wait(got)
                    got = self._claim(host=False)
            if got[0] is None:
                self._finish(got[1])
                return
            # A job back from a pause nobody took runs whole: no host is coming for it.
            paused = got[2]
            self._run(got, unpause=paused, limit_us=0 if paused else WORKER_LIMIT_US,
                      budget_us=0 if paused else self._budget_us())

    def _budget_us(self) -> int:
        """The time the worker may plan on before the host is back (Note [Worker's
        budget])."""
        left = self._left
        spent = 0.0 if left is None else time.perf_counter() - left
        return int(max(self._traced * WORKER_BUDGET - spent, 0.0) * 1e6)

    def _finish(self, ticket: Ticket) -> None:
        """Mark `ticket` done. No frame of this queue may still hold its job then: the closure
        holds the run's buffers, and a host woken by `done` counts references (a buffer
        something holds is never donated, Note [Donation] in compile/program.py; device
        memory is measured). So the worker's reference goes first, under the lock."""
        with self._cv:
            self._worker_job = None
        ticket.done.set()
        self._release()

    def _release(self, paused=None, handed=False) -> None:
        """Let the next job run; `paused` (a paused job and its ticket) goes back to the front
        of the queue first, for the host that asked for it, or `handed` to the worker, which
        starts it at once: a host that ran it as far as it needed."""
        with self._cv:
            if paused is not None:
                self._front(*paused, handed)
            self._running = False
            self._worker_job = None
            self._cv.notify_all()

    def _run(self, got: list, unpause: bool, limit_us: int = 0, until: int = 0,
             budget_us: int = 0, host: bool = False, hold=None) -> None:
        """Run the claimed [job, ticket, paused] (emptied here, so that only this frame holds
        the job, and drops it before the ticket is done, _finish). `hold`: the host's held
        Ctrl-C, released as the run starts (Note [A claimed job runs])."""
        job, ticket, _ = got
        got.clear()
        # Asked before the run, while the host's caches are warm: after it, cold, the question
        # (torch.get_num_threads) cost 20-25 us of the host's time between two runs.
        holds_team = host and getattr(job, "forks", True) and owns_team()   # Note [Team hold]
        t0 = time.perf_counter()
        finished, interrupt = True, None
        if self._failed:
            ticket.error = Cancelled("cancelled: an earlier wse program in the queue failed")
            interrupt = hold.release() if hold is not None else None
        else:
            try:
                try:
                    interrupt = hold.release() if hold is not None else None
                    finished = job.resume(unpause, limit_us, until, budget_us)
                except KeyboardInterrupt as e:
                    # Ctrl-C on the host, raised as the run returned: not the program's
                    # failure. Its outcome is kept, and the interrupt raised once it is.
                    interrupt = e
                    finished = job.interrupted()
            except BaseException as e:   # reported to the host at its next wait
                ticket.error = e
                self._failed = True
        ticket.seconds += time.perf_counter() - t0
        if holds_team:
            self._team_hold = time.perf_counter() + TEAM_SPIN_S
        if not finished:
            self._release((job, ticket), handed=bool(until) and job.reached(until))
        else:
            job = None          # holds no buffers once run (Run.resume): the ticket does
            self._done(ticket)
        if interrupt is not None:
            raise interrupt

    def _done(self, ticket: Ticket) -> None:
        """Bookkeeping of a finished run (no frame holds its job)."""
        with self._lock:        # counted under it (references)
            if ticket.error is not None:    # its job stays: how far it got (Note [Early reads])
                self._unreported.append(ticket)
            else:
                # The undo record holds the buffers this run replaced; once it succeeded they
                # are garbage (kept, each run would keep its predecessors' buffers alive).
                ticket.context = ticket.job = None
            ticket.holds = None
        self._finish(ticket)

    def _await(self, target: Ticket, calls: int | None = None) -> None:
        """Block until `target` has run (its first `calls` calls, if given), running the jobs
        up to it on this thread: those the worker has not started, and the rest of the one it
        is running once it pauses."""
        while not target.done.is_set():
            _refuse_forked()            # nothing would run it (Note [Forked children])
            hold = interrupts.Held()    # Note [A claimed job runs]
            try:
                got = self._host_claim(target, calls, hold)
            except BaseException:
                hold.release()
                raise
            if got is None:
                return
            if not got:
                continue
            mine = got[1] is target and calls
            try:
                self._run(got, unpause=True, until=calls if mine else 0, host=True, hold=hold)
            finally:
                hold.release()          # (the run released it, unless it failed before)

    def _host_claim(self, target: Ticket, calls: int | None, hold):
        """_await's turn: None when `target` has run far enough, [] after waiting for the
        queue, else the job claimed. Releases `hold` unless a job is claimed."""
        with self._cv:
            if target.done.is_set():
                _raise(hold.release())
                return None
            job = target.job
            reached = calls is not None and job is not None and job.reached(calls)
            job = None                          # held on, it outlives `done` (_finish)
            if reached:
                self._hand_back(target)
                _raise(hold.release())
                return None
            got = self._claim(host=True)
            if got is None:
                _raise(hold.release())          # nothing claimed
                if self._worker_job is not None:
                    self._worker_job.pause()    # it comes back to us (_release)
                self._cv.wait()
                return []
            return got

    def _front(self, job, ticket: Ticket, handed: bool) -> None:
        """Put a started job back at the front of the queue (the caller holds the lock):
        paused for a host, or `handed` to the worker, queued HOST_GRACE ago so it starts it at
        once."""
        now = time.perf_counter()
        self._pending.appendleft((job, ticket) + ((now - HOST_GRACE, False) if handed
                                                  else (now, True)))

    def _hand_back(self, target: Ticket) -> None:
        """`target`'s job, if it waits paused for this host (which asked, then found it had
        run far enough), goes to the worker at once, not after ORPHAN_GRACE. Holds the lock."""
        if self._pending and self._pending[0][1] is target and self._pending[0][3]:
            job, ticket, _, _ = self._pending.popleft()
            self._front(job, ticket, handed=True)
            self._cv.notify_all()

    def wait(self, ticket: Ticket | None = None, calls: int | None = None) -> list:
        """Wait for `ticket` (or for everything queued), or only for its first `calls` kernel
        calls; returns the failed and cancelled tickets not reported before, oldest first. The
        queue accepts work again after."""
        target = ticket if ticket is not None else self._last
        if self._left is not None:      # back from tracing: Note [Worker's budget]
            self._traced, self._left = time.perf_counter() - self._left, None
        if target is not None:
            self._await(target, calls if ticket is not None else None)
            self._release_due = bool(self._running or self._pending)
        if ticket is None or (ticket.error is not None and not _got_to(ticket, calls)):
            if self._last is not None:
                self._await(self._last)     # a failure cancels the rest: let them drain
            with self._lock:
                failed, self._unreported = self._unreported, []
            self._failed = False
            return failed
        return []

    def release_due(self) -> bool:
        """Whether the last wait left work for the worker (Note [Release when tracing])."""
        return self._release_due

    def leave_to_worker(self) -> None:
        """The host turns to tracing: if its last wait left work that is still queued, its
        idle OpenMP team ends so that the worker gets the other core (Note [Release when
        tracing])."""
        if self._release_due:
            self._release_due = False
            self._left = time.perf_counter()
            if self._running or self._pending:
                release_team()
                with self._cv:          # the other core is free: Note [Team hold]
                    self._team_hold = 0.0
                    self._cv.notify_all()

    def shutdown(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            # A program that failed with no read after it (a device-side check of a result
            # nothing read, a torch._assert_async) would otherwise end the process silently.
            for t in self.wait():
                if not isinstance(t.error, Cancelled):
                    sys.stderr.write(f"lazydev: a wse program failed and no read raised its "
                                     f"error: {type(t.error).__name__}: {t.error}\n")
            done = Ticket()
            with self._cv:
                self._pending.append((None, done, 0.0, False))
                self._cv.notify_all()
            done.done.wait()


def _got_to(ticket: Ticket, calls: int | None) -> bool:
    """Whether the failed job of `ticket` had run its first `calls` calls: a read of what they
    wrote keeps its value, and the failure waits for the next read (Note [Early reads]). The
    worker may run on into the failing call before the host that needed them is back."""
    job = ticket.job
    return bool(calls) and job is not None and job.reached(calls)


EXEC = ExecQueue()
atexit.register(EXEC.shutdown)     # never leave C code running while the interpreter exits
