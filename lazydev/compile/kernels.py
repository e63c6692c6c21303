"""Kernel templates: the loop nest (or library call) that computes one realized node."""
from __future__ import annotations

import math
import re
from contextlib import contextmanager, nullcontext

import torch

from ..trace.ir import ELEMENTWISE, REDUCE, Node, Op
from . import cexpr
from .cbuilder import CBuilder
from .passes import ROW_MIN, gemm_operand
from .codegen import PARALLEL_MIN, CodegenUnsupported, Emitter, Idx, index_nd_dims, times
from .cexpr import vtype
from .kernels_row import SIMD_REDUCE, Fold, row_reductions_read, row_staged, row_reductions

KERNEL_ARGS = ("const wse_lib_t* lib, void* const* restrict P, const double* restrict S, "
               "int64_t* errinfo")


def _prod(shape) -> int:
    return math.prod(shape) if shape else 1


def _omp(b: CBuilder, work: int, simd: bool = False) -> None:
    """Parallelise the next loop when it has enough work; `simd` also asserts its iterations
    are independent (a loop writing over the input it reads, Note [Donation])."""
    if work >= PARALLEL_MIN:
        b.line(f"#pragma omp parallel for{' simd' if simd else ''} schedule(static)")
    elif simd:
        b.line("#pragma omp simd")


def _store(e: Emitter, n: Node, flat: str, value: str) -> None:
    e.b.line(f"{e.ptr(n)}[{flat}] = {cexpr.store_expr(n.dtype, value)};")


STAGE_TILE = 128  # elements per tile of a staged loop (Note [Staged loops])
STAGE_MIN_NUMEL, STAGE_MIN_ROW = 1024, 256   # the least loop, or row, that is staged
STAGE_MIN_CALLS = 3


def pointwise(e: Emitter, n: Node, also=()) -> None:
    """Row template: the outer loop runs over rows (their coordinates computed once per row),
    the inner loop over the last dim, where contiguous and broadcast reads are plain strided
    loads the compiler vectorises; short last dims merge with the one before (Note [Merged
    rows]). Short rows use one flat loop. `also`: more nodes of n's shape computed in the same
    loop, each after the ones before it (Note [Kernel groups])."""
    numel, b, outs = n.numel, e.b, (n, *also)
    inner = n.shape[-1] if n.shape else 1
    if len(n.shape) >= 2 and inner >= ROW_MIN:
        e.row_staged = row_staged(e, outs)
    calls = _stage_calls(e, outs)
    # Written over an input (e.may_alias): element i is read, then written, with no dependence
    # between iterations, which `simd` tells the compiler.
    if len(n.shape) < 2 or inner < ROW_MIN:
        if calls and numel >= STAGE_MIN_NUMEL:
            _omp(b, numel)
            with e.loop("ob", numel, step=STAGE_TILE):
                _tile_stages(e, outs, calls, _tile_width(e, "ob", numel),
                             lambda shape, v: Idx(shape, flat=f"ob + {v}"))
            return
        _omp(b, numel, simd=bool(e.may_alias))
        with e.loop("i", numel):
            for m in outs:
                _store(e, m, "i", e.compute(m, Idx(m.shape, flat="i")))
        return
    # A row reduction reduces the last dim only: its rows cannot merge.
    if inner < MERGE_ROW and len(n.shape) >= 3 and numel and n.op is not Op.CAT \
            and not row_reductions_read(e, outs):
        mark = b.mark()
        known = _rows(e, n, outs, calls, len(n.shape) - 2)
        if len(e.ix.pairs) == known:
            b.unmark(mark)
            return
        b.rewind(mark)
    _rows(e, n, outs, calls, len(n.shape) - 1)


# Note [Merged rows]
# A row loop over a short last dim (a CNN's 28 or 14 columns) spends its time on the row's own
# overhead and on the vector loop's remainder: BatchNorm's normalise + ReLU over 64x8x28x28 took
# 115 us. When no read in the loop needs the last two coordinates apart (a contiguous read uses
# the flat index, a per-channel one only the row's coordinates), the last two dims form one row
# (784 columns) and the loop runs as fast as a long one. Whether some read does is known after
# emitting: the index algebra splits a column index (Note [Affine indices]); then the loop is
# emitted again over the last dim alone.
MERGE_ROW = 64      # last dims shorter than this try a merged row


def _rows(e: Emitter, n: Node, outs, calls, lead: int) -> int:
    """The row loop over n's first `lead` dims, each row the rest of n's dims (one or two).
    Returns how many splits the index algebra had made once the row's coordinates were known:
    any made after are the columns' (Note [Merged rows])."""
    b, inner = e.b, _prod(n.shape[lead:])
    _omp(b, n.numel)
    with e.loop("o", n.numel // inner):
        rows = Idx(n.shape[:lead], flat="o")
        dims = [e.dim(rows, k) for k in range(lead)]
        known = len(e.ix.pairs)

        def at(shape, j):       # the element at column j of row o
            cols = [j] if lead == len(shape) - 1 else [None] * (len(shape) - lead)
            return Idx(shape, dims=dims + cols, flat=f"o * {inner} + {j}")
        row_reductions(e, outs, dims)
        if calls and inner >= STAGE_MIN_ROW:
            with e.loop("jb", inner, step=STAGE_TILE):
                _tile_stages(e, outs, calls, _tile_width(e, "jb", inner),
                             lambda shape, v: at(shape, f"jb + {v}"))
        elif n.op is Op.CAT and n.arg == len(n.shape) - 1 and not outs[1:]:
            _row_cat(e, n, dims)
        else:
            def body(j):
                for m in outs:
                    idx = at(m.shape, j)
                    _store(e, m, idx.flat, e.compute(m, idx))
            _row_loop(e, inner, body)
    return known


def _row_cat(e: Emitter, n: Node, dims) -> None:
    """A concatenation along the last dim: one inner loop per source over its own columns, so
    no loop branches on which source a column comes from (a transformer's q/k/v gradients
    joined: 0.4-0.6 ms per kernel with the branch)."""
    inner, lo = n.shape[-1], 0
    for s in n.src:
        width = s.shape[-1]

        def body(j, s=s, width=width, lo=lo):
            value = e.load(s, Idx(s.shape, dims=dims + [j], flat=f"o * {width} + {j}"))
            _store(e, n, f"o * {inner} + {lo} + {j}" if lo else f"o * {inner} + {j}", value)
        _row_loop(e, width, body)
        lo += width


# Note [Split row loops]
# A row whose last dim merges two dims of a view (attention heads: 4 heads of 64 columns read
# as 256, from a tensor laid out head-major) reads column j at `j / 64` and `j % 64`: the index
# algebra (Note [Affine indices]) cannot remove the division, as j's range [0, 256) crosses
# multiples of 64, and the loop gathers. Split as jh over 4 and jl over 64, the same algebra
# proves `(jh * 64 + jl) / 64 == jh`, and each inner loop reads 64 contiguous elements. The
# divisor is the algebra's own: the row loop is emitted once, and if that split j by a divisor
# of the row (ix.pairs), it is emitted again split. The head merge of the transformer's q/k/v
# gradients (8 x 128 x 768, two of its three pieces split) went from 0.51 to 0.39 ms a call; the
# third piece reads a transposed key gradient, a stride no split removes.
SPLIT_MIN = 16      # an inner loop of at least one AVX-512 vector of floats


def _row_loop(e: Emitter, extent: int, body) -> None:
    """`for j` over a row's `extent` columns, running body(j); split in two loops when j is
    divided by a divisor of the row (Note [Split row loops])."""
    b, mark, known = e.b, e.b.mark(), len(e.ix.pairs)
    if e.may_alias:
        b.line("#pragma omp simd")
    with e.loop("j", extent):
        body("j")
    m = next((m for v, m in list(e.ix.pairs.values())[known:]
              if v == "j" and SPLIT_MIN <= m < extent and extent % m == 0), None)
    if m is None:
        b.unmark(mark)
        return
    b.rewind(mark)
    with e.loop("jh", extent // m):
        if e.may_alias:
            b.line("#pragma omp simd")
        with e.loop("jl", m):
            body(e.index_temp(f"jh * {m} + jl", "q"))


# Note [Staged loops]
# A loop body that calls several vector math functions (libmvec's sin and tanh, our exp) is
# slower than the same calls made in separate loops over the same data: on this machine
# tanh(exp(sin(.))) four times over 4M floats took 19 ms as one loop and 14 ms as four.
# Running each call over tiles of 16 or 64 elements in turn was as slow as the one loop, tiles
# of 256 or more as fast as the separate loops. With two calls the split loses (sin+tanh over
# 4M floats: 2.2 ms as one loop, 2.7 staged; GELU's backward, erf+exp over 1M floats: 1.0 ms as
# one loop, 1.15 staged), with three it wins (3.4 -> 2.9 ms).
# Our own inline functions (wse_expf, wse_erff: Note [Own float math] in csrc/wse_prefix.h)
# count as calls too, re-measured: the chain took 7.9-8.0 ms with exp in a loop of its own and
# 8.8-9.6 ms with exp inlined into tanh's loop; GELU's backward (erf+exp over 1M floats, 4
# calls) 1.75-1.96 ms as one loop and 2.46 staged. What fits the figures is latency: one
# element's path through several functions is a chain of some hundred dependent instructions,
# more than the out-of-order window overlaps across iterations (tiles of 16 or 64 give it no
# independent work either), while a loop of one function has short independent iterations.
# The chain inlined into one loop ran 3x slower than staged in a standalone test.
# So a pointwise loop making STAGE_MIN_CALLS calls or more is strip-mined: per tile of STAGE_TILE
# elements, one inner loop per call stores that call's results in a tile array on the stack
# (cache-resident), and a last loop computes the outputs. A later loop reads an earlier call's
# value from its tile array: the array element is registered as that node's value at the
# loop's position (CBuilder.remember), so nothing is computed twice and no tensor-sized memory
# is added. Tiles are of 128 elements: with wse_tanhf a rational (AVX2), the chain's program
# took 12.2-12.3 ms in tiles of 64 or 128, 12.6-12.9 in tiles of 512 (its eleven tile arrays
# then take 22 of the 32 KiB of L1; benchmarks/kernel_profile.py, AMD EPYC).

def _stage_calls(e: Emitter, outs) -> list:
    """The math-call nodes `outs` compute inline at their own position, sources first, when
    the loop makes STAGE_MIN_CALLS calls or more (Note [Staged loops]); else none."""
    here = {id(m) for m in outs}
    read = set()        # outputs another node of the loop reads (at the same position)

    def inline_sources(m):
        """m's sources computed in this loop, at m's position: not read from memory, but for
        outputs of the loop, which the last loop of a tile writes after the staged ones read
        them (s = a + b kept, sin(s).exp().tanh(): the stages read s's buffer unwritten)."""
        for s in m.src if m.op in ELEMENTWISE else ():
            if s.op in ELEMENTWISE and s.shape == m.shape and (id(s) in here or (
                    id(s) not in e.ptrs and id(s) not in e.row_staged)):
                yield s

    def walk(m, seen):
        for s in inline_sources(m):
            if id(s) in here:
                read.add(id(s))
            if id(s) not in seen:
                seen.add(id(s))
                walk(s, seen)
    walked: set = set()
    for m in outs:
        walk(m, walked)
    seen, order = set(), []

    def visit(m, top):
        if id(m) in seen:
            return
        seen.add(id(m))
        for s in inline_sources(m):
            visit(s, False)
        if (not top and m.op in cexpr.MATH_CALLS and m.dtype.is_floating_point) or id(m) in read:
            order.append(m)
    for m in outs:
        visit(m, True)
    calls = sum(m.op in cexpr.MATH_CALLS and m.dtype.is_floating_point
                for m in list(outs) + [m for m in order if id(m) not in here])
    return order if calls >= STAGE_MIN_CALLS else []


def _tile_width(e: Emitter, var: str, extent: int):
    if extent % STAGE_TILE == 0:
        return STAGE_TILE
    return e.b.temp("int64_t", f"({extent} - {var} < {STAGE_TILE} ? {extent} - {var} : "
                    f"{STAGE_TILE})", prefix="w")


# Note [Tile-checked math]
# Two float functions have a fast form that holds on part of the line only. wse_sinf_small
# (csrc/wse_prefix.h) is exact to 1.84 ulp for |x| < 2^17 and takes 0.365 ns a float against
# libmvec's 0.418 (AVX2 EPYC; benchmarks/mathf.py): beyond, a reduction by pi needs more bits
# than three floats hold. wse_expf_normal is wse_expf bit for bit for |x| < 87 and takes 0.24
# ns against 0.43: it skips the clamps and the two-step scaling that overflow and subnormal
# results need. A per-lane escape made a fast form as slow as the general one, so a staged call
# checks a whole tile instead: it flags any argument outside the fast range (inf and NaN too),
# and the tile takes the fast form only when none is. An argument that is itself a staged tile
# is checked where it lies; any other is first written to the call's own tile. The 20-op
# chain's program (four sins and four exps per element): 12.2-12.3 -> 11.9 ms with sin's fast
# form, -> 11.0 ms with exp's as well.
_TILE_CHECKED = {Op.SIN: ("131072.0f", "sin", "wse_sinf_small"),
                 Op.EXP: ("87.0f", "wse_expf", "wse_expf_normal")}
_STAGED = re.compile(r"s\d+\[i\]")


def _tile_checked(e: Emitter, k: int, c: Node, width, position) -> None:
    bound, general, fast = _TILE_CHECKED[c.op]
    b = e.b
    b.line(f"int big{k} = 0;")
    b.line(f"#pragma omp simd reduction(|:big{k})")
    with e.loop("i", width, hi=STAGE_TILE - 1):
        arg = e.load(c.src[0], position(c.shape, "i"))
        if not _STAGED.fullmatch(arg):
            b.line(f"s{k}[i] = {arg};")
            arg = f"s{k}[i]"
        b.line(f"big{k} |= !(fabsf({arg}) < {bound});")
    for head, fn in ((f"if (big{k})", general), ("else", fast)):
        with b.block(head):
            b.line("#pragma omp simd")
            with e.loop("i", width, hi=STAGE_TILE - 1):
                b.line(f"s{k}[i] = {fn}({arg});")


def _tile_stages(e: Emitter, outs, calls, width, position) -> None:
    """The loops of one tile (Note [Staged loops]): one per call in `calls`, then one computing
    `outs`. `position(shape, var)`: the Idx of the tile's element `var`."""
    b = e.b
    for k, c in enumerate(calls):
        b.line(f"{vtype(c.dtype)} s{k}[{STAGE_TILE}] WSE_ALIGNED;")
    for k, c in enumerate(calls):
        if c.op in _TILE_CHECKED and c.dtype is torch.float32 and c.src[0].dtype is torch.float32:
            _tile_checked(e, k, c, width, position)
        else:
            b.line("#pragma omp simd")
            with e.loop("i", width, hi=STAGE_TILE - 1):
                b.line(f"s{k}[i] = {e.compute(c, position(c.shape, 'i'))};")
        b.remember((id(c), position(c.shape, "i").key()), f"s{k}[i]")
    if e.may_alias:
        b.line("#pragma omp simd")
    with e.loop("i", width, hi=STAGE_TILE - 1):
        for m in outs:
            idx = position(m.shape, "i")
            staged = b.lookup((id(m), idx.key()))      # an output read by a staged call
            _store(e, m, idx.flat, staged if staged is not None else e.compute(m, idx))


def _reduce_positions(e: Emitter, n: Node, x: Node, axes, o: str, r: str) -> Idx:
    """Index into x of reduction step r for output position o."""
    nd = len(x.shape)
    red_shape = tuple(x.shape[a] for a in axes)
    if axes == tuple(range(nd - len(axes), nd)):
        return Idx(x.shape, flat=f"{o} * {_prod(red_shape)} + {r}" if _prod(red_shape) > 1 else o)
    oi = Idx(n.shape, flat=o)
    ri = Idx(red_shape, flat=r)
    dims = [e.dim(ri, axes.index(k)) if k in axes else e.dim(oi, k) for k in range(nd)]
    return Idx(x.shape, dims=dims)


COLUMN_BLOCK = 64


def reduction(e: Emitter, n: Node) -> None:
    x = n.src[0]
    axes = n.arg
    red = _prod([x.shape[a] for a in axes])
    out_numel, b = n.numel, e.b
    if n.op in SIMD_REDUCE and out_numel > 1 and axes == tuple(range(len(axes))):
        return column_reduction(e, n, red)
    split = _trailing_split(x, axes)
    if split is not None and out_numel > 1:
        return split_reduction(e, n, red, split)
    if out_numel == 1 and n.op is Op.SUM and red >= PARALLEL_MIN:
        return _full_sum(e, n, red)
    fold = Fold(n)
    if out_numel > 1:
        _omp(b, out_numel * red)
    with e.loop("o", out_numel):
        if out_numel > 1 and axes == (len(x.shape) - 1,):
            rows = Idx(n.shape[:-1], flat="o")
            row_reductions(e, (n,), [e.dim(rows, k) for k in range(len(n.shape) - 1)])
        b.line(fold.decl())
        if fold.pragma():
            b.line(fold.pragma())
        with e.loop("r", red):
            v = e.load(x, _reduce_positions(e, n, x, axes, "o", "r"))
            b.line(fold.step(v))
        _store(e, n, "o", fold.result())


def _trailing_split(x: Node, axes):
    """First axis k of a run of reduced axes k..nd-1 ending at x's last axis, when other reduced
    axes come before it and the run is long enough to be an inner loop; else None."""
    nd = len(x.shape)
    k = nd
    while k - 1 in axes:
        k -= 1
    if k == nd or k == min(axes) or _prod(x.shape[k:]) < ROW_MIN:
        return None
    return k


def split_reduction(e: Emitter, n: Node, red: int, k: int) -> None:
    """A reduction over some leading axes and the trailing axes k.. (batch norm's statistics
    over N, H, W): the trailing block is a contiguous inner loop the compiler vectorises, and
    the other coordinates are computed once per block, not with a division per element."""
    x, b, axes = n.src[0], e.b, n.arg
    inner = _prod(x.shape[k:])
    lead = [a for a in axes if a < k]
    fold = Fold(n)
    _omp(b, n.numel * red)
    with e.loop("o", n.numel):
        b.line(fold.decl())
        with e.loop("ro", red // inner):
            oi, ri = Idx(n.shape, flat="o"), Idx(tuple(x.shape[a] for a in lead), flat="ro")
            dims = [e.dim(ri, lead.index(a)) if a in lead else e.dim(oi, a) for a in range(k)]
            base = e.flat(Idx(x.shape[:k], dims=dims))
            if fold.pragma():
                b.line(fold.pragma())
            with e.loop("r", inner):
                v = e.load(x, Idx(x.shape, flat=f"{base} * {inner} + r"))
                b.line(fold.step(v))
        _store(e, n, "o", fold.result())


# Note [Column reductions]
# A sum over leading axes (a bias gradient over the batch) reads its rows in order. Over a wide
# row the rows are split into COLUMN_CHUNKS fixed runs, each summed into its own row of partial
# accumulators and the partials added in run order at the end: every read streams, and the result
# does not depend on how many threads ran the runs. Standalone (with the other core busy), 1024
# rows of 1024 took 123 us this way against 394 us in blocks of COLUMN_BLOCK columns, each block
# striding down all the rows (1024 x 768: 82 against 208 us). Narrow rows keep the blocks: their
# runs would be too short to pay.
COLUMN_CHUNKS = 4
COLUMN_SPLIT = (64, 8192)   # row widths split into runs (the partials live on the stack)


def column_reduction(e: Emitter, n: Node, red: int) -> None:
    """Sum/prod over leading axes (Note [Column reductions])."""
    if COLUMN_SPLIT[0] <= n.numel <= COLUMN_SPLIT[1] and red >= 2 * COLUMN_CHUNKS:
        return _column_runs(e, n, red)
    x, b, out = n.src[0], e.b, n.numel
    acc_t = cexpr.acc_type(n.op, n.dtype)
    _omp(b, out * red)
    with e.loop("ob", out, step=COLUMN_BLOCK):
        b.line(f"const int64_t w = {out} - ob < {COLUMN_BLOCK} ? {out} - ob : {COLUMN_BLOCK};")
        init = cexpr.REDUCE_INIT[n.op](n.dtype)
        b.line(f"{acc_t} acc[{COLUMN_BLOCK}] WSE_ALIGNED;")
        b.line(f"for (int64_t j = 0; j < {COLUMN_BLOCK}; j++) acc[j] = {init};")
        with e.loop("r", red):
            with e.loop("j", "w", hi=COLUMN_BLOCK - 1):
                v = e.load(x, Idx(x.shape, flat=f"r * {out} + ob + j"))
                b.line(cexpr.reduce_step(n.op, n.dtype, "acc[j]", v))
        with e.loop("j", "w", hi=COLUMN_BLOCK - 1):
            _store(e, n, "ob + j", cexpr.round_half(n.dtype, f"({vtype(n.dtype)})acc[j]"))


def _column_runs(e: Emitter, n: Node, red: int) -> None:
    x, b, out, runs = n.src[0], e.b, n.numel, COLUMN_CHUNKS
    acc_t, init = cexpr.acc_type(n.op, n.dtype), cexpr.REDUCE_INIT[n.op](n.dtype)
    b.line(f"{acc_t} part[{runs}][{out}] WSE_ALIGNED;")
    _omp(b, out * red)
    with e.loop("c", runs):
        b.line(f"{acc_t}* restrict acc = part[c];")
        b.line(f"for (int64_t j = 0; j < {out}; j++) acc[j] = {init};")
        with _run_rows(e, red, runs):
            b.line("#pragma omp simd")
            with e.loop("j", out):
                v = e.load(x, Idx(x.shape, flat=f"r * {out} + j"))
                b.line(cexpr.reduce_step(n.op, n.dtype, "acc[j]", v))
    total = f" {SIMD_REDUCE[n.op]} ".join(f"part[{c}][j]" for c in range(runs))
    with e.loop("j", out):
        _store(e, n, "j", cexpr.round_half(n.dtype, f"({vtype(n.dtype)})({total})"))


@contextmanager
def _run_rows(e: Emitter, red: int, runs: int):
    """`for r` over run c's rows [c * red / runs, (c + 1) * red / runs), inside a loop over c
    (Note [Column reductions], Note [Fixed sums]); r's range is all rows."""
    prev = e.ix.set_range("r", 0, red - 1)
    try:
        with e.b.block(f"for (int64_t r = c * {red} / {runs}; r < (c + 1) * {red} / {runs}; r++)"):
            yield
    finally:
        e.ix.restore("r", prev)


# Note [Fixed sums]
# A sum of a whole tensor (a loss) is split into FULL_SUM_RUNS fixed runs of its elements, each
# summed by one thread, and the partials are added in run order: its bits do not depend on how
# many threads ran it. An `omp parallel for reduction` split the elements by team size, and a
# step's program runs on the host's team of two or on the queue's one-thread worker, whichever
# gets there first (Note [Who runs a program] in runtime/queue.py): the same step's loss then
# differed in its last bits from run to run.
FULL_SUM_RUNS = 8


def _full_sum(e: Emitter, n: Node, red: int) -> None:
    x, b, runs, fold = n.src[0], e.b, FULL_SUM_RUNS, Fold(n)
    acc_t = cexpr.acc_type(n.op, n.dtype)
    b.line(f"{acc_t} part[{runs}];")
    _omp(b, red)
    with e.loop("c", runs):
        b.line(fold.decl())
        b.line(fold.pragma())
        with _run_rows(e, red, runs):
            v = e.load(x, _reduce_positions(e, n, x, n.arg, "0", "r"))
            b.line(fold.step(v))
        b.line("part[c] = acc;")
    b.line(f"{acc_t} acc = " + " + ".join(f"part[{c}]" for c in range(runs)) + ";")
    _store(e, n, "0", fold.result())


WINDOW_MAX = 16     # an arg-reduction over a last axis this short is done for a row at once


def argreduction(e: Emitter, n: Node) -> None:
    x, axis = n.src[0], n.arg
    size, b = x.shape[axis], e.b
    vt = vtype(x.dtype)
    init = cexpr.REDUCE_INIT[Op.RMAX if n.op is Op.ARGMAX else Op.RMIN](x.dtype)
    cmp = ">" if n.op is Op.ARGMAX else "<"

    def take(v: str, best: str) -> str:
        # Used in selects, not a branch: on data in no order a branch mispredicts every other
        # element.
        nan = f" || {v} != {v}" if x.dtype.is_floating_point else ""
        return f"!({best} != {best}) && ({v} {cmp} {best}{nan})"
    inner = _last_dim(x.shape[:axis])
    _omp(b, n.numel * size)
    if axis == len(x.shape) - 1 and size <= WINDOW_MAX and ROW_MIN <= inner <= WINDOW_ROWS_MAX:
        return _window_argreduction(e, n, x, vt, init, take, inner)
    with e.loop("o", n.numel):
        b.line(f"{vt} best = {init}; int64_t bi = 0;")
        with e.loop("r", size):
            v = e.load(x, _reduce_positions(e, n, x, (axis,), "o", "r"))
            b.line(f"const bool take = {take(v, 'best')};")
            b.line(f"best = take ? {v} : best; bi = take ? r : bi;")
        _store(e, n, "o", "bi")


# Outputs of one row in _window_argreduction's arrays on the stack: a row of 1M (argmax(1) of a
# (1M, 1) tensor, 12 MB) overflowed the stack and killed the process.
WINDOW_ROWS_MAX = 4096


def _last_dim(shape) -> int:
    return next((d for d in reversed(shape) if d != 1), 1)


def _window_argreduction(e: Emitter, n: Node, x: Node, vt: str, init: str, take,
                         inner: int) -> None:
    """Argmax/argmin over a short last axis (a pooling window): per row of outputs, the window
    element r is folded into every output of the row in one vectorisable loop, so position
    arithmetic is done once per row and no select waits on the one before it."""
    b, size = e.b, x.shape[-1]
    with e.loop("o", n.numel // inner):
        b.line(f"{vt} best[{inner}] WSE_ALIGNED; int64_t bi[{inner}] WSE_ALIGNED;")
        b.line(f"for (int64_t j = 0; j < {inner}; j++) {{ best[j] = {init}; bi[j] = 0; }}")
        with e.loop("r", size):
            b.line("#pragma omp simd")
            with e.loop("j", inner):
                v = e.load(x, Idx(x.shape, flat=f"(o * {inner} + j) * {size} + r"))
                b.line(f"const bool take = {take(v, 'best[j]')};")
                b.line(f"best[j] = take ? {v} : best[j]; bi[j] = take ? r : bi[j];")
        with e.loop("j", inner):
            _store(e, n, f"o * {inner} + j", "bi[j]")


def scan(e: Emitter, n: Node, axis: int, init: str, step) -> None:
    """Row-wise scan along `axis`: per row, the `init` statement; then at each position r the
    statements step(dims) emits, storing the value it returns there."""
    b, size = e.b, n.shape[axis]
    outer_shape = tuple(d for k, d in enumerate(n.shape) if k != axis)
    _omp(b, n.numel)
    with e.loop("o", _prod(outer_shape)):
        oi = Idx(outer_shape, flat="o")
        outer = [e.dim(oi, k) for k in range(len(outer_shape))]
        b.line(init)
        with e.loop("r", size):
            dims = outer[:axis] + ["r"] + outer[axis:]
            _store(e, n, e.flat(Idx(n.shape, dims=dims)), step(dims))


# scan op -> (initial accumulator, statement folding element `x` into `acc`). The accumulator
# is double for float/half values, as in PyTorch's CPU scans (acc_type); logcumsumexp's step is
# PyTorch's _log_add_exp_helper (csrc/wse_special.h).
_SCAN = {Op.CUMSUM: ("0", "acc += {x};"), Op.CUMPROD: ("1", "acc *= {x};"),
         Op.LOGCUMSUMEXP: ("(-INFINITY)", "acc = wsesp_log_add_exp((double){x}, acc);")}


def value_scan(e: Emitter, n: Node) -> None:
    """cumsum / cumprod / logcumsumexp: a running accumulator per row."""
    x = n.src[0]
    init, fold = _SCAN[n.op]

    def step(dims):
        e.b.line(fold.format(x=e.load(x, Idx(x.shape, dims=dims))))
        return cexpr.round_half(n.dtype, f"({vtype(n.dtype)})acc")
    scan(e, n, n.arg, f"{cexpr.acc_type(Op.SUM, n.dtype)} acc = {init};", step)


def _copy_base(e: Emitter, n: Node, base: Node) -> None:
    _omp(e.b, n.numel)
    with e.loop("i", n.numel):
        _store(e, n, "i", e.load(base, Idx(base.shape, flat="i")))


# SCATTER's reduce argument -> the binary op that folds a value into the element it hits.
SCATTER_REDUCE = {None: None, "add": Op.ADD, "mul": Op.MUL, "max": Op.MAX, "min": Op.MIN}


def _write(e: Emitter, n: Node, flat: str, value: str, combine: Op | None) -> None:
    if combine is not None:
        cur = cexpr.load_expr(n.dtype, f"{e.ptr(n)}[{flat}]")
        value = cexpr.binary(combine, n.dtype, cur, value)
    _store(e, n, flat, value)


def scatter_strided(e: Emitter, n: Node) -> None:
    base, value = n.src[:2]
    size, stride, offset = n.arg
    if offset is None:      # a runtime position (Note [Positions of writes] in wse_tensor.py)
        offset = e.load(n.src[2], Idx((), flat="0"))
    _copy_base(e, n, base)
    overlapping = any(s == 0 and d > 1 for s, d in zip(stride, size))
    if not overlapping:
        _omp(e.b, _prod(size))
    with e.loop("j", _prod(size)):
        vi = Idx(size, flat="j")
        terms = [str(offset)] + [times(e.dim(vi, k), s) for k, s in enumerate(stride)
                                 if size[k] != 1]
        _store(e, n, " + ".join(terms), e.load(value, vi))


def index_put(e: Emitter, n: Node) -> None:
    x, v, *indices = n.src
    first, count, ind_nd, front, accumulate = n.arg
    _copy_base(e, n, x)
    if not accumulate:
        _omp(e.b, v.numel)
    # Indices into x's leading dims (an embedding's gradient): each index position writes one
    # contiguous row of x, so the loop runs over rows, the index is loaded and checked once per
    # row (Note [Hoisted lines]) and the row's loop vectorises. Rows go in index order, so
    # accumulated values add up in the order of the flat loop. Rows of no elements: no loop.
    row = _prod(x.shape[count:]) if first == 0 and v.numel else 1
    with e.loop("o", v.numel // row), (e.loop("r", row) if row > 1 else nullcontext()):
        vi = Idx(v.shape, flat=f"o * {row} + r" if row > 1 else "o")
        dims = index_nd_dims(e, x, indices, (first, count, ind_nd, front), vi)
        target = e.flat(Idx(x.shape, dims=dims))
        _write(e, n, target, e.load(v, vi), Op.ADD if accumulate else None)


def scatter(e: Emitter, n: Node) -> None:
    x, index, value = n.src
    dim, reduce = n.arg
    _copy_base(e, n, x)
    # Element j of the index writes into x at j's own coordinates before `dim`, so rows of
    # those leading dims never collide and split across threads; inside a row, elements may
    # hit the same place and run in order (the last write wins, adds add up in index order).
    outer = _prod(index.shape[:dim])
    inner = index.numel // outer if outer else 0
    if outer > 1:
        _omp(e.b, index.numel)
    with e.loop("o", outer), e.loop("k", inner):
        ii = Idx(index.shape, flat=f"o * {inner} + k")
        dims = [e.dim(ii, k) for k in range(len(index.shape))]
        i = e.checked_index(e.load(index, ii), x.shape[dim], dim)
        target = e.flat(Idx(x.shape, dims=[i if k == dim else d for k, d in enumerate(dims)]))
        _write(e, n, target, e.load(value, Idx(value.shape, dims=dims)), SCATTER_REDUCE[reduce])


POOL_TILE = 1024   # outputs of one row whose running maxima a pooling kernel keeps at once


def pool_argmax(e: Emitter, n: Node) -> None:
    """max_pool2d's indices (Op.POOL_ARGMAX), picked as PyTorch's CPU kernel picks them: the
    first maximum of each window, a NaN over any number (the last NaN), and the first position
    in bounds when every value is -inf. Per row of outputs the taps run outermost and the
    outputs innermost, in one vectorised loop of selects: a loop per window chains its selects,
    which the compiler turns into branches that mispredict on data in no order (9x slower)."""
    x, b = n.src[0], e.b
    kh, kw, sh, sw, ph, pw, dh, dw = n.arg
    (h, w), (oh, ow) = x.shape[-2:], n.shape[-2:]
    if not n.numel:
        return
    vt, px, out = vtype(x.dtype), e.ptr(x), e.ptr(n)
    # Taps can fall outside the input only with padding or ceil_mode's partial last window.
    check_h = ph > 0 or (oh - 1) * sh + (kh - 1) * dh >= h
    check_w = pw > 0 or (ow - 1) * sw + (kw - 1) * dw >= w
    tile = min(ow, POOL_TILE)
    _omp(b, n.numel * kh * kw)
    with e.loop("r", n.numel // ow):          # output row r % oh of plane r / oh
        b.line(f"const int64_t base = (r / {oh}) * {h * w}, h0 = (r % {oh}) * {sh} - {ph};")
        with e.loop("cb", ow, step=tile):
            count = str(tile) if tile == ow else f"({ow} - cb < {tile} ? {ow} - cb : {tile})"
            b.line(f"{vt} best[{tile}] WSE_ALIGNED; int64_t bi[{tile}] WSE_ALIGNED;")
            b.line(f"for (int64_t c = 0; c < {tile}; c++) {{ best[c] = 0; bi[c] = -1; }}")
            with e.loop("i", kh):
                b.line(f"const int64_t ih = h0 + i * {dh};")
                if check_h:
                    b.line(f"if ((uint64_t)ih >= (uint64_t){h}) continue;")
                with e.loop("j", kw):
                    b.line("#pragma omp simd")
                    with b.block(f"for (int64_t c = 0; c < {count}; c++)"):
                        b.line(f"const int64_t iw = (cb + c) * {sw} + j * {dw} - {pw};")
                        ok, at = "", "iw"
                        if check_w:
                            b.line(f"const bool in = (uint64_t)iw < (uint64_t){w};")
                            ok, at = "in & ", "(in ? iw : 0)"
                        v = cexpr.load_expr(x.dtype, f"{px}[base + ih * {w} + {at}]")
                        b.line(f"const {vt} v = {v};")
                        b.line(f"const bool take = {ok}((bi[c] < 0) | (v > best[c]) | (v != v));")
                        b.line(f"best[c] = take ? v : best[c]; bi[c] = take ? ih * {w} + iw : bi[c];")
            with b.block(f"for (int64_t c = 0; c < {count}; c++)"):
                b.line(f"{out}[r * {ow} + cb + c] = bi[c];")


SLICED = "_sliced"       # the library GEMMs a run can pause inside; program.py looks for it


def _gemm_operand(e: Emitter, s: Node, stored: Node, trans: bool, view):
    """(pointer, transposed, leading dimension, (H, stride, inner stride)) of GEMM operand s,
    stored as gemm_operand says: its matrix for product b is at (b / H) * stride + (b % H) *
    inner stride (Note [Two-level batches] in csrc/wse_kernels.c)."""
    if id(stored) not in e.ptrs:
        raise CodegenUnsupported("matmul operand was not scheduled into a buffer")
    if view is None:            # the stored node's own bytes: its matrices one after another
        rows, cols = s.shape[-2], s.shape[-1]
        count = _prod(s.shape[:-2])
        ptr, ld = e.ptr(stored), rows if trans else cols
        batch = ((count, rows * cols),) if count > 1 else ()
    else:
        offset, ld, batch = view
        ptr = f"({e.ptr(stored)} + {offset})" if offset else e.ptr(stored)
    if len(batch) < 2:          # one level, or none: broadcast over the batch
        return ptr, int(trans), ld, (1, batch[0][1] if batch else 0, 0)
    (_, outer), (heads, inner) = batch
    return ptr, int(trans), ld, (heads, outer, inner)


def _holds_bf16(stored: Node) -> bool:
    """Whether a float GEMM operand's buffer holds bfloat16 values: a cast of a bfloat16 node
    (autocast's products, trace/lower.py matmul), exact in float and back."""
    return stored.op is Op.CAST and stored.src[0].dtype is torch.bfloat16


def matmul(e: Emitter, n: Node) -> None:
    a, b = n.src
    m, k, nn = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = _prod(n.shape[:-2])
    found_a, found_b = gemm_operand(a, e.ptrs), gemm_operand(b, e.ptrs)
    pa, ta, lda, (ha, sa, ia) = _gemm_operand(e, a, *found_a)
    pb, tb, ldb, (hb, sb, ib) = _gemm_operand(e, b, *found_b)
    out = e.ptr(n)
    fn = "gemm_f64" if n.dtype.itemsize == 8 else "gemm_f32"
    if fn == "gemm_f32" and _holds_bf16(found_a[0]) and _holds_bf16(found_b[0]):
        fn = "gemm_bf16"        # Note [BF16 GEMM] in csrc/wse_gemm_bf16.c
    heads = "0"
    if ha > 1 or hb > 1:
        e.b.line(f"static const int64_t hb[4] = {{{ha}, {ia}, {hb}, {ib}}};")
        heads = "hb"
    if k == 0:
        e.b.line(f"memset({out}, 0, sizeof(*{out}) * {n.numel});")
    elif n.numel:               # may pause inside (Note [Sliced GEMM] in csrc/wse_kernels.c)
        e.b.line(f"err = lib->{fn}{SLICED}({batch}, {ta}, {tb}, {m}, {nn}, {k}, 1, {pa}, {lda}, "
                 f"{sa}, {pb}, {ldb}, {sb}, 0, {out}, {nn}, {m * nn}, WSE_MAX_TILE, {heads});")


def conv(e: Emitter, n: Node) -> None:
    first, second = n.src
    sh, sw, ph, pw, dh, dw, groups = n.arg
    if n.op is Op.CONV2D:
        x, w, y = first, second, n
    elif n.op is Op.CONV2D_BWD_INPUT:
        y, w, x = first, second, n
    else:
        y, x, w = first, second, n
    dims = list(x.shape) + [w.shape[0], w.shape[2], w.shape[3], sh, sw, ph, pw, dh, dw, groups,
                            y.shape[2], y.shape[3]]
    fn = {Op.CONV2D: "conv2d_f32", Op.CONV2D_BWD_INPUT: "conv2d_bwd_input_f32",
          Op.CONV2D_BWD_WEIGHT: "conv2d_bwd_weight_f32"}[n.op]
    e.b.line(f"static const int64_t cp[16] = {{{', '.join(map(str, dims))}}};")
    if n.numel:
        e.b.line(f"err = lib->{fn}({e.ptr(first)}, {e.ptr(second)}, {e.ptr(n)}, cp, errinfo);")


def linalg(e: Emitter, n: Node) -> None:
    """A LAPACK routine of csrc/wse_linalg.c; n.arg is its parameter list (Note [LAPACK nodes]
    in trace/lower_linalg.py)."""
    e.b.line(f"static const int64_t lp[] = {{{', '.join(map(str, n.arg))}}};")
    ins = ", ".join(f"(const void*){e.ptr(s)}" for s in n.src)
    e.b.line(f"const void* li[] = {{{ins}}};")
    e.b.line(f"err = lib->linalg(lp, li, {e.ptr(n)}, errinfo);")


TEMPLATES = {
    Op.ARGMAX: argreduction, Op.ARGMIN: argreduction, Op.CUMSUM: value_scan,
    Op.CUMPROD: value_scan, Op.LOGCUMSUMEXP: value_scan,
    Op.SCATTER_STRIDED: scatter_strided, Op.INDEX_PUT: index_put, Op.SCATTER: scatter,
    Op.MATMUL: matmul, Op.CONV2D: conv, Op.CONV2D_BWD_INPUT: conv, Op.CONV2D_BWD_WEIGHT: conv,
    Op.LINALG: linalg, Op.POOL_ARGMAX: pool_argmax,
}


def emit_kernel(n: Node, ptrs: dict, realized: set, may_alias=(),
                also=()) -> tuple[str, list, list]:
    """The body of the C function that computes realized node `n` into its buffer, with the
    pointer expressions and scalar slots its caller binds to P[i] and S[j]. `may_alias`: input
    positions a run may pass as an output's own buffer (Note [Donation] in program.py).
    `also`: elementwise nodes of n's shape computed in the same loop (Note [Kernel groups])."""
    body = CBuilder()
    body._indent = 1
    e = Emitter(body, ptrs, realized)
    if may_alias:
        e.may_alias = set(may_alias) | {ptrs[id(m)] for m in (n, *also)}
    if also:
        pointwise(e, n, also)
    else:
        template = TEMPLATES.get(n.op) or (reduction if n.op in REDUCE else pointwise)
        template(e, n)
    lines = ["  int err = 0; (void)err;"]
    lines += ["  " + decl for _, decl in e.decls.values()]
    lines += body.lines
    lines += ["  return err;", "}", ""]
    slots = sorted(e.scalar_args, key=e.scalar_args.get)
    return "\n".join(lines), e.ptr_args, slots


from . import kernels_sort  # noqa: E402,F401  (registers the sort/search/scan row templates)
