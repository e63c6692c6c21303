"""C code generation: one C function per realized node, fused loop nests, one entry point.

Note [Index expressions]
A node that is not realized is computed inline wherever it is read. Reading node n at a position
is `Emitter.load(n, idx)`, where `idx` describes the position in n's own shape either as one
row-major flat index or as one C expression per dim (each derived from the other on demand).
Movement ops only rewrite the index (expand zeroes broadcast dims, permute reorders them,
reshape goes through the flat index, as_strided through strides); elementwise ops load their
sources at the same index and apply the C expression from cexpr.py. Every loaded value is bound
to a const temporary, so a value used twice in one loop body is computed once.
"""
from __future__ import annotations

import contextlib
import re

from ..runtime.device import ERR_INDEX_DIM
from ..trace.ir import BINARY, UNARY, Node, Op
from . import cexpr
from .affine import IndexAlgebra
from .cbuilder import CBuilder
from .cexpr import CodegenUnsupported, literal, vtype

SPECIAL_PREFIX = "wsesp_"   # every function of csrc/wse_special.h
PARALLEL_MIN = 32768       # elements (times inner work) below which a loop stays serial
_DIV_OPS = {Op.FLOORDIV, Op.TRUNCDIV, Op.MOD, Op.FMOD}


class Idx:
    """A position in a tensor of `shape` (Note [Index expressions])."""

    __slots__ = ("shape", "dims", "flat")

    def __init__(self, shape, dims=None, flat=None):
        self.shape = tuple(shape)
        self.dims = list(dims) if dims is not None else None
        self.flat = flat

    def key(self):
        return ("f", self.flat) if self.flat is not None else ("d", tuple(self.dims))


class Emitter:
    """Emits the body of one kernel."""

    def __init__(self, b: CBuilder, ptrs: dict, realized: set):
        self.b = b
        self.ptrs = ptrs            # id(node) -> pointer code (program.generate), realized nodes
        self.realized = realized
        self.decls: dict = {}       # pointer variable -> declaration
        # The kernel reads its buffers as P[i] and its runtime scalars as S[j]; the caller binds
        # them (Note [Kernel deduplication] in program.py), so equal loop nests are equal text.
        self.ptr_args: list = []    # pointer code per P index
        self.scalar_args: dict = {}  # scalar slot -> S index
        self.uses_error = False
        self.may_alias: set = set()   # pointer codes one run may bind to the same buffer
        self.ix = IndexAlgebra(lambda expr: self.index_temp(expr, "q"))
        self.row_values: dict = {}  # id(reduction) -> its value in the row being computed
        self.row_staged: set = set()  # ids of values a row kernel stores per row (kernels_row.py)
        self.row_arrays: dict = {}  # id(value) -> its row's stack array, once stored
        self.row_dims: list = []    # the coordinates of the row being computed

    # -- indices --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def loop(self, var: str, extent, step: int = 1, hi: int | None = None):
        """`for (var = 0; var < extent; var += step)`, its range known to index simplification
        (Note [Affine indices]); `hi` bounds var when `extent` is not a number."""
        if hi is None:
            hi = (int(extent) - 1) // step * step
        inc = f"{var}++" if step == 1 else f"{var} += {step}"
        prev = self.ix.set_range(var, 0, hi)
        runs = str(extent).isdigit() and int(extent) > 0
        try:
            with self.b.block(f"for (int64_t {var} = 0; {var} < {extent}; {inc})",
                              loop_var=var if runs else None):
                yield
        finally:
            self.ix.restore(var, prev)

    def index_temp(self, expr: str, prefix: str) -> str:
        """Bind an int64 index expression, in its simplest affine form where it has one."""
        a = self.ix.parse(expr)
        if a is not None:
            expr = a.c()
        name = self.b.temp("int64_t", expr, prefix=prefix)
        self.ix.learn(name, expr)
        return name

    def dim(self, idx: Idx, k: int) -> str:
        if idx.dims is None:
            idx.dims = [None] * len(idx.shape)
        if idx.dims[k] is None:
            size = idx.shape[k]
            if size == 1:
                idx.dims[k] = "0"
            else:
                stride = 1
                for d in idx.shape[k + 1:]:
                    stride *= d
                expr = self.ix.coordinate(idx.flat, stride, size if k > 0 else None)
                if expr is None:
                    expr = f"({idx.flat})" if stride == 1 else f"(({idx.flat}) / {stride})"
                    if k > 0:
                        expr = f"({expr} % {size})"
                idx.dims[k] = self.index_temp(expr, "q")
        return idx.dims[k]

    def flat(self, idx: Idx) -> str:
        if idx.flat is None:
            terms, stride = [], 1
            for k in reversed(range(len(idx.shape))):
                if idx.shape[k] != 1:
                    d = self.dim(idx, k)
                    if d != "0":
                        terms.append(times(d, stride))
                stride *= idx.shape[k]
            idx.flat = self.index_temp(" + ".join(reversed(terms)) or "0", "f")
        return idx.flat

    # -- values ---------------------------------------------------------------------------------
    def ptr(self, n: Node) -> str:
        code = self.ptrs[id(n)]
        decl = self.decls.get((code, n.dtype))
        if decl is None:
            name = f"p{len(self.decls)}"
            ct = cexpr.STORE_TYPE[n.dtype]
            self.ptr_args.append(code)
            qual = "" if code in self.may_alias else " restrict"
            decl = self.decls[(code, n.dtype)] = (
                name, f"{ct}*{qual} {name} = ({ct}*)(P[{len(self.ptr_args) - 1}]);")
        return decl[0]

    # Note [Hoisted scalars]
    # A 0-dim operand is read unexpanded by elementwise ops (trace/build.py `ew`), so a value
    # computed from scalars alone, Adam's bias correction -lr / (1 - beta1 ** step) of a step
    # count on the device, was computed inline at every element of its reader's loop: two pow
    # calls in double, a division and a square root per element made x * (lr / (1 - 0.9 ** t))
    # + sqrt(1 - 0.999 ** t) over 1M floats 3.8 ms against 0.4 once. Such a value is made under
    # the builder's hoisting (Note [Hoisted lines] in cbuilder.py), so it goes before the loops,
    # whatever pointers may alias: a buffer of one element that a loop over many writes is not
    # (donation pairs buffers of one size, Note [Donation] in program.py).
    def load(self, n: Node, idx: Idx) -> str:
        key = (id(n), idx.key())
        found = self.b.lookup(key)
        if found is not None:
            return found
        if id(n) in self.ptrs:
            expr = cexpr.load_expr(n.dtype, f"{self.ptr(n)}[{self.flat(idx) if n.shape else 0}]")
        elif id(n) in self.row_values:     # Note [Row reductions] in passes.py
            return self.row_values[id(n)]
        elif id(n) in self.row_arrays and idx.shape == n.shape and idx.dims is not None \
                and idx.dims[:-1] == self.row_dims:   # Note [Row-staged values] in kernels_row.py
            expr = f"{self.row_arrays[id(n)]}[{self.dim(idx, len(n.shape) - 1)}]"
        elif not n.shape:               # Note [Hoisted scalars]
            with self.b.hoisting():
                return self.b.temp(vtype(n.dtype), self.compute(n, idx), key=key)
        else:
            expr = self.compute(n, idx)
        return self.b.temp(vtype(n.dtype), expr, key=key)

    def compute(self, n: Node, idx: Idx) -> str:
        """C expression for n's value at idx, computed here (n itself is not read from memory)."""
        op = n.op
        rule = _RULES.get(op)
        if rule is not None:
            return rule(self, n, idx)
        if op in UNARY:
            x = self.load(n.src[0], idx)
            value = cexpr.unary(op, n.dtype, x, n.src[0].dtype)
            if op in (Op.SIN, Op.COS) and n.src[0].op is Op.ATAN:
                # gcc folds sin(atan(x)) to x / sqrt(x * x + 1), copysign(1, x) past a bound,
                # under -fno-math-errno: NaN came out as 1.0 (cos: 0.0). NaN is passed on here.
                value = f"({x} != {x} ? {x} : {value})"
            return cexpr.round_half(n.dtype, value)
        if op in BINARY:
            return self._binary(n, idx)
        raise CodegenUnsupported(f"cannot inline {op.name}")

    def _binary(self, n: Node, idx: Idx) -> str:
        a = self.load(n.src[0], idx)
        b = self.load(n.src[1], idx)
        dt = n.dtype
        if n.op in _DIV_OPS and not dt.is_floating_point:
            self.fail_if(f"{b} == 0", 2, "0", "0")
            b = f"({b} == 0 ? 1 : {b})"
            return cexpr.int_division(n.op, a, b)
        if n.op is Op.POW:
            c = n.src[1]
            const_exp = c.arg if c.op is Op.CONST and isinstance(c.arg, int) else None
            return cexpr.round_half(dt, cexpr.pow_expr(dt, a, b, const_exp))
        return cexpr.round_half(dt, cexpr.binary(n.op, dt, a, b))

    def hoisting(self):
        """Index code made inside goes before the loops it does not depend on (Note [Hoisted
        lines] in cbuilder.py); not when two pointers may be one buffer, as a load moved before
        a loop's stores could then read what they would have overwritten."""
        return contextlib.nullcontext() if self.may_alias else self.b.hoisting()

    def fail_if(self, cond: str, code: int, a: str, b: str) -> None:
        self.uses_error = True
        self.b.line(f"if (__builtin_expect({cond}, 0)) WSE_FAIL({code}, {a}, {b});")

    def check_fails_if(self, cond: str, shown: str, position: str, cid: int) -> None:
        """A device-side check (trace/checks.py) fails here if `cond`."""
        self.uses_error = True
        self.b.line(f"if (__builtin_expect({cond}, 0)) WSE_FAIL_CHECK({shown}, {position}, {cid});")

    def checked_index(self, i: str, size: int, dim: int) -> str:
        """Wrap a negative index into axis `dim` and check bounds (error WSE_ERR_INDEX_DIM +
        dim, whose message names the axis as the CPU's does; never an out-of-bounds read)."""
        j = self.b.temp("int64_t", f"({i} < 0 ? {i} + {size} : {i})", prefix="ix")
        self.fail_if(f"(uint64_t){j} >= (uint64_t){size}", ERR_INDEX_DIM + dim, i, str(size))
        k = self.b.temp("int64_t", f"((uint64_t){j} < (uint64_t){size} ? {j} : 0)", prefix="ix")
        self.ix.ranges.setdefault(k, (0, size - 1))     # clamped: index algebra may use it
        return k


# ---- inline rules for non-arithmetic ops -------------------------------------------------------

# Note [Half-precision scalars]
# A Python number operand of an op on float16/bfloat16 tensors is, in ATen, a 0-dim tensor cast
# to the tensors' dtype: rounded to it (bf16(x) == 0.1 holds for x = bf16(0.1)), then computed
# with in float. So a scalar or constant node of a half dtype is rounded where it is read. The
# ops ATen computes with the unrounded number (mul and div by a scalar, lerp's weight,
# addcmul's value) give their lowerings a float32 scalar node instead.
def _leaf_const(e: Emitter, n: Node, idx: Idx) -> str:
    return cexpr.round_half(n.dtype, literal(n.arg, n.dtype))


def _leaf_scalar(e: Emitter, n: Node, idx: Idx) -> str:
    j = e.scalar_args.setdefault(n.arg, len(e.scalar_args))
    return cexpr.round_half(n.dtype, f"(({vtype(n.dtype)})S[{j}])")


def _leaf_index(e: Emitter, n: Node, idx: Idx) -> str:
    return e.dim(idx, n.arg)


def _cast(e: Emitter, n: Node, idx: Idx) -> str:
    s = n.src[0]
    return cexpr.cast_expr(n.dtype, s.dtype, e.load(s, idx))


def _bitcast(e: Emitter, n: Node, idx: Idx) -> str:
    s = n.src[0]
    return cexpr.bitcast_expr(n.dtype, s.dtype, e.load(s, idx))


def _where(e: Emitter, n: Node, idx: Idx) -> str:
    c, a, b = (e.load(s, idx) for s in n.src)
    return f"({c} ? {a} : {b})"


def _lerp(e: Emitter, n: Node, idx: Idx) -> str:
    s, t, w = (e.load(x, idx) for x in n.src)
    fn = "wse_lerpf" if vtype(n.dtype) == "float" else "wse_lerp"
    return cexpr.round_half(n.dtype, f"{fn}({s}, {t}, {w})")


def _fma(e: Emitter, n: Node, idx: Idx) -> str:
    a, b, c = (e.load(x, idx) for x in n.src)
    fn = "fmaf" if vtype(n.dtype) == "float" else "fma"
    return cexpr.round_half(n.dtype, f"{fn}({a}, {b}, {c})")


def _special(e: Emitter, n: Node, idx: Idx) -> str:
    """A call of csrc/wse_special.h: the `_f` instance for float sources (half and bfloat16
    compute in float), the double one for float64; the unit gets the header (program.py)."""
    name, *consts = n.arg
    args = [e.load(s, idx) for s in n.src] + [str(c) for c in consts]
    suffix = "_f" if vtype(n.src[0].dtype) == "float" else ""
    return cexpr.round_half(n.dtype, f"{SPECIAL_PREFIX}{name}{suffix}({', '.join(args)})")


def _check(e: Emitter, n: Node, idx: Idx) -> str:
    """Note [Device-side checks] in trace/checks.py."""
    value, bad, shown = n.src
    e.check_fails_if(e.load(bad, idx), e.load(shown, idx), e.flat(idx), n.arg)
    return e.load(value, idx)


def _expand(e: Emitter, n: Node, idx: Idx) -> str:
    s = n.src[0]
    if s.numel == 1:
        return e.load(s, Idx(s.shape, flat="0"))
    dims = ["0" if sd == 1 and nd != 1 else e.dim(idx, k)
            for k, (sd, nd) in enumerate(zip(s.shape, n.shape))]
    return e.load(s, Idx(s.shape, dims=dims))


def _reshape(e: Emitter, n: Node, idx: Idx) -> str:
    s = n.src[0]
    return e.load(s, Idx(s.shape, flat=e.flat(idx) if s.numel > 1 else "0"))


def _permute(e: Emitter, n: Node, idx: Idx) -> str:
    s = n.src[0]
    dims = [None] * len(s.shape)
    for k, p in enumerate(n.arg):
        dims[p] = e.dim(idx, k)
    return e.load(s, Idx(s.shape, dims=dims))


_ATOM = re.compile(r"[A-Za-z_]\w*|\d+")


def times(d: str, k: int) -> str:
    """Index expression `d` times `k`, parenthesised: a coordinate given as a sum (a staged
    tile's column, `jb + i`) was multiplied as `jb + i * 2`, and a strided view read past its
    first tile from the wrong columns."""
    if k == 1:
        return d
    return f"{d} * {k}" if _ATOM.fullmatch(d) else f"({d}) * {k}"


def _as_strided(e: Emitter, n: Node, idx: Idx) -> str:
    stride, offset = n.arg
    terms = [str(offset)] if offset else []
    for k, st in enumerate(stride):
        if n.shape[k] != 1 and st != 0:
            terms.append(times(e.dim(idx, k), st))
    flat = e.index_temp(" + ".join(terms) or "0", "f")
    s = n.src[0]
    return e.load(s, Idx(s.shape, flat=flat))


def _branch_value(e: Emitter, idx: Idx, ctype: str, cases) -> str:
    """`cases` = [(condition or None, thunk)]: emit an if/else chain binding one temporary.
    Every index form of `idx` is bound first: a temporary first named inside a branch would be
    out of scope for later readers of `idx`."""
    e.flat(idx)
    for k in range(len(idx.shape)):
        e.dim(idx, k)
    out = e.b.fresh("t")
    e.b.line(f"{ctype} {out};")
    for i, (cond, thunk) in enumerate(cases):
        head = ("if" if i == 0 else "else if") + f" ({cond})" if cond else "else"
        with e.b.block(head):
            e.b.line(f"{out} = {thunk()};")
    return out


def _cat(e: Emitter, n: Node, idx: Idx) -> str:
    dim, d = n.arg, e.dim(idx, n.arg)
    cases, start = [], 0
    for i, s in enumerate(n.src):
        lo, hi = start, start + s.shape[dim]
        start = hi

        def thunk(s=s, lo=lo, hi=hi):
            dims = [e.dim(idx, k) if k != dim else (f"({d} - {lo})" if lo else d)
                    for k in range(len(n.shape))]
            with e.ix.narrowed(d, lo, hi - 1):     # this branch only runs for lo <= d < hi
                return e.load(s, Idx(s.shape, dims=dims))
        cases.append((f"{d} < {hi}" if i < len(n.src) - 1 else None, thunk))
    return _branch_value(e, idx, vtype(n.dtype), cases)


def _pad(e: Emitter, n: Node, idx: Idx) -> str:
    x, fill = n.src
    if all(lo == 0 and hi == 0 for lo, hi in n.arg):
        return e.load(x, idx)           # no padding: the same position, flat index and all
    conds, dims = [], []
    for k, (lo, hi) in enumerate(n.arg):
        d = e.dim(idx, k)
        if lo == 0 and hi >= 0:
            dims.append(d)
        else:
            dims.append(f"({d} - ({lo}))")
        if lo > 0:
            conds.append(f"{d} >= {lo}")
        if hi > 0:
            conds.append(f"{d} < {lo + x.shape[k]}")
    if not conds:
        return e.load(x, Idx(x.shape, dims=dims))
    return _branch_value(e, idx, vtype(n.dtype), [
        (" && ".join(conds), lambda: e.load(x, Idx(x.shape, dims=dims))),
        (None, lambda: e.load(fill, Idx((), flat="0")))])


def _gather(e: Emitter, n: Node, idx: Idx) -> str:
    x, index = n.src
    dim = n.arg
    with e.hoisting():
        i = e.checked_index(e.load(index, idx), x.shape[dim], dim)
    dims = [i if k == dim else e.dim(idx, k) for k in range(len(x.shape))]
    return e.load(x, Idx(x.shape, dims=dims))


def index_nd_dims(e: Emitter, x: Node, indices, arg, idx: Idx) -> list:
    """Positions in x read by aten.index-style indexing at output position idx. Index code
    only, so each piece goes before the loops it does not use (Note [Hoisted lines])."""
    first, count, ind_nd, front = arg
    bstart = 0 if front else first
    dims = []
    out_k = ind_nd if front else 0
    with e.hoisting():
        bdims = [e.dim(idx, bstart + k) for k in range(ind_nd)]
        for k in range(len(x.shape)):
            if first <= k < first + count:
                ix = indices[k - first]
                at = e.load(ix, Idx(ix.shape, dims=bdims))
                dims.append(e.checked_index(at, x.shape[k], k))
                if not front and k == first:
                    out_k += ind_nd
            else:
                dims.append(e.dim(idx, out_k))
                out_k += 1
    return dims


def _index_nd(e: Emitter, n: Node, idx: Idx) -> str:
    x = n.src[0]
    return e.load(x, Idx(x.shape, dims=index_nd_dims(e, x, n.src[1:], n.arg, idx)))


_RULES = {
    Op.CONST: _leaf_const, Op.SCALAR: _leaf_scalar, Op.INDEX: _leaf_index, Op.CAST: _cast,
    Op.BITCAST: _bitcast,
    Op.WHERE: _where, Op.LERP: _lerp, Op.FMA: _fma, Op.EXPAND: _expand, Op.RESHAPE: _reshape,
    Op.PERMUTE: _permute, Op.AS_STRIDED: _as_strided, Op.CAT: _cat, Op.PAD: _pad,
    Op.GATHER: _gather, Op.INDEX_ND: _index_nd, Op.SPECIAL: _special, Op.CHECK: _check,
}


def check_supported(n: Node) -> None:
    if n.dtype not in cexpr.SUPPORTED:
        raise CodegenUnsupported(f"dtype {n.dtype}")
