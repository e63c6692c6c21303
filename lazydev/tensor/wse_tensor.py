"""The wse tensor: a torch.Tensor wrapper subclass that records instead of computing.

All state lives on the object PyTorch hands back (nn.Parameter detaches, so attributes set on a
different object would be lost): `_st` (the shared Storage, trace/state.py) and `_lz_meta`
(size, stride, offset, storage numel, dtype), which the meta cache keys on.
"""
from __future__ import annotations

import collections
import copy
import warnings
import weakref
from multiprocessing.reduction import ForkingPickler

import _lazydev_node as _native
import torch

from .. import metrics
from ..trace import build, state, sync
from ..trace.ir import Node, Op
from ..trace.meta import COMPILED
from ..trace.state import Storage

WSE = torch.device("wse", 0)
_STRIDES: dict = {}         # shape -> row-major strides
_LAZY_STATE = frozenset(("_st", "_lz_meta", "_lz_full", "_lz_cache"))   # lazydev's, per tensor
_AS_STRIDED, _SCATTER_STRIDED = Op.AS_STRIDED, Op.SCATTER_STRIDED    # see trace/state.py _DATA
_DATA = torch.Tensor.data           # torch's own .data descriptor, which WseTensor.data wraps


# The hot paths (every op's result) make tensors with `_make`: _make_wrapper_subclass's
# positional arguments (size, strides, storage offset, memory format, dtype, layout, device),
# made by the C++ side's wse_make_tensor once lazydev/__init__.py has handed it to
# set_tensor_maker (Note [Native tensor objects] in csrc/wse_hooks.cpp), else by the wrapper.
_wrapper = torch.Tensor._make_wrapper_subclass
_make = _native.make_tensor
set_tensor_maker, tensors_made = _native.set_tensor_maker, _native.tensors_made
_STRIDED = torch.strided


class WseTensor(torch.Tensor):
    """A view (size, stride, offset) of a Storage. `dtype` differs from the storage's for a
    complex tensor, whose storage holds real numbers (Note [Complex storage]), and for a view as
    another dtype of the same item size (x.view(torch.int32)), which reads the storage's bits."""

    @staticmethod
    def __new__(cls, storage: Storage, size, stride=None, offset=0, requires_grad=False,
                dtype=None):
        size = tuple(size)
        fresh = stride is None        # a whole new storage, row-major: the common, fast case
        stride = build.contiguous_strides(size) if fresh else tuple(stride)
        dtype = dtype or storage.dtype
        t = torch.Tensor._make_wrapper_subclass(
            cls, size, strides=stride, storage_offset=offset, dtype=dtype, device=WSE,
            requires_grad=requires_grad)
        t._st = storage
        if fresh and offset == 0 and dtype is storage.dtype:
            t._lz_meta = (size, stride, 0, storage.numel, dtype)
            t._lz_full = True
            t._lz_cache = None
        else:
            t._set_meta(size, stride, offset, dtype)
        return t

    @classmethod
    def fresh(cls, storage: Storage, size: tuple):
        """A row-major tensor over all of a new `storage` (the fast path of __new__)."""
        stride = _STRIDES.get(size)
        if stride is None:
            stride = _STRIDES[size] = build.contiguous_strides(size)
        t = _make(cls, size, stride, 0, None, storage.dtype, _STRIDED, WSE)
        t._st = storage
        t._lz_meta = (size, stride, 0, storage.numel, storage.dtype)
        t._lz_full = True
        t._lz_cache = None
        return t

    @staticmethod
    def view_meta(storage: Storage, size, stride, offset) -> tuple:
        """(size, stride, offset, _lz_meta, _lz_full) of a view of `storage`, for `_view`."""
        size, stride = tuple(size), tuple(stride)
        numel = 1
        for d in size:
            numel *= d
        full = offset == 0 and numel == storage.numel and build.is_contiguous(size, stride)
        return size, stride, offset, (size, stride, offset, storage.numel, storage.dtype), full

    @classmethod
    def _view(cls, storage: Storage, size, stride, offset, meta, full):
        """A view with metadata precomputed by `view_meta` (the replayed-view fast path)."""
        t = _make(cls, size, stride, offset, None, storage.dtype, _STRIDED, WSE)
        t._st = storage
        t._lz_meta = meta
        t._lz_full = full
        t._lz_cache = None
        return t

    def _set_meta(self, size, stride, offset, dtype=None):
        """Record the view; sizes, strides, offset and the storage numel are in units of the
        tensor's dtype (two reals are one complex element)."""
        st = self._st
        dtype = dtype or self._lz_meta[4]
        st_numel = st.numel // _reals_per_element(dtype) if dtype is not st.dtype else st.numel
        self._lz_meta = (size, stride, offset, st_numel, dtype)
        numel = 1
        for d in size:
            numel *= d
        self._lz_full = offset == 0 and numel == st_numel and build.is_contiguous(size, stride)
        self._lz_cache = None

    __torch_function__ = torch._C._disabled_torch_function_impl

    # Being a "traceable wrapper subclass" makes nn.Module._apply swap converted parameters in
    # place (torch.utils.swap_tensors) instead of making new Parameter objects, which would
    # untie shared weights (a head tied to an embedding) on model.to("wse"). Unflattening is
    # for PyTorch's compile stack only (Note [torch.compile on wse]).
    def __tensor_flatten__(self):
        return [], (self._st, self._lz_meta[:3], self._lz_meta[4])

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        _refuse_compile_stack()

    # __torch_dispatch__(cls, func, types, args=(), kwargs=None), in C (csrc/wse_record.c; Note
    # [Native recording] in tensor/replay.py): with a make_fx mode active, _refuse_graph_tracing
    # (Note [make_fx on wse]); then, holding RECORDING (Note [One recorder at a time]), the
    # call through its plan or view if its op's handler is one C replays (dispatch._NATIVE),
    # else tensor/dispatch.py's dispatch(func, args, kwargs or {}).
    __torch_dispatch__ = classmethod(_native.torch_dispatch)

    # -- materialisation entry points that are not aten ops -------------------------------------
    def __repr__(self, *, tensor_contents=None):
        cpu = to_cpu(self, reason="print")
        contents = torch._tensor_str._tensor_str(cpu, len("tensor("))
        text = torch._tensor_str._str_intern(self, tensor_contents=contents)
        # PyTorch names subclasses in the prefix; a wse tensor prints as any device tensor does,
        # and a Parameter as nn.Parameter's repr (it printed as "Parameter(tensor(...))")
        text = text.replace(f"{type(self).__name__}(", "tensor(", 1)
        if text.startswith("Parameter(tensor(") and text.endswith(")"):
            return "Parameter containing:\n" + text[len("Parameter("):-1]
        return text

    def __reduce_ex__(self, protocol):
        """Pickling (torch.save) stores the values as a CPU tensor: loading gives CPU tensors,
        which `.to("wse")` or `load_state_dict` into a wse model bring back. Views of one
        storage are saved as views of one CPU copy of it (so they alias again when loaded), and
        a Parameter as a Parameter; Python attributes with them, as the CPU's are kept."""
        cpu = _saved(self)
        attrs = {k: v for k, v in self.__dict__.items()
                 if k not in _LAZY_STATE and k != "_is_param"}
        if isinstance(self, torch.nn.Parameter):
            return (torch._utils._rebuild_parameter_with_state,
                    (cpu, self.requires_grad, collections.OrderedDict(), attrs))
        if self.requires_grad:
            cpu.requires_grad_()
        if attrs:       # (cpu is a view of the saved copy, a tensor of its own)
            cpu.__dict__.update(attrs)
        return cpu.__reduce_ex__(protocol)

    def as_subclass(self, cls):
        """A wse tensor's Python object is its TensorImpl's: PyTorch cannot make another one
        of another class for it ('raw Tensor object is already associated to a python object
        of type WseTensor')."""
        raise RuntimeError(
            f"a wse tensor cannot be viewed as {cls.__name__} (Tensor.as_subclass): tensor "
            "subclasses of wse tensors are not supported. Lazy modules (nn.LazyLinear, ...) are "
            "initialised by a dry run on the CPU, then moved with .to('wse')")

    def __copy__(self):
        """copy.copy as on the CPU: a leaf over this tensor's storage (it aliases), with its
        requires_grad and attributes; not the CPU copy that __reduce_ex__ makes for pickling."""
        size, stride, offset = self._lz_meta[:3]
        new = WseTensor(self._st, size, stride, offset, self.requires_grad, self.dtype)
        new.__dict__.update((k, v) for k, v in self.__dict__.items() if k not in _LAZY_STATE)
        return new

    def __deepcopy__(self, memo):
        """copy.deepcopy (of a model: an EMA copy, the best weights so far) as on the CPU: a
        copy of the whole storage, once per storage, so copies of views of one storage alias
        again; a Parameter's copy is a Parameter without grad or attributes (as
        nn.Parameter.__deepcopy__ makes), another tensor's keeps its grad and attributes.
        Recorded, not run. torch's deepcopy would also deep-copy lazydev's state from
        __dict__: TypeError on the device buffer."""
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) "
                               "support the deepcopy protocol at the moment")
        st = self._st
        copied = memo.get(id(st))
        if copied is None:
            with torch.no_grad():
                copied = WseTensor(st, (st.numel,), (1,), 0).clone()._st
            memo[id(st)] = copied
            memo.setdefault(id(memo), []).append(st)    # keep st alive: its id is a key
        size, stride, offset = self._lz_meta[:3]
        new = WseTensor(copied, size, stride, offset, self.requires_grad, self.dtype)
        memo[id(self)] = new
        if self.__dict__.get("_is_param"):     # a Parameter model.to("wse") swapped in place
            new._is_param = True
            return new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        for k, v in self.__dict__.items():
            if k not in _LAZY_STATE:
                new.__dict__[k] = copy.deepcopy(v, memo)
        return new

    # `p.data = t` (torch's set_data) copies only the C++ metadata into p: lazydev's state is on
    # the Python object, so p kept its old values (`model.weight.data = w` did nothing).
    @property
    def data(self):
        return _DATA.__get__(self)

    @data.setter
    def data(self, new):
        if not isinstance(new, WseTensor):
            what = new.device.type if isinstance(new, torch.Tensor) else type(new).__name__
            raise RuntimeError(
                f"cannot set .data of a wse tensor to a {what} tensor: move it first "
                "(`p.data = t.to('wse')`) or copy into p (`p.data.copy_(t)`)")
        _DATA.__set__(self, new)
        self._st = new._st
        self._lz_meta, self._lz_full, self._lz_cache = new._lz_meta, new._lz_full, None

    def __format__(self, spec):
        # torch.Tensor.__format__ formats a 0-d tensor's number for its own class only: a wse
        # loss in f"{loss:.4f}" raised TypeError.
        if self.dim() == 0:
            return self.detach().item().__format__(spec)
        return object.__format__(self, spec)

    def __bool__(self):
        return to_bool(self)

    def tolist(self):
        return to_cpu(self, reason="tolist").tolist()

    def numpy(self, *, force: bool = False):
        if force:                   # what force means: .detach().cpu().resolve_conj()...numpy()
            return self.detach().cpu().numpy(force=True)
        raise TypeError("can't convert wse:0 device type tensor to numpy. Use Tensor.cpu() to "
                        "copy the tensor to host memory first.")

    def __dlpack__(self, *args, **kwargs):
        """DLPack has no wse device, and a wse tensor's data pointer is not its values: the
        export made a capsule of a null pointer, and the tensor imported from it failed at its
        first use with another backend's error."""
        raise BufferError("can't export a wse:0 device type tensor through DLPack. Use "
                          "Tensor.cpu() to copy the tensor to host memory first.")

    def __dlpack_device__(self):
        self.__dlpack__()


_plain_to_dlpack = torch.utils.dlpack.to_dlpack


def to_dlpack(tensor):
    """torch.utils.dlpack.to_dlpack (and torch.to_dlpack), which do not ask __dlpack__."""
    if isinstance(tensor, WseTensor):
        tensor.__dlpack__()
    return _plain_to_dlpack(tensor)


# Note [torch.compile on wse]
# Only PyTorch's compile stack (dynamo, AOT autograd, export) unflattens a traceable wrapper
# subclass, to rebuild it around fake tensors, and a wse tensor has no inner tensors to fake:
# torch.compile(model) on a wse model failed inside dynamo (InternalTorchDynamoError: `tensor`
# needs to be a FakeTensor). lazydev records and compiles each step itself, so dynamo is told
# to leave such a frame alone (skip_frame): the compiled model runs as written, recorded as
# usual, with a warning that torch.compile adds only its own overhead here. Outside dynamo
# (export, AOT autograd on wse inputs) the same exception says why.
def _refuse_compile_stack():
    from torch._dynamo import exc
    metrics.warn_once("torch.compile", "lazydev: torch.compile leaves code that uses wse "
                      "tensors as it is (lazydev records and compiles each step itself); call "
                      "the model without torch.compile to save dynamo's overhead")
    exc.unimplemented(gb_type="wse tensor", context="",
                      explanation="lazydev records and compiles wse steps itself",
                      hints=["Call the model without torch.compile on the wse device."],
                      skip_frame=True)


# Note [make_fx on wse]
# make_fx (and what traces through it: torch.func.linearize, torch.export's non-strict mode)
# leaves an op on a tensor subclass to the subclass with its tracing mode still active, so
# lazydev's own work for the op (meta tensors to infer shapes) was traced instead of the op, and
# the graph returned the values of the first call as constants: linearize's jvp gave zeros,
# silently. A wse tensor cannot be traced into an FX graph (it holds no data a graph can name),
# so an op seen under the tracing mode says so.
_modes_active = torch._C._len_torch_dispatch_stack
_PROXY = torch._C._TorchDispatchModeKey.PROXY


def _refuse_graph_tracing(func) -> None:
    if torch._C._get_dispatch_mode(_PROXY) is not None:
        raise RuntimeError(
            f"{func} on a wse tensor under make_fx (torch.func.linearize, torch.export): wse "
            "tensors cannot be traced into an FX graph, since lazydev records and compiles wse "
            "code itself; trace the function with CPU or meta tensors, or call it on wse "
            "directly (torch.func.jvp instead of linearize)")


# Note [Complex storage]
# Complex values are never compiled, but a complex tensor and its real views (view_as_real,
# .real, .imag) must alias as on the CPU. So a complex tensor's Storage holds real numbers, two
# per element, and the tensor is a view of it in complex units; view_as_real is then an ordinary
# view of the same storage, compiled like any real tensor. value()/write() take real tensors
# only: complex writes go through write_tensor, which writes the real view.

class ComplexValue(TypeError):
    """value()/write() of a complex tensor, or of another dtype not compiled (float8, uint32):
    such values have no IR node."""

    def __init__(self, dtype):
        super().__init__(f"{dtype} values are not compiled on wse; this op cannot take them")


def _reals_per_element(dtype) -> int:
    return 2 if dtype.is_complex else 1


def real_view(t: WseTensor) -> WseTensor:
    """torch.view_as_real(t) of a complex wse tensor: a real tensor over the same storage."""
    size, stride, offset, _, _ = t._lz_meta
    return WseTensor(t._st, size + (2,), tuple(2 * s for s in stride) + (1,), 2 * offset,
                     dtype=t._st.dtype)


def write_tensor(t: WseTensor, src: WseTensor) -> None:
    """t.copy_(src) for wse tensors: src broadcast to t and cast to its dtype, complex or not."""
    if _uncompiled(t) and not t.dtype.is_complex:
        _write_on_cpu(t, src)
    elif not (t.dtype.is_complex or src.dtype.is_complex):
        write(t, value(src))
    elif not t.dtype.is_complex:
        warnings.warn("Casting complex values to real discards the imaginary part", stacklevel=3)
        pairs = value(real_view(src))
        shape = pairs.shape[:-1]
        flat = build.reshape(pairs, (pairs.numel,))
        stride = tuple(2 * s for s in build.contiguous_strides(shape))
        write(t, Node(Op.AS_STRIDED, pairs.dtype, shape, (flat,), (stride, 0)))
    elif src.dtype.is_complex:
        write(real_view(t), value(real_view(src)))
    else:                                   # a real value x is the pair (x, 0)
        x = value(src)
        x = build.reshape(build.cast(x, t._st.dtype), x.shape + (1,))
        zero = build.full(0, x.dtype, x.shape)
        pair = Node(Op.CAT, x.dtype, x.shape[:-1] + (2,), (x, zero), len(x.shape) - 1)
        write(real_view(t), pair)


def _uncompiled(t: WseTensor) -> bool:
    return t.dtype not in COMPILED or t._st.dtype not in COMPILED


def _write_on_cpu(t: WseTensor, src: WseTensor) -> None:
    """t.copy_(src) into a tensor whose values are not compiled (float8, uint32; every in-place
    op on one runs on the CPU and copies its result back here): the storage's bytes are
    updated on the CPU and uploaded again (a sync)."""
    host, view = storage_on_cpu(t, "cpu")
    view.copy_(to_cpu(src, reason="cpu"))
    t._st.replace_buffer(sync.upload(host))


def storage_on_cpu(t: WseTensor, reason: str) -> tuple:
    """(a CPU copy of all of t's storage, t's view of that copy; a sync): for a write the device
    does not make, made on the CPU on the storage's memory as it is laid out there."""
    st = t._st
    host = to_cpu(WseTensor(st, (st.numel,), (1,), 0), reason=reason)
    size, stride, offset = t._lz_meta[:3]
    return host, host.view(t.dtype).as_strided(size, stride, offset)


def _regrown(t: WseTensor) -> None:
    """`t` is a view of a storage that grew through an alias (resize_): refresh what `t` knows
    of the storage (its numel, and so whether `t` covers all of it)."""
    t._set_meta(*t._lz_meta[:3])


# Note [Value caches]
# value(t) keeps the node it made on the tensor (`_lz_cache`, valid for one storage version in
# one trace), since a view's node is new each time it is made. A node holds its whole graph, so
# a cached node of a pending value kept that step's graph alive for as long as the tensor lived
# after the sync: an evaluation loop appending each batch's argmax to a list, read at the end,
# held 73 IR nodes (11 KiB) per batch. Only nodes over buffers (DATA, windows: leaves) are kept
# now. The read that needs no cache is a tensor over all of a pending value as it is, which is
# the storage's node itself, and is checked first; a view of a pending value makes its node at
# each read (the compiler's CSE folds the copies), and a tensor written through a view as
# another dtype keeps its node until the next write (the one case where value(t) is not the
# storage's node).
def value(t: WseTensor) -> Node:
    """The IR node for the current value of tensor `t` (derived from its storage)."""
    st = t._st
    node = st.node
    meta = t._lz_meta
    if node is not None and t._lz_full and node.shape == meta[0] and meta[4] is st.dtype:
        return node
    cache = t._lz_cache
    tid = state._current.id
    if cache is not None and cache[0] == st.version and cache[1] == tid:
        return cache[2]
    if t._lz_meta[3] != st.numel:
        _regrown(t)
    size, stride, offset, numel, dtype = t._lz_meta
    if (dtype is not st.dtype and not bitcasts(dtype, st.dtype) or dtype not in COMPILED
            or st.dtype not in COMPILED):
        raise ComplexValue(t.dtype)
    if t._lz_full:
        node = st.value(size)
    else:
        node = _view_node(st, size, stride, offset, numel)
    if dtype is not st.dtype:
        node = Node(Op.BITCAST, dtype, size, (node,))
    if st.node is None:                 # Note [Value caches]
        t._lz_cache = (st.version, tid, node)
    return node


# Note [Windows]
# A view of a computed buffer was read as AS_STRIDED(the whole buffer, strides, offset), so the
# view's offset was part of the graph: a loop slicing a dataset that lives on the device,
# data[i * b:(i + 1) * b] or data[i] with a new i each step, compiled a program per step (200 ms
# each for a small model). Such a view is read instead from a window: an input slot of its own,
# bound at run time to the `extent` elements of the buffer it spans, so only the binding changes
# with the offset. Two slots then share memory; that is safe because a buffer is never written
# after it is produced, except by donation (Note [Donation] in compile/program.py), and the
# window's reference to the buffer makes it look shared, so it is not donated while a trace or
# a queued run reads it through one. A view that spans all of its buffer from element 0 (x.t())
# keeps the whole-buffer slot: it has no offset to vary, and stays donatable.
def _view_node(st: Storage, size: tuple, stride: tuple, offset: int, numel: int) -> Node:
    """The node of a view of `st`: AS_STRIDED of a window of its buffer, or of its whole
    value."""
    extent = build.extent(size, stride, offset) - offset
    part = extent > 0 and (offset != 0 or extent != numel)
    if st.node is None and st.buf is not None:      # a part of a device buffer
        if part:
            return Node(_AS_STRIDED, st.dtype, size, (st.window(offset, extent),), (stride, 0))
        return st.strided(size, stride, offset)
    if part and st.node.op is _SCATTER_STRIDED:     # Note [Reads at positions]
        return _read_at(st.value((numel,)), size, stride, offset)
    return Node(_AS_STRIDED, st.dtype, size, (st.value((numel,)),), (stride, offset))


# Note [Reads at positions]
# A storage written through a view in this step (cache[:, t] += k: SCATTER_STRIDED at a runtime
# offset, Note [Positions of writes]) and then read through another view (cache[:, t + 1] += k,
# a ring buffer's row t + 1) was read as AS_STRIDED at a constant offset, so those loops still
# compiled a program per step. Such a read is a GATHER of the flat value at positions
# offset + sum(index_k * stride_k), the offset a runtime scalar (0 too: row 0 of the ring is
# read as the other rows are). Only after a write through a view: views of other computed
# values (slices of activations) keep AS_STRIDED, which fuses as a plain strided load.
def _read_at(flat: Node, size: tuple, stride: tuple, offset: int) -> Node:
    pos = state.scalar(float(offset), torch.int64)
    for k, (n, s) in enumerate(zip(size, stride)):
        if n != 1 and s != 0:
            step = Node(Op.INDEX, torch.int64, size, (), k)
            if s != 1:
                step = build.ew(Op.MUL, torch.int64, size, step, build.const(s, torch.int64))
            pos = build.ew(Op.ADD, torch.int64, size, pos, step)
    return Node(Op.GATHER, flat.dtype, size, (flat, build.expand(pos, size)), 0)


def bitcasts(dtype: torch.dtype, stored: torch.dtype) -> bool:
    """Whether a tensor of `dtype` over a storage of `stored` reads the storage's bits as its
    own (x.view(torch.int32) of a float32 tensor): real dtypes of one item size, not bool."""
    return (dtype.itemsize == stored.itemsize and torch.bool not in (dtype, stored)
            and not (dtype.is_complex or stored.is_complex))


def write(t: WseTensor, node: Node) -> None:
    """Store `node` (any shape broadcastable to t, any dtype) as the new value of `t`."""
    st = t._st
    if t._lz_meta[3] != st.numel:
        _regrown(t)
    size, stride, offset, numel, dtype = t._lz_meta
    if (dtype is not st.dtype and not bitcasts(dtype, st.dtype) or dtype not in COMPILED
            or st.dtype not in COMPILED):
        raise ComplexValue(t.dtype)
    if node.dtype is not dtype:
        node = build.cast(node, dtype)
    if node.shape != size:
        if not broadcasts_to(node.shape, size):
            _copy_shape_error(node.shape, size)
        node = build.expand(node, size)
    seen = node                     # what value(t) would make
    if dtype is not st.dtype:       # a view as another dtype: the storage gets the bits
        node, dtype = Node(Op.BITCAST, st.dtype, size, (node,)), st.dtype
    if t._lz_full:
        st.set_node(node)
        if seen is not node:            # Note [Value caches]
            t._lz_cache = (st.version, state._current.id, seen)
        return
    base = st.value((numel,))
    at = state.scalar(float(offset), torch.int64)          # Note [Positions of writes]
    st.set_node(Node(_SCATTER_STRIDED, dtype, (numel,), (base, node, at), (size, stride, None)))


# Note [Positions of writes]
# A write through a view (cache[:, t] = k, history[step] = loss) replaces part of its storage's
# value: SCATTER_STRIDED of the view's values into the old value at the view's sizes, strides
# and offset. The offset was part of the node, so a loop writing at a new position each step (a
# static KV cache, a preallocated buffer of losses) compiled a program per step. It is a runtime
# scalar (an int64 SCALAR, the node's third source; arg's offset is None), as windows make the
# offsets of reads (Note [Windows]).
def broadcasts_to(shape: tuple, size: tuple) -> bool:
    """Whether a value of `shape` broadcasts to `size` (copy_'s rule: no new leading dims)."""
    if len(shape) > len(size):
        return False
    return all(a == b or a == 1 for a, b in zip(reversed(shape), reversed(size)))


def _copy_shape_error(shape: tuple, size: tuple):
    """Raise what the CPU raises for copying a value of `shape` into a tensor of `size`."""
    torch.empty(size, device="meta").copy_(torch.empty(shape, device="meta"))
    raise RuntimeError(f"output with shape {list(size)} doesn't match the broadcast shape "
                       f"{list(shape)}")


_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def check_in_bounds(t: WseTensor, size, stride, offset) -> None:
    """The CPU's setStorage check for a view of `t`'s storage (as_strided): a view past its
    end was made, and writing through it wrote past the device buffer (a heap corruption)."""
    if offset is None:
        offset = t.storage_offset()
    item = t.dtype.itemsize
    need = build.extent(size, stride, 0) * item
    have = t._st.numel * t._st.dtype.itemsize
    if need and need + offset * item > have:
        raise RuntimeError(
            f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, "
            f"and itemsize {item} requiring a storage size of {need + offset * item} are out "
            f"of bounds for storage of size {have}")


def restride(t: WseTensor, size, stride, offset: int) -> None:
    """Give `t` new sizes, strides and offset over its storage `t._st` (set_, resize_,
    as_strided_). PyTorch's storage of a wrapper holds no data; it only bounds the view, so when
    the new view does not fit, `t` gets a larger one. set_ runs as the CPU kernel, which only
    checks bounds and writes the metadata (its storage is large enough: nothing is allocated)."""
    size, stride = tuple(size), tuple(stride)
    storage = t.untyped_storage()
    need = build.extent(size, stride, offset) * t.dtype.itemsize
    if need > storage.nbytes():
        storage = torch.Tensor._make_wrapper_subclass(
            WseTensor, (need // t.dtype.itemsize,), dtype=t.dtype, device=WSE).untyped_storage()
    torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        _CPU_KEYS, t, storage, offset, size, stride)
    t._set_meta(size, stride, offset)


# from_node(node): a new tensor (with its own storage) holding `node`, so value(t) is st.node:
# WseTensor.fresh(Storage.pending(numel, node), node.shape), in C (csrc/wse_record.c: Note
# [Native recording] in tensor/replay.py), since every recorded op's result is made by it.
_native.setup_tensors(WseTensor, Storage, _STRIDES, WseTensor.fresh, _wrapper, WSE,
                      _STRIDED, value, write, _modes_active, _refuse_graph_tracing,
                      state.RECORDING.acquire, state.RECORDING.release)
from_node = _native.from_node


def from_cpu(cpu: torch.Tensor) -> WseTensor:
    """Upload a CPU tensor to a new materialised wse tensor."""
    if cpu.dtype.is_complex:                 # stored as real pairs (Note [Complex storage])
        real = torch.view_as_real(cpu.resolve_conj().resolve_neg().contiguous()).reshape(-1)
        storage = Storage(real.numel(), real.dtype, buf=sync.upload(real))
        return WseTensor(storage, tuple(cpu.shape), dtype=cpu.dtype)
    buf = sync.upload(cpu)
    return WseTensor(Storage(cpu.numel(), cpu.dtype, buf=buf), tuple(cpu.shape))


# Note [Sending to another process]
# multiprocessing pickles a wse tensor (a spawned Process's arguments, a Queue, a DataLoader's
# dataset sent to its workers) as pickle does, as a CPU copy (__reduce_ex__), and shares the
# copy's memory by file descriptor. For a Process's arguments the descriptor is only noted while
# pickling and passed when the child is started, after the copy, which nothing else held, had
# been freed and its descriptor closed: the child failed ("unable to resize file"). The last
# copy sent of each tensor is kept while the tensor lives (views of a storage share one copy,
# _saved).
_SENT: dict = {}       # id(tensor) -> what it was last pickled as (not a WeakKeyDictionary:
#                        its lookups compare tensors with ==, elementwise)


def reduce_for_process(t: WseTensor):
    reduced = t.__reduce_ex__(2)
    if id(t) not in _SENT:
        weakref.finalize(t, _SENT.pop, id(t), None)
    _SENT[id(t)] = reduced
    return reduced


ForkingPickler.register(WseTensor, reduce_for_process)


# wse storage -> (its version, its buffer, a weak reference to a CPU copy of all of it). The
# copy lives while a CPU tensor over it does, as torch.save keeps the storages it writes until
# it ends; so views saved in one torch.save share a copy, and nothing is kept after it.
_SAVED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@state.recorder
def _saved(t: WseTensor) -> torch.Tensor:
    """`t` on the CPU as a view, with t's sizes, strides and offset, of a copy of its whole
    storage, the same copy for every view saved while one is alive and the storage holds the
    same value: torch.save writes one storage per CPU storage, so the views alias again."""
    st = t._st
    dtype = t._lz_meta[4]
    if (dtype is not st.dtype and not bitcasts(dtype, st.dtype) and not (
            dtype.is_complex and dtype.to_real() is st.dtype)) or \
            t._lz_meta[3] * dtype.itemsize != st.numel * st.dtype.itemsize:
        return to_cpu(t, reason="save")         # a regrown storage: the values
    sync.sync("save", needed=st.node is not None or st.buf is None)
    if st.buf is None:
        _no_value(st)
    got = _SAVED.get(st)
    copy = got[2]() if got is not None and got[0] == st.version and got[1] is st.buf else None
    if copy is None:
        copy = sync.download(st.buf, st.dtype, st.numel).untyped_storage()
        _SAVED[st] = (st.version, st.buf, weakref.ref(copy))
    size, stride, offset = t._lz_meta[:3]
    # A view as another dtype views the same copy, so saving it with its base raises as on the
    # CPU ("Cannot save multiple tensors or storages that view the same data as different types")
    return torch.empty(0, dtype=dtype, device="cpu").set_(copy, offset, size, stride)


def _no_value(st) -> None:
    if st.error is not None:
        raise state.lost(st.error)
    raise RuntimeError("wse tensor has no value: it was never written")


@state.recorder
def to_item(t: WseTensor, reason: str):
    """`.item()`: a one-element tensor's value as a Python number, read from its buffer in
    place when its dtype allows (Buffer.element), else through a CPU copy."""
    st = t._st
    size, _, offset, numel, dtype = t._lz_meta
    if dtype is not st.dtype or numel != st.numel or any(n != 1 for n in size):
        return to_cpu(t, reason).item()     # complex, regrown, or not one element (raises)
    number = sync.element(_materialised(t, reason).buf, dtype, offset)
    return to_cpu(t, reason).item() if number is None else number


def to_bool(t: WseTensor) -> bool:
    """bool(t) and t.is_nonzero(): a one-element tensor's truth, read in place as .item() reads
    it (`if (x > 0).any():`); any other size raises the CPU's error."""
    if t.numel() == 1:
        return bool(to_item(t, reason="bool"))
    return to_cpu(t, reason="bool").is_nonzero()


def _materialised(t: WseTensor, reason: str) -> Storage:
    """`t`'s storage with its value in a buffer: a sync if it is pending."""
    st = t._st
    sync.sync(reason, needed=st.node is not None or st.buf is None)
    if st.buf is None:
        _no_value(st)
    # The cached node is of a trace that has been cut, and it reaches that whole graph: a
    # loss read and then kept (losses.append(loss)) held 50 KB of a 320-op step's IR.
    t._lz_cache = None
    return st


@state.recorder
def to_cpu(t: WseTensor, reason: str) -> torch.Tensor:
    """Materialise `t` (a sync if it is pending) and copy it to a new contiguous CPU tensor."""
    st = _materialised(t, reason)
    size, stride, offset, _, dtype = t._lz_meta
    if not t._lz_full and dtype is st.dtype and t._lz_meta[3] == st.numel:
        # A view reads only the span it covers: one element of a 4M-element result must not
        # copy 16 MB to the host.
        count = max(build.extent(size, stride, offset) - offset, 0)
        span = sync.download(st.buf, st.dtype, count, start=offset)
        return span.as_strided(size, stride, 0).clone()
    flat = sync.download(st.buf, st.dtype, st.numel)
    if t._lz_meta[4] is not st.dtype:
        flat = flat.view(t._lz_meta[4])      # complex pairs (Note [Complex storage])
    if t._lz_meta[3] != flat.numel():
        _regrown(t)
    size, stride, offset, _, _ = t._lz_meta
    if t._lz_full:
        return flat.view(size)
    return flat.as_strided(size, stride, offset).clone()
