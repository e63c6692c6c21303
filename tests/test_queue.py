"""The execution queue (lazydev/runtime/queue.py): who runs a program, the host or the
queue's worker, the hand-over between them, failures and the bound on queued steps
(Note [Who runs a program])."""

import gc
import os
import sys
import threading
import time
import weakref

import pytest
import torch

import lazydev
from conftest import assert_same
from lazydev.runtime import Buffer


# ----------------------------------------------------------------- execution queue

def test_a_host_that_waits_runs_the_queued_jobs_itself_in_order(monkeypatch):
    """Note [Who runs a program]: jobs the worker has not started run on the waiting thread,
    in submission order and only up to the one waited for; the rest run on the worker."""
    from lazydev.runtime import queue as Q
    q, ran = Q.ExecQueue(), []

    def job(k):
        return lambda: ran.append((k, threading.current_thread().name))
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)       # the worker never gets there first
    tickets = [q.submit(job(k)) for k in range(3)]
    assert q.wait(tickets[1]) == []
    assert ran == [(0, "MainThread"), (1, "MainThread")]
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    later = q.submit(job(3))                          # wakes the worker, nobody waits
    assert later.done.wait(10)
    assert ran[2:] == [(2, "lazydev-exec"), (3, "lazydev-exec")]
    q.shutdown()



def test_the_worker_runs_a_long_gemm_in_slices_and_the_host_finishes_it(monkeypatch):
    """Note [Who runs a program]: the worker starts a queued step's GEMM, however long, and a
    host that then reads its result takes the run over between two slices: its first resume
    starts inside the GEMM, past the blocks the worker computed. The values are right."""
    from lazydev.runtime import device as D, queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    resumes, worker_in = [], threading.Event()
    orig = D.Run.resume

    def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
        on_worker = threading.current_thread().name == "lazydev-exec"
        if on_worker:
            worker_in.set()
        before = self.position()
        done = orig(self, unpause, limit_us, until, budget_us)
        resumes.append((on_worker, before, self.position(), done))
        return done
    monkeypatch.setattr(D.Run, "resume", resume)
    a = torch.randn(1024, 1024)
    x = a.to("wse")
    lazydev.mark_step()
    y = (x @ x) * 0.5                       # ~40 ms of GEMM on one core
    lazydev.mark_step()
    assert worker_in.wait(30)
    time.sleep(0.005)
    got = y.cpu()
    torch.testing.assert_close(got, (a @ a) * 0.5, rtol=1e-4, atol=1e-3)
    paused = [r for r in resumes if r[0] and not r[3]]
    assert paused and paused[-1][2][1] > 0, resumes       # stopped inside the GEMM
    host = [r for r in resumes if not r[0]]
    assert host and host[0][1] == paused[-1][2], resumes  # and the host went on from there


def test_a_loss_read_after_mark_step_waits_for_the_calls_that_write_it_only(monkeypatch):
    """Note [Early reads]: a scalar's calls come first in the program, whatever order the
    step made its outputs in, and reading it runs the program only that far on the host; the
    worker runs the rest (here a big GEMM cut before the loss). Both values are right."""
    from lazydev.runtime import device as D, queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)       # the worker starts nothing by itself
    resumes = []
    orig = D.Run.resume

    def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
        before = self.position()[0]
        done = orig(self, unpause, limit_us, until, budget_us)
        resumes.append((threading.current_thread().name, until, before, done))
        return done
    monkeypatch.setattr(D.Run, "resume", resume)
    a, b = torch.randn(512, 512), torch.randn(64, 512)
    w, x = a.to("wse"), b.to("wse")
    lazydev.mark_step()
    lazydev.wait()
    resumes.clear()
    y = w @ w                                       # cut first
    loss = torch.tanh(x @ w).mean()
    lazydev.mark_step()
    torch.testing.assert_close(loss.item(), torch.tanh(b @ a).mean().item(), rtol=1e-5,
                               atol=1e-5)
    host = resumes[0]
    assert host[0] == "MainThread" and 0 < host[1] and host[3] is False, resumes
    deadline = time.time() + 10
    while len(resumes) < 2 and time.time() < deadline:   # the worker takes it at once
        time.sleep(0.001)
    assert resumes[1][0] == "lazydev-exec" and resumes[1][2] == host[1], resumes
    torch.testing.assert_close(y.cpu(), a @ a, rtol=1e-4, atol=1e-3)


def test_a_synchronous_step_runs_after_the_steps_queued_before_it(monkeypatch):
    """config.async_exec=False: mark_step's program runs before mark_step returns, but after
    the programs queued before it, here the rest of a step whose loss was read early, which
    writes what it reads (it used to run at once, beside them, and read garbage)."""
    from lazydev.runtime import device as D
    orig = D.Run.resume

    def slow_worker(self, unpause=False, limit_us=0, until=0, budget_us=0):
        if threading.current_thread().name == "lazydev-exec":
            time.sleep(0.2)         # the rest of the first step is still queued below
        return orig(self, unpause, limit_us, until, budget_us)
    monkeypatch.setattr(D.Run, "resume", slow_worker)
    a = torch.randn(256, 256)
    w, p = a.to("wse"), torch.zeros(256, 256).to("wse")
    lazydev.mark_step()
    lazydev.wait()
    loss = w.sum()
    p.add_(w @ w)                   # after the loss in the program: left to the worker
    lazydev.mark_step()
    torch.testing.assert_close(loss.item(), a.sum().item(), rtol=1e-5, atol=1e-3)
    monkeypatch.setattr(lazydev.config, "async_exec", False)
    q = p * 2
    lazydev.mark_step()
    assert q._st.buf.ticket is None or q._st.buf.ticket.done.is_set()   # ran in mark_step
    torch.testing.assert_close(q.cpu(), (a @ a) * 2, rtol=1e-4, atol=1e-3)


def test_an_op_recorded_on_another_thread_is_never_cut_in_half(monkeypatch):
    """Note [One recorder at a time]: a thread in the middle of recording an op (held there a
    moment, after its node is made and before its result is registered) keeps the trace to
    itself, so a mark_step on another thread cannot cut between the two; unguarded, the op's
    node read an input slot of the trace the cut had closed."""
    from lazydev.trace import state as S
    inside, cut = threading.Event(), threading.Event()
    pending = S.Storage.pending.__func__

    def held(cls, numel, node):
        if threading.current_thread().name == "loader" and not inside.is_set():
            inside.set()
            cut.wait(0.5)           # the main thread's mark_step comes here, or waits
        return pending(cls, numel, node)
    monkeypatch.setattr(S.Storage, "pending", classmethod(held))
    a = torch.randn(1000)
    x = a.to("wse")
    lazydev.mark_step()
    lazydev.wait()
    out = {}
    loader = threading.Thread(target=lambda: out.update(y=x * 2 - 1), name="loader")
    loader.start()
    assert inside.wait(10)
    z = x + 1
    lazydev.mark_step()
    cut.set()
    loader.join(10)
    lazydev.mark_step()
    assert_same(out["y"], a * 2 - 1)
    assert_same(z, a + 1)


@pytest.mark.parametrize("worker_fails_first", [False, True])
def test_a_value_read_before_its_step_failed_keeps_it_and_the_step_s_updates_are_undone(
        monkeypatch, worker_fails_first):
    """Note [Early reads]: a loss read after its own calls stays readable, with the same value,
    when a later call of its step fails, also when the worker, given the rest, fails before the
    reading host is back; the failure is raised at the next read and the step's update to an
    existing tensor is undone."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)       # the host runs the step up to the loss
    if worker_fails_first:
        release = Q.ExecQueue._release

        def late_host(self, paused=None, handed=False):
            release(self, paused, handed)
            if handed:                  # the worker runs the rest, into the failure, first
                assert paused[1].done.wait(10)
        monkeypatch.setattr(Q.ExecQueue, "_release", late_host)
    x = torch.randn(1000)
    xw, idx, p = x.to("wse"), torch.tensor([5, 2000]).to("wse"), torch.zeros(3).to("wse")
    lazydev.mark_step()
    lazydev.wait()
    bad = xw[idx]                                     # index 2000 of 1000: fails on the device
    loss = xw.sum()
    p.add_(1)
    lazydev.mark_step()
    first = loss.item()
    torch.testing.assert_close(first, x.sum().item(), rtol=1e-5, atol=1e-4)
    with pytest.raises(IndexError, match="2000 is out of bounds"):
        bad.cpu()
    assert loss.item() == first
    assert p.cpu().tolist() == [0.0, 0.0, 0.0]


def _on_worker(q, fn):
    """Run fn as a job nobody waits for, so the worker runs it; the thread that ran it."""
    where = []
    ticket = q.submit(lambda: where.append((fn(), threading.current_thread().name)))
    assert ticket.done.wait(10) and ticket.error is None     # the worker runs it: none waits
    return where[0][1]


def test_the_worker_forks_no_openmp_team_of_its_own(gemm_prog, monkeypatch):
    """Note [One OpenMP team] (csrc/wse_runtime.c): a team forked by the worker would make
    libgomp throttle every team in the process. A GEMM big enough to fork, run by the worker,
    starts no thread, and is right."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    q = Q.ExecQueue()
    assert _on_worker(q, lambda: None) == "lazydev-exec"           # the worker thread exists
    run, check = _big_gemm(gemm_prog)
    threads = set(os.listdir("/proc/self/task"))
    assert _on_worker(q, run) == "lazydev-exec"
    assert set(os.listdir("/proc/self/task")) == threads
    check()
    q.shutdown()


def _big_gemm(gemm_prog):
    """(run, check): a 256^3 GEMM, enough work to fork a team, and the check of its result."""
    n = 256
    a, b = torch.randn(n, n), torch.randn(n, n)
    bufs = [Buffer.from_tensor(a), Buffer.from_tensor(b), Buffer(n * n * 4)]
    scalars = [32, 1, 0, 0, n, n, n, 1.0, n, 0, n, 0, 0.0, n, 0]
    return (lambda: gemm_prog.run(bufs, scalars),
            lambda: torch.testing.assert_close(bufs[2].to_tensor(torch.float32, (n, n)), a @ b,
                                               rtol=1e-4, atol=1e-4))


def test_a_program_run_off_the_team_thread_forks_no_team(gemm_prog):
    """Note [One OpenMP team]: a thread other than the one that started the device's team (a
    backward hook on autograd's device thread that reads a value) runs programs on one thread."""
    run, check = _big_gemm(gemm_prog)
    ready, go, threads = threading.Event(), threading.Event(), []

    def other():
        ready.set()
        go.wait(10)
        run()
    t = threading.Thread(target=other)
    t.start()
    assert ready.wait(10)
    threads.append(set(os.listdir("/proc/self/task")))      # the new thread included
    go.set()
    t.join(10)
    threads.append(set(os.listdir("/proc/self/task")))
    assert threads[1] <= threads[0]
    check()


class _Limited:
    """A job that stops at its first call as if it were long, whenever it runs with a limit."""

    def __init__(self):
        self.runs, self.ran = [], threading.Event()

    def pause(self):
        pass

    def reached(self, calls):
        return False

    def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
        self.runs.append((limit_us, threading.current_thread().name))
        self.ran.set()
        return limit_us == 0


def test_the_worker_leaves_a_long_call_to_the_host_and_runs_it_whole_if_none_comes(
        monkeypatch):
    """Note [Who runs a program]: a fresh job runs on the worker under WORKER_LIMIT_US; stopped
    at a long call it waits for a host, which runs it without a limit; if no host comes within
    ORPHAN_GRACE the worker runs it without one."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    monkeypatch.setattr(Q, "ORPHAN_GRACE", 0.01)
    q, job = Q.ExecQueue(), _Limited()
    ticket = q.submit(job)
    assert ticket.done.wait(10)
    assert job.runs == [(Q.WORKER_LIMIT_US, "lazydev-exec"), (0, "lazydev-exec")]
    monkeypatch.setattr(Q, "ORPHAN_GRACE", 60.0)
    job = _Limited()
    ticket = q.submit(job)
    assert job.ran.wait(10)
    assert q.wait(ticket) == [] and job.runs == [(Q.WORKER_LIMIT_US, "lazydev-exec"),
                                                 (0, "MainThread")]
    q.shutdown()


class _Steps:
    """A resumable job of `n` steps that records which thread ran each step."""

    def __init__(self, n, ran, started):
        self.n, self.ran, self.started, self.next, self.stop = n, ran, started, 0, False

    def pause(self):
        self.stop = True

    def reached(self, calls):
        return self.next >= calls

    def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
        if unpause:
            self.stop = False
        while self.next < self.n:
            if self.stop or (until and self.next >= until):
                return False
            self.ran.append((self.next, threading.current_thread().name))
            self.next += 1
            self.started.set()
            time.sleep(0.002)
        return True


def test_a_host_that_waits_takes_over_the_job_the_worker_is_running(monkeypatch):
    """Note [Who runs a program]: the worker pauses between two steps of a running job and the
    waiting host runs the rest, each step once and in order; a job is not split otherwise."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    ticket = q.submit(_Steps(200, ran, started))
    assert started.wait(10)
    assert q.wait(ticket) == [] and ticket.error is None
    assert [k for k, _ in ran] == list(range(200))
    threads = [name for _, name in ran]
    first_host = threads.index("MainThread")
    assert 0 < first_host < 200
    assert set(threads[:first_host]) == {"lazydev-exec"} and set(threads[first_host:]) == {
        "MainThread"}
    alone, done = [], threading.Event()
    whole = q.submit(_Steps(3, alone, done))           # nobody waits: the worker runs it all
    assert whole.done.wait(10)
    assert [name for _, name in alone] == ["lazydev-exec"] * 3
    q.shutdown()


def test_a_host_that_needs_a_job_s_first_calls_runs_those_and_leaves_the_rest(monkeypatch):
    """Note [Early reads]: waiting for a job's first calls runs only those on the host; the
    worker takes the rest without a paused job's grace period (ORPHAN_GRACE) while the host
    goes on."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)       # the worker never starts a job first
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    ticket = q.submit(_Steps(20, ran, started))
    assert q.wait(ticket, calls=5) == [] and not ticket.done.is_set()
    assert ticket.done.wait(10) and ticket.error is None
    assert ran == [(k, "MainThread") for k in range(5)] + [(k, "lazydev-exec")
                                                           for k in range(5, 20)]
    q.shutdown()


def test_a_wait_that_leaves_work_for_the_worker_releases_the_team_when_the_host_traces(
        monkeypatch):
    """Note [Release when tracing] (runtime/queue.py): a wait that returns with a job left for
    the worker marks the release of the host's idle OpenMP team due, and the host releases it
    once, when it turns to tracing; a burst of reads releases nothing, and a wait that leaves
    nothing makes no release due (the next region would pay to restart the team)."""
    from lazydev.runtime import queue as Q
    released = []
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)
    monkeypatch.setattr(Q, "release_team", lambda: released.append(1))
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    ticket = q.submit(_Steps(200, ran, started))
    assert q.wait(ticket, calls=5) == [] and q.release_due() and released == []
    assert q.wait(ticket, calls=10) == [] and q.release_due() and released == []
    q.leave_to_worker()
    assert released == [1] and not q.release_due()
    q.leave_to_worker()
    assert released == [1]                                          # once per wait
    assert q.wait(ticket) == [] and not q.release_due()             # nothing left
    q.leave_to_worker()
    assert released == [1]
    assert [k for k, _ in ran] == list(range(200))
    q.shutdown()


def test_after_the_host_ran_on_its_team_the_worker_waits_for_the_team_s_release(monkeypatch):
    """Note [Team hold] (runtime/queue.py): a job the host ran on its OpenMP team and handed
    back waits for the worker until the host releases the team, whose thread spins on the
    worker's core meanwhile; with no release, until TEAM_SPIN_S has passed."""
    from lazydev.runtime import queue as Q
    released = []
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)
    monkeypatch.setattr(Q, "TEAM_SPIN_S", 60.0)
    monkeypatch.setattr(Q, "owns_team", lambda: True)
    monkeypatch.setattr(Q, "release_team", lambda: released.append(1))
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    ticket = q.submit(_Steps(20, ran, started))
    assert q.wait(ticket, calls=5) == [] and q.release_due()
    time.sleep(0.2)
    assert ran == [(k, "MainThread") for k in range(5)]              # held
    q.leave_to_worker()
    assert released == [1] and ticket.done.wait(10)
    assert ran[5:] == [(k, "lazydev-exec") for k in range(5, 20)]
    monkeypatch.setattr(Q, "TEAM_SPIN_S", 0.3)
    ran.clear()
    ticket = q.submit(_Steps(10, ran, started))
    assert q.wait(ticket, calls=2) == []
    t0 = time.perf_counter()
    assert ticket.done.wait(10) and time.perf_counter() - t0 > 0.2   # no release: the hold ends
    assert ran[2:] == [(k, "lazydev-exec") for k in range(2, 10)] and released == [1]
    q.shutdown()


def test_a_job_that_cannot_fork_the_team_does_not_hold_the_worker(monkeypatch):
    """Note [Team hold]: a job without a forking call (`forks` false: a program too small for
    a parallel loop or a library call) leaves no team spinning, so the worker takes the rest
    of it at once; the same job that may fork waits for the release."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)
    monkeypatch.setattr(Q, "TEAM_SPIN_S", 60.0)
    monkeypatch.setattr(Q, "owns_team", lambda: True)
    monkeypatch.setattr(Q, "release_team", lambda: None)

    class Job(_Steps):
        def __init__(self, forks, *args):
            super().__init__(*args)
            self.forks = forks
    q, started = Q.ExecQueue(), threading.Event()
    for forks in (False, True):
        ran = []
        ticket = q.submit(Job(forks, 10, ran, started))
        assert q.wait(ticket, calls=2) == []
        assert ticket.done.wait(2) is not forks
        q.leave_to_worker()
        assert ticket.done.wait(10)
        assert ran == [(k, "MainThread" if k < 2 else "lazydev-exec") for k in range(10)]
    q.shutdown()


def test_the_worker_plans_on_three_quarters_of_the_host_s_last_tracing(monkeypatch):
    """Note [Worker's budget]: the host's time from turning to tracing to its next wait is
    how long the worker may plan on next time, in WORKER_BUDGET parts; before any tracing,
    nothing."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)
    monkeypatch.setattr(Q, "release_team", lambda: None)
    budgets = []

    class Job(_Steps):
        def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
            if threading.current_thread().name == "lazydev-exec":
                budgets.append(budget_us)
            return super().resume(unpause, limit_us, until, budget_us)
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    ticket = q.submit(Job(200, ran, started))
    assert q.wait(ticket, calls=5) == [] and q.release_due()
    t0 = time.perf_counter()
    q.leave_to_worker()                         # the host traces for 0.2 s
    time.sleep(0.2)
    assert q.wait(ticket, calls=150) == [] and not ticket.done.is_set()
    traced = time.perf_counter() - t0
    time.sleep(0.02)                            # the worker takes the job back
    assert q.wait(ticket) == [] and [k for k, _ in ran] == list(range(200))
    assert budgets[0] == 0 and len(budgets) >= 2
    assert 0.75 * 0.2e6 <= budgets[-1] <= 0.75e6 * traced
    q.shutdown()


def test_the_release_comes_at_the_first_op_recorded_after_a_wait(monkeypatch):
    """Note [Release when tracing]: after a wait that left work (mark_step's, or a read's), the
    next op that records a value releases the team, once; reads and views record none."""
    import lazydev.compile as C
    left = []
    monkeypatch.setattr(C, "release_due", lambda: True)
    monkeypatch.setattr(C, "leave_to_worker", lambda: left.append(1))
    x = torch.arange(6.0, device="wse")
    y = x + 1
    lazydev.mark_step()
    assert y.cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert y.view(2, 3)[1].sum().item() == 15.0 and left == [1]     # sum records
    assert y[1:].cpu().tolist() == [2.0, 3.0, 4.0, 5.0, 6.0] and left == [1]
    z = y * 2
    assert left == [1, 1]
    w = z + 1
    assert left == [1, 1] and w.cpu().tolist() == [3.0, 5.0, 7.0, 9.0, 11.0, 13.0]


def test_a_released_team_ends_its_threads_and_the_next_gemm_starts_one(gemm_prog):
    """Note [Releasing the team]: releasing ends the host's team threads (they exit), and the
    next GEMM big enough to fork starts a team again and is right. Thread ids, not counts:
    another test's thread may end meanwhile."""
    from lazydev.runtime import device as D
    run, check = _big_gemm(gemm_prog)
    run()
    check()

    def threads():
        return set(os.listdir("/proc/self/task"))
    extra = torch.get_num_threads() - 1     # the host's team: it and `extra` threads
    with_team = threads()
    assert D.lib.wse_release_team() == 0
    deadline = time.monotonic() + 10
    while len(with_team - threads()) < extra and time.monotonic() < deadline:
        time.sleep(0.001)
    released = threads()
    assert len(with_team - released) >= extra
    run()
    check()
    assert len(threads() - released) >= extra


def test_a_host_needing_calls_the_worker_has_run_does_not_stop_it(monkeypatch):
    """Note [Early reads]: if the worker is past the calls a host needs, the host returns at
    once and the worker runs on: every step on the worker, none paused."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    job = _Steps(100, ran, started)
    ticket = q.submit(job)
    assert started.wait(10)
    while job.next < 3:
        time.sleep(0.001)
    assert q.wait(ticket, calls=2) == [] and not job.stop
    assert ticket.done.wait(10)
    assert [name for _, name in ran] == ["lazydev-exec"] * 100
    q.shutdown()


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="only Linux lowers one thread's priority (setpriority per thread)")
def test_the_worker_thread_runs_at_the_lowest_priority_and_the_host_does_not():
    """Note [Who runs a program]: the worker yields a shared core to the tracing host."""
    from lazydev.runtime import queue as Q
    host = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    q = Q.ExecQueue()
    ids = []
    assert q.submit(lambda: ids.append(threading.get_native_id())).done.wait(10)
    assert ids[0] != threading.get_native_id()
    assert os.getpriority(os.PRIO_PROCESS, ids[0]) == Q.WORKER_NICE == 19
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == host
    q.shutdown()


def test_a_job_paused_for_a_host_that_never_takes_it_goes_back_to_the_worker(monkeypatch):
    """A paused job nobody waits for (an interrupted wait) must not stall the queue."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    monkeypatch.setattr(Q, "ORPHAN_GRACE", 0.01)
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    job = _Steps(50, ran, started)
    ticket = q.submit(job)
    after = q.submit(lambda: ran.append(("after", threading.current_thread().name)))
    assert started.wait(10)
    job.pause()                                        # as a host would, then never waits
    after.done.wait(10)
    assert ticket.done.is_set() and after.done.is_set() and ticket.error is None
    assert [k for k, _ in ran] == list(range(50)) + ["after"]
    assert {name for _, name in ran} == {"lazydev-exec"}
    q.shutdown()


class _Job:
    """A resumable job that runs whole and can be weakly referenced."""

    def pause(self):
        pass

    def reached(self, calls):
        return False

    def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
        return True


class _DoneChecksJobIsGone(threading.Event):
    """A ticket's `done` that records, when set, whether its job still lives."""

    def __init__(self, ref):
        super().__init__()
        self.ref, self.job_alive = ref, None

    def set(self):
        gc.collect()
        self.job_alive = self.ref() is not None
        super().set()


def test_a_job_is_dropped_before_its_ticket_is_done(monkeypatch):
    """A host woken by `done` counts references (donation, device memory), so by then no
    frame of the queue may hold the job, whose closure holds the run's buffers; whoever ran it,
    the host that waited or the worker."""
    from lazydev.runtime import queue as Q
    q = Q.ExecQueue()
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)       # the worker leaves the first to the host
    tickets = []
    for _ in range(2):
        job = _Job()
        ticket = q.submit(job)
        ticket.done = _DoneChecksJobIsGone(weakref.ref(job))
        tickets.append(ticket)
        del job
    q.wait(tickets[0])
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    with q._cv:
        q._cv.notify_all()                            # the worker takes the second
    # Long: the worker runs niced, and done's gc.collect() walks the whole suite's heap.
    assert tickets[1].done.wait(60)
    assert [t.done.job_alive for t in tickets] == [False, False]
    q.shutdown()


def test_a_failed_job_cancels_the_rest_whoever_runs_them():
    from lazydev.runtime.queue import Cancelled, ExecQueue
    q = ExecQueue()

    def boom():
        raise ValueError("boom")
    tickets = [q.submit(lambda: None), q.submit(boom), q.submit(lambda: None)]
    failed = q.wait(tickets[-1])
    assert [type(t.error) for t in failed] == [ValueError, Cancelled]
    assert q.wait(q.submit(lambda: None)) == []          # the queue accepts work again
    q.shutdown()


@pytest.mark.parametrize("keep", [2, 0])
def test_a_loop_that_never_reads_leaves_at_most_max_queued_steps_unfinished(monkeypatch, keep):
    """Note [Bounded queue]: past config.max_queued_steps unfinished programs, mark_step runs
    the oldest itself, so a loop that never reads cannot trace ahead without bound. The worker
    is kept from starting any job here, so without the bound every step would stay queued."""
    from lazydev.runtime import queue as Q
    lazydev.wait()
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)
    monkeypatch.setattr(lazydev.config, "max_queued_steps", keep)
    x0 = torch.randn(1 << 14, generator=torch.Generator().manual_seed(0))
    x, want = x0.to("wse"), x0
    unfinished = []
    for _ in range(8):
        x, want = torch.sin(x) * 0.5 + 1.0, torch.sin(want) * 0.5 + 1.0
        lazydev.mark_step()
        unfinished.append(sum(not t.done.is_set() for t in Q.EXEC._inflight))
    assert max(unfinished) == keep and unfinished[-1] == keep
    assert_same(x, want)


def test_a_failed_step_is_reported_within_the_queue_bound(monkeypatch):
    """A step failing on the device raises at a mark_step at most max_queued_steps later, with
    a note saying how many queued programs were cancelled; the loop then goes on as usual. The
    failure waited for the backlog to grow, which the worker, running the cancelled programs at
    once, kept empty: steps 5 to 11 were dropped and the error came at step 11 or the last
    read, depending on timing."""
    monkeypatch.setattr(lazydev.config, "max_queued_steps", 2)
    p = torch.zeros(1, device="wse")
    table = torch.arange(10.0, device="wse")
    lazydev.mark_step()
    raised = []
    for i in range(12):
        try:
            p.add_(1)
            p.add_(table[torch.tensor([11 if i == 4 else 3], device="wse")] * 0)
            lazydev.mark_step()
        except IndexError as e:
            raised.append((i, e))
    (at, error), = raised
    assert 4 <= at <= 4 + 2
    lost = at - 4          # the steps queued behind the failed one, cancelled
    if lost:
        assert f"{'the program' if lost == 1 else f'the {lost} programs'} queued after it" \
            in " ".join(error.__notes__)
    assert p.item() == 12 - 1 - lost


def test_only_the_programs_run_last_keep_their_arenas():
    """Each shape's program kept its arena for the life of the process: device memory grew
    with the number of shapes a loop met (Note [Arenas of idle programs])."""
    from lazydev import compile as lzc
    w = torch.randn(64, 64, device="wse")
    for n in range(1, 3 * lzc.ARENAS_KEPT):
        x = torch.randn(n * 4, 64, device="wse")
        ((x @ w).relu() @ w).sum().item()
    lazydev.wait()
    with_arena = [c for c in lzc._programs.values() if c.arena is not None]
    assert 0 < len(with_arena) <= lzc.ARENAS_KEPT
    again = torch.randn(4, 64, device="wse")            # the first shape: its arena again
    torch.testing.assert_close(((again @ w).relu() @ w).sum().cpu(),
                               ((again.cpu() @ w.cpu()).relu() @ w.cpu()).sum())


def test_results_kept_after_their_step_do_not_hold_its_graph():
    """Note [Value caches]: a tensor's cached node reached its whole step's IR. An evaluation
    loop appending each batch's result (and a view of it) to a list, read at the end, held 73
    nodes a batch; losses.append(loss) after loss.item() held 50 KB a step for 320 ops."""
    import _lazydev_node
    w = torch.randn(8, 8, device="wse")
    kept, losses, expected = [], [], []

    def step(i):
        y = torch.tanh(w @ w * (1.0 + i / 64))
        kept.extend([y.sum(1), y[2:, 1:]])
        loss = y.sum()
        lazydev.mark_step()
        losses.append(loss)
        loss.item()
        y_cpu = torch.tanh(w.cpu() @ w.cpu() * (1.0 + i / 64))
        expected.extend([y_cpu.sum(1), y_cpu[2:, 1:]])

    for i in range(3):
        step(i)
    gc.collect()
    lazydev.wait()
    before = _lazydev_node.live()
    for i in range(3, 23):
        step(i)
    gc.collect()
    lazydev.wait()
    assert _lazydev_node.live() - before < 20       # 20 steps' graphs held 400 more
    for got, want in zip(kept, expected):
        assert_same(got, want)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals reach the main thread only")
def test_ctrl_c_while_the_host_runs_a_program_raises_there_and_keeps_its_results():
    """A SIGINT arriving while the host ran a queued program (waiting in .item()) was caught
    as the program's failure: .item() returned, the interrupt came at a later read, and the
    finished program's writes were rolled back (acc lost its update)."""
    import signal
    torch.manual_seed(0)
    z = torch.randn(1500, 1500)
    zw = z.to("wse")
    acc = torch.zeros(3, device="wse")
    lazydev.mark_step()
    lazydev.wait()
    w = zw
    for _ in range(8):                      # a program of a second or more
        w = (w @ zw) / 1500 ** 0.5
    s = w.sum()
    acc.add_(1)
    lazydev.mark_step()
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            s.item()
            time.sleep(5)                   # a late interrupt comes here, not at a later read
    finally:
        timer.cancel()
    assert_same(acc.cpu(), torch.ones(3))
    want = z
    for _ in range(8):
        want = (want @ z) / 1500 ** 0.5
    assert s.item() == pytest.approx(want.sum().item(), rel=1e-3, abs=1e-2)


@pytest.mark.parametrize("where", ["_donations", "run", "materialise"])
def test_ctrl_c_while_a_step_is_queued_loses_none_of_its_values(monkeypatch, where):
    """Note [Ctrl-C while a step is queued]: a SIGINT between queueing a step's program and
    binding its storages to their new buffers lost the step's values (tensors made in it raised
    ValueLost or 'never written' ever after). It is raised once the step is queued whole. One
    before the program is found (while donations are counted) left the trace broken (an
    IndexError at the next step): the step stays recorded, as when compiling."""
    import signal
    from lazydev import compile as C
    from lazydev.trace import sync
    from lazydev.trace.state import Storage
    a = torch.arange(6.0, device="wse")
    lazydev.mark_step()
    b, c, d = a * 2, a + 1, a.exp()
    owner = {"_donations": sync, "run": C, "materialise": Storage}[where]
    real = getattr(owner, where)

    def interrupted(*args):
        os.kill(os.getpid(), signal.SIGINT)      # Python raises it at its next line
        return real(*args)
    monkeypatch.setattr(owner, where, interrupted)
    with pytest.raises(KeyboardInterrupt):
        lazydev.mark_step()
    monkeypatch.undo()
    assert_same((b, c, d), (torch.arange(6.0) * 2, torch.arange(6.0) + 1, torch.arange(6.0).exp()))


def test_ctrl_c_as_the_host_claims_a_job_neither_loses_nor_hangs_it(monkeypatch):
    """Note [A claimed job runs]: a SIGINT after the host took a job off the queue and before
    it ran it left the job in no one's hands and the queue busy: every later read hung."""
    import signal
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)       # the worker never gets there first
    a = torch.arange(6.0, device="wse")
    lazydev.mark_step()
    lazydev.wait()
    c = (a * 3).sum()
    lazydev.mark_step()
    real = Q.ExecQueue._claim

    def claim(self, host):
        got = real(self, host)
        if host and isinstance(got, list):
            os.kill(os.getpid(), signal.SIGINT)       # Python raises it at its next line
        return got
    monkeypatch.setattr(Q.ExecQueue, "_claim", claim)
    with pytest.raises(KeyboardInterrupt):
        c.item()
    monkeypatch.setattr(Q.ExecQueue, "_claim", real)
    read = {}
    reader = threading.Thread(target=lambda: read.update(c=c.item()), daemon=True)
    reader.start()
    reader.join(60)
    assert read == {"c": 45.0}
    d = (a + 1).sum()
    lazydev.mark_step()
    assert d.item() == 21.0
