"""Lowerings of the special functions (torch.special, the gamma family, Bessel functions,
orthogonal polynomials) and of the few float ops around them (fmax/fmin, frexp, angle).

Each special function is one Op.SPECIAL node naming a function of csrc/wse_special.h, where the
bodies are ported from PyTorch's ATen/native/Math.h so values agree with the CPU kernels. Operands
are cast to the output dtype first, as the CPU kernels' TensorIterator does; where the CPU kernel
has no half/bfloat16 version the lowering raises the CPU kernel's error.
"""
from __future__ import annotations

import math

import torch

from .build import HALF, SCALAR_TYPE, Unsupported, as_node, cast, const, ew, reduce
from .ir import Node, Op
from .lower import register

aten = torch.ops.aten
prims = torch.ops.prims
_FLOAT = (torch.float32, torch.float64)


def special(name: str, dtype, shape, *srcs: Node, consts: tuple = ()) -> Node:
    """wsesp_<name>(srcs..., consts...) at every position (see codegen._special)."""
    return ew(Op.SPECIAL, dtype, shape, *srcs).replace(arg=(name,) + tuple(consts))


def _check_dtype(dtype, halves: bool, name: str) -> None:
    """The CPU kernel's own error for a half dtype it has no kernel for (the aten op would
    otherwise decompose into prims that compute in float and succeed where the CPU fails)."""
    if dtype in HALF and not halves:
        kernel = name.removeprefix("calc_").removesuffix("_forward")
        raise NotImplementedError(f'"{kernel}_cpu" not implemented for \'{SCALAR_TYPE[dtype]}\'')
    if dtype not in _FLOAT and dtype not in HALF:
        raise Unsupported(f"{name} of {dtype}")


def _special_fn(name: str, halves: bool):
    """Lowering of an elementwise special function of one or two tensor/scalar operands."""
    def lower(spec, *args, **__):
        _check_dtype(spec.dtype, halves, name)
        return special(name, spec.dtype, spec.shape, *(as_node(a, spec.dtype) for a in args))
    return lower


def _ops(*names):
    """The overloads that exist of aten/prims ops named 'aten.x' / 'prims.x' (all overloads
    but the out= ones)."""
    found = []
    for qual in names:
        ns, name = qual.split(".")
        packet = getattr(aten if ns == "aten" else prims, name, None)
        if packet is None:
            continue
        found += [getattr(packet, ov) for ov in packet.overloads() if "out" not in ov]
    return found


# (C function in wse_special.h, CPU kernel has half/bfloat16, ops computing it)
_FUNCTIONS = [
    ("bessel_j0_forward", False, ("aten.special_bessel_j0", "prims.bessel_j0")),
    ("bessel_j1_forward", False, ("aten.special_bessel_j1", "prims.bessel_j1")),
    ("bessel_y0_forward", False, ("aten.special_bessel_y0",)),
    ("bessel_y1_forward", False, ("aten.special_bessel_y1",)),
    ("modified_bessel_i0_forward", False, ("aten.special_modified_bessel_i0",)),
    ("modified_bessel_i1_forward", False, ("aten.special_modified_bessel_i1",)),
    ("modified_bessel_k0_forward", False, ("aten.special_modified_bessel_k0",)),
    ("modified_bessel_k1_forward", False, ("aten.special_modified_bessel_k1",)),
    ("scaled_modified_bessel_k0_forward", False, ("aten.special_scaled_modified_bessel_k0",)),
    ("scaled_modified_bessel_k1_forward", False, ("aten.special_scaled_modified_bessel_k1",)),
    ("spherical_bessel_j0_forward", False,
     ("aten.special_spherical_bessel_j0", "prims.spherical_bessel_j0")),
    ("airy_ai_forward", False, ("aten.special_airy_ai",)),
    ("calc_i0", True, ("aten.i0", "prims.bessel_i0")),
    ("calc_i0e", True, ("aten.special_i0e", "prims.bessel_i0e")),
    ("calc_i1", True, ("aten.special_i1", "prims.bessel_i1")),
    ("calc_i1e", True, ("aten.special_i1e", "prims.bessel_i1e")),
    ("calc_ndtri", False, ("aten.special_ndtri", "prims.ndtri")),
    ("calc_erfcx", False, ("aten.special_erfcx", "prims.erfcx")),
    ("calc_log_ndtr", False, ("aten.special_log_ndtr",)),
    ("calc_erfinv", True, ("aten.erfinv", "prims.erf_inv")),
    ("calc_digamma", True, ("aten.digamma", "prims.digamma")),
    ("zeta", False, ("aten.special_zeta", "prims.zeta")),
    ("calc_igamma", True, ("aten.igamma", "prims.igamma")),
    ("calc_igammac", True, ("aten.igammac", "prims.igammac")),
]
_POLYNOMIALS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
                "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
                "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
                "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
                "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]
_FUNCTIONS += [(f"{p}_forward", False, (f"aten.special_{p}",)) for p in _POLYNOMIALS]

for _name, _halves, _names in _FUNCTIONS:
    register(*_ops(*_names))(_special_fn(_name, _halves))


@register(aten.polygamma.default)
def _polygamma(spec, n, x):
    """n is a Python int: it picks the C function (digamma, trigamma, or the zeta form)."""
    _check_dtype(spec.dtype, True, "polygamma")
    if n < 0:
        raise Unsupported("polygamma of negative order: the CPU kernel reports it")
    x = cast(x, spec.dtype)
    if n == 0:
        return special("calc_digamma", spec.dtype, spec.shape, x)
    if n == 1:
        return special("trigamma", spec.dtype, spec.shape, x)
    return special("calc_polygamma", spec.dtype, spec.shape, x, consts=(int(n),))


@register(prims.frexp.default, aten.frexp.Tensor)
def _frexp(spec, x):
    mantissa, exponent = spec
    _check_dtype(mantissa.dtype, True, "frexp")
    x = cast(x, mantissa.dtype)
    return (special("frexp_mantissa", mantissa.dtype, mantissa.shape, x),
            special("frexp_exponent", exponent.dtype, exponent.shape, x))


@register(aten.ldexp.Tensor)
def _ldexp(spec, x, other):
    """x * 2**other for an integer exponent as ATen's kernel computes it (std::ldexp); a float
    exponent is left to the decomposition, x * pow(2, other), as ATen's is."""
    e = other if isinstance(other, Node) else None
    if e is None or e.dtype.is_floating_point or e.dtype is torch.bool:
        raise Unsupported("ldexp with an exponent that is not an integer tensor")
    _check_dtype(spec.dtype, True, "ldexp")
    return special("ldexp", spec.dtype, spec.shape, cast(as_node(x, spec.dtype), spec.dtype),
                   cast(e, torch.int64))


@register(aten.nextafter.default)
def _nextafter(spec, a, b):
    """Of float16/bfloat16 on their own bits, as c10's (in float, the step was a float's and
    rounding back undid it: nextafter(1, 2) gave 1); float32/64 by C's nextafter."""
    dt = spec.dtype
    x, y = (cast(as_node(v, dt), dt) for v in (a, b))
    if dt in HALF:
        name = "nextafter_f16" if dt is torch.float16 else "nextafter_bf16"
        return special(name, dt, spec.shape, x, y)
    return ew(Op.NEXTAFTER, dt, spec.shape, x, y)


def _fmaxmin(op: Op):
    """fmax/fmin: the maximum/minimum ignoring a NaN operand (NaN only when both are)."""
    def lower(spec, a, b):
        dt = spec.dtype
        a, b = as_node(a, dt), as_node(b, dt)
        m = ew(op, dt, spec.shape, a, b)
        if not dt.is_floating_point:
            return m
        a_nan = ew(Op.NE, torch.bool, spec.shape, a, a)
        b_nan = ew(Op.NE, torch.bool, spec.shape, b, b)
        return ew(Op.WHERE, dt, spec.shape, a_nan, b, ew(Op.WHERE, dt, spec.shape, b_nan, a, m))
    return lower


register(aten.fmax.default, prims.fmax.default)(_fmaxmin(Op.MAX))
register(aten.fmin.default, prims.fmin.default)(_fmaxmin(Op.MIN))


@register(aten.angle.default)
def _angle(spec, x):
    """Real input: pi for negative values, 0 otherwise, NaN kept (complex runs on the CPU)."""
    dt = spec.dtype
    if x.dtype.is_complex or not dt.is_floating_point:
        raise Unsupported("angle of a complex tensor")
    x = cast(x, dt)
    neg = ew(Op.LT, torch.bool, spec.shape, x, const(0, dt))
    value = ew(Op.WHERE, dt, spec.shape, neg, const(math.pi, dt), const(0, dt))
    return ew(Op.WHERE, dt, spec.shape, ew(Op.NE, torch.bool, spec.shape, x, x), x, value)


# ---- products and scans -----------------------------------------------------------------------

@register(prims.prod.default)
def _prims_prod(spec, x, dims, output_dtype=None):
    axes = tuple(dims) if dims is not None else tuple(range(len(x.shape)))
    return reduce(Op.PROD, cast(x, spec.dtype), axes, False, spec.dtype)


def _scan(op: Op, floats_only: bool):
    def lower(spec, x, dim, dtype=None):
        if floats_only and not spec.dtype.is_floating_point:
            raise Unsupported(f"{op.name} of {spec.dtype}: the CPU fallback reports it")
        x = cast(x, spec.dtype)
        if not x.shape:
            return x            # a 0-dim scan is its input (log(exp(x)) is x too)
        return Node(op, spec.dtype, x.shape, (x,), dim % len(x.shape))
    return lower


register(aten.cumprod.default)(_scan(Op.CUMPROD, False))
register(aten.logcumsumexp.default)(_scan(Op.LOGCUMSUMEXP, True))
