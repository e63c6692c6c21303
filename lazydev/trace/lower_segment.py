"""Lowerings of reductions over segments, bags and bins: segment_reduce, embedding_bag, histc.

Each assigns every input position to a segment (bag, bin) -- with a SEARCHSORTED over the
segment ends, or arithmetic for histc -- and reduces with one SCATTER into a buffer with one
extra, dummy segment that collects every position belonging to none; the dummy is dropped.
The backward passes read the gradient of each position's segment with a GATHER.
"""
from __future__ import annotations

import torch

from .build import (Unsupported, as_node, broadcast_shape, cast, expand, full, opmath, reduce,
                    reshape, take_rows)
from .ir import Node, Op
from .lower import register, scatter
from .lower_sort import _bin, narrow, take

aten = torch.ops.aten
i64 = torch.int64
_FOLD = {"sum": "add", "mean": "add", "prod": "mul", "max": "max", "min": "min"}


def _where(cond: Node, a: Node, b: Node) -> Node:
    shape = broadcast_shape(cond.shape, a.shape, b.shape)
    return Node(Op.WHERE, a.dtype, shape, (expand(cond, shape), expand(a, shape), expand(b, shape)))


def _k(value, dtype) -> Node:
    return as_node(value, dtype)


def _positions(shape: tuple, axis: int) -> Node:
    return Node(Op.INDEX, i64, shape, (), axis)


def _search(ends: Node, values: Node) -> Node:
    """How many of the (sorted) `ends` of each row are <= each value: its segment."""
    return Node(Op.SEARCHSORTED, i64, values.shape, (ends, values), True)


def _with_dummy(x: Node, axis: int) -> Node:
    """x with one zero slot appended along `axis`: what a GATHER of the dummy segment reads."""
    pads = tuple((0, 1) if i == axis else (0, 0) for i in range(len(x.shape)))
    shape = tuple(d + 1 if i == axis else d for i, d in enumerate(x.shape))
    return Node(Op.PAD, x.dtype, shape, (x, _k(0, x.dtype)), pads)


# ---- segment_reduce ---------------------------------------------------------------------------

class _Segments:
    """Segment of every position of `data` along the last axis of lengths/offsets (ATen uses
    axis = lengths.dim() - 1), as `index` (data's shape; S = no segment) and per-segment
    `lengths` (outer dims + (S,))."""

    def __init__(self, data: Node, lengths, offsets):
        bounds = lengths if lengths is not None else offsets
        if data.numel == 0 or not data.dtype.is_floating_point or not bounds.shape:
            raise Unsupported("segment_reduce of empty or non-float data: CPU checks")
        self.axis = axis = len(bounds.shape) - 1
        outer, n = data.shape[:axis], data.shape[axis]
        if lengths is not None:
            lengths = cast(lengths, i64)
            ends = Node(Op.CUMSUM, i64, lengths.shape, (lengths,), axis)
            starts = _bin(Op.SUB, ends, lengths)
        else:
            s = offsets.shape[-1] - 1
            offsets = cast(offsets, i64)
            starts, ends = narrow(offsets, axis, 0, s), narrow(offsets, axis, 1, s)
            lengths = _bin(Op.SUB, ends, starts)
        self.count = count = ends.shape[-1]
        self.lengths = lengths
        pos = _positions(outer + (n,), axis)
        seg = _search(ends, pos)
        start = take(_with_dummy(starts, axis), seg, axis)
        valid = _bin(Op.AND, _bin(Op.LT, seg, _k(count, i64), torch.bool),
                     _bin(Op.LE, start, pos, torch.bool))
        seg = _where(valid, seg, _k(count, i64))
        inner = data.shape[axis + 1:]
        self.index = expand(reshape(seg, seg.shape + (1,) * len(inner)), data.shape)
        self.valid = expand(reshape(valid, valid.shape + (1,) * len(inner)), data.shape)
        self.out_shape = outer + (count,) + inner

    def fold(self, values: Node, op, init) -> Node:
        """Per-segment reduction of `values` (data's shape), starting from `init`."""
        shape = tuple(d + 1 if i == self.axis else d for i, d in enumerate(self.out_shape))
        base = full(init, values.dtype, shape)
        return narrow(scatter(base, self.axis, self.index, values, op), self.axis, 0, self.count)

    def pick(self, per_segment: Node) -> Node:
        """The value of each position's segment (0 for positions in none)."""
        return take(_with_dummy(per_segment, self.axis), self.index, self.axis)

    def per_segment_lengths(self, dtype) -> Node:
        kept = self.lengths.shape + (1,) * (len(self.out_shape) - self.axis - 1)
        return expand(reshape(cast(self.lengths, dtype), kept), self.out_shape)


def _initial(reduction: str, initial, dtype):
    if initial is not None:
        return initial
    return {"max": float("-inf"), "min": float("inf"), "prod": 1}.get(reduction, 0)


@register(aten.segment_reduce.default)
def _segment_reduce(spec, data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                    unsafe=False, initial=None):
    if indices is not None or reduce not in _FOLD or (lengths is None and offsets is None):
        raise Unsupported("segment_reduce by indices: CPU")
    seg = _Segments(data, lengths, offsets)
    dt = data.dtype
    out = seg.fold(data, _FOLD[reduce], _initial(reduce, initial, dt))
    if reduce != "mean":
        return out
    n = seg.per_segment_lengths(dt)
    divide = _bin(Op.AND, _bin(Op.GT, n, _k(0, dt), torch.bool),
                  _bin(Op.EQ, out, out, torch.bool))
    out = _where(divide, _bin(Op.DIV, out, n), out)
    if initial is None:     # an empty segment's mean is NaN
        out = _where(_bin(Op.EQ, n, _k(0, dt), torch.bool), _k(float("nan"), dt), out)
    return out


@register(aten._segment_reduce_backward.default)
def _segment_reduce_backward(spec, grad, output, data, reduce, *, lengths=None, offsets=None,
                             axis=0, initial=None):
    """ATen's _segment_reduce_cpu_backward_kernel, position by position."""
    seg = _Segments(data, lengths, offsets)
    dt = data.dtype
    zero = _k(0, dt)
    if reduce == "sum":
        g = seg.pick(grad)
    elif reduce == "mean":
        g = seg.pick(_bin(Op.DIV, grad, seg.per_segment_lengths(dt)))
    elif reduce in ("max", "min"):
        g = _extreme_grad(seg, grad, output, data)
    elif reduce == "prod":
        g = _prod_grad(seg, grad, output, data, 1 if initial is None else initial)
    else:
        raise Unsupported(f"segment_reduce backward of {reduce}")
    return _where(seg.valid, g, zero)


def _extreme_grad(seg: _Segments, grad, output, data):
    """Gradient to every element equal to its segment's max (or NaN), divided by their count
    when there are several (ATen divides only the positive ones)."""
    dt = data.dtype
    hit = _bin(Op.OR, Node(Op.ISNAN, torch.bool, data.shape, (data,)),
               _bin(Op.EQ, data, seg.pick(output), torch.bool))
    count = seg.pick(seg.fold(cast(hit, dt), "add", 0))
    g = _where(hit, seg.pick(grad), _k(0, dt))
    share = _bin(Op.AND, _bin(Op.GE, count, _k(2, dt), torch.bool),
                 _bin(Op.GT, g, _k(0, dt), torch.bool))
    return _where(share, _bin(Op.DIV, g, count), g)


def _prod_grad(seg: _Segments, grad, output, data, initial):
    """grad * output / x, except where x is 0 or NaN: there, grad times the product of the
    segment's other elements (ATen computes that exclusive product explicitly)."""
    dt = data.dtype
    nan = Node(Op.ISNAN, torch.bool, data.shape, (data,))
    zero = _bin(Op.EQ, data, _k(0, dt), torch.bool)
    special = _bin(Op.OR, nan, zero)
    rest = seg.pick(seg.fold(_where(special, _k(1, dt), data), "mul", initial))
    nans = _bin(Op.SUB, seg.pick(seg.fold(cast(nan, dt), "add", 0)), cast(nan, dt))
    zeros = _bin(Op.SUB, seg.pick(seg.fold(cast(zero, dt), "add", 0)), cast(zero, dt))
    others = _where(_bin(Op.GT, zeros, _k(0, dt), torch.bool), _bin(Op.MUL, rest, _k(0, dt)),
                    rest)
    others = _where(_bin(Op.GT, nans, _k(0, dt), torch.bool), _k(float("nan"), dt), others)
    g = seg.pick(grad)
    plain = _bin(Op.DIV, seg.pick(_bin(Op.MUL, grad, output)), data)
    return _where(special, _bin(Op.MUL, g, others), plain)


# ---- embedding_bag ----------------------------------------------------------------------------

_SUM, _MEAN, _MAX = 0, 1, 2


class _Bags:
    """Bag of every index (offsets are the bags' starts): `bag` [n] with B for positions in no
    bag or holding padding_idx, and the number of counted indices per bag."""

    def __init__(self, indices: Node, offsets: Node, bags: int, padding_idx: int):
        n = indices.numel
        self.n, self.bags = n, bags
        self.indices = reshape(cast(indices, i64), (n,))
        offsets = reshape(cast(offsets, i64), (offsets.numel,))
        pos = _positions((n,), 0)
        bag = _bin(Op.SUB, _search(offsets, pos), _k(1, i64))
        valid = _bin(Op.AND, _bin(Op.GE, bag, _k(0, i64), torch.bool),
                     _bin(Op.LT, bag, _k(bags, i64), torch.bool))
        if padding_idx >= 0:
            valid = _bin(Op.AND, valid, _bin(Op.NE, self.indices, _k(padding_idx, i64),
                                             torch.bool))
        self.valid = valid
        self.bag = _where(valid, bag, _k(bags, i64))
        ones = full(1, i64, (n,))
        self.size = narrow(scatter(full(0, i64, (bags + 1,)), 0, self.bag, ones, "add"), 0, 0,
                           bags)

    def column(self, x: Node, width: int) -> Node:
        """x [n] (one value per index) spread over `width` columns."""
        return expand(reshape(x, (self.n, 1)), (self.n, width))

    def fold(self, rows: Node, op, init) -> Node:
        """Per-bag reduction of `rows` [n, D] into [B, D]."""
        d = rows.shape[1]
        base = full(init, rows.dtype, (self.bags + 1, d))
        return narrow(scatter(base, 0, self.column(self.bag, d), rows, op), 0, 0, self.bags)

    def pick(self, per_bag: Node) -> Node:
        """Row of each index's bag (zeros for indices in no bag)."""
        d = per_bag.shape[1]
        return take(_with_dummy(per_bag, 0), self.column(self.bag, d), 0)


def _bag_max(bags: _Bags, rows: Node):
    """(max, argmax word) per bag and column, as ATen's embedding_bag_cpu_max_out: a later row
    replaces the running max only if strictly greater (so a NaN counts only as a bag's first
    row), empty bags give 0."""
    dt, (n, d) = rows.dtype, rows.shape
    nan = Node(Op.ISNAN, torch.bool, rows.shape, (rows,))
    best = bags.fold(_where(nan, _k(float("-inf"), dt), rows), "max", float("-inf"))
    pos = expand(reshape(_positions((n,), 0), (n, 1)), (n, d))
    first = bags.fold(pos, "min", n)                    # first row of each bag
    starts_nan = bags.pick(take(_with_dummy(cast(nan, i64), 0), first, 0))
    at_best = _bin(Op.OR, _bin(Op.NE, starts_nan, _k(0, i64), torch.bool),
                   _bin(Op.EQ, rows, bags.pick(best), torch.bool))
    winner = bags.fold(_where(at_best, pos, _k(n, i64)), "min", n)
    empty = _bin(Op.GE, winner, _k(n, i64), torch.bool)
    safe = _where(empty, _k(0, i64), winner)
    values = _where(empty, _k(0, dt), take(rows, safe, 0))
    words = _where(empty, _k(0, i64), take(bags.column(bags.indices, d), safe, 0))
    return values, words


@register(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def _embedding_bag(spec, weight, indices, offsets, scale_grad_by_freq=False, mode=0,
                   sparse=False, per_sample_weights=None, include_last_offset=False,
                   padding_idx=-1):
    out_spec = spec[0]
    bags = _Bags(indices, offsets, out_spec.shape[0], padding_idx)
    # ATen's kernel sums half-precision bags in float: rows are weighed and summed in it here.
    d, dt = weight.shape[1], opmath(out_spec.dtype)
    rows = take_rows(cast(weight, dt), bags.indices)
    if per_sample_weights is not None:
        rows = _bin(Op.MUL, rows, bags.column(cast(per_sample_weights, dt), d))
    words = None
    if mode == _MAX:
        out, words = _bag_max(bags, rows)
    else:
        # A mean divides the sum rounded to the output's type by the count in that type too
        # (a float16 bag of 3001 divides by 3000, as the CPU's does).
        out = cast(bags.fold(rows, "add", 0), out_spec.dtype)
        if mode == _MEAN:
            size = expand(reshape(cast(bags.size, out.dtype), (bags.bags, 1)), out.shape)
            out = _bin(Op.DIV, out, _bin(Op.MAX, size, _k(1, out.dtype)))
    out = cast(out, out_spec.dtype)
    # The meta kernel's shapes of the auxiliary outputs differ from the CPU kernel's (and
    # between modes); they are filled where they fit, and the backward recomputes bags.
    offset2bag, bag_size, max_indices = (full(0, s.dtype, s.shape) for s in spec[1:])
    if spec[1].shape == (bags.n,):
        offset2bag = bags.bag
    if spec[2].shape == (bags.bags,):
        bag_size = bags.size
    if words is not None and spec[3].shape == words.shape:
        max_indices = words
    return out, offset2bag, bag_size, max_indices


@register(aten._embedding_bag_backward.default)
def _embedding_bag_backward(spec, grad, indices, offsets, offset2bag, bag_size,
                            maximum_indices, num_weights, scale_grad_by_freq, mode, sparse,
                            per_sample_weights, padding_idx=-1):
    if sparse:
        raise Unsupported("sparse embedding_bag gradients")
    dt, (b, d) = spec.dtype, grad.shape
    grad = cast(grad, dt)
    zeros = full(0, dt, (num_weights, d))
    bags = _Bags(indices, offsets, b, padding_idx)     # sizes recounted: see _embedding_bag
    if mode == _MAX:
        size = expand(reshape(bags.size, (b, 1)), (b, d))
        g = _where(_bin(Op.GT, size, _k(0, i64), torch.bool), grad, _k(0, dt))
        return scatter(zeros, 0, cast(maximum_indices, i64), g, "add")
    g = bags.pick(grad)
    if per_sample_weights is not None:
        g = _bin(Op.MUL, g, bags.column(cast(per_sample_weights, dt), d))
    if mode == _MEAN:
        size = _bin(Op.MAX, cast(bags.size, dt), _k(1, dt))
        g = _bin(Op.DIV, g, bags.pick(expand(reshape(size, (b, 1)), (b, d))))
    if scale_grad_by_freq:
        ones = full(1, dt, (bags.n,))
        freq = scatter(full(0, dt, (num_weights,)), 0, bags.indices, ones, "add")
        g = _bin(Op.DIV, g, bags.column(take(freq, bags.indices, 0), d))
    g = _where(bags.column(bags.valid, d), g, _k(0, dt))
    return scatter(zeros, 0, bags.column(bags.indices, d), g, "add")


@register(aten._embedding_bag_per_sample_weights_backward.default)
def _embedding_bag_psw_backward(spec, grad, weight, indices, offsets, offset2bag, mode,
                                padding_idx=-1):
    if mode != _SUM:
        raise Unsupported("per_sample_weights are only defined for mode='sum'")
    dt, b = spec.dtype, grad.shape[0]
    bags = _Bags(indices, offsets, b, padding_idx)
    rows = take_rows(cast(weight, dt), bags.indices)
    dot = reduce(Op.SUM, _bin(Op.MUL, bags.pick(cast(grad, dt)), rows), (1,), False, dt)
    return _where(bags.valid, dot, _k(0, dt))


# ---- histc ------------------------------------------------------------------------------------

def histc(x: Node, bins: int, low: float, high: float) -> Node:
    """torch.histc with a finite range low < high (tensor/special_sort.py resolves min == max
    from the data first). ATen's LINEAR_INTERPOLATION bin rule, in the input's dtype:
    int((x - low) * bins / (high - low)), the top edge in the last bin, NaN and out-of-range
    values in none."""
    dt = x.dtype
    flat = reshape(x, (x.numel,))
    lo, hi = torch.tensor(low, dtype=dt, device="cpu"), torch.tensor(high, dtype=dt, device="cpu")
    left, width = _k(float(lo), dt), _k(float(hi - lo), dt)
    inside = _bin(Op.AND, _bin(Op.GE, flat, left, torch.bool),
                  _bin(Op.LE, flat, _k(float(hi), dt), torch.bool))
    scaled = _bin(Op.DIV, _bin(Op.MUL, _bin(Op.SUB, flat, left), _k(bins, dt)), width)
    pos = _bin(Op.MIN, cast(scaled, i64), _k(bins - 1, i64))
    pos = _where(inside, pos, _k(bins, i64))
    ones = full(1, dt, flat.shape)
    return narrow(scatter(full(0, dt, (bins + 1,)), 0, pos, ones, "add"), 0, 0, bins)
