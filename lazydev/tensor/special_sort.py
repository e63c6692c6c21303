"""Handlers for sorting/selection ops that need a value before they can be recorded.

Output sizes that depend on values (nonzero, unique, boolean-mask indexing), histc's range when
min == max, and segment_reduce's argument checks are read with one sync -- the same values the
CPU kernels read with .item() -- and the op is then recorded natively (trace/lower_sort.py,
trace/lower_segment.py). Everything computed before the sync (e.g. the sorted values unique
needs) is kept as a live tensor, so the sync materialises it and nothing is computed twice.
randint_like draws from the CPU generator, as rand_like does (tensor/special.py).
"""
from __future__ import annotations

import math

import torch

from ..trace import build, lower_segment, lower_sort, meta
from ..trace.ir import Node, Op
from .dispatch import DeviceMismatch, _node_args, lowered_op
from .fallback import fallback_op
from .special import _upload, special
from .wse_tensor import WseTensor, from_node, to_cpu, value

aten = torch.ops.aten
i64 = torch.int64


def _read(node: Node, reason: str):
    """The value of a small node on the host. A sync: nodes made before it belong to the old
    trace, so callers take value() of their tensors again afterwards."""
    return to_cpu(from_node(node), reason=reason)


def _count(mask: Node, reason: str) -> int:
    flat = build.reshape(build.cast(mask, i64), (mask.numel,))
    return int(_read(build.reduce(Op.SUM, flat, (0,), False, i64), reason).item())


# ---- data-dependent sizes ---------------------------------------------------------------------

@special(aten.nonzero.default)
def _nonzero(func, args, kwargs):
    x = value(args[0])
    count = _count(build.ew(Op.NE, torch.bool, x.shape, x, build.as_node(0, x.dtype)), "nonzero")
    return from_node(lower_sort.nonzero(value(args[0]), count))   # nodes of the new trace


@special(aten.masked_select.default)
def _masked_select(func, args, kwargs):
    x, mask = args[0], args[1]
    if mask.dtype is not torch.bool:    # (a uint8 mask counted its sum, not its nonzeros)
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    if not isinstance(x, WseTensor):
        raise DeviceMismatch.of_cpu()
    if not isinstance(mask, WseTensor):
        return fallback_op(func, args, kwargs, why="masked_select with a CPU mask")
    shape = build.broadcast_shape(x.shape, mask.shape)
    count = _count(build.expand(value(mask), shape), "masked_select")
    xs, ms = (build.expand(value(t), shape) for t in (x, mask))
    return from_node(lower_sort.compact(build.reshape(xs, (xs.numel,)), ms, count))


def _unique(names: tuple, sort: bool = True):
    """Handler of one unique overload: `names` are its arguments after self, in order."""
    def handler(func, args, kwargs):
        x, flags = args[0], dict(zip(names, args[1:]), **kwargs)
        dim = flags.get("dim")
        if dim is not None and x.numel() == 0 and x.dim() and x.shape[dim] != 0:
            return fallback_op(func, args, kwargs, why="unique of empty slices (CPU raises)")
        s, order, first = (from_node(n) for n in lower_sort.sorted_runs(value(x), sort, dim))
        count = _count(value(first), "unique") if first.numel() else 0
        values, inverse, counts = lower_sort.unique(value(s), value(order), value(first),
                                                    count, value(x), dim)
        empty = build.full(0, i64, (0,))
        out = [values, inverse if flags.get("return_inverse") else empty,
               counts if flags.get("return_counts") else empty]
        return tuple(from_node(n) for n in out[:len(func._schema.returns)])
    return handler


special(aten._unique.default)(_unique(("sorted", "return_inverse")))
special(aten._unique2.default)(_unique(("sorted", "return_inverse", "return_counts")))
special(aten.unique_dim.default)(_unique(("dim", "sorted", "return_inverse", "return_counts")))
special(aten.unique_consecutive.default)(
    _unique(("return_inverse", "return_counts", "dim"), sort=False))


# ---- boolean-mask indexing --------------------------------------------------------------------

def _is_mask(ix) -> bool:
    return isinstance(ix, torch.Tensor) and ix.dtype in (torch.bool, torch.uint8)


def _check_mask(x, mask, dim: int) -> None:
    """ATen's check that a mask's shape is that of the dims it indexes, from `dim` on."""
    for k, size in enumerate(mask.shape):
        if dim + k >= x.dim() or x.shape[dim + k] != size:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {k} does not "
                             f"match the shape of the indexed tensor {list(x.shape)} at index "
                             f"{dim + k}")


def _mask_columns(mask) -> list:
    """The long index tensors a boolean mask stands for (one per mask dim), as ATen's
    expandTensors makes them."""
    if not isinstance(mask, WseTensor):
        return list(torch.nonzero(mask.bool()).unbind(1))
    nz = value(_nonzero(None, (mask,), {}))
    count = nz.shape[0]
    return [from_node(build.reshape(lower_sort.narrow(nz, 1, k, 1), (count,)))
            for k in range(nz.shape[1])]


def _long_indices(x, indices) -> list:
    out, dim = [], 0
    for ix in indices:
        if _is_mask(ix):
            _check_mask(x, ix, dim)
            out += _mask_columns(ix)
            dim += ix.dim()
        else:
            out.append(ix)
            dim += 1
    return out


def _mask_unsupported(indices) -> bool:
    return any(_is_mask(ix) and ix.dim() == 0 for ix in indices)


@special(aten.index.Tensor)
def _index(func, args, kwargs):
    x, indices = args[0], list(args[1])
    if not any(_is_mask(ix) for ix in indices):
        return lowered_op(func, args, kwargs)
    if _mask_unsupported(indices):
        return fallback_op(func, args, kwargs, why="0-dim boolean index")
    return lowered_op(func, (x, _long_indices(x, indices)), kwargs)


@special(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(func, args, kwargs):
    x, indices, values = args[0], list(args[1]), args[2]
    accumulate = (list(args[3:]) + [kwargs.get("accumulate", False)])[0]
    _refuse_bad_indices(func, args, kwargs, x, indices)
    if not any(_is_mask(ix) for ix in indices):
        return lowered_op(func, args, kwargs)
    _no_uint8_fill(indices, values, accumulate)
    if _mask_unsupported(indices) or values.dtype != x.dtype:
        # (the CPU raises for most dtype mismatches, but not all: it decides)
        return fallback_op(func, args, kwargs, why="0-dim boolean index or another dtype")
    put = _masked_put(x, indices, values, accumulate)
    if put is not None:
        return put
    return lowered_op(func, (x, _long_indices(x, indices), values, accumulate), {})


_INDEX_DTYPES = (torch.int64, torch.int32, torch.uint8, torch.bool)


def _refuse_bad_indices(func, args, kwargs, x, indices) -> None:
    """The CPU's IndexError for indices it refuses: a float or int8 index, more indexed dims
    than x has, index shapes that do not broadcast. The lowering wrote somewhere instead (x[[1.7]]
    = v wrote row 1). The CPU is asked (cpu_error) only when one of those is suspected."""
    given = [ix for ix in indices if ix is not None]
    dims = len(indices) - len(given) + sum(
        ix.dim() if ix.dtype in (torch.bool, torch.uint8) else 1 for ix in given)
    suspect = dims > x.dim() or any(ix.dtype not in _INDEX_DTYPES for ix in given)
    if not suspect:
        try:
            torch.broadcast_shapes(*[ix.shape for ix in given
                                     if ix.dtype not in (torch.bool, torch.uint8)])
        except RuntimeError:
            suspect = True
    error = meta.cpu_error(func, args, kwargs, expand_large=False) if suspect else None
    if error is not None:
        raise error


def _no_uint8_fill(indices, values, accumulate) -> None:
    """ATen's index_put_ of one number under one mask is masked_fill_, which takes no uint8
    mask (a uint8 mask is otherwise the deprecated form of a bool one)."""
    given = [ix for ix in indices if ix is not None]
    if (not accumulate and len(given) == 1 and given[0].dtype is torch.uint8
            and values.dim() == 0):
        raise RuntimeError("masked_fill_ only supports boolean masks, but got mask with dtype "
                           "unsigned char")


def _masked_put(x, indices, values, accumulate):
    """x[..., mask] = values as a WHERE (no sync) when that is what it means: one mask after
    only full slices, values constant along the masked elements. None otherwise."""
    masks = [i for i, ix in enumerate(indices) if ix is not None]
    first = masks[0]
    mask = indices[first]
    if len(masks) != 1 or not isinstance(mask, WseTensor) or not isinstance(values, torch.Tensor):
        return None
    if not isinstance(values, WseTensor) and values.dim() != 0:
        return None
    _check_mask(x, mask, first)
    region = x.dim() - mask.dim() + 1
    at = values.dim() - (region - first)            # values' dim for the masked elements
    if values.dim() > region or (0 <= at and values.shape[at] != 1) or x.dtype.is_complex:
        return None
    v = _node_args(values)                     # a wse tensor or a 0-dim CPU scalar
    node = lower_sort.masked_put(value(x), first, value(mask), v, bool(accumulate))
    return from_node(node)


# ---- histc and segment_reduce -----------------------------------------------------------------

@special(aten.histc.default)
def _histc(func, args, kwargs):
    x = args[0]
    given = dict(zip(("bins", "min", "max"), args[1:]), **kwargs)
    bins, low, high = given.get("bins", 100), given.get("min", 0), given.get("max", 0)
    if not x.dtype.is_floating_point or bins <= 0:
        return fallback_op(func, args, kwargs, why="histc of a non-float input or no bins")
    low, high = float(low), float(high)
    if low == high and x.numel():       # the range of the data (ATen reads it with aminmax)
        flat = build.reshape(value(x), (x.numel(),))
        ends = [build.reduce(op, flat, (0,), False, x.dtype) for op in (Op.RMIN, Op.RMAX)]
        low, high = _read(Node(Op.CAT, x.dtype, (2,), tuple(build.reshape(e, (1,))
                                                           for e in ends), 0), "histc").tolist()
    if low == high:
        low, high = low - 1, high + 1
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        return fallback_op(func, (x, bins, low, high), {}, why="histc range error")
    return from_node(lower_segment.histc(value(x), bins, low, high))


@special(aten.segment_reduce.default)
def _segment_reduce(func, args, kwargs):
    """ATen reads the segment bounds on the host to check them (non-negative lengths, and
    unless unsafe=True, lengths summing to the axis size); so do we. A failed check runs the
    CPU kernel, which raises its own error."""
    data = args[0]
    lengths, offsets = kwargs.get("lengths"), kwargs.get("offsets")
    if lengths is not None or offsets is not None:
        if not _segments_ok(data, lengths, offsets, kwargs.get("unsafe", False)):
            return fallback_op(func, args, kwargs, why="segment_reduce argument check")
    return lowered_op(func, args, kwargs)


def _segments_ok(data, lengths, offsets, unsafe: bool) -> bool:
    bounds = lengths if lengths is not None else offsets
    cpu = to_cpu(bounds, reason="segment_reduce") if isinstance(bounds, WseTensor) else bounds
    if lengths is None:
        return bool((cpu.diff(dim=-1) >= 0).all())
    sums_ok = unsafe or bool((cpu.sum(-1) == data.shape[cpu.dim() - 1]).all())
    return bool((cpu >= 0).all()) and sums_ok


@special(aten.randint_like.default, aten.randint_like.low_dtype, aten.randint_like.generator,
         aten.randint_like.low_generator_dtype)
def _randint_like(func, args, kwargs):
    x = args[0]
    kw = {k: v for k, v in kwargs.items() if k in ("dtype", "generator")}
    cpu = func(torch.empty(x.shape, dtype=x.dtype, device="cpu"), *args[1:], **kw)
    device = kwargs.get("device")
    if device is not None and torch.device(device).type == "cpu":
        return cpu
    return _upload(cpu)
