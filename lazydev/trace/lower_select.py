"""Lowerings of selections by a mask: masked_scatter (+backward), nonzero_static, and the node
builders of the ops whose output size is the number of selected elements (masked_select,
unique_consecutive; their handlers in tensor/special_select.py read that number first).

Note [Compaction]
Selecting the elements where a mask holds, in order, needs no data-dependent control flow: the
running count of the mask (CUMSUM) is each selected element's 1-based rank, so a SCATTER puts
element i at row rank[i] - 1 of an output with a fixed number of rows, and every element not
selected (or ranked past the end) at one extra dummy row, which is then cut off. The reverse,
masked_scatter, reads source[rank[i] - 1] at every selected position with a GATHER.
"""
from __future__ import annotations

import torch

from .build import as_node, cast, contiguous_strides, ew, expand, full, reshape
from .ir import Node, Op
from .lower import register

aten = torch.ops.aten
i64 = torch.int64


def _flat(x: Node) -> Node:
    return reshape(x, (x.numel,))


def _k(value, dtype=i64) -> Node:
    return as_node(value, dtype)


def running_count(mask: Node) -> Node:
    """1-based rank of every element of a flat bool mask among the true ones."""
    return Node(Op.CUMSUM, i64, mask.shape, (cast(mask, i64),), 0)


def first_rows(x: Node, rows: int) -> Node:
    """x[:rows] along dim 0, as a strided read of the flat value."""
    shape = (rows,) + x.shape[1:]
    return Node(Op.AS_STRIDED, x.dtype, shape, (_flat(x),), (contiguous_strides(x.shape), 0))


def compact(values: Node, mask: Node, rows: int, fill) -> Node:
    """The rows values[i] (dim 0) where the flat bool `mask` holds, in order: the first `rows`
    of them, then rows of `fill` (Note [Compaction])."""
    rest = values.shape[1:]
    if rows == 0 or values.shape[0] == 0:
        return full(fill, values.dtype, (rows,) + rest)
    n = mask.shape[0]
    rank = running_count(mask)
    keep = ew(Op.AND, torch.bool, (n,), mask, ew(Op.LE, torch.bool, (n,), rank, _k(rows)))
    target = ew(Op.WHERE, i64, (n,), keep, ew(Op.SUB, i64, (n,), rank, _k(1)), _k(rows))
    target = expand(reshape(target, (n,) + (1,) * len(rest)), values.shape)
    base = full(fill, values.dtype, (rows + 1,) + rest)
    out = Node(Op.SCATTER, values.dtype, base.shape, (base, target, values), (0, None))
    return first_rows(out, rows)


def coordinates(shape: tuple) -> Node:
    """(numel, ndim) int64: the coordinates of every element of `shape` in row-major order."""
    n, nd = _numel(shape), len(shape)
    cols = tuple(reshape(Node(Op.INDEX, i64, shape, (), k), (n, 1)) for k in range(nd))
    return cols[0] if nd == 1 else Node(Op.CAT, i64, (n, nd), cols, 1)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def nonzero_mask(x: Node) -> Node:
    return _flat(ew(Op.NE, torch.bool, x.shape, x, as_node(0, x.dtype)))


def spread(x: Node, shape: tuple, dtype=None) -> Node:
    """x cast to `dtype`, broadcast to `shape` and flattened: how masked ops read x and mask."""
    return _flat(expand(cast(x, dtype or x.dtype), shape))


@register(aten.nonzero_static.default)
def _nonzero_static(spec, x, *, size, fill_value=-1):
    nd = len(x.shape)
    if nd == 0 or x.numel == 0:
        return full(fill_value, i64, spec.shape)
    return compact(coordinates(x.shape), nonzero_mask(x), size, fill_value)


@register(aten.masked_scatter.default)
def _masked_scatter(spec, x, mask, source):
    """out[i] = source.flat[rank[i] - 1] where mask holds, else x[i]. The source is read one
    position further (a zero in front), so unselected positions read index 0: a mask with more
    true elements than the source has raises an IndexError (the CPU raises a RuntimeError)."""
    shape, dt = spec.shape, spec.dtype
    xs, m = spread(x, shape, dt), spread(mask, shape, torch.bool)
    n = m.shape[0]
    if n == 0:
        return expand(cast(x, dt), shape)
    src = _flat(cast(source, dt))
    src = Node(Op.PAD, dt, (src.numel + 1,), (src, as_node(0, dt)), ((1, 0),))
    at = ew(Op.WHERE, i64, (n,), m, running_count(m), _k(0))
    picked = Node(Op.GATHER, dt, (n,), (src, at), 0)
    return reshape(ew(Op.WHERE, dt, (n,), m, picked, xs), shape)


@register(aten.masked_scatter_backward.default)
def _masked_scatter_backward(spec, grad, mask, sizes):
    """The source's gradient: masked_select(grad, mask), zero-padded to the source's size."""
    shape = tuple(torch.broadcast_shapes(grad.shape, mask.shape))
    g, m = spread(grad, shape), spread(mask, shape, torch.bool)
    return reshape(compact(g, m, _numel(spec.shape), 0), spec.shape)


def runs(x: Node, axis: int | None) -> tuple:
    """(rows, first): x as rows along `axis` (the whole flat x for None), and the flat bool
    mask of the rows that start a run of equal rows (NaN never equals itself, as on the CPU)."""
    rows = _flat(x) if axis is None else _rows(x, axis)
    n = rows.shape[0]
    if n == 0:
        return rows, full(True, torch.bool, (0,))
    prev = Node(Op.PAD, rows.dtype, rows.shape, (first_rows(rows, n - 1), as_node(0, rows.dtype)),
                ((1, 0),) + ((0, 0),) * (len(rows.shape) - 1))
    differs = ew(Op.NE, torch.bool, rows.shape, rows, prev)
    if len(rows.shape) == 2:
        differs = reshape(Node(Op.ANY, torch.bool, (n, 1), (differs,), (1,)), (n,))
    start = ew(Op.EQ, torch.bool, (n,), Node(Op.INDEX, i64, (n,), (), 0), _k(0))
    return rows, ew(Op.OR, torch.bool, (n,), start, differs)


def _rows(x: Node, axis: int) -> Node:
    """x with `axis` first, flattened to (x.shape[axis], rest)."""
    perm = (axis,) + tuple(k for k in range(len(x.shape)) if k != axis)
    if perm != tuple(range(len(perm))):
        shape = tuple(x.shape[p] for p in perm)
        x = Node(Op.PERMUTE, x.dtype, shape, (x,), perm)
    return reshape(x, (x.shape[0], x.numel // max(x.shape[0], 1)))


def unique_consecutive(x: Node, first: Node, count: int, axis: int | None) -> tuple:
    """(values, inverse, counts) of torch.unique_consecutive, given `runs` and the number of
    runs."""
    n = first.shape[0]
    rank = ew(Op.SUB, i64, (n,), running_count(first), _k(1))
    inverse = reshape(rank, x.shape) if axis is None else rank
    counts = Node(Op.SCATTER, i64, (count,), (full(0, i64, (count,)), rank, full(1, i64, (n,))),
                  (0, "add")) if n else full(0, i64, (0,))
    if axis is None:
        return compact(_flat(x), first, count, 0), inverse, counts
    starts = compact(Node(Op.INDEX, i64, (n,), (), 0), first, count, 0)
    shape = x.shape[:axis] + (count,) + x.shape[axis + 1:]
    values = Node(Op.INDEX_ND, x.dtype, shape, (x, starts), (axis, 1, 1, False))
    return values, inverse, counts
