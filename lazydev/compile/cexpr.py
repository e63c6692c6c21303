"""The op -> C expression table and the dtype -> C type tables used by codegen.

Values of float16/bfloat16 nodes are computed in float and rounded back after every op, as
PyTorch's CPU kernels do; they are stored as uint16_t.
"""
from __future__ import annotations

import torch

from ..trace.ir import Op
from ..trace.meta import COMPILED

STORE_TYPE = {
    torch.float32: "float", torch.float64: "double", torch.float16: "uint16_t",
    torch.bfloat16: "uint16_t", torch.int64: "int64_t", torch.int32: "int32_t",
    torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t",
    # Bools are stored as bytes and computed as bool: gcc 12 does not vectorise a loop that
    # loads a _Bool array (a causal mask made softmax's exp loop scalar, 4x slower).
    torch.bool: "uint8_t",
}
SUPPORTED = frozenset(STORE_TYPE)
assert SUPPORTED == COMPILED, "trace/meta.py's COMPILED names the dtypes stored here"
HALF = {torch.float16: "f16", torch.bfloat16: "bf16"}


def vtype(dtype: torch.dtype) -> str:
    """The C type values of `dtype` are computed in."""
    if dtype is torch.bool:
        return "bool"
    return "float" if dtype in HALF else STORE_TYPE[dtype]


def load_expr(dtype, ptr_elem: str) -> str:
    kind = HALF.get(dtype)
    return f"wse_{kind}_to_f32({ptr_elem})" if kind else ptr_elem


def store_expr(dtype, value: str) -> str:
    kind = HALF.get(dtype)
    return f"wse_f32_to_{kind}({value})" if kind else value


def round_half(dtype, value: str) -> str:
    """Round a float value to the precision of a half dtype (identity for other dtypes)."""
    kind = HALF.get(dtype)
    return f"wse_{kind}_to_f32(wse_f32_to_{kind}({value}))" if kind else value


def literal(value, dtype) -> str:
    """C text of a constant; a negative one is parenthesised, as operators are put before
    operands (`-` before -1.0 would make `--1.0`, a decrement)."""
    if dtype is torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        if value != value:
            return "NAN"
        if value in (float("inf"), float("-inf")):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        text = repr(float(value)) + ("f" if vtype(dtype) == "float" else "")
    elif dtype is torch.int64:
        return f"INT64_C({int(value)})"
    else:
        text = str(int(value))
    return f"({text})" if text.startswith("-") else text


_FLOAT_FN = {
    Op.EXP: "exp", Op.LOG: "log", Op.SQRT: "sqrt", Op.SIN: "sin", Op.COS: "cos", Op.TAN: "tan",
    Op.TANH: "tanh", Op.ERF: "erf", Op.ERFC: "erfc", Op.FLOOR: "floor", Op.CEIL: "ceil",
    Op.ROUND: "nearbyint", Op.TRUNC: "trunc", Op.LOG1P: "log1p", Op.EXPM1: "expm1",
    Op.ASIN: "asin", Op.ACOS: "acos", Op.ATAN: "atan", Op.SINH: "sinh", Op.COSH: "cosh",
    Op.ASINH: "asinh", Op.ACOSH: "acosh", Op.ATANH: "atanh", Op.EXP2: "exp2", Op.LOG2: "log2",
    Op.LOG10: "log10", Op.LGAMMA: "lgamma",
}
# Float functions of our own (csrc/wse_prefix.h, Note [Own float math]): straight-line code,
# faster than libmvec's and with no slow lanes (-inf for exp); wse_tanhf is libmvec's tanhf
# with AVX-512, where that is the faster one.
_OWN_FLOAT_FN = {Op.EXP: "wse_expf", Op.ERF: "wse_erff", Op.TANH: "wse_tanhf"}
_FLOAT_FN2 = {Op.ATAN2: "atan2", Op.HYPOT: "hypot", Op.COPYSIGN: "copysign",
              Op.NEXTAFTER: "nextafter", Op.FMOD: "fmod"}
# Ops whose float form is a long math function (libmvec's, or our own inline wse_expf,
# wse_erff and wse_tanhf): the costly part of a loop body, and what Note [Staged loops]
# (kernels.py) splits a loop at. Inline ones count too: the 20-op chain took 7.9-8.0 ms with
# wse_expf in a loop of its own, 8.8-9.6 ms with it inlined into tanh's loop.
MATH_CALLS = (frozenset(_FLOAT_FN) - {Op.FLOOR, Op.CEIL, Op.ROUND, Op.TRUNC, Op.SQRT}
              | {Op.SIGMOID, Op.ATAN2, Op.HYPOT})
_INFIX = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/", Op.EQ: "==", Op.NE: "!=",
          Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">=", Op.BITAND: "&", Op.BITOR: "|",
          Op.BITXOR: "^", Op.SHL: "<<", Op.SHR: ">>"}
_INT_IDENTITY = {Op.FLOOR, Op.CEIL, Op.ROUND, Op.TRUNC}


class CodegenUnsupported(Exception):
    pass


def unary(op: Op, dtype, x: str, src_dtype) -> str:
    """C expression for a unary op; `dtype` is the node's, `src_dtype` its source's."""
    isf = dtype.is_floating_point
    one = literal(1, dtype)
    zero = literal(0, dtype)
    if op in _OWN_FLOAT_FN and vtype(dtype) == "float":
        return f"{_OWN_FLOAT_FN[op]}({x})"
    if op in _FLOAT_FN and isf:
        return f"{_FLOAT_FN[op]}({x})"
    if op in _INT_IDENTITY:
        return x
    if op is Op.NEG:
        return f"(-{x})"
    if op is Op.ABS:
        return f"fabs({x})" if isf else f"({x} < 0 ? -{x} : {x})"
    if op is Op.RSQRT:
        return f"({one} / sqrt({x}))"
    if op is Op.SIGMOID:
        e = "wse_expf" if vtype(dtype) == "float" else "exp"
        return f"({one} / ({one} + {e}(-{x})))"
    if op is Op.RECIPROCAL:
        return f"({one} / {x})"
    if op is Op.RELU:               # NaN and -0.0 pass through, as ATen's clamp_min(x, 0)
        return f"(({x} < {zero}) ? {zero} : {x})"
    if op is Op.SIGN:
        if dtype is torch.bool:
            return x
        return f"(({vtype(dtype)})(({x} > 0) - ({x} < 0)))"     # NaN -> 0, as ATen's
    if op is Op.NOT:
        return f"(!{x})"
    if op is Op.BITNOT:
        return f"(!{x})" if dtype is torch.bool else f"(~{x})"
    sf = src_dtype.is_floating_point
    if op is Op.ISNAN:
        return f"({x} != {x})" if sf else "false"
    if op is Op.ISINF:
        return f"(isinf({x}) != 0)" if sf else "false"
    if op is Op.ISFINITE:
        return f"(isfinite({x}) != 0)" if sf else "true"
    if op is Op.SIGNBIT and sf and vtype(src_dtype) == "float":
        # The sign bit read as an int: gcc 12 fails (an internal compiler error) vectorising
        # signbit() of a bfloat16 widened to float for AVX-512.
        return f"((wse_f32_bits({x}) >> 31) != 0)"
    if op is Op.SIGNBIT:
        return f"(signbit({x}) != 0)" if sf else f"({x} < 0)"
    raise CodegenUnsupported(f"{op.name} on {dtype}")


def binary(op: Op, dtype, a: str, b: str) -> str:
    isf = dtype.is_floating_point
    if dtype is torch.bool and op in (Op.ADD, Op.MUL, Op.MAX, Op.MIN):
        return f"({a} {'||' if op in (Op.ADD, Op.MAX) else '&&'} {b})"
    if op in (Op.SHL, Op.SHR) and not isf:
        # ATen's: a count below 0 or past the width shifts everything out (0, or -1 for a
        # negative number shifted right); C leaves those undefined (x << 70 of int64 gave x << 6)
        width = dtype.itemsize * 8
        out = f"(({a}) < 0 ? -1 : 0)" if op is Op.SHR else "0"
        done = f"((uint64_t)({a}) << ({b}))" if op is Op.SHL else f"(({a}) >> ({b}))"
        return f"((({b}) < 0 || ({b}) >= {width}) ? {out} : {done})"
    if op in _INFIX:
        return f"({a} {_INFIX[op]} {b})"
    if op in _FLOAT_FN2 and isf:
        return f"{_FLOAT_FN2[op]}({a}, {b})"
    if op is Op.MAX:
        return f"(({a} != {a} || {a} > {b}) ? {a} : {b})" if isf else f"({a} > {b} ? {a} : {b})"
    if op is Op.MIN:
        return f"(({a} != {a} || {a} < {b}) ? {a} : {b})" if isf else f"({a} < {b} ? {a} : {b})"
    if op is Op.AND:
        return f"({a} && {b})"
    if op is Op.OR:
        return f"({a} || {b})"
    if op is Op.XOR:
        return f"(!{a} != !{b})"
    suffix = "f" if vtype(dtype) == "float" else ""
    if op is Op.MOD and isf:
        return f"wse_remainder{suffix}({a}, {b})"
    if op is Op.FLOORDIV and isf:
        return f"wse_floordiv{suffix}({a}, {b})"
    raise CodegenUnsupported(f"{op.name} on {dtype}")


def int_division(op: Op, a: str, b: str) -> str:
    """Integer division-like ops; the caller has already checked `b != 0`."""
    if op is Op.FLOORDIV:
        return f"wse_floordiv_i64({a}, {b})"
    if op is Op.MOD:
        return f"wse_mod_i64({a}, {b})"
    if op in (Op.TRUNCDIV, Op.FMOD):
        return f"wse_{'truncdiv' if op is Op.TRUNCDIV else 'fmod'}_i64({a}, {b})"
    raise CodegenUnsupported(op.name)


def pow_expr(dtype, a: str, b: str, const_exp) -> str:
    if dtype.is_floating_point:
        if const_exp == 2:
            return f"({a} * {a})"
        if const_exp == 1:
            return a
        if const_exp == 3:
            return f"({a} * {a} * {a})"
        return f"pow({a}, ({vtype(dtype)}){b})"
    return f"wse_ipow({a}, {b})"


def bitcast_expr(dst, src, x: str) -> str:
    """The bits of `x` (a value of `src`) read as a value of `dst`, of the same item size."""
    return (f"({{ {STORE_TYPE[src]} b_ = {store_expr(src, x)}; {STORE_TYPE[dst]} r_; "
            f"memcpy(&r_, &b_, sizeof r_); {load_expr(dst, 'r_')}; }})")


def cast_expr(dst, src, x: str) -> str:
    if dst is torch.bool:
        return f"({x} != 0)"
    if src.is_floating_point and not dst.is_floating_point:
        # C leaves float->int conversion of NaN and out-of-range values undefined: x86's
        # results, as PyTorch's CPU kernels give them (csrc/wse_prefix.h).
        wide = "wse_f2i64" if dst is torch.int64 else "wse_f2i32"
        return f"(({vtype(dst)}){wide}((double){x}))"
    return round_half(dst, f"(({vtype(dst)}){x})")


REDUCE_INIT = {
    Op.SUM: lambda dt: literal(0, dt), Op.PROD: lambda dt: literal(1, dt),
    Op.ANY: lambda dt: "false", Op.ALL: lambda dt: "true",
    Op.RMAX: lambda dt: "(-INFINITY)" if dt.is_floating_point else _int_limit(dt, "MIN"),
    Op.RMIN: lambda dt: "INFINITY" if dt.is_floating_point else _int_limit(dt, "MAX"),
    Op.SEQSUM: lambda dt: literal(0, dt),
}


def _int_limit(dt, which):
    if dt is torch.bool:
        return "false" if which == "MIN" else "true"
    if dt is torch.uint8:
        return "0" if which == "MIN" else "255"
    bits = {torch.int8: 8, torch.int16: 16, torch.int32: 32, torch.int64: 64}[dt]
    return f"INT{bits}_{which}"


def acc_type(op: Op, dtype) -> str:
    """Accumulator type: float sums accumulate in double, as PyTorch's cascade sum is close to."""
    if op in (Op.SUM, Op.PROD) and dtype in (torch.float32, torch.float16, torch.bfloat16):
        return "double"
    if dtype is torch.bool and op in (Op.SUM, Op.PROD, Op.SEQSUM):
        # A bool sum is an or (a product an and); summed as bool under `omp simd`, gcc adds the
        # bytes and wraps: 256 trues summed to false, 300 to the byte 44, a bool PyTorch then
        # crashed on reading. The int sum, cast to bool at the store, is the CPU's result.
        return "int64_t"
    return vtype(dtype)


def reduce_step(op: Op, dtype, acc: str, x: str) -> str:
    """A statement that folds `x` into `acc`."""
    isf = dtype.is_floating_point
    if op is Op.SUM or op is Op.SEQSUM:
        return f"{acc} += {x};"
    if op is Op.PROD:
        return f"{acc} *= {x};"
    if op is Op.ANY:
        return f"{acc} = {acc} || {x};"
    if op is Op.ALL:
        return f"{acc} = {acc} && {x};"
    cmp = ">" if op is Op.RMAX else "<"
    nan = f" || {x} != {x}" if isf else ""
    # A select, not a branch: on data in no order (activations) the branch mispredicts about
    # every other element, and the select also lets the compiler vectorise the loop.
    return f"{acc} = ({x} {cmp} {acc}{nan}) ? {x} : {acc};"
