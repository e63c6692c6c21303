"""The wse tensor: a torch.Tensor wrapper subclass that records instead of computing.

All state lives on the object PyTorch hands back (nn.Parameter detaches, so attributes set on a
different object would be lost): `_st` (the shared Storage, trace/state.py) and `_lz_meta`
(size, stride, offset, storage numel, dtype), which the meta cache keys on.
"""
from __future__ import annotations

import torch

from ..trace import build, sync
from ..trace.ir import Node, Op
from ..trace.state import Storage, current

WSE = torch.device("wse", 0)


class WseTensor(torch.Tensor):
    @staticmethod
    def __new__(cls, storage: Storage, size, stride=None, offset=0, requires_grad=False):
        size = tuple(size)
        fresh = stride is None        # a whole new storage, row-major: the common, fast case
        stride = build.contiguous_strides(size) if fresh else tuple(stride)
        t = torch.Tensor._make_wrapper_subclass(
            cls, size, strides=stride, storage_offset=offset, dtype=storage.dtype, device=WSE,
            requires_grad=requires_grad)
        t._st = storage
        if fresh and offset == 0:
            t._lz_meta = (size, stride, 0, storage.numel, storage.dtype)
            t._lz_full = True
            t._lz_cache = None
        else:
            t._set_meta(size, stride, offset)
        return t

    def _set_meta(self, size, stride, offset):
        st = self._st
        self._lz_meta = (size, stride, offset, st.numel, st.dtype)
        numel = 1
        for d in size:
            numel *= d
        self._lz_full = offset == 0 and numel == st.numel and build.is_contiguous(size, stride)
        self._lz_cache = None

    __torch_function__ = torch._C._disabled_torch_function_impl

    # Being a "traceable wrapper subclass" makes nn.Module._apply swap converted parameters in
    # place (torch.utils.swap_tensors) instead of making new Parameter objects, which would
    # untie shared weights (a head tied to an embedding) on model.to("wse").
    def __tensor_flatten__(self):
        return [], (self._st, self._lz_meta[:3])

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        storage, (size, stride, offset) = ctx
        return WseTensor(storage, size, stride, offset)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from .dispatch import dispatch
        return dispatch(func, args, kwargs or {})

    # -- materialisation entry points that are not aten ops -------------------------------------
    def __repr__(self, *, tensor_contents=None):
        cpu = to_cpu(self, reason="print")
        contents = torch._tensor_str._tensor_str(cpu, len(f"tensor("))
        text = torch._tensor_str._str_intern(self, tensor_contents=contents)
        # PyTorch names subclasses in the prefix; a wse tensor prints as any device tensor does.
        return text.replace(f"{type(self).__name__}(", "tensor(", 1)

    def __reduce_ex__(self, protocol):
        """Pickling (torch.save) stores the values as a CPU tensor: loading gives CPU tensors,
        which `.to("wse")` or `load_state_dict` into a wse model bring back."""
        cpu = to_cpu(self, reason="save")
        if self.requires_grad:
            cpu.requires_grad_()
        return cpu.__reduce_ex__(protocol)

    def __bool__(self):
        return bool(to_cpu(self, reason="bool"))

    def tolist(self):
        return to_cpu(self, reason="tolist").tolist()

    def numpy(self, *args, **kwargs):
        raise TypeError("can't convert wse:0 device type tensor to numpy. Use Tensor.cpu() to "
                        "copy the tensor to host memory first.")


def _regrown(t: WseTensor) -> None:
    """`t` is a view of a storage that grew through an alias (resize_): refresh what `t` knows
    of the storage (its numel, and so whether `t` covers all of it)."""
    t._set_meta(*t._lz_meta[:3])


def value(t: WseTensor) -> Node:
    """The IR node for the current value of tensor `t` (derived from its storage)."""
    st = t._st
    cache = t._lz_cache
    tid = current().id
    if cache is not None and cache[0] == st.version and cache[1] == tid:
        return cache[2]
    if t._lz_meta[3] != st.numel:
        _regrown(t)
    size, stride, offset, numel, _ = t._lz_meta
    if t._lz_full:
        node = st.value(size)
    else:
        base = st.value((numel,))
        node = Node(Op.AS_STRIDED, st.dtype, size, (base,), (stride, offset))
    t._lz_cache = (st.version, tid, node)
    return node


def write(t: WseTensor, node: Node) -> None:
    """Store `node` (any shape broadcastable to t, any dtype) as the new value of `t`."""
    st = t._st
    if t._lz_meta[3] != st.numel:
        _regrown(t)
    size, stride, offset, numel, dtype = t._lz_meta
    node = build.expand(build.cast(node, dtype), size)
    if t._lz_full:
        st.set_node(node)
        return
    base = st.value((numel,))
    st.set_node(Node(Op.SCATTER_STRIDED, dtype, (numel,), (base, node), (size, stride, offset)))


_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


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


def from_node(node: Node) -> WseTensor:
    """A new tensor (with its own storage) holding `node`."""
    numel = 1
    for d in node.shape:
        numel *= d
    return WseTensor(Storage(numel, node.dtype, node=node), node.shape)


def from_cpu(cpu: torch.Tensor) -> WseTensor:
    """Upload a CPU tensor to a new materialised wse tensor."""
    buf = sync.upload(cpu)
    return WseTensor(Storage(cpu.numel(), cpu.dtype, buf=buf), tuple(cpu.shape))


def to_cpu(t: WseTensor, reason: str) -> torch.Tensor:
    """Materialise `t` (a sync if it is pending) and copy it to a new contiguous CPU tensor."""
    st = t._st
    sync.sync(reason, needed=st.node is not None or st.buf is None)
    if st.buf is None:
        raise RuntimeError(f"wse tensor has no value: {st.error or 'it was never written'}")
    flat = sync.download(st.buf, st.dtype, st.numel)
    if t._lz_meta[3] != st.numel:
        _regrown(t)
    size, stride, offset, _, _ = t._lz_meta
    if t._lz_full:
        return flat.view(size)
    return flat.as_strided(size, stride, offset).clone()
