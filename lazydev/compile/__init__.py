"""compile/: graph -> program. Cache lookup by key; on a miss canonicalise, schedule (fuse),
plan memory, generate C, build; then run on the device runtime."""
from __future__ import annotations

import atexit
import collections
import time
import warnings

from .. import metrics
from ..log import user_stacklevel
from ..config import config
from ..runtime import Buffer, BufferWindow, Program, on_pressure, prefix_source, special_source
from ..runtime.queue import EXEC
from ..trace.ir import Node, Op
from ..trace.macro import expand_calls
from . import cache, passes
from .cexpr import CodegenUnsupported
from .program import Layout, generate

__all__ = ["program_for", "run", "bind_windows", "upload", "download", "CodegenUnsupported",
           "Compiled"]


class Compiled:
    """A loaded program and its run-time binding."""

    def __init__(self, program: Program, layout: Layout, units: list):
        self.program, self.layout, self.units = program, layout, units
        self.arena = None
        self.stats = {"hits": 0, "runs": 0, "execute_s": 0.0}

    def execute(self, inputs: list, scalars: list, context=None, donate=()) -> list:
        """Queue a run (Note [Async execution]); returns the output buffers at once, each
        carrying the ticket of this run. Buffers are allocated here, so running out of device
        memory is raised to the caller, not to the queue. `donate`: (output index, input slot)
        pairs whose input buffer the output may take over (Note [Donation])."""
        lay = self.layout
        outs = [None] * len(lay.out_nbytes)
        for i, slot in donate:
            if slot in lay.donatable.get(i, ()):
                outs[lay.out_map[i][1]] = inputs[slot]
        outs = [b if b is not None else Buffer(nb) for b, nb in zip(outs, lay.out_nbytes)]
        if self.arena is None or self.arena.nbytes < lay.arena_bytes:
            self.arena = Buffer(lay.arena_bytes)
        _keep_arena(self)
        bufs = [inputs[s] for s in lay.input_slots] + outs + [self.arena]
        job = _Job(self.program.start(bufs, scalars), self.stats, lay.forks)
        # Queued even with config.async_exec off: runs queued before it (the rest of a step
        # whose loss was read early) write what it reads, so it must run after them; the
        # caller then waits for it (trace/sync.py).
        ticket = EXEC.submit(job, context, holds=bufs)
        for b, ready in zip(outs, lay.out_ready):   # donated inputs too: a read waits
            b.ticket, b.ready = ticket, ready         # for this run (Note [Early reads])
        ins = bufs[:len(lay.input_slots)]
        return [outs[k] if kind == "new" else ins[k] for kind, k in lay.out_map]


# Note [Arenas of idle programs]
# A program's arena (the buffer its intermediates are planned into, program.plan_arena) was kept
# for the life of the process, so every shape a loop met kept one: 60 sequence lengths of a
# small two-layer step held 117 MiB of arenas beside a 1 MiB weight (device memory grew with
# the number of shapes, and a capped device ran out). Only the ARENAS_KEPT programs run last
# keep theirs between runs; another gets a new one when it runs again (one allocation). A
# queued run holds the arena it was given, so dropping the program's reference never frees it
# under a run.
ARENAS_KEPT = 8
_with_arena: collections.OrderedDict = collections.OrderedDict()    # id -> Compiled, LRU


def _keep_arena(compiled: Compiled) -> None:
    _with_arena.pop(id(compiled), None)
    _with_arena[id(compiled)] = compiled
    while len(_with_arena) > ARENAS_KEPT:
        _with_arena.popitem(last=False)[1].arena = None


class _Job:
    """A queued run: resumable on another thread (Note [Who runs a program] in
    runtime/queue.py), timed into the program's stats and the step's execute time."""

    __slots__ = ("run", "stats", "forks")

    def __init__(self, run, stats: dict, forks: bool):
        # forks: whether a call may start the OpenMP team (Note [Team hold] in runtime/queue.py)
        self.run, self.stats, self.forks = run, stats, forks

    def pause(self) -> None:
        self.run.pause()

    def reached(self, calls: int) -> bool:
        """Whether the first `calls` kernel calls have run (read while another thread runs it)."""
        return self.run.position()[0] >= calls

    def interrupted(self) -> bool:
        return self.run.interrupted()

    def resume(self, unpause: bool = False, limit_us: int = 0, until: int = 0,
               budget_us: int = 0) -> bool:
        t0 = time.perf_counter()
        try:
            return self.run.resume(unpause, limit_us, until, budget_us)
        finally:
            dt = time.perf_counter() - t0
            self.stats["execute_s"] += dt
            metrics.add_time("execute", dt)


# graph key -> Compiled, the PROGRAMS_KEPT most recently run: each keeps its .so mapped (six
# mappings, 40 KB), and a job whose shapes never settle made one per step, without bound (11,000
# reach vm.max_map_count). One dropped is unloaded once no queued run holds it; run again, it
# is a disk-cache hit.
PROGRAMS_KEPT = 512
_programs: collections.OrderedDict = collections.OrderedDict()
_structures: dict = {}     # structure hash (ops, dtypes; no shapes) -> [keys compiled, last specs]
last_compiled: dict = {}   # the last graph compiled: units, layout, outputs (lazydev.debug)


class RecompileLimitError(RuntimeError):
    pass


def _structure(order: list[Node]) -> tuple[int, list]:
    """Shape-free identity of a graph, and its inputs' (slot, shape, dtype). An input read
    with several shapes (a bias as [n] and as [1, n]) is described by its largest-rank one."""
    best: dict = {}
    for n in order:
        if n.op is Op.DATA and (n.arg not in best or len(n.shape) > len(best[n.arg][0])):
            best[n.arg] = (n.shape, n.dtype)
    specs = [(slot, shape, dt) for slot, (shape, dt) in sorted(best.items())]
    return hash(tuple((n.op, n.dtype) for n in order)), specs


def _changed(prev_specs: list, specs: list) -> list:
    """(slot, dtype, old shape, new shape) for inputs whose shape differs: why it recompiled."""
    old = {slot: shape for slot, shape, _ in prev_specs}
    return [(slot, dt, old[slot], shape) for slot, shape, dt in specs
            if slot in old and old[slot] != shape]


def _count_structure(order: list[Node], info: dict) -> None:
    """Track compiles per structure: explain, warn on churn, enforce the recompile limit."""
    structure, specs = _structure(order)
    entry = _structures.setdefault(structure, [set(), specs])
    compiled = entry[0]
    if info.get("graph_key") in compiled:
        info["changed"] = []        # a program dropped from memory (PROGRAMS_KEPT), loaded again
        return
    info["changed"] = _changed(entry[1], specs) if compiled else []
    limit = config.recompile_limit
    if limit is not None and len(compiled) >= limit:
        changes = "; ".join(f"input {s}: {list(o)} -> {list(n)}" for s, _, o, n in info["changed"])
        raise RecompileLimitError(
            f"this graph has been compiled {len(compiled)} times (recompile_limit={limit}) with "
            f"different shapes ({changes or 'shapes or constants changed'}); pad inputs to a "
            "few fixed sizes, or raise lazydev.config(recompile_limit=...); the step stays "
            "recorded, and the next mark_step() runs it")
    compiled.add(info.get("graph_key"))
    entry[1] = specs
    if len(compiled) == config.recompile_warn:
        why = ("input shapes keep changing; pad inputs to a few bucket sizes on the CPU before "
               "moving them (lazydev.pad_to_bucket), or keep a sequence that grows on the "
               "device in a buffer of its final size written at a position (buf[:, t] = x), so "
               "that programs are reused") if info["changed"] else (
            "a constant compiled into it keeps changing while no input shape does: an int that "
            "is part of the graph, such as the position of a write (cache[:, t] = v), a slice "
            "of a value computed in the step, an int divisor or shift of an integer op, or the "
            "size of a data-dependent result (x[mask], nonzero, unique); write at a position "
            "held in a wse tensor (cache.index_copy_(1, t_tensor, v)), pass the number as a "
            "0-d tensor, or keep sizes fixed (torch.where(mask, x, 0), nonzero_static)")
        warnings.warn(f"lazydev: one graph structure has been compiled {len(compiled)} times "
                      f"because {why}", stacklevel=user_stacklevel())


def compile_graph(outputs: list[Node], info: dict) -> tuple[Compiled, bool]:
    """Pipeline on a miss. Returns the compiled program and whether gcc ran."""
    outs = expand_calls(outputs)               # macros recorded as CALL nodes -> their nodes
    outs = passes.canonicalise(outs)           # fold movement, CSE
    order, realized = passes.schedule(outs)    # choose buffers; the rest fuses inline
    passes.check(order, "schedule")
    _count_structure(order, info)              # recompile reasons and limits
    units, layout = generate(outs, order, realized, prefix_source(),  # memory plan + C
                             special_source())
    summary = {"nodes": layout.nodes, "kernels": layout.kernels, "inputs": len(layout.input_slots),
               "outputs": len(layout.out_map), "where": info.get("where")}
    program, built = cache.load_or_build(units, Program, summary)      # disk cache or gcc
    last_compiled.update(units=units, layout=layout, outputs=outs)
    return Compiled(program, layout, units), built


def program_for(outputs: list[Node], inputs: list, scalars: list, info: dict):
    """The program computing `outputs`: from the cache by graph key, or compiled."""
    key = hash(tuple([n.key for n in outputs]))
    info["graph_key"] = f"{key & 0xFFFFFFFFFFFF:012x}"
    compiled = _programs.get(key)
    if compiled is None:
        metrics.count("cache_misses")
        t0 = time.perf_counter()
        compiled, built = compile_graph(outputs, info)
        dt = time.perf_counter() - t0
        metrics.add_time("compile", dt)
        metrics.count("compilations" if built else "disk_cache_hits")
        info.update(cache="miss" if built else "disk hit", compile_s=dt)
        compiled.stats.update(key=info["graph_key"], compile_s=dt, source=info["cache"],
                              where=info.get("where"))
        held = [inputs[s] for s in compiled.layout.input_slots]
        # ids are safe: last_compiled holds the buffers. A set, since every step asks about
        # each buffer it may donate (a scan of the list cost a transformer step 1.7 ms).
        last_compiled.update(inputs=held, input_ids=frozenset(map(id, held)),
                             scalars=list(scalars))
        _programs[key] = compiled
        if len(_programs) > PROGRAMS_KEPT:
            _programs.popitem(last=False)
    else:
        _programs.move_to_end(key)
        metrics.count("cache_hits")
        info["cache"] = "hit"
        compiled.stats["hits"] += 1
    info["nodes"], info["kernels"] = compiled.layout.nodes, compiled.layout.kernels
    return compiled


def run(compiled, inputs: list, scalars: list, info: dict, context=None,
        donate: tuple = ()) -> list:
    """Queue `compiled` (program_for's); returns one device buffer per output. `donate`:
    (output index, input slot) pairs whose input buffers nothing else holds (Note [Donation])."""
    t0 = time.perf_counter()
    result = compiled.execute(inputs, scalars, context, donate)
    info["queue_s"] = time.perf_counter() - t0
    compiled.stats["runs"] += 1
    metrics.count("executions")
    return result


def bind_windows(inputs: list) -> list:
    """A trace's inputs with each window, (buffer, byte offset, bytes), bound to that part of
    its buffer (Note [Windows] in tensor/wse_tensor.py)."""
    return [BufferWindow(*b) if type(b) is tuple else b for b in inputs]


def is_window(buf) -> bool:
    """Whether `buf` is a window of another buffer: a program output that is one of its input
    windows (a clone of a slice) is that window, and its memory is part of the other buffer's,
    which other tensors may read, so it is never donated (Note [Donation])."""
    return type(buf) is BufferWindow


def references(buffers: list) -> list:
    """Per buffer, the references to it outside `buffers` and the queued runs, which finish
    before any program queued after them (Note [Donation])."""
    return EXEC.references(buffers)


def _drop_debug_inputs() -> None:
    """Free what only lazydev.debug held: the device needs the memory (a tensor the user deleted
    stays an input of the last graph compiled while steps hit the cache)."""
    last_compiled.pop("inputs", None)
    last_compiled.pop("input_ids", None)


on_pressure(_drop_debug_inputs)


def held_for_debug(buf) -> bool:
    """Whether lazydev.debug keeps `buf` as an input of the last compiled graph (so its values
    must stay as they were: it is never donated, Note [Donation])."""
    return id(buf) in last_compiled.get("input_ids", ())


def programs() -> list[dict]:
    """Per program compiled in this process: key, where it was first cut, nodes, kernels,
    compile time, cache hits, runs, execute time (the compile-cache table)."""
    return [dict(c.stats, nodes=c.layout.nodes, kernels=c.layout.kernels)
            for c in _programs.values()]


@atexit.register
def _persist() -> None:
    c = metrics.counters()
    try:
        cache.persist_stats(c["cache_hits"], c["compilations"], c["disk_cache_hits"])
    except OSError:
        pass


def upload(cpu_tensor) -> Buffer:
    t0 = time.perf_counter()
    buf = Buffer.from_tensor(cpu_tensor)
    metrics.add_time("transfer", time.perf_counter() - t0)
    metrics.count("bytes_to_device", buf.nbytes)
    return buf


def wait(buf: Buffer | None = None) -> list:
    """Wait until `buf` (or all queued work) is written; returns failed/cancelled tickets."""
    if buf is None:
        return EXEC.wait()
    ticket = buf.ticket
    if ticket is None:
        return []
    failed = EXEC.wait(ticket, buf.ready)
    if ticket.error is None and ticket.done.is_set():
        buf.ticket = None          # final: later reads need not wait
    return failed


def release_due() -> bool:
    """Whether the last wait left work for the queue's worker, which the host's idle OpenMP
    team would keep off the other core (Note [Release when tracing] in runtime/queue.py)."""
    return EXEC.release_due()


def leave_to_worker() -> None:
    """Called when the host turns to tracing: ends its idle team if work is left."""
    EXEC.leave_to_worker()


def throttle(keep: int) -> list:
    """Wait until at most `keep` queued runs are unfinished (Note [Bounded queue] in
    trace/sync.py); returns failed/cancelled tickets, as `wait` does. A failure already known
    is reported at once, whatever the backlog: the queue cancels every program after a failed
    one until it is reported, and the worker runs cancelled ones at once, so waiting for the
    backlog to grow let a failure go unreported for as long as timing allowed (steps 5 to 11 of
    a loop dropped, the error at step 11 or at the last read)."""
    if EXEC.failed():
        return EXEC.wait()
    ticket = EXEC.backlog(max(keep, 0))
    return [] if ticket is None else EXEC.wait(ticket)


def download(buf: Buffer, dtype, numel: int, start: int = 0):
    """Copy elements [start, start + numel) of a buffer to a new CPU tensor; the caller has
    waited for it (wait)."""
    t0 = time.perf_counter()
    t = buf.to_tensor(dtype, (numel,), start)
    metrics.add_time("transfer", time.perf_counter() - t0)
    metrics.count("bytes_to_host", t.numel() * t.element_size())
    return t


def element(buf: Buffer, dtype, index: int):
    """Element `index` of a buffer as a Python number (None: copy it with download); the
    caller has waited for it (wait)."""
    value = buf.element(dtype, index)
    if value is not None:
        metrics.count("bytes_to_host", dtype.itemsize)
    return value


def clear_memory_cache() -> None:
    _programs.clear()
    _with_arena.clear()
    _structures.clear()
