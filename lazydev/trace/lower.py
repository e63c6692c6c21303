"""Lowerings: aten op -> IR nodes. The rule table LOWERINGS is keyed by OpOverload.

Each lowering gets the meta output spec(s) first, then the op's arguments with every wse tensor
already replaced by its value node and every 0-dim CPU tensor by a runtime scalar node. Output
shapes and dtypes come from the spec (PyTorch's meta kernels), so no lowering has its own shape
rule; a lowering only says how the values are computed, and one whose nodes disagree with the
spec is refused (`_checked`). Ops without an entry here are decomposed with torch._decomp or run
on the CPU (tensor/dispatch.py).
"""
from __future__ import annotations

import math

import torch

from .. import metrics
from .build import (Unsupported, as_node, cast, const, ew, expand, full, opmath, permute, reduce,
                    reshape, scalar)
from .build import broadcast_shape
from .build import contiguous_strides as build_strides
from .ir import Node, Op

aten = torch.ops.aten
prims = torch.ops.prims
LOWERINGS: dict = {}


def register(*ops):
    def deco(fn):
        for op in ops:
            LOWERINGS[op] = _checked(op, fn)
        return fn
    return deco


def _checked(op, fn):
    """Lowering `fn` of `op`, refusing (Unsupported: the op is decomposed or runs on the CPU)
    where its nodes' shapes or dtypes differ from the meta kernel's: a slip in a rule would
    otherwise give a result unlike the CPU's. Runs when a call is first lowered, not on replay."""
    numbers = _number_arguments(op)

    def lower(spec, *args, **kwargs):
        if numbers:
            args, kwargs = _at_runtime(numbers, _floating(spec, args), args, kwargs)
        out = fn(spec, *args, **kwargs)
        wrong = disagreement(spec, out)
        if wrong is not None:
            metrics.count("lowering_disagreements")
            raise Unsupported(f"lazydev's lowering gives {wrong}")
        return out
    return lower


# Note [Int operands], beyond arithmetic: ops whose Scalar arguments are values a floating op
# converts to its dtype (a bound, a fill, a comparand, a factor), where an int from a step
# counter (x.clamp(max=step), torch.full_like(x, step), x >= step, add(alpha=step)) compiled a
# program per step. As a float of the same value they are runtime scalars. Not exponents or
# divisors, whose lowerings branch on the value; nor -1, 0 and 1, constants a model writes
# (masked_fill(m, 0), alpha=1, full_like(x, 1)) that the C folds: a counter compiles for those
# values and once more for the rest. An integer op's int operand (ids + step, arange(T) + t,
# positions < length) is a runtime scalar too, an int64 one read from a double (exact to 2**53);
# C converts it to the op's dtype as ATen converts the number (uint8 x > -2 compares with 254).
_NUMBER_ARGUMENTS = {
    "clamp": ("min", "max"), "clamp_min": ("min",), "clamp_max": ("max",),
    "where": ("self", "other"), "masked_fill": ("value",), "fill": ("value",),
    "full": ("fill_value",), "full_like": ("fill_value",), "new_full": ("fill_value",),
    "add": ("other", "alpha"), "sub": ("other", "alpha"), "rsub": ("other", "alpha"),
    "addcmul": ("value",), "addcdiv": ("value",), "lerp": ("weight",),
    "eq": ("other",), "ne": ("other",), "lt": ("other",), "le": ("other",), "gt": ("other",),
    "ge": ("other",), "maximum": ("other",), "minimum": ("other",), "mul": ("other",),
}


def _number_arguments(op) -> tuple:
    """(position, name) of op's Scalar arguments that _NUMBER_ARGUMENTS lists, and its Tensor
    ones, which a number reaches as a Python number (ids + 5 is add.Tensor(ids, 5))."""
    names = _NUMBER_ARGUMENTS.get(op.overloadpacket.__name__, ())
    return tuple((i, a.name) for i, a in enumerate(op._schema.arguments) if a.name in names
                 and str(a.type) in ("number", "Optional[number]", "Tensor"))


def _floating(spec, args) -> bool:
    """Whether the op computes in a floating dtype: a floating tensor argument or result."""
    if any(isinstance(a, Node) and a.dtype.is_floating_point for a in args):
        return True
    specs = spec if isinstance(spec, (list, tuple)) else (spec,)
    return any(s is not None and s.dtype.is_floating_point for s in specs)


def _at_runtime(numbers, floating: bool, args, kwargs):
    args = list(args)
    for i, name in numbers:
        if i < len(args):
            args[i] = _runtime(args[i], floating)
        elif name in kwargs:
            kwargs = {**kwargs, name: _runtime(kwargs[name], floating)}
    return tuple(args), kwargs


def _runtime(v, floating: bool):
    """Int operand `v` as a runtime scalar (a float for a floating op, an int64 node for an
    integer one), but -1, 0, 1 and ints past 2**53."""
    if type(v) is not int or -1 <= v <= 1 or not -_EXACT_INT <= v <= _EXACT_INT:
        return v
    return float(v) if floating else cast(scalar(float(v)), torch.int64)


def disagreement(spec, out) -> str | None:
    """Where a lowering's nodes differ in shape or dtype from the meta kernel's specs (a
    lowering's slip that would give a result unlike the CPU's), or None."""
    if isinstance(out, Node):
        if spec is None or (out.dtype, tuple(out.shape)) != (spec.dtype, tuple(spec.shape)):
            theirs = None if spec is None else (spec.dtype, tuple(spec.shape))
            return f"{out.dtype} {tuple(out.shape)} where the meta kernel gives {theirs}"
        return None
    if isinstance(out, (list, tuple)):
        if not isinstance(spec, (list, tuple)) or len(spec) != len(out):
            return f"{len(out)} results where the meta kernel gives {spec}"
        return next(filter(None, map(disagreement, spec, out)), None)
    return None


def _operand(v, dtype, shape):
    return expand(as_node(v, dtype), shape)


# ---- elementwise ------------------------------------------------------------------------------

def _unary(op: Op):
    def lower(spec, x, *_, **__):
        return Node(op, spec.dtype, spec.shape, (cast(x, spec.dtype),))
    return lower


def _predicate(op: Op):
    def lower(spec, x, *_, **__):
        return Node(op, torch.bool, spec.shape, (x,))
    return lower


_UNARY_OPS = {
    "neg": Op.NEG, "abs": Op.ABS, "exp": Op.EXP, "log": Op.LOG, "sqrt": Op.SQRT,
    "rsqrt": Op.RSQRT, "sin": Op.SIN, "cos": Op.COS, "tan": Op.TAN, "tanh": Op.TANH,
    "sigmoid": Op.SIGMOID, "erf": Op.ERF, "erfc": Op.ERFC, "floor": Op.FLOOR, "ceil": Op.CEIL,
    "round": Op.ROUND, "trunc": Op.TRUNC, "sign": Op.SIGN, "reciprocal": Op.RECIPROCAL,
    "log1p": Op.LOG1P, "expm1": Op.EXPM1, "asin": Op.ASIN, "acos": Op.ACOS, "atan": Op.ATAN,
    "sinh": Op.SINH, "cosh": Op.COSH, "asinh": Op.ASINH, "acosh": Op.ACOSH, "atanh": Op.ATANH,
    "exp2": Op.EXP2, "log2": Op.LOG2, "log10": Op.LOG10, "relu": Op.RELU, "lgamma": Op.LGAMMA,
    "bitwise_not": Op.BITNOT,
}
# erfinv has no C library function and no expression here yet: it runs on the CPU.
for _name, _op in _UNARY_OPS.items():
    register(getattr(aten, _name).default)(_unary(_op))
register(aten.logical_not.default)(_predicate(Op.NOT))
register(aten.isnan.default)(_predicate(Op.ISNAN))
register(aten.isinf.default)(_predicate(Op.ISINF))
register(aten.signbit.default)(_predicate(Op.SIGNBIT))
register(aten.isfinite.default)(_predicate(Op.ISFINITE))


# Note [Int operands]
# A Python int operand was a compile-time constant (a CONST node, and a part of the op's replay
# signature), so x * step, x + epoch or x / n_seen with a new int each step compiled a program
# per step. ATen converts a number operand to the op's dtype, so for a floating op an int
# converts as the float of the same value would: it becomes that float, a runtime scalar, and
# the graph stays the same (the op gets one replay plan per value, a lowering, not a compile).
# Past 2**53 an int is not exactly a double, and a double rounded to float32 could differ from
# the int rounded once: those stay constants.
_EXACT_INT = 1 << 53


def _number(v, dtype: torch.dtype):
    """Operand `v` of an op computing in `dtype`, an int as a float where it converts alike."""
    if type(v) is int and dtype.is_floating_point and -_EXACT_INT <= v <= _EXACT_INT:
        return float(v)
    return v


def _binary(op: Op):
    def lower(spec, a, b, *_, **__):
        dt = spec.dtype
        a, b = _number(a, dt), _number(b, dt)
        if op in (Op.MUL, Op.DIV) and dt != opmath(dt) and _scalar_like(b):
            # Note [Half-precision scalars] in compile/codegen.py: ATen multiplies and divides
            # a half tensor by a scalar as given, in float.
            wide = opmath(dt)
            return cast(ew(op, wide, spec.shape, as_node(a, wide), as_node(b, wide)), dt)
        return ew(op, dt, spec.shape, as_node(a, dt), as_node(b, dt))
    return lower


_true_div = _binary(Op.DIV)


def _scalar_like(v) -> bool:
    """Whether ATen's kernel sees operand `v` as a scalar (TensorIterator.is_scalar): a number
    or a one-element tensor."""
    return not isinstance(v, Node) or v.numel == 1


_BINARY_OPS = {
    "mul": Op.MUL, "div": Op.DIV, "maximum": Op.MAX, "minimum": Op.MIN, "atan2": Op.ATAN2,
    "bitwise_and": Op.BITAND, "bitwise_or": Op.BITOR, "bitwise_xor": Op.BITXOR,
    "remainder": Op.MOD, "fmod": Op.FMOD, "hypot": Op.HYPOT,
    "copysign": Op.COPYSIGN, "bitwise_left_shift": Op.SHL, "bitwise_right_shift": Op.SHR,
}   # (nextafter: lower_special.py, which steps the half types on their own bits)
for _name, _op in _BINARY_OPS.items():
    # Scalar_Tensor (remainder(1e5, x)): decomposed, the number was not rounded to x's half type
    # as ATen rounds it (1e5 % half is NaN, an infinity's remainder; wse gave numbers)
    for _ov in ("Tensor", "Scalar", "default", "Scalar_Tensor"):
        if hasattr(getattr(aten, _name), _ov):
            register(getattr(getattr(aten, _name), _ov))(_binary(_op))


@register(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def _pow(spec, a, b):
    if type(b) is int and b < 0 and isinstance(a, Node) and not (
            spec.dtype.is_floating_point or spec.dtype.is_complex):
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    dt = spec.dtype
    if isinstance(b, int) and not isinstance(b, bool) and dt.is_floating_point:
        # An integer exponent is structure (x*x for 2), not a runtime value.
        return ew(Op.POW, dt, spec.shape, as_node(a, dt), const(b, torch.int64))
    if type(b) is float and isinstance(a, Node) and dt in _POW_SCALAR:
        # ATen's kernel: sqrt and rsqrt for ±0.5 (csrc/wse_special_t.h), and a float32 tensor's
        # power taken in double with the exponent as given ((-2.0) ** 3.0000001 is NaN, not
        # (-2.0) ** 3.0); bfloat16's in float, its exponent rounded to bfloat16 first
        wide = _POW_SCALAR[dt]
        exponent = as_node(b, wide) if dt is not torch.bfloat16 else cast(as_node(b, dt), wide)
        out = ew(Op.SPECIAL, wide, spec.shape, cast(a, wide), exponent)
        return cast(out.replace(arg=("pow_scalar",)), dt)
    return ew(Op.POW, dt, spec.shape, as_node(a, dt), as_node(b, dt))


# dtype -> the dtype its power by a number is computed in (not half: ATen's half kernel is pow)
_POW_SCALAR = {torch.float32: torch.float64, torch.float64: torch.float64,
               torch.bfloat16: torch.float32}


def _make_add(op: Op):
    def lower(spec, a, b, alpha=1):
        dt = spec.dtype
        a, rhs = _number(a, dt), as_node(_number(b, dt), dt)
        if isinstance(alpha, (int, bool)) and alpha == 1:
            return ew(op, dt, spec.shape, as_node(a, dt), rhs)
        if dt.is_floating_point:
            # ATen: fma(b, ±alpha, a) in float for the half types, rounded once; alpha is
            # rounded to them first (Note [Half-precision scalars] in compile/codegen.py).
            wide = opmath(dt)
            scale = cast(as_node(alpha if op is Op.ADD else -alpha, dt), wide)
            return cast(ew(Op.FMA, wide, spec.shape, cast(rhs, wide), scale,
                           cast(as_node(a, dt), wide)), dt)
        rhs = ew(Op.MUL, dt, rhs.shape, rhs, as_node(alpha, dt))
        return ew(op, dt, spec.shape, as_node(a, dt), rhs)
    return lower


_SUB = _make_add(Op.SUB)
register(aten.add.Tensor, aten.add.Scalar)(_make_add(Op.ADD))
register(aten.sub.Tensor, aten.sub.Scalar)(_SUB)


@register(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(spec, a, b, alpha=1):
    """other - alpha * self: ATen's rsub is sub with its operands swapped (decomposed, it
    dispatched three ops a call: fused AdamW's bias corrections, `1 - beta ** step`)."""
    return _SUB(spec, b, a, alpha)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(spec, a, b, rounding_mode=None):
    dt = spec.dtype
    if rounding_mode is None:
        return _true_div(spec, a, b)
    trunc = rounding_mode == "trunc"
    if not dt.is_floating_point:
        x, y = as_node(a, dt), as_node(b, dt)
        return ew(Op.TRUNCDIV if trunc else Op.FLOORDIV, dt, spec.shape, x, y)
    # ATen, for the half types: a floor division in float, a truncating one of the quotient
    # rounded to them; by a scalar (as given) both in float.
    # A tensor operand is converted to the result dtype first, as TensorIterator does (an int32
    # 100000 is inf in half; converted straight to float it divided finitely).
    wide = opmath(dt) if not trunc or _scalar_like(b) else dt
    x, y = (as_node(cast(v, dt) if isinstance(v, Node) else v, wide) for v in (a, b))
    q = ew(Op.DIV if trunc else Op.FLOORDIV, wide, spec.shape, x, y)
    return cast(Node(Op.TRUNC, wide, spec.shape, (q,)) if trunc else q, dt)


@register(aten.floor_divide.default, aten.floor_divide.Scalar)
def _floor_divide(spec, a, b):
    """div(rounding_mode="floor"): ATen's kernel for both, so a half tensor's divisor is the
    number as given, in float (x // 0.1 of half 1.0 is 9; rounded to half first it was 10)."""
    return _div_mode(spec, a, b, "floor")


@register(aten.xlogy.Tensor, aten.xlogy.Scalar_Other, aten.xlogy.Scalar_Self)
def _xlogy(spec, a, b):
    """ATen's kernel: NaN where y is NaN, else 0 where x is 0, else x * log(y), with a number
    operand rounded to the result's dtype and the half types computed in float. (Decomposed,
    xlogy(half, 1e5) used 1e5, which rounds to inf in half.)"""
    dt = spec.dtype
    wide = opmath(dt)
    x, y = (cast(as_node(_number(v, dt), dt), wide) for v in (a, b))
    log = cast(cast(Node(Op.LOG, wide, y.shape, (y,)), dt), wide)   # a half log is rounded
    out = ew(Op.MUL, wide, spec.shape, x, log)
    out = ew(Op.WHERE, wide, spec.shape, ew(Op.EQ, torch.bool, x.shape, x, as_node(0.0, wide)),
             as_node(0.0, wide), out)
    nan = ew(Op.ISNAN, torch.bool, y.shape, y)
    return cast(ew(Op.WHERE, wide, spec.shape, nan, as_node(math.nan, wide), out), dt)


def _promoted(a, b):
    """PyTorch's promoted dtype of two operands; for nodes only dtype and 0-dim-ness count."""
    def stand_in(v):
        if not isinstance(v, Node):
            return v
        return torch.empty((0,) if v.shape else (), dtype=v.dtype, device="cpu")
    return torch.result_type(stand_in(a), stand_in(b))


def _compare(op: Op):
    def lower(spec, a, b):
        dt = _promoted(a, b)
        return ew(op, torch.bool, spec.shape, as_node(a, dt), as_node(b, dt))
    return lower


for _name, _op in {"eq": Op.EQ, "ne": Op.NE, "lt": Op.LT, "le": Op.LE, "gt": Op.GT,
                   "ge": Op.GE}.items():
    for _ov in ("Tensor", "Scalar"):
        register(getattr(getattr(aten, _name), _ov))(_compare(_op))


def _logical(op: Op):
    def lower(spec, a, b):
        return ew(op, torch.bool, spec.shape, as_node(a, torch.bool), as_node(b, torch.bool))
    return lower


for _name, _op in {"logical_and": Op.AND, "logical_or": Op.OR, "logical_xor": Op.XOR}.items():
    register(getattr(aten, _name).default)(_logical(_op))


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(spec, cond, a, b):
    dt = spec.dtype
    return ew(Op.WHERE, dt, spec.shape, as_node(cond, torch.bool), as_node(a, dt), as_node(b, dt))


@register(aten.clamp.default, aten.clamp.Tensor)
def _clamp(spec, x, min=None, max=None):
    dt = spec.dtype
    out = cast(x, dt)
    if min is not None:
        out = ew(Op.MAX, dt, spec.shape, out, as_node(min, dt))
    if max is not None:
        out = ew(Op.MIN, dt, spec.shape, out, as_node(max, dt))
    return out


@register(aten._to_copy.default)
def _to_copy(spec, x, dtype=None, **_):
    return cast(x, spec.dtype)


@register(prims.convert_element_type.default)
def _convert(spec, x, dtype):
    return cast(x, dtype)


@register(aten.clone.default, aten.alias_copy.default, aten.lift_fresh_copy.default,
          aten.contiguous.default if hasattr(aten, "contiguous") else aten.clone.default)
def _clone(spec, x, *_, **__):
    return x


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(spec, x, mask, value):
    dt = spec.dtype
    return ew(Op.WHERE, dt, spec.shape, mask, as_node(value, dt), x)


@register(aten.fill.Scalar, aten.fill.Tensor)
def _fill(spec, x, value):
    return full(value, spec.dtype, spec.shape)


@register(aten.zero.default)
def _zero(spec, x):
    return full(0, spec.dtype, spec.shape)


@register(aten.full.default, aten.new_full.default)
def _full(spec, *args, **kwargs):
    value = args[-1] if len(args) >= 2 else kwargs["fill_value"]
    return full(value, spec.dtype, spec.shape)


@register(aten.ones_like.default)
def _ones_like(spec, x, **_):
    return full(1, spec.dtype, spec.shape)


@register(aten.zeros_like.default)
def _zeros_like(spec, x, **_):
    return full(0, spec.dtype, spec.shape)


@register(aten.full_like.default)
def _full_like(spec, x, fill_value, **_):
    return full(fill_value, spec.dtype, spec.shape)


@register(aten.scalar_tensor.default)
def _scalar_tensor(spec, s, **_):
    return as_node(s, spec.dtype)


@register(aten.arange.start_step)
def _arange(spec, start, end=None, step=1, **_):
    dt = spec.dtype
    acc = torch.float64 if dt.is_floating_point else torch.int64
    idx = Node(Op.INDEX, torch.int64, spec.shape, (), 0)
    val = ew(Op.ADD, acc, spec.shape, as_node(start, acc),
             ew(Op.MUL, acc, spec.shape, cast(idx, acc), as_node(step, acc)))
    return cast(val, dt)


# ---- reductions -------------------------------------------------------------------------------

def _whole(dim) -> bool:
    """Whether a reduction's `dim` argument means every dim (None or an empty list)."""
    return dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0)


def _axes(x: Node, dim):
    if _whole(dim):
        return tuple(range(len(x.shape)))
    return tuple(dim) if isinstance(dim, (list, tuple)) else (dim,)


@register(aten.sum.dim_IntList, aten.sum.default)
def _sum(spec, x, dim=None, keepdim=False, dtype=None):
    return reduce(Op.SUM, cast(x, spec.dtype), _axes(x, dim), keepdim, spec.dtype)


@register(aten.prod.default, aten.prod.dim_int)
def _prod(spec, x, dim=None, keepdim=False, dtype=None):
    return reduce(Op.PROD, cast(x, spec.dtype), _axes(x, dim), keepdim, spec.dtype)


def _minmax(op: Op, name: str):
    def lower(spec, x, dim=None, keepdim=False):
        _no_empty_reduce(name, x, dim)
        return reduce(op, x, _axes(x, dim), keepdim, spec.dtype)
    return lower


def _no_empty_reduce(name: str, x, dim):
    """The CPU's errors for a max/min with no identity over no elements."""
    if _whole(dim):
        if x.numel == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                               "input.numel() == 0. Specify the reduction dim with the 'dim' "
                               "argument.")
        return
    for a in _axes(x, dim):
        if x.shape and x.shape[a] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {a % len(x.shape)} to have "
                             "non-zero size.")


register(aten.amax.default)(_minmax(Op.RMAX, "amax"))
register(aten.amin.default)(_minmax(Op.RMIN, "amin"))
register(aten.max.default)(_minmax(Op.RMAX, "max"))
register(aten.min.default)(_minmax(Op.RMIN, "min"))


def _arg(op: Op):
    def lower(spec, x, dim=None, keepdim=False):
        if dim is None:
            x = reshape(x, (x.numel,))
            dim = 0
        nd = max(len(x.shape), 1)
        dim = dim % nd
        if not x.shape:
            x = reshape(x, (1,))
        kept = tuple(1 if i == dim else d for i, d in enumerate(x.shape))
        node = Node(op, torch.int64, kept, (x,), dim)
        return reshape(node, spec.shape)
    return lower


register(aten.argmax.default)(_arg(Op.ARGMAX))
register(aten.argmin.default)(_arg(Op.ARGMIN))


def _minmax_dim(vop: Op, iop: Op, name: str):
    values, indices = _minmax(vop, name), _arg(iop)

    def lower(spec, x, dim, keepdim=False):
        return values(spec[0], x, dim, keepdim), indices(spec[1], x, dim, keepdim)
    return lower


register(aten.max.dim)(_minmax_dim(Op.RMAX, Op.ARGMAX, "max"))
register(aten.min.dim)(_minmax_dim(Op.RMIN, Op.ARGMIN, "min"))


def _anyall(op: Op):
    def lower(spec, x, dim=None, keepdim=False):
        # (uint8 in, uint8 out: ATen keeps the dtype for uint8, a legacy of masks)
        return cast(reduce(op, cast(x, torch.bool), _axes(x, dim), keepdim, torch.bool),
                    spec.dtype)
    return lower


for _name, _op in (("any", Op.ANY), ("all", Op.ALL)):
    for _ov in ("default", "dim", "dims"):
        if hasattr(getattr(aten, _name), _ov):
            register(getattr(getattr(aten, _name), _ov))(_anyall(_op))


@register(aten.cumsum.default)
def _cumsum(spec, x, dim, dtype=None):
    x = cast(x, spec.dtype)
    if not x.shape:
        return x
    return Node(Op.CUMSUM, spec.dtype, x.shape, (x,), dim % len(x.shape))


# ---- movement that makes new values -----------------------------------------------------------

@register(aten.cat.default)
def _cat(spec, tensors, dim=0):
    nd = len(spec.shape)
    dim = dim % nd if nd else 0
    # Empty parts (including legacy 1-d empties of another rank) contribute nothing.
    parts = tuple(cast(t, spec.dtype) for t in tensors if len(t.shape) == nd and t.shape[dim] > 0)
    if not parts:
        return full(0, spec.dtype, spec.shape)
    if len(parts) == 1:
        return parts[0]
    return Node(Op.CAT, spec.dtype, spec.shape, parts, dim)


@register(aten.stack.default)
def _stack(spec, tensors, dim=0):
    """cat of the tensors with a dim of 1 inserted (decomposed, a dispatch per tensor: 42 us
    for fused AdamW's six step counts)."""
    dim = dim % len(spec.shape)
    return _cat(spec, [reshape(t, t.shape[:dim] + (1,) + t.shape[dim:]) for t in tensors], dim)


@register(aten.constant_pad_nd.default)
def _pad(spec, x, pad, value=0):
    nd = len(x.shape)
    pads = [(0, 0)] * nd
    for i in range(len(pad) // 2):
        pads[nd - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return Node(Op.PAD, spec.dtype, spec.shape, (x, as_node(value, spec.dtype)), tuple(pads))


@register(aten.gather.default)
def _gather(spec, x, dim, index, sparse_grad=False):
    if not x.shape:
        x = reshape(x, (1,))
    if not index.shape:
        index = reshape(index, (1,))
    dim = dim % len(x.shape)
    out = Node(Op.GATHER, spec.dtype, index.shape, (x, index), dim)
    return reshape(out, spec.shape)


@register(aten.index_select.default)
def _index_select(spec, x, dim, index):
    if not x.shape:
        return reshape(Node(Op.INDEX_ND, spec.dtype, (1,), (reshape(x, (1,)), reshape(index, (1,))),
                            (0, 1, 1, False)), spec.shape)
    dim = dim % len(x.shape)
    index = reshape(index, (index.numel,))
    return Node(Op.INDEX_ND, spec.dtype, spec.shape, (x, index), (dim, 1, 1, False))


def _index_layout(x, indices):
    """(first indexed dim, index nodes broadcast to one shape, front) for aten.index semantics."""
    dims = [i for i, ix in enumerate(indices) if ix is not None]
    if any(ix.dtype == torch.bool for ix in indices if ix is not None):
        raise Unsupported("boolean-mask indexing has a data-dependent shape")
    if not dims:
        raise Unsupported("no index tensors")
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    shapes = [indices[d].shape for d in dims]
    bshape = broadcast_shape(*shapes)
    idx = tuple(expand(cast(indices[d], torch.int64), bshape) for d in dims)
    return dims, idx, bshape, not adjacent


@register(aten.index.Tensor, aten._unsafe_index.Tensor)
def _index(spec, x, indices):
    dims, idx, bshape, front = _index_layout(x, list(indices))
    if dims != list(range(dims[0], dims[0] + len(dims))):
        # Non-adjacent indexed dims: move them to the front first (aten.index puts the
        # broadcast index dims first in that case).
        rest = [d for d in range(len(x.shape)) if d not in dims]
        x = permute(x, dims + rest)
        dims = list(range(len(dims)))
    arg = (dims[0], len(dims), len(bshape), front)
    return Node(Op.INDEX_ND, spec.dtype, spec.shape, (x,) + idx, arg)


@register(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(spec, x, indices, values, accumulate=False):
    dims, idx, bshape, front = _index_layout(x, list(indices))
    if front:
        raise Unsupported("index_put with non-adjacent index tensors")
    # The region written has the shape aten.index would return; values broadcast to it.
    region = x.shape[:dims[0]] + bshape + x.shape[dims[0] + len(dims):]
    fits = len(values.shape) <= len(region) and all(
        v in (1, r) for v, r in zip(reversed(values.shape), reversed(region)))
    if not fits:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot "
                           f"be broadcast to indexing result of shape {list(region)}")
    v = expand(cast(values, spec.dtype), region)
    arg = (dims[0], len(dims), len(bshape), False, bool(accumulate))
    return Node(Op.INDEX_PUT, spec.dtype, spec.shape, (x, v) + idx, arg)


@register(aten.scatter_add.default)
def _scatter_add(spec, x, dim, index, src):
    return _scatter(spec, x, dim, index, src, reduce="add")


_SCATTER_REDUCE = {None: None, "add": "add", "sum": "add", "multiply": "mul"}


@register(aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce)
def _scatter(spec, x, dim, index, src, reduce=None):
    if reduce not in _SCATTER_REDUCE:
        raise Unsupported(f"scatter reduce={reduce!r}")
    if isinstance(src, Node) and src.shape:
        value = cast(src, spec.dtype)
    else:
        value = expand(as_node(src, spec.dtype), index.shape)
    return scatter(x, dim, index, value, _SCATTER_REDUCE[reduce], wide=True)


def scatter(x: Node, dim: int, index: Node, value: Node, reduce=None, wide=False) -> Node:
    """A SCATTER node (torch.scatter semantics); a 0-dim scatter is one of a 1-element row.
    `wide`: a sum of float16 or bfloat16 values accumulates in float32 and rounds once, as the
    CPU's scatter kernels do (index_put, put and index_reduce round at every addition)."""
    if wide and reduce == "add" and opmath(x.dtype) is not x.dtype:
        f = opmath(x.dtype)
        return cast(scatter(cast(x, f), dim, index, cast(value, f), reduce), x.dtype)
    if not x.shape:
        one = (1,)
        out = scatter(reshape(x, one), 0, reshape(index, one), reshape(value, one), reduce)
        return reshape(out, ())
    return Node(Op.SCATTER, x.dtype, x.shape, (x, index, value), (dim % len(x.shape), reduce))


# ---- prims (they appear inside torch._decomp decompositions) ----------------------------------

for _name, _op in list(_UNARY_OPS.items()):
    if hasattr(prims, _name):
        register(getattr(prims, _name).default)(_unary(_op))
for _name, _op in {"add": Op.ADD, "sub": Op.SUB, "mul": Op.MUL, "div": Op.DIV, "maximum": Op.MAX,
                   "minimum": Op.MIN, "pow": Op.POW, "atan2": Op.ATAN2}.items():
    register(getattr(prims, _name).default)(_binary(_op))


@register(prims.sum.default)
def _prims_sum(spec, x, dims, output_dtype=None):
    return reduce(Op.SUM, cast(x, spec.dtype), dims if dims is not None else range(len(x.shape)),
                  False, spec.dtype)


@register(prims.var.default)
def _prims_var(spec, x, dims, correction=1, output_dtype=None):
    dt = spec.dtype
    x = cast(x, dt)
    if not x.shape:         # a 0-dim tensor's dim 0 or -1 (it raised IndexError): its one value
        x, dims = reshape(x, (1,)), (0,)
    axes = tuple(dims) if dims is not None else tuple(range(len(x.shape)))
    n = 1
    for a in axes:
        n *= x.shape[a]
    mean = reduce(Op.SUM, x, axes, True, dt)
    mean = ew(Op.DIV, dt, mean.shape, mean, const(n, dt))
    dev = ew(Op.SUB, dt, x.shape, x, mean)
    sq = reduce(Op.SUM, ew(Op.MUL, dt, x.shape, dev, dev), axes, False, dt)
    return ew(Op.DIV, dt, sq.shape, sq, const(max(n - correction, 0), dt))


@register(prims.broadcast_in_dim.default)
def _broadcast_in_dim(spec, x, shape, broadcast_dimensions):
    kept = [1] * len(shape)
    for src_dim, out_dim in enumerate(broadcast_dimensions):
        kept[out_dim] = x.shape[src_dim]
    return expand(reshape(x, tuple(kept)), tuple(shape))


@register(aten.flip.default, prims.rev.default)
def _flip(spec, x, dims):
    """Reversal is a read with negative strides over the flat input (no data movement)."""
    nd = len(x.shape)
    if not nd or x.numel == 0:
        return x
    stride = list(build_strides(x.shape))
    offset = 0
    for d in {d % nd for d in dims}:
        if x.shape[d] > 1:
            offset += (x.shape[d] - 1) * stride[d]
            stride[d] = -stride[d]
    flat = reshape(x, (x.numel,))
    return Node(Op.AS_STRIDED, x.dtype, x.shape, (flat,), (tuple(stride), offset))


@register(prims.copy_strided.default)
def _copy_strided(spec, x, stride):
    return x                # wse values have no layout: a copy with other strides is the value


def _view_scatter(view):
    """x.clone() with view(clone, ...) overwritten by src, as one strided scatter. The view's
    strides come from its meta kernel on a contiguous tensor: a wse value is row-major whatever
    the input's strides (the _refs decompositions clone preserving strides, which is wrong for
    an expanded input: its diagonal would alias one element)."""
    def lower(spec, x, src, *args, **kwargs):
        v = view(torch.empty(x.shape, dtype=x.dtype, device="meta"), *args, **kwargs)
        size = tuple(v.shape)
        value = expand(cast(src, spec.dtype), size)
        flat = reshape(cast(x, spec.dtype), (x.numel,))
        out = Node(Op.SCATTER_STRIDED, spec.dtype, (x.numel,), (flat, value),
                   (size, tuple(v.stride()), v.storage_offset()))
        return reshape(out, spec.shape)
    return lower


register(aten.diagonal_scatter.default)(_view_scatter(torch.diagonal))
register(aten.select_scatter.default)(_view_scatter(torch.select))
register(aten.slice_scatter.default)(_view_scatter(aten.slice.Tensor))

from . import lower_nn  # noqa: E402,F401  (registers the native nn lowerings)
from . import lower_special  # noqa: E402,F401  (registers the special-function lowerings)
from . import lower_linalg  # noqa: E402,F401  (LAPACK-backed linear algebra)
from . import lower_sort  # noqa: E402,F401  (sorting, selection, scatter-reduce lowerings)
from . import lower_mm  # noqa: E402,F401  (mm, bmm, addmm, addmv, addbmm)
