"""In-place writes to memory that several elements share, as the CPU makes them.

ATen's TensorIterator refuses most writes to a tensor whose elements share memory (an expanded
one) and writes that read another, partly overlapping view of the written memory (x.add_(x.t())):
`refused` raises its errors. A few in-place ops it lets write to an expanded tensor
(`MAY_OVERLAP`); of these, the ones that write different elements differently (a mask, an
index, a triangle) leave each shared memory location with what the CPU's element-by-element
loop left last: `on_shared_memory` runs them there.
"""
from __future__ import annotations

import functools
import math

import torch

from .. import log, metrics
from ..trace.build import extent
from .replay import may_overlap_itself, overlaps_itself
from .wse_tensor import WseTensor, from_cpu, storage_on_cpu, write_tensor

aten = torch.ops.aten

# In-place ops the CPU lets write to a tensor whose elements share memory (MAY_OVERLAP): those
# whose writes differ between elements over one location (a mask, an index, a triangle), which
# run on the CPU here; fill_ and zero_, which write one value everywhere (the device's functional
# form gets that right); and set_/resize_, which only move the view.
_ELEMENTWISE_ORDER = frozenset({
    aten.masked_fill_.Scalar, aten.masked_fill_.Tensor, aten.index_put_.default,
    aten._index_put_impl_.default, aten.index_fill_.int_Scalar, aten.index_fill_.int_Tensor,
    aten.tril_.default, aten.triu_.default, aten.baddbmm_.default})
MAY_OVERLAP = _ELEMENTWISE_ORDER | {
    aten.fill_.Scalar, aten.zero_.default, aten.resize_.default, aten.resize_as_.default,
    aten.set_.source_Tensor, aten.set_.source_Storage, aten.set_.source_Storage_storage_offset,
    aten.set_.source_Tensor_storage_offset, aten.set_.default}


def arg_at(func, pos, args, kwargs):
    """The argument at schema position `pos`, passed positionally or by name (None if absent)."""
    return args[pos] if pos < len(args) else kwargs.get(func._schema.arguments[pos].name)


def partly_overlap(a: WseTensor, b: WseTensor) -> bool:
    """ATen's get_overlap_status(a, b) == Partial for two views of one storage: both dense,
    their spans overlapping but not the same view. (Views with gaps are 'too hard' for ATen
    and pass, as here.)"""
    if a is b:
        return False
    sa, ta, oa, _, da = a._lz_meta
    sb, tb, ob, _, db = b._lz_meta
    na, nb = math.prod(sa), math.prod(sb)
    if not na or not nb or da is not db or not (_no_gaps(sa, ta) and _no_gaps(sb, tb)):
        return False
    if oa == ob and na == nb:
        return ta != tb
    return oa < ob + nb and ob < oa + na


def shares_elements(a: WseTensor, b: WseTensor) -> bool:
    """Whether views `a` and `b` of one storage, not both dense (ATen's 'too hard', which its
    pointwise ops write element by element, reading what they wrote: v[1:] = v[:-1] of a
    transposed v), have an element in common; counted exactly up to 4M elements."""
    (sa, ta, oa, _, da), (sb, tb, ob, _, db) = a._lz_meta, b._lz_meta
    if da is not db or (sa, ta, oa) == (sb, tb, ob) or (_no_gaps(sa, ta) and _no_gaps(sb, tb)):
        return False
    ea, eb = extent(sa, ta, oa), extent(sb, tb, ob)     # one past each view's last element
    if not ea or not eb or oa >= eb or ob >= ea:
        return False
    return _common((sa, ta, oa), (sb, tb, ob))


@functools.lru_cache(maxsize=256)
def _common(a: tuple, b: tuple) -> bool:
    """Whether two views' (sizes, strides, offset) reach a common element: a function of the
    views alone, kept, so a loop writing the same views pays for the count once."""
    if math.prod(a[0]) + math.prod(b[0]) > 1 << 22:
        return True
    return bool(torch.isin(_offsets(*a), _offsets(*b)).any())


def _offsets(size, stride, offset) -> torch.Tensor:
    at = torch.tensor([offset], dtype=torch.int64, device="cpu")
    for n, st in zip(size, stride):
        at = (at[:, None] + torch.arange(n, dtype=torch.int64, device="cpu") * st).reshape(-1)
    return at


def _no_gaps(size, stride) -> bool:
    """is_non_overlapping_and_dense: some order of the dims is row-major with no gaps."""
    expect = 1
    for st, n in sorted((st, n) for n, st in zip(size, stride) if n != 1):
        if st != expect:
            return False
        expect *= n
    return True


def refused(handler, positions, partial: bool, to_cpu_args):
    """An op that writes a tensor, one element of which stands for several (an expanded
    one), raises as the CPU's does: the elements would get one of several results. So does
    one (`partial`: a TensorIterator op, as the pointwise ones and copy_) that reads another
    view of the written memory, which the CPU would read half-written (x.add_(x.t())). One that
    writes a view whose elements may share memory otherwise (x.unfold(0, 2, 1).add_(1)) runs
    on the CPU, element by element as there (`on_storage`)."""
    def run(func, args, kwargs):
        if func is aten.copy_.default and len(args) > 1 and args[1] is args[0]:
            return args[0]          # ATen's copy_ returns at once (x.copy_(x) of an expanded x)
        for pos in positions:
            t = arg_at(func, pos, args, kwargs)
            if type(t) is not WseTensor:
                continue
            if may_overlap_itself(t):
                if overlaps_itself(t):
                    raise RuntimeError(
                        "unsupported operation: more than one element of the written-to tensor "
                        "refers to a single memory location. Please clone() the tensor before "
                        "performing the operation.")
                if len(positions) == 1 and t.dtype is t._st.dtype:
                    return on_storage(func, pos, args, kwargs, to_cpu_args,
                                      "its elements overlap")
            if not partial:
                continue
            others = [a for a in args if type(a) is WseTensor and a._st is t._st and a is not t]
            if any(partly_overlap(t, a) for a in others):
                raise RuntimeError(
                    "unsupported operation: some elements of the input tensor and the "
                    "written-to tensor refer to a single memory location. Please clone() the "
                    "tensor before performing the operation.")
            if len(positions) == 1 and t.dtype is t._st.dtype and any(
                    shares_elements(t, a) for a in others):
                return on_storage(func, pos, args, kwargs, to_cpu_args, "it reads what it writes")
        return handler(func, args, kwargs)
    # for foreach plans, whose element plans refuse such tensors (as dtypes.checked's does)
    run.unchecked = getattr(handler, "unchecked", handler)
    return run


def on_shared_memory(func, handler, to_cpu_args):
    """`handler`, except that a write to an expanded tensor runs on the CPU (`on_storage`):
    masked_fill_ of zeros(3).expand(2, 3) writes a location if any element over it is masked,
    index_put_ leaves each location with the last value put there. The device's functional
    form computes each element apart and keeps one element's result per location (`a[0] = v`
    was undone by row 1's old value)."""
    if func not in _ELEMENTWISE_ORDER:
        return handler
    pos = 0                             # every op in the set writes `self`

    def run(func, args, kwargs):
        t = arg_at(func, pos, args, kwargs)
        if type(t) is not WseTensor or not may_overlap_itself(t) or t.dtype is not t._st.dtype:
            return handler(func, args, kwargs)
        return on_storage(func, pos, args, kwargs, to_cpu_args, "it writes an expanded tensor")
    return run


def on_storage(func, pos, args, kwargs, to_cpu_args, why):
    """Run in-place op `func` on the CPU on a view of the whole storage of its argument `pos`,
    with that tensor's strides, so each memory location several of its elements share is left
    with what the CPU's element-by-element loop leaves last. A use PyTorch warns about or
    calls undefined, so it is a counted fallback rather than a lowering."""
    metrics.fallback(str(func))
    log.emit("fallback", f"{func} runs on the CPU ({why}) at [green]{log.user_frame()}[/]")
    t = arg_at(func, pos, args, kwargs)
    st = t._st
    cpu, view = storage_on_cpu(t, f"fallback:{func}")
    name = func._schema.arguments[pos].name

    def on_cpu(a):          # other views of the storage read the CPU's copy, as it is written
        if type(a) is WseTensor and a._st is st:
            return cpu.as_strided(tuple(a.shape), a.stride(), a.storage_offset())
        return to_cpu_args(a)
    cpu_args = tuple(view if i == pos else on_cpu(a) for i, a in enumerate(args))
    cpu_kwargs = {k: view if k == name else on_cpu(v) for k, v in kwargs.items()}
    func(*cpu_args, **cpu_kwargs)
    write_tensor(WseTensor(st, (st.numel,), (1,), 0), from_cpu(cpu))
    return t


def _written(*specs) -> dict:
    """func -> the schema position of the tensor it writes: `self` of in-place ops, `out`."""
    table = {}
    for func in specs:
        names = [a.name for a in func._schema.arguments]
        table[func] = names.index("out") if "out" in names else 0
    return table


# Ops whose kernels ATen guards with assert_no_overlap(written, input): an input sharing any
# memory with the written tensor, the same view included, is refused, not only a partial
# overlap as by TensorIterator's ops (x[[0, 1]] = x[2], x.index_copy_(0, i, x[1:2]) and
# x.scatter_(0, i, x) were computed as if the input were cloned).
_NO_OVERLAP = _written(
    aten.index_put_.default, aten._index_put_impl_.default, aten.index_copy_.default,
    aten.index_add_.default, aten.scatter_.src, aten.scatter_.reduce, aten.scatter_add_.default,
    aten.scatter_reduce_.two, aten.put_.default, aten.gather.out, aten.index_select.out,
    aten.take.out)
# ... and ones that read their input as they write, which the CPU allows: only the CPU's loop
# gives their result (x.masked_scatter_(x > 0, x) reads values it has already overwritten)
_READS_WHAT_IT_WRITES = _written(aten.masked_scatter_.default)


def no_overlap(func, handler, to_cpu_args):
    """`handler`, refusing (or running on the CPU, as ATen computes them) calls whose inputs
    share memory with the tensor written (_NO_OVERLAP, _READS_WHAT_IT_WRITES)."""
    pos = _NO_OVERLAP.get(func)
    if pos is None:
        pos = _READS_WHAT_IT_WRITES.get(func)
        if pos is None:
            return handler

    def run(func, args, kwargs):
        t = arg_at(func, pos, args, kwargs)
        if type(t) is WseTensor and t.numel():
            name = func._schema.arguments[pos].name
            inputs = [a for i, a in enumerate(args) if i != pos] + [
                v for k, v in kwargs.items() if k != name]
            for a in _tensors(inputs):
                if a._st is not t._st or not a.numel() or not _shared(t, a):
                    continue
                if func in _NO_OVERLAP and _dense(t) and _dense(a):
                    raise RuntimeError(
                        "unsupported operation: some elements of the input tensor and the "
                        "written-to tensor refer to a single memory location. Please clone() "
                        "the tensor before performing the operation.")
                return on_storage(func, pos, args, kwargs, to_cpu_args, "it reads what it writes")
        return handler(func, args, kwargs)
    return run


def _tensors(args):
    for a in args:
        if type(a) is WseTensor:
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _tensors(a)


def _dense(t: WseTensor) -> bool:
    return _no_gaps(t.shape, t.stride())


def _shared(a: WseTensor, b: WseTensor) -> bool:
    """Whether views `a` and `b` of one storage span common memory: ATen's overlap status Full
    or Partial for dense views; an element in common for others."""
    if _dense(a) and _dense(b):
        (sa, _, oa, _, _), (sb, _, ob, _, _) = a._lz_meta, b._lz_meta
        return oa < ob + math.prod(sb) and ob < oa + math.prod(sa)
    return a is b or shares_elements(a, b)
