"""Handlers of selection ops that must read a value on the host: the number of elements
masked_select and unique_consecutive return, and allclose's Python bool.

Each reads that value with one sync (one compiled reduction, cut with everything pending), then
records the op natively (trace/lower_select.py) on the materialised inputs, so nothing is
computed twice. The mask and the runs are kept as live tensors across the sync for that reason.
"""
from __future__ import annotations

import torch

from ..trace import build, lower_select
from ..trace.ir import Op
from .dispatch import _node_args, dispatch, fallback_op
from .special import special
from .wse_tensor import WseTensor, from_node, to_cpu, value

aten = torch.ops.aten
i64 = torch.int64


def _count(mask: WseTensor, reason: str) -> int:
    """The number of true elements of a flat bool wse tensor (a sync)."""
    total = build.reduce(Op.SUM, build.cast(value(mask), i64), (0,), False, i64)
    return int(to_cpu(from_node(total), reason=reason).item())


@special(aten.masked_select.default)
def _masked_select(func, args, kwargs):
    x, mask = args[0], args[1]
    if x.dtype.is_complex:
        return fallback_op(func, args, kwargs, why="complex dtypes are not compiled")
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    shape = tuple(torch.broadcast_shapes(x.shape, mask.shape))
    keep = from_node(lower_select.spread(_node_args(mask), shape, torch.bool))
    count = _count(keep, "masked_select") if keep.numel() else 0
    # Nodes made before the sync belong to the old trace: read x (again) after it.
    src = lower_select.spread(_node_args(x), shape)
    return from_node(lower_select.compact(src, value(keep), count, 0))


@special(aten.unique_consecutive.default)
def _unique_consecutive(func, args, kwargs):
    x = args[0]
    given = dict(zip(("return_inverse", "return_counts", "dim"), args[1:]), **kwargs)
    dim = given.get("dim")
    if x.dtype.is_complex:
        return fallback_op(func, args, kwargs, why="complex dtypes are not compiled")
    axis = None if dim is None else dim % max(x.dim(), 1)
    if axis is not None and x.numel() == 0 and x.shape[axis] != 0:
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique "
                           "cannot be applied")
    rows, first = lower_select.runs(value(x), axis)
    first_t = from_node(first)              # live across the sync: computed once
    count = _count(first_t, "unique_consecutive") if first.numel else 0
    values, inverse, counts = lower_select.unique_consecutive(
        value(x), value(first_t), count, axis)
    empty = build.full(0, i64, (0,))
    return (from_node(values), from_node(inverse if given.get("return_inverse") else empty),
            from_node(counts if given.get("return_counts") else empty))


@special(aten.allclose.default)
def _allclose(func, args, kwargs):
    """isclose(...).all() compiled; the Python bool is read with a sync."""
    close = dispatch(aten.isclose.default, args, kwargs)
    every = dispatch(aten.all.default, (close,), {})
    return bool(to_cpu(every, reason="allclose").item())
