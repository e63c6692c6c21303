"""Lowerings of the matrix products (mm, bmm, addmm, addmv, addbmm) onto Op.MATMUL, which runs
the C library's GEMM (csrc/wse_kernels.c) in float or double, half types converted."""
from __future__ import annotations

import torch

from .build import Unsupported, as_node, cast, ew, expand, full, opmath, reduce, reshape
from .ir import Node, Op
from .lower import register

aten = torch.ops.aten


def _mm_dtype(dt):
    if dt not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        raise Unsupported(f"matmul of {dt}")
    return torch.float64 if dt == torch.float64 else torch.float32


def matmul(a: Node, b: Node, out_dtype) -> Node:
    ct = _mm_dtype(out_dtype)
    a, b = cast(a, ct), cast(b, ct)
    batch = a.shape[:-2]
    shape = batch + (a.shape[-2], b.shape[-1])
    return cast(Node(Op.MATMUL, ct, shape, (a, b)), out_dtype)


@register(aten.mm.default, aten.bmm.default)
def _mm(spec, a, b):
    return matmul(a, b, spec.dtype)


@register(aten.addmm.default)
def _addmm(spec, bias, a, b, beta=1, alpha=1):
    """A half-type addmm (nn.Linear under autocast or .half()) is rounded once, as the CPU's
    GEMM adds the bias to the float product (C = alpha * A @ B + beta * C in float): rounding
    the product first, then the sum, differed in a quarter of a Linear's outputs."""
    wide = opmath(spec.dtype)
    out = _addmm_tail(spec, matmul(a, b, wide), bias, beta, alpha, wide)
    return cast(out, spec.dtype)


def _addmm_tail(spec, prod, bias, beta, alpha, dt=None):
    dt = dt or spec.dtype
    if isinstance(alpha, (int, float)) and alpha == 0:
        # as BLAS: alpha=0 skips the product, whose NaNs and infinities are not propagated
        prod = full(0, dt, spec.shape)
        if not (isinstance(beta, (int, float)) and beta == 0):
            scaled = ew(Op.MUL, dt, bias.shape, cast(bias, dt), as_node(beta, dt))
            return expand(scaled, spec.shape)
    if not (isinstance(alpha, int) and alpha == 1):
        prod = ew(Op.MUL, dt, spec.shape, prod, as_node(alpha, dt))
    if isinstance(beta, (int, float)) and beta == 0:
        return prod             # as in PyTorch: beta=0 ignores bias, NaNs included
    bias = cast(bias, dt)
    if not (isinstance(beta, int) and beta == 1):
        bias = ew(Op.MUL, dt, bias.shape, bias, as_node(beta, dt))
    return ew(Op.ADD, dt, spec.shape, prod, bias)


@register(aten.addmv.default)
def _addmv(spec, bias, mat, vec, beta=1, alpha=1):
    """beta * bias + alpha * mat @ vec, as addmm of one column (BLAS's alpha=0: no product)."""
    wide = opmath(spec.dtype)
    prod = reshape(matmul(mat, reshape(vec, (vec.shape[0], 1)), wide), spec.shape)
    return cast(_addmm_tail(spec, prod, bias, beta, alpha, wide), spec.dtype)


@register(aten.addbmm.default)
def _addbmm(spec, bias, b1, b2, beta=1, alpha=1):
    """beta * bias + alpha * sum over the batch of b1 @ b2."""
    total = reduce(Op.SUM, matmul(b1, b2, spec.dtype), (0,), False, spec.dtype)
    return _addmm_tail(spec, total, bias, beta, alpha)
