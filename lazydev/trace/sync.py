"""Sync points: cut the trace, compile (or hit the cache) and run it.

Every sync (mark_step, .item(), .cpu(), print, bool, a CPU fallback, a data-dependent shape)
computes every pending live tensor at once, so a later sync never recomputes a value, and then
starts a new trace. Device buffers are immutable, so results simply replace pending values.

Note [Sync ledger]
Every sync other than mark_step is implicit: the user may not know it happens, and each one
splits a step into several programs. They are counted per (reason, user source line) for the
current step and in total (metrics.ledger); strict mode raises at the first one, naming its line.
"""
from __future__ import annotations

import time
from collections import Counter

from .. import compile as _compile
from .. import interrupts, log, metrics
from ..config import config
from . import state

def upload(cpu):
    """A host -> device copy into a new buffer."""
    state.check_pure()
    return _compile.upload(cpu)


def download(buf, dtype, numel, start=0):
    """A host read of elements [start, start + numel): waits for the program writing `buf`,
    raises its error if it failed."""
    return _compile.download(_readable(buf), dtype, numel, start)


def element(buf, dtype, index):
    """A host read of element `index` as a Python number, as `download` waits; None for a
    dtype it cannot read in place (download it then)."""
    return _compile.element(_readable(buf), dtype, index)


def _readable(buf):
    """`buf` once the program writing it has run (its error raised if it failed)."""
    state.check_pure()
    _waited(_compile.wait(buf))
    return buf


@state.recorder
def wait() -> None:
    """Wait for every queued program; raise the first failure among them."""
    _waited(_compile.wait())


def _waited(failed: list) -> None:
    """After a wait: if it left work for the queue's worker, the host's next recorded value
    releases the host's team (Note [Release when tracing] in runtime/queue.py); then the
    failures it reported are raised."""
    if _compile.release_due():
        state.call_at_next_write(_compile.leave_to_worker)
    _raise_failures(failed)


def _raise_failures(failed: list) -> None:
    """Undo failed and cancelled runs, newest first, so every storage they would have written
    returns to its value before them; then raise the first real error. A new tensor whose value
    was final before the run failed keeps it: a read may already have returned it (Note [Early
    reads] in compile/passes.py), and a second read must agree."""
    if not failed:
        return
    for ticket in reversed(failed):
        for st, old, new in ticket.context or ():
            if old is None and _written(ticket, new):
                continue
            if st.buf is new:
                st.buf = old
                st.version += 1
                if old is None:
                    st.error = f"{type(failed[0].error).__name__}: {failed[0].error}"
    error = failed[0].error
    if len(failed) > 1:
        later = "the program" if len(failed) == 2 else f"the {len(failed) - 1} programs"
        error.add_note(
            f"lazydev: the program that failed was queued by an earlier mark_step, and {later} "
            f"queued after it, cancelled, undo their steps' updates too. With LAZYDEV_ASYNC=0, "
            f"mark_step raises at the step that fails.")
    raise error


def _written(ticket, buf) -> bool:
    """Whether the failed run of `ticket` had written `buf` for good before it failed."""
    job = ticket.job
    return (job is not None and buf.ticket is ticket and buf.ready is not None
            and job.reached(buf.ready))


class StrictSyncError(RuntimeError):
    pass


_step = {"start": time.perf_counter(), "compile": 0.0, "execute": 0.0, "syncs": Counter(),
         "index": 0, "transfer": 0.0}


@state.recorder
def sync(reason: str, needed: bool = True) -> None:
    """Cut the trace. needed=False is a read of values already computed: not a sync (it
    cuts nothing; a read after mark_step is the normal way to look at a loss)."""
    state.check_pure()
    if not needed:
        return
    where = log.user_frame()
    implicit = reason != "mark_step"
    if implicit:
        _note_implicit(reason, where)
    metrics.count("syncs")
    tr = state.current()
    pending = state.pending_storages()
    if pending:
        _run(pending, tr, reason, where)
    else:
        state.new_trace()
    if not implicit:
        _end_step()


def _note_implicit(reason: str, where: str) -> None:
    kind = reason.split(":")[0]
    if config.strict_syncs:
        raise StrictSyncError(
            f"implicit sync ({reason}) at {where}: strict_syncs is on, so only "
            "lazydev.mark_step() may cut the trace; move the read after mark_step() or turn "
            "strict mode off with lazydev.config(strict_syncs=False)")
    metrics.count(f"sync_{kind}")
    metrics.ledger(kind, where, _step["index"])
    _step["syncs"][(kind, where)] += 1
    log.emit("sync", f"implicit sync: [bold]{reason}[/] at [green]{where}[/]")


def _run(pending, tr, reason, where) -> None:
    info: dict = {"where": where}
    outputs = [st.node for st in pending]
    state.new_trace()            # ops recorded from here on belong to the next trace
    context = []                 # (storage, value before, value after): to undo a failed run
    try:
        donate = _donations(pending, tr)
        inputs = _compile.bind_windows(tr.inputs) if tr.windows else tr.inputs
        program = _compile.program_for(outputs, inputs, tr.scalars, info)
    except BaseException as e:
        if isinstance(e, (_compile.RecompileLimitError, KeyboardInterrupt)):
            # Refused or interrupted before anything ran: the step stays recorded, and the
            # next sync (after raising the limit) runs it; dropped, its in-place updates
            # were lost.
            state.resume(tr)
        else:
            _revert(pending, e)
        raise
    with interrupts.held():
        try:
            buffers = _compile.run(program, inputs, tr.scalars, info, context, donate)
        except BaseException as e:
            _revert(pending, e)
            raise
        for st, buf in zip(pending, buffers):
            context.append((st, st.buf, buf))
            st.materialise(buf)
    _step["compile"] += info.get("compile_s", 0.0)
    _log_cut(reason, where, len(pending), info, tr)
    _waited(_compile.throttle(config.max_queued_steps if config.async_exec else 0))


# Note [Ctrl-C while a step is queued]
# Ctrl-C while a step compiles leaves it recorded (sync._run resumes the trace). Once its program
# is found, queueing it and binding each pending storage to its new buffer is one act: a
# KeyboardInterrupt between two of those lines lost every value of the step (tensors made in it
# raised ValueLost or "never written" ever after), though the program ran or would have. So
# SIGINT is held for those lines, which take microseconds, and raised after them
# (lazydev/interrupts.py): the step is queued whole, and the interrupt reaches the user's loop.


# Note [Bounded queue]
# mark_step returns once the step's program is queued (Note [Async execution] in
# runtime/queue.py), and a queued run holds the buffers it reads and writes until it has run.
# A loop that never reads a value would then trace ahead of the device without bound: 300
# steps of the 20-op chain on 4M floats were traced in under a second, held 4.2 GB of queued
# outputs by step 250, and took 11.6 s in all, the one-thread worker running the backlog; a
# longer loop runs the device out of memory. So, as a GPU's launch queue blocks when full,
# mark_step waits (running the oldest program on the host's threads) until no more than
# config.max_queued_steps runs are unfinished: the same loop holds 50 MB and takes 4.3 s.
# Two keep the pipelining that pays, the host tracing step i + 1 while step i runs, and a
# loss read one step late.


# References to a buffer that only its storage holds: the storage and the trace's input list.
# Queued runs hold their buffers too; they run before this program, so those references do not
# count (ExecQueue.references).
_SOLE_REFS = 2


def _donations(pending, tr) -> tuple:
    """(output index, input slot) for each storage whose new value may overwrite its current
    buffer: one this trace reads and nothing else holds (no other storage, no host read, not
    lazydev.debug), apart from queued runs, which finish first (Note [Donation] in
    compile/program.py)."""
    reads = [(i, st) for i, st in enumerate(pending)
             if st.buf is not None and st._slot_trace == tr.id
             and not _compile.held_for_debug(st.buf) and not _compile.is_window(st.buf)]
    if not reads:
        return ()
    refs = _compile.references([st.buf for _, st in reads])
    return tuple((i, st._slot) for (i, st), n in zip(reads, refs) if n <= _SOLE_REFS)


def _revert(pending, error) -> None:
    """A failed graph loses no data: storages fall back to their last materialised value, and
    values that never had one remember why they are gone."""
    for st in pending:
        st.node = None
        if st.buf is None:
            st.error = f"{type(error).__name__}: {error}"


def _since(timer: float, mark: float) -> float:
    """A cumulative timer's growth since `mark`; below the mark, the timers were reset
    (metrics.reset()) in between, and all of it is this step's."""
    return timer - mark if timer >= mark else timer


def _end_step() -> None:
    """Close a step (at mark_step): record its time split and warn if tracing dominates."""
    now = time.perf_counter()
    timings = metrics.timings()
    transfer = timings.get("transfer", 0.0)
    executed = timings.get("execute", 0.0)
    _step["execute"] = _since(executed, _step.get("execute_mark", 0.0))
    _step["execute_mark"] = executed
    total = now - _step["start"]
    record = {"step": _step["index"], "total_s": total, "compile_s": _step["compile"],
              "execute_s": _step["execute"], "transfer_s": _since(transfer, _step["transfer"]),
              "implicit_syncs": sum(_step["syncs"].values())}
    record["trace_s"] = max(0.0, total - record["compile_s"] - record["execute_s"]
                            - record["transfer_s"])
    metrics.step(record)
    tracing_bound = record["trace_s"] > max(record["execute_s"], 1e-3)
    if _step["index"] >= 2 and tracing_bound and record["compile_s"] == 0:
        metrics.warn_once("tracing-bound", "lazydev: the step is tracing-bound (recording ops in "
                          f"Python took {record['trace_s'] * 1e3:.1f} ms, executing "
                          f"{record['execute_s'] * 1e3:.1f} ms); larger batches amortise it")
    _step.update(start=now, compile=0.0, syncs=Counter(), index=_step["index"] + 1,
                 transfer=transfer)


def _log_cut(reason, where, n_out, info, tr) -> None:
    if info.get("changed"):
        metrics.count("recompiles_shape")
    show_cache = log.enabled("cache") and info.get("cache") != "hit"
    if log.enabled("trace") or show_cache:
        parts = [f"cut by [bold]{reason}[/] at [green]{where}[/]", f"nodes={info.get('nodes')}",
                 f"kernels={info.get('kernels')}", f"outputs={n_out}",
                 f"graph={info.get('graph_key')}", f"cache={info.get('cache')}"]
        if "compile_s" in info:
            parts.append(f"compile={info['compile_s'] * 1e3:.1f}ms")
        parts.append(f"queued in {info.get('queue_s', 0) * 1e3:.2f}ms")
        log.emit("trace" if log.enabled("trace") else "cache", " ".join(parts))
    if show_cache and info.get("changed"):
        log.emit("cache", _recompile_tree(info, tr, where))


def _recompile_tree(info, tr, where):
    from rich.tree import Tree
    tree = Tree(f"recompiled graph {info.get('graph_key')} (cut at {where}): input shapes changed")
    for slot, dt, old, new in info["changed"]:
        origin = tr.origins[slot] if slot < len(tr.origins) else None
        dtype = str(dt).replace("torch.", "")
        tree.add(f"input {slot} ({dtype}{', from ' + origin if origin else ''}) changed shape "
                 f"{list(old)} -> {list(new)}")
    return tree


state.cut_hook = sync
