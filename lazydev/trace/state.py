"""Storages, the current trace, and the live-tensor registry.

Note [Storage and value semantics]
Every wse tensor is a view (size, stride, offset) of a Storage, and all aliases of one storage
share it. A storage's value is either materialised (`buf`, a device buffer) or pending (`node`, an
IR node with the storage's numel elements in row-major order). Reading a tensor derives its node
from the storage value; writing a tensor (any in-place op, through any view) replaces the
storage's value with a new node, so aliases see the write, exactly as on CPU, while the IR stays
purely functional. Device buffers are never written after they are produced, so two storages may
share one buffer safely; the one exception is a buffer only its own storage holds, which the
program computing that storage's new value may overwrite (Note [Donation], compile/program.py).

Every storage with a pending value is in the live registry (weakly: a dead temporary is not
computed). A sync computes all of them at once, so nothing is computed twice.
"""
from __future__ import annotations

import functools
import itertools
import threading
import weakref

import torch

from ..config import watch as _watch_config
from .ir import Node, Op, local_key

_serials = itertools.count()
_new_object = object.__new__
# Enum members cost a tenth of a microsecond per `Op.X` on Python 3.11: the recording path's
# own ops are read once, here.
_DATA, _RESHAPE, _SCALAR, _AS_STRIDED = Op.DATA, Op.RESHAPE, Op.SCALAR, Op.AS_STRIDED


class Trace:
    """The graph being recorded: its input buffers and runtime scalars, by slot."""

    _ids = itertools.count()

    def __init__(self):
        self.id = next(Trace._ids)
        self.inputs: list = []          # device buffers, by DATA slot
        self.origins: list = []         # per DATA slot: user source line of its upload, if known
        self.scalars: list = []         # Python floats, by SCALAR slot
        self.shared_scalars = None      # while a _foreach_ call records: Note [Shared scalars]
        self.windows = 0                # DATA slots that are windows (Note [Windows])
        self.live: dict = {}            # serial -> weakref to a pending Storage (may be dead)
        self.keep: list = []            # storages computed at the next sync even if unreferenced
        self.ranges: dict = {}          # checks.in_range's checks made in this trace
        self.nodes = 0                  # ops dispatched
        self.writes = 0                 # pending values created (for the runaway-trace guard)
        self.guard_at = _guard_threshold(0)
        self.next_write = None          # called at the next pending value (call_at_next_write)


def _guard_threshold(writes: int) -> int:
    from ..config import config
    return config.trace_warn_ops if writes < config.trace_warn_ops else config.trace_max_ops


def _guard_changed(name: str) -> None:
    """lazydev.config(trace_warn_ops=...) applies to the trace being recorded: its threshold
    was fixed when it began (set right after import, a loop with no mark_step was neither
    warned about nor cut). One past it warns (or is cut) at its next write."""
    if name in ("trace_warn_ops", "trace_max_ops"):
        from ..config import config
        tr = _current
        tr.guard_at = min(config.trace_warn_ops,
                          tr.writes + 1 if tr.next_write is not None else 1 << 62)


_warned_runaway = set()
cut_hook = None     # set by trace/sync.py: cut the trace (state cannot import sync)


def call_at_next_write(fn) -> None:
    """Call `fn` when the current trace next gets a pending value: when the host turns to
    tracing (Note [Release when tracing] in runtime/queue.py). It rides on the runaway guard's
    threshold, so recording pays nothing for it."""
    tr = _current
    tr.next_write = fn
    tr.guard_at = min(tr.guard_at, tr.writes + 1)


def at_threshold(tr) -> None:
    """tr.writes reached tr.guard_at: the call waiting for this write, then the runaway guard
    if the trace really is that long."""
    fn, tr.next_write = tr.next_write, None
    if fn is not None:
        tr.guard_at = _guard_threshold(tr.writes)
        fn()
        if tr.writes < tr.guard_at:
            return
    runaway_guard(tr)


def runaway_guard(tr) -> None:
    """A trace that grows without a sync: warn once at the soft bound (with the line where it
    grows), cut it at the hard bound."""
    import warnings
    from ..config import config
    from ..log import user_frame
    where = user_frame()
    if tr.writes >= config.trace_max_ops and cut_hook is not None:
        tr.guard_at = 1 << 62
        cut_hook("runaway_trace")
        return
    if where not in _warned_runaway:
        _warned_runaway.add(where)
        warnings.warn(f"lazydev: {tr.writes} ops recorded without a sync (growing at {where}); "
                      "call lazydev.mark_step() once per step. The trace is cut at "
                      f"{config.trace_max_ops} ops.", stacklevel=2)
    tr.guard_at = config.trace_max_ops


# Note [One recorder at a time]
# The current trace, its live registry and every storage are shared by all Python threads (one
# trace per device, as in Lazy Tensor Core), and recording one op is many Python steps, between
# any two of which the GIL may pass to another thread: a loader thread normalising batches on
# wse while the main thread traced got its nodes into a trace that mark_step had already cut
# (IndexError in the compiled graph's inputs). So every entry from user code holds RECORDING:
# each aten op (WseTensor.__torch_dispatch__), the factory kernels, syncs, waits and reads.
# It is re-entrant, for the ops an op dispatches. The queue's worker only runs programs and
# never takes it; a thread holding it may wait for the worker, never the other way round.
RECORDING = threading.RLock()


def recorder(fn):
    """`fn` holding RECORDING (Note [One recorder at a time]): an entry from user code."""
    @functools.wraps(fn)
    def entry(*args, **kwargs):
        with RECORDING:
            return fn(*args, **kwargs)
    return entry


_current = Trace()
_watch_config(_guard_changed)
# Set while tensor/replay.py lowers an op on placeholders: a lowering that syncs, uploads or
# downloads is not a pure function of its arguments' metadata and must not become a plan.
building_plan = False


class NotPure(Exception):
    """Raised when an impure action happens while a replay plan is being built."""


def check_pure() -> None:
    if building_plan:
        raise NotPure


def current() -> Trace:
    return _current


def new_trace() -> Trace:
    global _current
    _current = Trace()
    return _current


def resume(tr: Trace) -> None:
    """Make `tr`, cut by a sync that failed before it ran, current again."""
    global _current
    _current = tr


class ValueLost(RuntimeError):
    pass


def lost(error: str) -> ValueLost:
    """The error for reading a value its failed step never computed (a failed run rolls back
    every storage that had a value before it, sync._raise_failures; one made in it has none)."""
    return ValueLost(
        f"this wse tensor has no value: the step that computed it failed ({error}), and it was "
        "made in that step, so there is no earlier value to go back to. Write all of it "
        "(t.zero_(), t.copy_(src)) or make it again; for an optimizer's state made in that "
        "step, del optimizer.state[param]")


class Storage:
    """The shared value behind a tensor and its views (Note [Storage and value semantics])."""

    __slots__ = ("numel", "dtype", "buf", "node", "serial", "version", "error", "origin",
                 "_slot_trace", "_slot", "_data_nodes", "_wref", "__weakref__")

    def __init__(self, numel: int, dtype: torch.dtype, buf=None, node: Node | None = None):
        self.numel = numel
        self.dtype = dtype
        self.buf = buf
        self.node = None
        self.serial = next(_serials)
        self.version = 0
        self.error = None
        self.origin = None          # where the user uploaded it (for recompile reasons)
        self._slot_trace = -1
        self._slot = -1
        self._data_nodes = None
        self._wref = None
        if node is not None:
            self.set_node(node)

    @classmethod
    def pending(cls, numel: int, node: Node) -> "Storage":
        """A new storage holding `node` (of `numel` elements): Storage(numel, node.dtype,
        node=node) without the general constructor's branches, for every recorded op's result."""
        self = _new_object(cls)
        self.numel = numel
        self.dtype = node.dtype
        self.buf = self.error = self.origin = self._data_nodes = None
        self.node = node
        self.serial = serial = next(_serials)
        self.version = 1
        self._slot_trace = self._slot = -1
        tr = _current
        tr.live[serial] = self._wref = weakref.ref(self)
        tr.writes += 1
        if tr.writes >= tr.guard_at:
            at_threshold(tr)
        return self

    def set_node(self, node: Node) -> None:
        """Give the storage a new pending value (a write)."""
        self.node = node
        self.version += 1
        tr = _current
        ref = self._wref
        if ref is None:
            ref = self._wref = weakref.ref(self)
        tr.live[self.serial] = ref
        tr.writes += 1
        if tr.writes >= tr.guard_at:
            at_threshold(tr)

    def materialise(self, buf) -> None:
        self.buf = buf
        self.node = None
        self.version += 1

    def replace_buffer(self, buf, origin=None) -> None:
        """A whole-storage overwrite with new device data (an upload)."""
        self.buf = buf
        self.node = None
        self.error = None
        self.origin = origin
        self.version += 1
        self._slot_trace = -1       # the next read binds the new buffer to a new input slot

    def grow(self, numel: int) -> None:
        """Enlarge the storage to `numel` elements in place (resize_ growing a tensor), as a CPU
        storage grows: every alias keeps sharing it, old elements keep their values, the new
        ones are zero (PyTorch leaves them uninitialised)."""
        from .build import const         # build imports this module
        old = self.value((self.numel,))
        zero = const(0, self.dtype)
        self.numel = numel
        self.set_node(Node(Op.PAD, self.dtype, (numel,), (old, zero), ((0, numel - old.numel),)))

    def discard(self, why: str) -> None:
        """Drop a pending value no one will read (the op it was made for failed while being
        recorded): the next sync does not compute it."""
        self.node = None
        self.error = why

    def value(self, shape: tuple) -> Node:
        """The storage's current value as a node of `shape` (numel must match)."""
        node = self.node
        if node is not None:
            return node if node.shape == shape else reshape(node, shape)
        if self.buf is None and self.error is not None:
            raise lost(self.error)
        return self.data_node(shape)

    def lost(self) -> bool:
        """Whether the storage has no value because the step computing it failed."""
        return self.node is None and self.buf is None and self.error is not None

    def window(self, offset: int, extent: int) -> Node:
        """The `extent` elements of the storage's buffer from element `offset` on, as a DATA
        node of a slot of its own, bound to that part of the buffer (Note [Windows]). Two
        windows at one offset get two slots: merged, the graph's structure would depend on
        whether two offsets happened to meet (data[i] + data[j])."""
        item = self.dtype.itemsize
        _current.windows += 1
        slot = self._new_slot((self.buf, offset * item, extent * item))
        return Node(_DATA, self.dtype, (extent,), (), slot)

    def _new_slot(self, binding) -> int:
        """A DATA slot of the current trace bound to `binding` (this storage's buffer, or a
        window of it), with the storage's upload line for recompile reasons."""
        tr = _current
        tr.inputs.append(binding)
        tr.origins.append(self.origin)
        return len(tr.inputs) - 1

    def strided(self, size: tuple, stride: tuple, offset: int) -> Node:
        """A view of the storage's buffer read as AS_STRIDED of all of it (one spanning it
        from element 0, as x.t()), kept per view in the trace as data_node keeps a DATA node
        per shape (its keys, tuples of tuples, are no shape): F.linear makes weight.t()
        anew at every call, and building its node again cost each read 1.1 us of 3.8 (hot)."""
        base = self.data_node((self.numel,))
        key = (size, stride, offset)
        node = self._data_nodes.get(key)
        if node is None:
            node = self._data_nodes[key] = Node(_AS_STRIDED, self.dtype, size, (base,),
                                                (stride, offset))
        return node

    def data_node(self, shape: tuple) -> Node:
        tr = _current
        if self._slot_trace != tr.id:
            self._slot_trace = tr.id
            self._slot = self._new_slot(self.buf)
            self._data_nodes = {}
        node = self._data_nodes.get(shape)
        if node is None:
            node = self._data_nodes[shape] = Node(_DATA, self.dtype, shape, (), self._slot)
        return node


def reshape(node: Node, shape: tuple) -> Node:
    if node.shape == shape:
        return node
    if node.op is _RESHAPE:             # reshape of reshape: keep one
        node = node.src[0]
        if node.shape == shape:
            return node
    return Node(_RESHAPE, node.dtype, shape, (node,))


def scalar(value: float, dtype=torch.float64) -> Node:
    """A runtime scalar: its value is bound at execution, so it never changes the graph key.

    Each occurrence gets its own slot: sharing slots between equal values would make the graph's
    structure depend on values (lr == momentum in one step but not the next) and recompile."""
    tr = _current
    tr.scalars.append(float(value))
    slot = len(tr.scalars) - 1
    # Node(Op.SCALAR, dtype, (), (), slot) with its local key computed once per (dtype, slot):
    # replayed ops make tens of these a step (BatchNorm six a call).
    local = _SCALAR_KEYS.get((dtype, slot))
    if local is None:
        local = local_key(_SCALAR, dtype, (), slot)
        if slot < _SCALAR_KEYS_MAX:
            _SCALAR_KEYS[(dtype, slot)] = local
    return Node.make(_SCALAR, dtype, (), (), slot, local)


_SCALAR_KEYS: dict = {}         # (dtype, slot) -> local key of its SCALAR node
_SCALAR_KEYS_MAX = 1 << 14      # slots past this (huge traces) are not remembered


def pending_storages() -> list[Storage]:
    """Live storages with pending values, in creation order (deterministic step to step)."""
    out = [st for st in [r() for r in _current.live.values()]
           if st is not None and st.node is not None]
    out.sort(key=lambda st: st.serial)
    return out
