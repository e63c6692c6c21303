"""Row kernel templates for sorting, searching and arg-scans (trace/lower_sort.py).

Each computes int64 positions along one axis; the values they select are read afterwards with
GATHER nodes, so one kernel serves sort values and indices, topk, cummax values and indices.
"""
from __future__ import annotations

import math

import torch

from ..trace.ir import Node, Op
from . import cexpr
from .codegen import Emitter, Idx
from .kernels import TEMPLATES, _omp, _store, scan

# dtype codes of lib->argsort (the WSE_DT_* enum in csrc/wse_prefix.h)
DTYPE_CODE = {
    torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3, torch.int64: 4,
    torch.int32: 5, torch.int16: 6, torch.int8: 7, torch.uint8: 8, torch.bool: 9,
}


def _split(shape, axis):
    """(outer, size, inner) of a row-major shape around `axis`."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def sort_rows(e: Emitter, n: Node) -> None:
    """The stable sort in csrc/wse_sort.c; the source is a buffer (SORT is in LIBRARY)."""
    x = n.src[0]
    axis, descending = n.arg
    outer, size, inner = _split(x.shape, axis)
    if n.numel:
        e.b.line(f"err = lib->argsort({e.ptr(x)}, {DTYPE_CODE[x.dtype]}, {outer}, {size}, "
                 f"{inner}, {int(descending)}, {e.ptr(n)}, errinfo);")


def searchsorted(e: Emitter, n: Node) -> None:
    """Binary search of every value in its row, with ATen's comparisons (cus_lower_bound /
    cus_upper_bound), so NaNs in a row steer the search exactly as on the CPU."""
    seq, values = n.src
    size, batched = seq.shape[-1], len(seq.shape) > 1
    width = values.shape[-1] if values.shape else 1
    test = "(mid_val > val)" if n.arg else "(mid_val >= val)"
    b = e.b
    _omp(b, n.numel * max(1, size.bit_length()))
    with e.loop("i", n.numel):
        val = e.load(values, Idx(values.shape, flat="i"))
        b.line(f"const {cexpr.vtype(seq.dtype)} val = {val};")
        b.line(f"int64_t lo = 0, hi = {size};")
        with b.block("while (lo < hi)"):
            b.line("const int64_t mid = lo + ((hi - lo) >> 1);")
            flat = f"(i / {width}) * {size} + mid" if batched else "mid"
            mid_val = e.load(seq, Idx(seq.shape, flat=flat))
            b.line(f"const {cexpr.vtype(seq.dtype)} mid_val = {mid_val};")
            b.line(f"if (!{test}) lo = mid + 1; else hi = mid;")
        _store(e, n, "i", "lo")


def cumarg(e: Emitter, n: Node) -> None:
    """Index of the running max (min) along the axis, with ATen's cummax_cummin_helper rule: a
    NaN always takes over, ties move to the later index."""
    x, (axis, is_max) = n.src[0], n.arg
    cmp = ">=" if is_max else "<="

    def step(dims):
        v = e.load(x, Idx(x.shape, dims=dims))
        take = f"r == 0 || {v} {cmp} best"
        if x.dtype.is_floating_point:
            take = f"r == 0 || {v} != {v} || (best == best && {v} {cmp} best)"
        e.b.line(f"if ({take}) {{ best = {v}; bi = r; }}")
        return "bi"
    scan(e, n, axis, f"{cexpr.vtype(x.dtype)} best = 0; int64_t bi = 0;", step)


TEMPLATES.update({Op.SORT: sort_rows, Op.SEARCHSORTED: searchsorted, Op.CUMARG: cumarg})
