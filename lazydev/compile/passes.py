"""Graph passes run on a cache miss: canonicalise, then schedule (choose what is materialised).

Each pass is a small named function; `pipeline` in compile/__init__.py runs them in order.
"""
from __future__ import annotations

import math
import os

from ..trace.build import contiguous_strides, is_contiguous
from .cexpr import MATH_CALLS
from ..trace.ir import ELEMENTWISE, LEAF, LIBRARY, MOVEMENT, REDUCE, SCATTERS, Node, Op, toposort


class IRCheckError(AssertionError):
    pass


def check(nodes: list[Node], stage: str) -> None:
    """With LAZYDEV_CHECK=1, verify basic IR invariants after each pass."""
    if os.environ.get("LAZYDEV_CHECK") != "1":
        return
    for n in nodes:
        if n.op in ELEMENTWISE:
            for s in n.src:
                if s.shape != n.shape and s.shape != ():
                    raise IRCheckError(f"after {stage}: {n} has source of shape {s.shape}")
        if n.op is Op.RESHAPE and n.src[0].numel != n.numel:
            raise IRCheckError(f"after {stage}: reshape changes numel: {n}")
        if n.op is Op.EXPAND and len(n.src[0].shape) != len(n.shape):
            raise IRCheckError(f"after {stage}: expand changes rank: {n}")


# ---- canonicalise -----------------------------------------------------------------------------

def _permutation_of_contiguous(shape, stride):
    """If `stride` is a permutation of the contiguous strides of some permuted shape, return
    (permuted_shape, perm) such that as_strided == permute(reshape(src, permuted_shape), perm)."""
    dims = [i for i in range(len(shape))]
    order = sorted(dims, key=lambda i: (-stride[i], -shape[i]))
    pshape = tuple(shape[i] for i in order)
    if tuple(stride[i] for i in order) != contiguous_strides(pshape):
        for i in order:      # size-1 dims may carry any stride
            if shape[i] != 1 and stride[i] != contiguous_strides(pshape)[order.index(i)]:
                return None
    perm = tuple(order.index(i) for i in dims)
    return pshape, perm


def _canon_node(n: Node, src: tuple) -> Node:
    op = n.op
    if op is Op.RESHAPE:
        (x,) = src
        if x.shape == n.shape:
            return x
        if x.op is Op.RESHAPE:
            x = x.src[0]
            if x.shape == n.shape:
                return x
        if x.op is Op.DATA:         # a buffer is flat: any shape of the same numel reads it
            return Node(Op.DATA, x.dtype, n.shape, (), x.arg)
        return Node(op, n.dtype, n.shape, (x,), n.arg)
    if op is Op.EXPAND and src[0].shape == n.shape:
        return src[0]
    if op is Op.CAST and src[0].dtype == n.dtype:
        return src[0]
    if op is Op.PERMUTE and n.arg == tuple(range(len(n.arg))):
        return src[0]
    if op is Op.AS_STRIDED:
        return _canon_as_strided(n, src[0])
    return n if all(a is b for a, b in zip(src, n.src)) else n.replace(src=src)


def _canon_as_strided(n: Node, x: Node) -> Node:
    stride, offset = n.arg
    if offset == 0 and n.numel == x.numel and n.numel > 0:
        if is_contiguous(n.shape, stride):
            return _canon_node(Node(Op.RESHAPE, n.dtype, n.shape, (x,)), (x,))
        found = _permutation_of_contiguous(n.shape, stride)
        if found is not None:
            pshape, perm = found
            inner = _canon_node(Node(Op.RESHAPE, n.dtype, pshape, (x,)), (x,))
            return Node(Op.PERMUTE, n.dtype, n.shape, (inner,), perm)
    return Node(Op.AS_STRIDED, n.dtype, n.shape, (x,), n.arg)


def _swap_last(t: tuple) -> tuple:
    return tuple(t[:-2]) + (t[-1], t[-2])


def _blas_transpose(nd: int) -> tuple:
    """The permutation a GEMM reads as BLAS's transpose flag (gemm_operand): the last two dims
    swapped."""
    return _swap_last(tuple(range(nd)))


def _gemm_view(s: Node, by_key: dict) -> Node:
    """GEMM operand `s`, with a strided view whose last two dims are swapped in memory turned
    into the transpose of a row-major view: the key of attention (`k.transpose(-2, -1)` of a head
    split of the QKV projection) and, in the backward pass, its transpose back. With at most two
    batch dims the GEMM reads it in place either way (Note [Two-level batches] in
    csrc/wse_kernels.c). With more it is copied, and copied untransposed the copy reads whole
    rows and BLAS transposes it, where the transposed copy read one element per source row
    (8x4x64x128: 200-260 us, against 60-80 for the row copy). The new view is shared by key, so
    every GEMM that reads the key, either way round, reads one copy."""
    swap = _blas_transpose(len(s.shape))
    outer = s.op is Op.PERMUTE and s.arg == swap        # already the BLAS transpose flag
    x = s.src[0] if outer else s
    v = x.src[0] if x.op is Op.RESHAPE else x           # a reshape merging batch dims (bmm)
    if v.op is not Op.AS_STRIDED or len(v.shape) < 2 or min(v.shape[-2:]) < 2 \
            or v.shape[-2:] != x.shape[-2:]:
        return s
    stride, offset = v.arg
    if not 0 < stride[-2] < stride[-1]:       # not swapped (or a broadcast row: stride 0)
        return s
    inner = _canon_as_strided(Node(Op.AS_STRIDED, v.dtype, _swap_last(v.shape), v.src,
                                   (_swap_last(stride), offset)), v.src[0])
    inner = by_key.setdefault(inner.key, inner)
    if v is not x:
        inner = _canon_node(Node(Op.RESHAPE, x.dtype, _swap_last(x.shape), (inner,)), (inner,))
        inner = by_key.setdefault(inner.key, inner)
    if outer:                                           # the transpose of the transpose
        return inner
    return Node(Op.PERMUTE, s.dtype, s.shape, (inner,), swap)


def _gemm_cast(s: Node, by_key: dict) -> Node:
    """GEMM operand `s`, a cast of a transpose (autocast's `x @ w.to(bf16).t()`, lowered as
    float32 GEMMs on bfloat16 values, trace/lower.py), turned into the transpose of the cast:
    the cast then runs over the weight as it lies and the GEMM reads it transposed in place.
    Materialised as it was, the cast read one element per source row: a 1024x1024 weight's
    took 1.66 ms of the mixed-precision MLP's 12.9 ms program, its 4 KiB row stride thrashing
    every cache level. The inner cast is shared by key, so the backward GEMM that reads the
    weight untransposed reads the same buffer."""
    swap = _blas_transpose(len(s.shape))
    casts, v = [], s
    while v.op is Op.CAST:
        casts.append(v)
        v = v.src[0]
    if not casts or v.op is not Op.PERMUTE or v.arg != swap:
        return s
    inner = v.src[0]
    for c in reversed(casts):
        cast = Node(Op.CAST, c.dtype, inner.shape, (inner,), c.arg)
        inner = by_key.setdefault(cast.key, cast)
    return Node(Op.PERMUTE, s.dtype, s.shape, (inner,), swap)


def canonicalise(outputs: list[Node]) -> list[Node]:
    """Fold no-op movement, fold reshape chains, turn simple as_strided into reshape/permute,
    give GEMMs their transposed views as transposes (`_gemm_view`) and their casts of
    transposes as transposes of casts (`_gemm_cast`), and merge structurally equal nodes (CSE
    by key)."""
    by_key: dict = {}
    new_of: dict = {}
    for n in toposort(outputs):
        src = tuple(new_of[id(s)] for s in n.src)
        if n.op is Op.MATMUL:
            src = tuple(by_key.setdefault(v.key, v) for v in
                        (_gemm_cast(_gemm_view(s, by_key), by_key) for s in src))
        m = _canon_node(n, src)
        m = by_key.setdefault(m.key, m)
        new_of[id(n)] = m
    return [new_of[id(o)] for o in outputs]


# ---- schedule ---------------------------------------------------------------------------------

def _cheap(n: Node, realized: set) -> bool:
    """Cheap to recompute at every use: leaves and movement/casts of leaves or buffers."""
    while True:
        if n.op in LEAF or id(n) in realized:
            return True
        if n.op in (Op.EXPAND, Op.RESHAPE, Op.PERMUTE, Op.CAST, Op.AS_STRIDED):
            n = n.src[0]
            continue
        return False


def gemm_operand(s: Node, realized: set | None = None) -> tuple[Node, bool, tuple | None]:
    """(the node whose buffer a GEMM reads for operand s, transposed?, view). A transpose of the
    last two dims is the BLAS transpose flag, and a reshape of a buffer is the same bytes, so
    neither is copied; nor is a strided view a GEMM can address (Note [Two-level batches] in
    csrc/wse_kernels.c): then `view` is (element offset, leading dimension, its batch dims as
    (size, stride) pairs), else None. Shared by the scheduler and the GEMM kernel template so
    both agree."""
    def kept(n):
        return realized is not None and id(n) in realized
    nd, trans = len(s.shape), False
    if s.op is Op.PERMUTE and s.arg == _blas_transpose(nd) and not kept(s):
        s, trans = s.src[0], True
    top = s
    while s.op is Op.RESHAPE and not kept(s):
        s = s.src[0]
    strided = s.op in (Op.AS_STRIDED, Op.PERMUTE) and not kept(s)
    view = _gemm_strided(s, top) if strided else None
    if view is None:
        return s, trans, None
    base, flip, view = view
    return base, trans ^ flip, view


def _view_strides(v: Node) -> tuple:
    """(strides, element offset) of a strided view or of a permutation of contiguous values."""
    if v.op is Op.AS_STRIDED:
        return v.arg
    inner = contiguous_strides(v.src[0].shape)
    return tuple(inner[p] for p in v.arg), 0


def _gemm_strided(v: Node, top: Node):
    """(buffer node, transposed?, (offset, ld, batch)) when the view `v` (strided, or a
    permutation), read as `top` (a reshape of it merging or splitting batch dims only), is
    matrices BLAS can address: rows or columns of unit stride, at most two batch dims of any
    stride; else None."""
    if len(v.shape) < 2 or v.shape[-2:] != top.shape[-2:]:
        return None
    stride, offset = _view_strides(v)
    batch = tuple((n, st) for n, st in zip(v.shape[:-2], stride[:-2]) if n != 1)
    if len(batch) > 2 or v.numel == 0:
        return None
    (rows, cols), (sr, sc) = v.shape[-2:], stride[-2:]
    if (sc == 1 or cols == 1) and sr >= cols and sr > 0:
        flip, ld = False, sr
    elif (sr == 1 or rows == 1) and sc >= rows and sc > 0:
        flip, ld = True, sc
    else:
        return None
    base = v.src[0]
    while base.op is Op.RESHAPE:
        base = base.src[0]
    if base.op in MOVEMENT or base.dtype != v.dtype:
        return None
    return base, flip, (offset, ld, batch)


def _producer(n: Node) -> Node:
    """The node under a chain of pure index rewrites: what to materialise instead of a view."""
    while n.op in (Op.RESHAPE, Op.PERMUTE, Op.EXPAND):
        n = n.src[0]
    return n


# Note [Early reads]
# A read waits only for the kernel calls before the one that writes what it reads (Layout.
# out_ready, ExecQueue.wait), and the rest of the program runs on the queue's worker while the
# host traces on. So the order of calls puts the scalar outputs' subgraphs first: a training
# step's loss is then written right after the forward pass, not at the end of the program,
# and `loss.item()` after `mark_step()` waits for the forward pass only, while the worker runs
# the backward pass and the update beside the tracing of the next step. Other outputs keep the
# order in which they were cut (the backward pass interleaved with each parameter's update).
# Kernels that can fail come right after the scalars (program.generate): that they still run
# before any update they could leave half done is _donatable's to check, whatever the order.
# If a call after a read fails, the values final before it keep them (a second read agrees with
# the first), the step's updates to existing tensors are undone, and the error is raised at the
# next read (trace/sync._raise_failures).
def roots(outputs: list[Node], then=()) -> list[Node]:
    """toposort's roots for `outputs`: the scalars, `then`, the other outputs (Note [Early
    reads])."""
    return ([o for o in outputs if o.numel == 1] + list(then)
            + [o for o in outputs if o.numel != 1])


def schedule(outputs: list[Node]) -> tuple[list[Node], set]:
    """Topological order and the set (of ids) of nodes that get their own buffer. The rest are
    computed inline, fused into the loop nest of the realized node that uses them."""
    order = toposort(roots(outputs))
    realized = {id(o) for o in outputs if o.op is not Op.DATA}
    uses: dict = {}
    for n in order:
        if n.op in REDUCE or n.op in LIBRARY or n.op in SCATTERS:
            realized.add(id(n))
        if n.op in LIBRARY:
            for s in n.src:
                realized.add(id(gemm_operand(s)[0] if n.op is Op.MATMUL else s))
        for s in n.src:
            uses[id(s)] = uses.get(id(s), 0) + 1
    for n in reversed(order):                 # consumers before producers
        if n.op is Op.EXPAND and n.numel > n.src[0].numel and not _cheap(n.src[0], realized):
            realized.add(id(_producer(n.src[0])))   # broadcasting an expensive value: once
        if n.op in (Op.GATHER, Op.INDEX_ND) and not _cheap(n.src[0], realized):
            realized.add(id(_producer(n.src[0])))   # random access into an expensive value
        if n.op is Op.SEQSUM and not _cheap(n.src[0], realized):
            # SEQSUM reproduces a CPU kernel's float rounding: inlined, its operand's last
            # product would be contracted into the sum (an fma) by the C compiler.
            realized.add(id(_producer(n.src[0])))
    for n in order:
        if (uses.get(id(n), 0) > 1 and not _cheap(n, realized) and n.op not in MOVEMENT
                and not _recomputed(n, realized)):
            realized.add(id(n))               # shared by several consumers: compute it once
    users, outs = _users(order), {id(o) for o in outputs}
    realized -= _shared_in_one_loop(order, users, realized, outs)
    # Values stored to bound a loop body's size, like outputs, stay stored from here on.
    pinned = outs | _bound_fusion_depth(order, realized)
    realized -= _row_reductions(order, users, realized, pinned)
    realized -= _recomputed_per_row(order, users, realized, pinned)
    for n in order:
        if n.op is Op.DATA:
            realized.discard(id(n))
    return order, realized


# Note [Recomputed values]
# A value made by a few arithmetic ops from one stored value of its size, plus broadcasts and
# scalars (a convolution plus its bias, x - mean, y * rstd), costs each reader one load per
# element inline, as much as reading it back from a buffer would. Stored, it would add a kernel
# and a pass writing it. So it is computed inline by every reader, however many.
RECOMPUTE_OPS = 4       # elementwise ops an inline value may take to be recomputed per reader


def _recomputed(n: Node, realized: set) -> bool:
    """Whether n is cheap enough to compute in each of its readers (Note [Recomputed values]):
    at most RECOMPUTE_OPS elementwise ops without math calls, over at most one stored value of
    n's size; broadcasts, reshapes, scalars and constants free."""
    if n.op not in ELEMENTWISE:
        return False
    ops, loads, stack, seen = 0, 0, [n], set()
    while stack:
        m = stack.pop()
        if id(m) in realized or m.op in LEAF:
            if m.numel == n.numel and (m.op is Op.DATA or id(m) in realized):
                loads += 1
            continue
        if m.op in ELEMENTWISE:
            ops += 1
            if m.op in MATH_CALLS and m.dtype.is_floating_point:
                return False
        elif m.op not in (Op.EXPAND, Op.RESHAPE):
            return False
        for s in m.src:
            if id(s) not in seen:
                seen.add(id(s))
                stack.append(s)
    return ops <= RECOMPUTE_OPS and loads <= 1


def _users(order: list[Node]) -> dict:
    """id(node) -> the nodes reading it."""
    users: dict = {}
    for n in order:
        for s in n.src:
            users.setdefault(id(s), []).append(n)
    return users


def _shared_in_one_loop(order: list[Node], users: dict, realized: set, pinned: set) -> set:
    """Values used several times, but all at their own position by one kernel's loop (GELU's
    input, read by its two factors): that loop computes them once (a value read twice at one
    position is one C temporary, Note [Index expressions]), so a buffer would only add a pass.
    Runs before any reduction is fused, so _reading_loops sees own-position readers only."""
    return {id(n) for n in order if id(n) in realized and id(n) not in pinned
            and n.op in ELEMENTWISE and len(_reading_loops(n, users, realized)) == 1}


MAX_FUSED_DEPTH = 48   # nodes inlined along one chain into one loop body


def _bound_fusion_depth(order: list[Node], realized: set) -> set:
    """Materialise every MAX_FUSED_DEPTH-th node of a long inline chain: codegen inlines
    recursively, and one loop body the size of a whole 500-op chain helps no compiler.
    Returns the ids it materialised."""
    depth: dict = {}
    added = set()
    for n in order:
        d = 1 + max((depth[id(s)] for s in n.src), default=0)
        if id(n) in realized or n.op in LEAF:
            d = 0
        elif d >= MAX_FUSED_DEPTH:
            realized.add(id(n))
            added.add(id(n))
            d = 0
        depth[id(n)] = d
    return added


# Note [Row reductions]
# LayerNorm's mean and variance and softmax's max and sum reduce the last axis of a row, and
# the row's elements then read the result back through a broadcast. Realized, each reduction is
# a kernel of its own and a pass over the whole tensor: the LayerNorm+GELU+softmax block made 11
# kernels. A reduction over a last axis of at most ROW_FUSE_MAX elements whose every reader
# computes whole rows of the same shape is not realized: the reader's kernel computes it per row,
# in a loop of its own before the row's elements (kernels_row.row_reductions), while the row is in
# L1. Readers that qualify: elementwise kernels with a row loop (last dim >= ROW_MIN) and
# last-axis reductions, reached only through elementwise ops of the reduction's shape, one
# broadcast of its last dim, and elementwise ops of the row's shape. Anything else (a saved
# statistic, a view, another reduction) keeps the reduction realized.
ROW_MIN = 8             # a last dim at least this long gets its own inner loop (kernels.py)
ROW_STAGE_MAX = 4096    # elements of a row a kernel may keep in a stack array (kernels_row.py)
ROW_FUSE_MAX = 8192     # elements of a row reduction a reader may compute per row
_ROW_FOLDS = frozenset({Op.SUM, Op.RMAX, Op.RMIN})


def _row_reduction(n: Node) -> bool:
    """A reduction over the last axis only, of rows long enough for an inner loop."""
    if n.op not in _ROW_FOLDS:
        return False
    x = n.src[0]
    nd = len(x.shape)
    return (nd >= 2 and n.arg == (nd - 1,) and n.shape == x.shape[:-1] + (1,)
            and ROW_MIN <= x.shape[-1] and math.prod(x.shape[:-1]) > 1)


def _row_reductions(order: list[Node], users: dict, realized: set, pinned: set) -> set:
    """Ids of the reductions computed per row by their readers, and of the statistics between
    them and the broadcast, which the broadcast rule realized (Note [Row reductions])."""
    fused: set = set()
    for n in reversed(order):       # readers first: a fused reduction may read another
        if id(n) in pinned or not _row_reduction(n) or n.src[0].shape[-1] > ROW_FUSE_MAX:
            continue
        stats = _read_per_row(n, users, realized, fused, pinned)
        if stats is not None:
            fused.add(id(n))
            fused |= stats
    return fused


def _read_per_row(r: Node, users: dict, realized: set, fused: set, pinned: set) -> set | None:
    """The statistics on the way to r's broadcasts if every reader of r computes whole rows
    of r's rows, else None."""
    rows, stats = r.shape[:-1], set()
    stack, seen = [r], set()
    while stack:
        m = stack.pop()
        for c in users.get(id(m), ()):
            if id(c) in seen:
                continue
            seen.add(id(c))
            kept = id(c) in realized
            if c.op in ELEMENTWISE and c.shape == r.shape and id(c) not in pinned:
                stats.add(id(c))        # a statistic of the row: mean, rsqrt(var + eps)
                stack.append(c)
            elif c.op in REDUCE:        # a reduction of the row's elements, per row itself
                if not (id(c) in fused or kept and _row_reduction(c)) or m.shape == r.shape:
                    return None
            elif c.shape[:-1] != rows or c.shape[-1] < ROW_MIN:
                return None
            elif c.op in ELEMENTWISE and kept:
                continue                # a kernel with a row loop
            elif c.op in ELEMENTWISE or c.op is Op.EXPAND and not kept:
                stack.append(c)         # the broadcast, and the row's elements reading it
            else:
                return None
    return stats


def _recomputed_per_row(order: list[Node], users: dict, realized: set, pinned: set) -> set:
    """Values read only by one row loop, at their own position and by the row reductions that
    loop computes. Cheap ones (LayerNorm's x - mean, read by the variance and by the
    normalisation) that loop computes twice per element instead of storing them; ones making
    a math call on rows of at most ROW_STAGE_MAX elements (softmax's exp) it computes once per
    row into a stack array (Note [Row-staged values] in kernels_row.py)."""
    return {id(n) for n in order if id(n) in realized and id(n) not in pinned
            and n.op in ELEMENTWISE and len(n.shape) >= 2
            and (not _calls(n, realized) or _staged_per_row(n, users, realized))
            and len(_reading_loops(n, users, realized)) == 1}


def _staged_per_row(n: Node, users: dict, realized: set) -> bool:
    """Whether a value making a math call is the input of a row reduction its reader computes,
    on rows short enough for a stack array (Note [Row-staged values] in kernels_row.py). Only that
    plain shape: a value reached through other inline ones could be recomputed by loops that
    do not store it (a CTC loss's chain of logsumexps grew one kernel to 5 MB of C)."""
    return n.shape[-1] <= ROW_STAGE_MAX and any(
        c.op in REDUCE and c.src[0] is n and id(c) not in realized for c in users.get(id(n), ()))


def _calls(n: Node, realized: set) -> bool:
    """Whether computing n inline makes a vector-math call."""
    stack, seen = [n], set()
    while stack:
        m = stack.pop()
        if m.op in MATH_CALLS and m.dtype.is_floating_point:
            return True
        for s in m.src:
            if id(s) not in realized and id(s) not in seen and s.op is not Op.DATA:
                seen.add(id(s))
                stack.append(s)
    return False


def _reading_loops(n: Node, users: dict, realized: set) -> set:
    """The kernels reading n through elementwise ops of n's shape (at n's own position), or
    through a row reduction they compute (Note [Row reductions]); an empty set if anything
    else reads it."""
    kernels, stack, seen = set(), [(n, False)], set()
    while stack:
        m, stat = stack.pop()
        for c in users.get(id(m), ()):
            if id(c) in realized:
                if c.op not in ELEMENTWISE or c.shape != n.shape:
                    return set()
                kernels.add(id(c))
                continue
            if id(c) in seen:
                continue
            seen.add(id(c))
            if c.op in REDUCE or stat and (c.op in ELEMENTWISE or c.op is Op.EXPAND):
                stack.append((c, c.shape != n.shape))  # fused: its readers are row loops
            elif c.op in ELEMENTWISE and c.shape == n.shape:
                stack.append((c, False))
            else:
                return set()
    return kernels
