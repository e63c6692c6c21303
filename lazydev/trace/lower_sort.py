"""Lowerings of sorting, selection and scatter-with-reduce ops, through a few primitives.

Note [Sorting primitives]
SORT gives the stable sorting permutation of every row (NaN largest, as PyTorch's CPU sort);
the values are a GATHER of the input with it. sort, topk, kthvalue, median, nanmedian and mode
are all a SORT and a selection of positions from it; msort, argsort and quantile are
CompositeImplicit ops that reach sort. SEARCHSORTED is a binary search per value, CUMARG the
index of the running max/min (cummax/cummin values are a GATHER with it). Ties: PyTorch's
non-stable CPU sort, topk, kthvalue and mode do not promise which of equal elements comes first;
these lowerings always answer with the stable order.

Every scatter with a reduction (scatter_reduce, index_reduce, put, histc, segment_reduce,
embedding_bag) is one SCATTER node whose reduce folds each value into the element it hits
(add, mul, max, min); `mean` is a sum divided by a scattered count, and include_self=False
first scatters the reduction's identity onto the elements hit.
"""
from __future__ import annotations

import math

import torch

from .build import as_node, cast, const, contiguous_strides, ew, expand, full
from .build import broadcast_shape, reduce, reshape, take_rows, wrap_dim
from . import checks, meta
from .ir import Node, Op
from .lower import _promoted, register, scatter

aten = torch.ops.aten
i64 = torch.int64


# ---- helpers ----------------------------------------------------------------------------------

_axis = wrap_dim


def argsort_rows(x: Node, axis: int, descending: bool = False) -> Node:
    return Node(Op.SORT, i64, x.shape, (x,), (axis, bool(descending)))


def take(x: Node, index: Node, axis: int) -> Node:
    """torch.gather(x, axis, index): the values at positions `index` along `axis`."""
    return Node(Op.GATHER, x.dtype, index.shape, (x, index), axis)


def narrow(x: Node, axis: int, start: int, length: int) -> Node:
    """x.narrow(axis, start, length), as a strided read of the flat value."""
    shape = x.shape[:axis] + (length,) + x.shape[axis + 1:]
    strides = contiguous_strides(x.shape)
    flat = reshape(x, (x.numel,))
    return Node(Op.AS_STRIDED, x.dtype, shape, (flat,), (strides, start * strides[axis]))


def _bin(op: Op, a: Node, b: Node, dtype=None) -> Node:
    shape = broadcast_shape(a.shape, b.shape)
    return ew(op, dtype or a.dtype, shape, a, b)


def _position(x: Node, axis: int) -> Node:
    return Node(Op.INDEX, i64, x.shape, (), axis)


def _selected(spec, x: Node, index: Node, axis: int):
    """(values, indices) of a selection along `axis` (index keeps the axis as size 1)."""
    values = take(x, index, axis)
    return reshape(values, spec[0].shape), reshape(index, spec[1].shape)


def _scalar_pair(x: Node):
    """(values, indices) of a selection from a 0-dim input: the element itself, index 0."""
    return x, const(0, i64)


# ---- sort and selections from it --------------------------------------------------------------

@register(aten.sort.default)
def _sort(spec, x, dim=-1, descending=False):
    if not x.shape:
        return _scalar_pair(x)
    axis = _axis(x, dim)
    idx = argsort_rows(x, axis, descending)
    return take(x, idx, axis), idx


@register(aten.sort.stable)
def _sort_stable(spec, x, *, stable=None, dim=-1, descending=False):
    return _sort(spec, x, dim, descending)


@register(aten.topk.default)
def _topk(spec, x, k, dim=-1, largest=True, sorted=True):
    if not x.shape:
        return _scalar_pair(x)      # k is 1 (the meta kernel checked it)
    axis = _axis(x, dim)
    idx = narrow(argsort_rows(x, axis, largest), axis, 0, k)
    return take(x, idx, axis), idx


@register(aten.kthvalue.default)
def _kthvalue(spec, x, k, dim=-1, keepdim=False):
    if not x.shape:
        return _scalar_pair(x)
    axis = _axis(x, dim)
    return _selected(spec, x, narrow(argsort_rows(x, axis), axis, k - 1, 1), axis)


def _median_index(x: Node, axis: int, ignore_nan: bool) -> Node:
    """Position along `axis` of the lower median (kept as a size-1 axis). As ATen's
    median_with_indices_impl: median returns the first NaN of a row that has one; nanmedian
    takes the median of the non-NaN values (NaN sorts last)."""
    n = x.shape[axis]
    order = argsort_rows(x, axis)
    if not x.dtype.is_floating_point:
        return narrow(order, axis, (n - 1) // 2, 1)
    nan = Node(Op.ISNAN, torch.bool, x.shape, (x,))
    if ignore_nan:
        count = reduce(Op.SUM, cast(nan, i64), (axis,), True, i64)
        pos = _bin(Op.FLOORDIV, _bin(Op.SUB, as_node(n - 1, i64), count), as_node(2, i64))
        pos = _bin(Op.MAX, pos, as_node(0, i64))     # an all-NaN row: ATen's (-1) / 2 == 0
        return take(order, pos, axis)
    kept = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    any_nan = reduce(Op.ANY, nan, (axis,), True, torch.bool)
    first_nan = Node(Op.ARGMAX, i64, kept, (nan,), axis)
    return ew(Op.WHERE, i64, kept, any_nan, first_nan, narrow(order, axis, (n - 1) // 2, 1))


def _nonempty(name: str, x: Node, axis: int) -> None:
    if x.shape[axis] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {axis} to have non-zero size.")


def _median_dim(ignore_nan: bool):
    def lower(spec, x, dim=-1, keepdim=False):
        if not x.shape:
            return _scalar_pair(x)
        axis = _axis(x, dim)
        _nonempty("median", x, axis)      # (nanmedian's message names median too)
        return _selected(spec, x, _median_index(x, axis, ignore_nan), axis)
    return lower


def _median_all(ignore_nan: bool):
    def lower(spec, x):
        if x.numel == 0:            # NaN, converted as x86 converts it for an integer dtype
            dt = spec.dtype
            wide = dt in (torch.int32, torch.int64)
            nan = float("nan") if dt.is_floating_point else torch.iinfo(dt).min if wide else 0
            return full(nan, dt, ())
        flat = reshape(x, (x.numel,))
        return reshape(take(flat, _median_index(flat, 0, ignore_nan), 0), ())
    return lower


register(aten.median.dim)(_median_dim(False))
register(aten.nanmedian.dim)(_median_dim(True))
register(aten.median.default)(_median_all(False))
register(aten.nanmedian.default)(_median_all(True))


@register(aten.mode.default)
def _mode(spec, x, dim=-1, keepdim=False):
    """The smallest of the most frequent values, and the last index where it occurs (ATen sorts
    each row and keeps the first longest run of equal values)."""
    if not x.shape:
        return _scalar_pair(x)
    axis = _axis(x, dim)
    _nonempty("mode", x, axis)
    n = x.shape[axis]
    order = argsort_rows(x, axis)
    s = take(x, order, axis)
    pos = _position(s, axis)
    if n == 1:
        return _selected(spec, x, order, axis)
    def shifted(start, lo, hi):     # s moved by one along the axis, padded at one end
        pads = tuple((lo, hi) if i == axis else (0, 0) for i in range(len(s.shape)))
        part = narrow(s, axis, start, n - 1)
        return Node(Op.PAD, s.dtype, s.shape, (part, as_node(0, s.dtype)), pads)
    first = _bin(Op.OR, _bin(Op.EQ, pos, as_node(0, i64), torch.bool),
                 _bin(Op.NE, s, shifted(0, 1, 0), torch.bool))
    last = _bin(Op.OR, _bin(Op.EQ, pos, as_node(n - 1, i64), torch.bool),
                _bin(Op.NE, s, shifted(1, 0, 1), torch.bool))
    starts = ew(Op.WHERE, i64, s.shape, first, pos, as_node(0, i64))
    run_start = take(starts, Node(Op.CUMARG, i64, s.shape, (starts,), (axis, True)), axis)
    length = _bin(Op.ADD, _bin(Op.SUB, pos, run_start), as_node(1, i64))
    score = ew(Op.WHERE, i64, s.shape, last, length, as_node(0, i64))
    kept = tuple(1 if i == axis else d for i, d in enumerate(s.shape))
    best = Node(Op.ARGMAX, i64, kept, (score,), axis)
    return _selected(spec, x, take(order, best, axis), axis)


# ---- searchsorted and scans -------------------------------------------------------------------

_SORTER_RANGE = checks.message(RuntimeError, "torch.searchsorted(): sorter index out of range")


@register(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def _searchsorted(spec, seq, values, *, out_int32=False, right=False, side=None, sorter=None):
    right = bool(right) or side == "right"
    dt = _promoted(seq, values)
    seq, values = cast(seq, dt), as_node(values, dt)
    if sorter is not None:
        sorter = checks.in_range(sorter, seq.shape[-1], _SORTER_RANGE)
        seq = take(seq, sorter, len(seq.shape) - 1)
    if values.numel == 0 or seq.shape[-1] == 0:
        return full(0, spec.dtype, spec.shape)
    out = Node(Op.SEARCHSORTED, i64, values.shape, (seq, values), right)
    return cast(out, spec.dtype)


@register(aten.bucketize.Tensor, aten.bucketize.Scalar)
def _bucketize(spec, values, boundaries, *, out_int32=False, right=False):
    # torch._decomp's bucketize returns zeros of the input's dtype for no boundaries (a float
    # tensor where the CPU gives int64)
    if len(boundaries.shape) != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim("
                           f"{len(boundaries.shape)})")
    return _searchsorted(spec, boundaries, values, out_int32=out_int32, right=right)


def _cumext(is_max: bool):
    def lower(spec, x, dim):
        if not x.shape:
            return _scalar_pair(x)
        axis = _axis(x, dim)
        idx = Node(Op.CUMARG, i64, x.shape, (x,), (axis, is_max))
        return take(x, idx, axis), idx
    return lower


register(aten.cummax.default)(_cumext(True))
register(aten.cummin.default)(_cumext(False))


# ---- scatter with a reduction -----------------------------------------------------------------

_REDUCE_OP = {"sum": "add", "mean": "add", "prod": "mul", "amax": "max", "amin": "min"}


def _identity(reduction: str, dtype) -> Node:
    """The value a reduction starts from (what include_self=False puts under the scatter)."""
    if reduction in ("sum", "mean"):
        return as_node(0, dtype)
    if reduction == "prod":
        return as_node(1, dtype)
    if dtype.is_floating_point:
        return as_node(float("-inf") if reduction == "amax" else float("inf"), dtype)
    if dtype is torch.bool:
        return as_node(reduction == "amin", dtype)
    info = torch.iinfo(dtype)
    return as_node(info.min if reduction == "amax" else info.max, dtype)


def scatter_reduce(x: Node, dim: int, index: Node, src: Node, reduction: str,
                   include_self: bool = True, wide: bool = False) -> Node:
    """torch.scatter_reduce(x, dim, index, src, reduction, include_self=...); `wide`: sums
    accumulate half-precision values in float32 (scatter's)."""
    if reduction not in _REDUCE_OP:
        raise ValueError(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                         f"{reduction}")
    dt = x.dtype
    src = cast(src, dt)
    base = x
    if not include_self:
        base = scatter(x, dim, index, expand(_identity(reduction, dt), index.shape))
    out = scatter(base, dim, index, src, _REDUCE_OP[reduction], wide)
    if reduction != "mean":
        return out
    count = scatter(full(int(include_self), dt, x.shape), dim, index,
                    full(1, dt, index.shape), "add")
    count = _bin(Op.MAX, count, as_node(1, dt))
    return _bin(Op.DIV if dt.is_floating_point else Op.FLOORDIV, out, count)


@register(aten.scatter_reduce.two)
def _scatter_reduce(spec, x, dim, index, src, reduce, *, include_self=True):
    reduce = meta.REDUCE_ALIASES.get(reduce, reduce)
    return scatter_reduce(cast(x, spec.dtype), dim, index, src, reduce, include_self, wide=True)


@register(aten.index_reduce.default)
def _index_reduce(spec, x, dim, index, source, reduce, *, include_self=True):
    """index_reduce is scatter_reduce with the 1-d index spread along `dim` of `source`."""
    if not source.shape:
        source = reshape(source, (1,))
    axis = _axis(source, dim)
    along = tuple(-1 if i == axis else 1 for i in range(len(source.shape)))
    idx = expand(reshape(index, tuple(index.numel if d == -1 else 1 for d in along)),
                 source.shape)
    if not x.shape:
        return reshape(scatter_reduce(reshape(x, (1,)), 0, idx, source, reduce, include_self), ())
    return scatter_reduce(cast(x, spec.dtype), axis, idx, source, reduce, include_self)


@register(aten.put.default)
def _put(spec, x, index, source, accumulate=False):
    flat = reshape(x, (x.numel,))
    k = (index.numel,)
    out = scatter(flat, 0, reshape(index, k), reshape(cast(source, x.dtype), k),
                  "add" if accumulate else None)
    return reshape(out, spec.shape)


@register(aten.take.default)
def _take(spec, x, index):
    flat = reshape(x, (x.numel,))
    return reshape(take(flat, reshape(index, (index.numel,)), 0), spec.shape)


# ---- data-dependent sizes (tensor/special_sort.py finds the size with a sync first) ------------

def compact(rows: Node, mask: Node, size: int, fill=0) -> Node:
    """The rows (values [n] or rows [n, w]) where the flat `mask` [n] is set, in order, as
    `size` rows: element j goes to row cumsum(mask)[j] - 1; rows past `size` and unset rows go
    to a dummy row that is dropped, rows nothing goes to hold `fill`."""
    n = mask.numel
    mask = reshape(cast(mask, torch.bool), (n,))
    rank = _bin(Op.SUB, Node(Op.CUMSUM, i64, (n,), (cast(mask, i64),), 0), as_node(1, i64))
    keep = _bin(Op.AND, mask, _bin(Op.LT, rank, as_node(size, i64), torch.bool))
    target = ew(Op.WHERE, i64, (n,), keep, rank, as_node(size, i64))
    if len(rows.shape) == 2:
        target = expand(reshape(target, (n, 1)), rows.shape)
    base = full(fill, rows.dtype, (size + 1,) + rows.shape[1:])
    return narrow(scatter(base, 0, target, rows), 0, 0, size)


def nonzero(x: Node, size: int, fill=0) -> Node:
    """torch.nonzero(x) given its number of nonzero elements (or nonzero_static's size)."""
    nd, n = len(x.shape), x.numel
    if nd == 0 or n == 0:
        return full(fill, i64, (size, nd))
    mask = ew(Op.NE, torch.bool, x.shape, x, as_node(0, x.dtype))
    coords = tuple(reshape(Node(Op.INDEX, i64, x.shape, (), k), (n, 1)) for k in range(nd))
    coords = coords[0] if nd == 1 else Node(Op.CAT, i64, (n, nd), coords, 1)
    return compact(coords, mask, size, fill)


@register(aten.nonzero_static.default)
def _nonzero_static(spec, x, *, size, fill_value=-1):
    return nonzero(x, size, fill_value)


_TOO_FEW = checks.message(RuntimeError, "Number of elements of source < number of ones in mask")


@register(aten.masked_scatter.default)
def _masked_scatter(spec, x, mask, source):
    """The k-th set element of the mask takes the k-th element of source (no sync: a GATHER
    at each element's rank among the set ones). The source is read one position further, after
    a zero, so unset elements read position 0 even of an empty source; a mask with more set
    elements than the source has fails the CPU's check."""
    x, mask = expand(cast(x, spec.dtype), spec.shape), expand(mask, spec.shape)
    n = x.numel
    if n == 0:
        return x
    flat = reshape(mask, (n,))
    rank = Node(Op.CUMSUM, i64, (n,), (cast(flat, i64),), 0)
    rank = ew(Op.WHERE, i64, (n,), flat, rank, as_node(0, i64))
    rank = checks.checked(rank, checks.compare(rank, Op.GT, source.numel), rank, _TOO_FEW)
    src = reshape(cast(source, spec.dtype), (source.numel,))
    src = Node(Op.PAD, spec.dtype, (source.numel + 1,), (src, as_node(0, spec.dtype)), ((1, 0),))
    picked = take(src, rank, 0)
    return ew(Op.WHERE, spec.dtype, spec.shape, mask, reshape(picked, spec.shape), x)


@register(aten.masked_scatter_backward.default)
def _masked_scatter_backward(spec, grad, mask, sizes):
    n = grad.numel
    out = compact(reshape(grad, (n,)), expand(mask, grad.shape), math.prod(spec.shape))
    return reshape(out, spec.shape)


def _as_rows(x: Node, dim):
    """x as the rows torch.unique compares: its elements [n], or its slices along `dim` [m, k]
    (dim moved to the front, the rest flattened)."""
    if dim is None:
        return reshape(x, (x.numel,))
    dim = _axis(x, dim)
    perm = (dim,) + tuple(d for d in range(len(x.shape)) if d != dim)
    moved = Node(Op.PERMUTE, x.dtype, tuple(x.shape[d] for d in perm), (x,), perm)
    return reshape(moved, (x.shape[dim], x.numel // max(x.shape[dim], 1)))


def _lexsort(rows: Node) -> Node:
    """Stable ascending permutation of rows [m] or [m, k], lexicographic over the columns: one
    stable sort per column, last column first."""
    if len(rows.shape) == 1:
        return argsort_rows(rows, 0)
    m, k = rows.shape
    order = Node(Op.INDEX, i64, (m,), (), 0)
    for c in reversed(range(k)):
        keys = take(reshape(narrow(rows, 1, c, 1), (m,)), order, 0)
        order = take(order, argsort_rows(keys, 0), 0)
    return order


def sorted_runs(x: Node, sort: bool = True, dim=None):
    """(rows of x sorted -- or as they are, for unique_consecutive --, the permutation,
    first-of-a-run flags): what torch.unique reads. NaNs never equal each other, so each is its
    own run, as on the CPU."""
    rows = _as_rows(x, dim)
    m = rows.shape[0]
    order = _lexsort(rows) if sort else Node(Op.INDEX, i64, (m,), (), 0)
    s = rows
    if sort:
        s = take_rows(rows, order)
    if m < 2:
        return s, order, full(True, torch.bool, (m,))
    pads = ((1, 0),) + ((0, 0),) * (len(s.shape) - 1)
    prev = Node(Op.PAD, s.dtype, s.shape, (narrow(s, 0, 0, m - 1), as_node(0, s.dtype)), pads)
    differs = _bin(Op.NE, s, prev, torch.bool)
    if len(s.shape) == 2:
        differs = reduce(Op.ANY, differs, (1,), False, torch.bool)
    first = _bin(Op.OR, _bin(Op.EQ, Node(Op.INDEX, i64, (m,), (), 0), as_node(0, i64),
                             torch.bool), differs)
    return s, order, first


def unique(s: Node, order: Node, first: Node, count: int, x: Node, dim=None):
    """(values, inverse, counts) of torch.unique(x, sorted=True, dim=dim) from sorted_runs and
    the number of runs."""
    m = s.shape[0]
    rank = _bin(Op.SUB, Node(Op.CUMSUM, i64, (m,), (cast(first, i64),), 0), as_node(1, i64))
    inverse = scatter(full(0, i64, (m,)), 0, order, rank)
    counts = scatter(full(0, i64, (count,)), 0, rank, full(1, i64, (m,)), "add")
    # A run's value is its first element's, as the CPU's (0.0 of 0.0, -0.0): the others are
    # put in a slot past the end (scattered by rank, the last one of a run was kept)
    slot = ew(Op.WHERE, i64, (m,), first, rank, as_node(count, i64))
    if dim is None:
        values = scatter(full(0, s.dtype, (count + 1,)), 0, slot, s)
        return narrow(values, 0, 0, count), reshape(inverse, x.shape), counts
    rows = scatter(full(0, s.dtype, (count + 1,) + s.shape[1:]), 0,
                   expand(reshape(slot, (m, 1)), s.shape), s)
    rows = narrow(rows, 0, 0, count)
    dim = _axis(x, dim)
    rest = tuple(d for i, d in enumerate(x.shape) if i != dim)
    back = tuple(range(1, dim + 1)) + (0,) + tuple(range(dim + 1, len(x.shape)))
    moved = reshape(rows, (count,) + rest)
    values = Node(Op.PERMUTE, s.dtype, tuple(moved.shape[p] for p in back), (moved,), back)
    return values, inverse, counts


def masked_put(x: Node, first: int, mask: Node, values: Node, accumulate: bool) -> Node:
    """x.index_put_((None,) * first + (mask,), values) when values do not vary along the masked
    elements (their dim for the masked elements is 1 or absent): a WHERE, no sync."""
    k = len(mask.shape)
    rest = x.shape[first + k:]
    region = x.shape[:first] + (1,) + rest
    v = expand(cast(values, x.dtype), region)
    v = expand(reshape(v, x.shape[:first] + (1,) * k + rest), x.shape)
    m = expand(reshape(cast(mask, torch.bool), (1,) * first + mask.shape + (1,) * len(rest)),
               x.shape)
    if accumulate:
        v = ew(Op.ADD, x.dtype, x.shape, x, v)
    return ew(Op.WHERE, x.dtype, x.shape, m, v, x)


from . import lower_segment  # noqa: E402,F401  (segment, bag and histc lowerings built on these)
