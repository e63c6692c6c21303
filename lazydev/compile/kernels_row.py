"""Row loops: reductions folded per row (Fold), the row reductions a row kernel computes before
its elements (Note [Row reductions] in passes.py) and the values it stores per row for them
(Note [Row-staged values])."""
from __future__ import annotations

import torch

from ..trace.ir import ELEMENTWISE, REDUCE, Node, Op
from . import cexpr
from .cexpr import vtype
from .codegen import Emitter, Idx
from .passes import ROW_STAGE_MAX

SIMD_REDUCE = {Op.SUM: "+", Op.PROD: "*"}
MINMAX = {Op.RMAX: (">", "max"), Op.RMIN: ("<", "min")}


class Fold:
    """How one reduction folds values into `acc`: its declaration, the simd pragma that lets the
    compiler reorder it into vector lanes, the statement per value and the result. A float
    max/min keeps a NaN flag beside the max/min of the rest, so it vectorises (a NaN-propagating
    select chain cannot: every step waits for the last, about 10x slower on a row of 128)."""

    def __init__(self, n: Node):
        self.op, self.dtype = n.op, n.dtype
        self.minmax = n.op in MINMAX and n.dtype is not torch.bool
        self.nan = self.minmax and n.dtype.is_floating_point

    def decl(self) -> str:
        init = cexpr.REDUCE_INIT[self.op](self.dtype)
        acc = f"{cexpr.acc_type(self.op, self.dtype)} acc = {init};"
        return acc + (" int nan = 0;" if self.nan else "")

    def pragma(self) -> str | None:
        if self.op in SIMD_REDUCE:
            # Lets the compiler reorder this sum into vector lanes (the order PyTorch's own
            # vectorised kernels use differs from a serial sum anyway).
            return f"#pragma omp simd reduction({SIMD_REDUCE[self.op]}:acc)"
        if self.minmax:
            flag = " reduction(|:nan)" if self.nan else ""
            return f"#pragma omp simd reduction({MINMAX[self.op][1]}:acc){flag}"
        return None

    def step(self, v: str) -> str:
        if not self.minmax:
            return cexpr.reduce_step(self.op, self.dtype, "acc", v)
        nan = f"nan |= {v} != {v}; " if self.nan else ""
        return f"{nan}acc = {v} {MINMAX[self.op][0]} acc ? {v} : acc;"

    def result(self) -> str:
        acc = "(nan ? NAN : acc)" if self.nan else "acc"
        return cexpr.round_half(self.dtype, f"({vtype(self.dtype)}){acc}")


def row_reductions_read(e: Emitter, nodes) -> list:
    """The reductions `nodes` read that no kernel stores, sources first: each reduces a row
    (Note [Row reductions] in passes.py)."""
    order, seen = [], set()

    def visit(m):
        for s in m.src:
            if id(s) not in e.ptrs and id(s) not in seen:
                seen.add(id(s))
                visit(s)
                if s.op in REDUCE:
                    order.append(s)
    for m in nodes:
        visit(m)
    return order


# Note [Row-staged values]
# A value with a math call that a row kernel reads in two of the loops it runs per row (a row
# reduction's and the elements', or two reductions'): softmax over GELU's output reads it in
# the max and in exp(x - max), and exp's result in the sum and in the division. Stored to a
# buffer of its own (passes.py had to: it is not cheap to recompute), the block took three
# kernels and three passes over memory; computed in each loop, it would double the math. So
# the kernel computes it once per row, before the first loop that reads it, into a stack array
# of the row (at most ROW_STAGE_MAX elements, in L1), and every later loop of the row reads
# the array (Emitter.load). passes._recomputed_per_row leaves such a value to its one reader
# when it is the direct input of a row reduction there (passes._staged_per_row says why only
# then). The LayerNorm+GELU+softmax block: three kernels, 3.98 ms; one, 3.15 ms.


def row_staged(e: Emitter, outs) -> set:
    """Ids of the values with a math call that two or more of the row loops of a kernel
    computing `outs` would compute (Note [Row-staged values]). Consumers are decided first, so
    of a chain (GELU's output over its erf) the value nearest the readers is staged, and the
    values it reads are then read by its loop alone."""
    reds = row_reductions_read(e, outs)
    if not reds or outs[0].shape[-1] > ROW_STAGE_MAX:
        return set()
    roots = [(r.src[0], k) for k, r in enumerate(reds)
             if id(r.src[0]) not in e.ptrs and r.src[0].op in ELEMENTWISE]
    roots += [(o, "elements") for o in outs]
    order, seen = [], set()

    def visit(m):               # the values the loops compute inline, sources first
        if id(m) in seen:
            return
        seen.add(id(m))
        for s in m.src if m.op in ELEMENTWISE else ():
            if id(s) not in e.ptrs and s.op in ELEMENTWISE and s.shape == m.shape:
                visit(s)
        order.append(m)
    for root, _ in roots:
        visit(root)
    calls: dict = {}
    for m in order:
        calls[id(m)] = (m.op in cexpr.MATH_CALLS and m.dtype.is_floating_point
                        or any(calls.get(id(s), False) for s in m.src))
    readers = {id(m): set() for m in order}
    for root, loop in roots:
        readers[id(root)].add(loop)
    staged, out_ids = set(), {id(o) for o in outs}
    for m in reversed(order):   # consumers first
        mine = readers[id(m)]
        if id(m) not in out_ids and calls[id(m)] and len(mine) >= 2:
            staged.add(id(m))
            mine = {id(m)}      # read by its own staging loop from here on
        for s in m.src if m.op in ELEMENTWISE else ():
            if id(s) in readers:
                readers[id(s)] |= mine
    return staged


def _stage_row(e: Emitter, m: Node) -> None:
    """m's values for the row into a stack array (Note [Row-staged values]), its sources'
    first."""
    if id(m) in e.row_arrays:
        return
    for s in _staged_reads(e, m.src if m.op in ELEMENTWISE else ()):
        _stage_row(e, s)
    size, name = m.shape[-1], e.b.fresh("ra")
    e.b.line(f"{vtype(m.dtype)} {name}[{size}] WSE_ALIGNED;")
    e.b.line("#pragma omp simd")
    with e.loop("r", size):
        value = e.compute(m, Idx(m.shape, dims=e.row_dims + ["r"], flat=f"o * {size} + r"))
        e.b.line(f"{name}[r] = {value};")
    e.row_arrays[id(m)] = name


def _staged_reads(e: Emitter, roots) -> list:
    """The row-staged values that computing `roots` inline reads (a stored root: none), not
    yet stored."""
    stack = list({id(r): r for r in roots if id(r) not in e.ptrs}.values())
    found, seen = [], {id(r) for r in stack}
    while stack:
        m = stack.pop()
        if id(m) in e.row_staged:
            if id(m) not in e.row_arrays:
                found.append(m)
            continue
        for s in m.src if m.op in ELEMENTWISE else ():
            if id(s) not in e.ptrs and id(s) not in seen:
                seen.add(id(s))
                stack.append(s)
    return found


def row_reductions(e: Emitter, nodes, dims: list) -> None:
    """Before the elements of row `o` (coordinates `dims`), a loop per reduction that `nodes`
    read and no kernel stores; from then on, a read of one is its value for this row. The
    row-staged values a loop reads are stored just before it (Note [Row-staged values])."""
    e.row_dims, e.row_arrays = dims, {}
    for r in row_reductions_read(e, nodes):
        x, fold, value = r.src[0], Fold(r), e.b.fresh("t")
        size = x.shape[-1]
        for m in _staged_reads(e, (x,)):
            _stage_row(e, m)
        e.b.line(f"{vtype(r.dtype)} {value};")
        with e.b.block(f"/* {r.op.name} of the row */"):
            e.b.line(fold.decl())
            if fold.pragma():
                e.b.line(fold.pragma())
            with e.loop("r", size):
                v = e.load(x, Idx(x.shape, dims=dims + ["r"], flat=f"o * {size} + r"))
                e.b.line(fold.step(v))
            e.b.line(f"{value} = {fold.result()};")
        e.row_values[id(r)] = value
