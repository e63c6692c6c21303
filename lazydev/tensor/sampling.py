"""Resampling ops torch._decomp does not decompose: grid_sampler_3d, _upsample_bilinear2d_aa.

grid_sampler_3d follows the CPU kernel (aten/src/ATen/native/GridSampler.cpp): unnormalise the
grid, apply the padding mode, then a weighted sum of the (trilinear) corner gathers, or one
gather at the rounded position (nearest). Its backward is written out in the kernel's order of
summation (a grid gradient sums many terms over channels, and the CPU's float accumulation
error there is larger than the comparison tolerance).
The antialiased bilinear resize is separable and linear: out = Wh @ x @ Ww^T, with the CPU
kernel's normalised triangle-filter weights built from aranges; its backward is the transpose.
"""
from __future__ import annotations

import math

import torch

from ..trace.build import reduce
from ..trace.ir import Op
from .vjp import decomposition
from .wse_tensor import WseTensor, from_node, value

aten = torch.ops.aten


def seqsum(t, dim: int, keepdim: bool = False):
    """Sum over `dim` accumulated in t's dtype, in index order, as PyTorch's scalar CPU kernels
    sum (wse's sum accumulates floats in double). No aten op says this: the node is made here."""
    if not isinstance(t, WseTensor):
        return t.sum(dim, keepdim=keepdim)
    return from_node(reduce(Op.SEQSUM, value(t), (dim,), keepdim, t.dtype))


def _unnormalize(coord, size: int, align_corners: bool):
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord, twice_low: int, twice_high: int):
    if twice_low == twice_high:
        return torch.zeros_like(coord)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    c = (coord - low).abs()
    extra = torch.fmod(c, span)
    flips = (c / span).floor()
    return torch.where(torch.fmod(flips, 2) == 0, extra + low, span - extra + low)


def _source_index(coord, size: int, padding_mode: int, align_corners: bool):
    c = _unnormalize(coord, size, align_corners)
    if padding_mode == 1:                                   # border
        return c.clamp(0, size - 1)
    if padding_mode == 2:                                   # reflection
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _reflect(c, *twice).clamp(0, size - 1)
    return c                                                # zeros


def _gather3d(x, iz, iy, ix):
    """x[n, c, iz, iy, ix] per output position (zero outside the input); iz.. are (N, oD, oH,
    oW) integer-valued float tensors."""
    n, c, d, h, w = x.shape
    valid = (iz >= 0) & (iz < d) & (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
    i64 = torch.int64
    flat = (iz.to(i64) * h + iy.to(i64)) * w + ix.to(i64)
    flat = torch.where(valid, flat, 0).reshape(n, 1, -1).expand(n, c, -1)
    vals = torch.gather(x.reshape(n, c, d * h * w), 2, flat)
    return torch.where(valid.reshape(n, 1, -1), vals, 0)


@decomposition(aten.grid_sampler_3d.default)
def grid_sampler_3d(x, grid, interpolation_mode, padding_mode, align_corners):
    if interpolation_mode not in (0, 1):
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    n, c = x.shape[:2]
    out = list(grid.shape[1:4])
    ix, iy, iz = (_source_index(grid[..., k], x.shape[4 - k], padding_mode, align_corners)
                  for k in range(3))
    if interpolation_mode == 1:
        y = _gather3d(x, iz.round(), iy.round(), ix.round())
        return y.reshape([n, c] + out)
    x0, y0, z0 = ix.floor(), iy.floor(), iz.floor()
    wx, wy, wz = ((x0 + 1 - ix, ix - x0), (y0 + 1 - iy, iy - y0), (z0 + 1 - iz, iz - z0))
    total = None
    for dz in (0, 1):                   # the CPU kernel's corner order: tnw, tne, tsw, ..., bse
        for dy in (0, 1):
            for dx in (0, 1):
                weight = (wx[dx] * wy[dy] * wz[dz]).reshape(n, 1, -1)
                term = _gather3d(x, z0 + dz, y0 + dy, x0 + dx) * weight
                total = term if total is None else total + term
    return total.reshape([n, c] + out)


def _reflect_grad(coord, twice_low: int, twice_high: int):
    """d reflect / d coord: +-1 by the side and parity of the reflection (the CPU kernel's
    reflect_coordinates_set_grad)."""
    if twice_low == twice_high:
        return torch.zeros_like(coord)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    sign = torch.where(coord - low < 0, -1.0, 1.0)
    flips = ((coord - low).abs() / span).floor()
    return torch.where(torch.fmod(flips, 2) == 0, sign, -sign)


def _source_index_grad(coord, size: int, padding_mode: int, align_corners: bool):
    """(source index, its derivative in coord), as grid_sampler_compute_source_index_set_grad."""
    c = _unnormalize(coord, size, align_corners)
    grad = torch.full_like(c, (size - 1) / 2 if align_corners else size / 2)
    if padding_mode == 2:
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        grad = grad * _reflect_grad(c, *twice)
        c = _reflect(c, *twice)
    if padding_mode in (1, 2):
        grad = torch.where((c > 0) & (c < size - 1), grad, 0)
        c = c.clamp(0, size - 1)
    return c, grad


def _corners(ix, iy, iz, interpolation_mode):
    """(z, y, x, weight, (wx, wy, wz), (dz, dy, dx)) per corner in the CPU kernel's order."""
    if interpolation_mode == 1:
        one = torch.ones_like(ix)
        return [(iz.round(), iy.round(), ix.round(), one, None, None)]
    x0, y0, z0 = ix.floor(), iy.floor(), iz.floor()
    wx, wy, wz = ((x0 + 1 - ix, ix - x0), (y0 + 1 - iy, iy - y0), (z0 + 1 - iz, iz - z0))
    return [(z0 + dz, y0 + dy, x0 + dx, wx[dx] * wy[dy] * wz[dz], (wx[dx], wy[dy], wz[dz]),
             (dz, dy, dx)) for dz in (0, 1) for dy in (0, 1) for dx in (0, 1)]


def _scatter3d(shape, corners, g):
    """The input gradient: g (N, C, P) times each corner's weight, added at its position."""
    n, c, d, h, w = shape
    i64 = torch.int64
    vals, idx = [], []
    for z, y, x, weight, _, _ in corners:
        valid = (z >= 0) & (z < d) & (y >= 0) & (y < h) & (x >= 0) & (x < w)
        flat = (z.to(i64) * h + y.to(i64)) * w + x.to(i64)
        idx.append(torch.where(valid, flat, 0).unsqueeze(1))
        vals.append(torch.where(valid, weight, 0).unsqueeze(1) * g)
    # (N, C, P, corners): the CPU adds point by point, each point's corners in order.
    vals = torch.stack(vals, -1).reshape(n, c, -1)
    idx = torch.stack(idx, -1).reshape(n, 1, -1).expand(n, c, -1)
    out = torch.zeros(n, c, d * h * w, dtype=g.dtype, device=g.device)
    return out.scatter_add(2, idx, vals).reshape(shape)


def _grid_grad(x, corners, g, mults):
    """The grid gradient, summed over channels and corners in the CPU kernel's order and
    precision (SEQSUM: float accumulation), then scaled by d index / d grid."""
    n, c = x.shape[:2]
    parts = []
    for axis in range(3):                                   # gix, giy, giz
        terms = []
        for z, y, xx, _, ws, bits in corners:
            others = [ws[k] for k in range(3) if k != axis]   # (wy, wz), (wx, wz), (wx, wy)
            t = _gather3d(x, z, y, xx) * others[0].unsqueeze(1) * others[1].unsqueeze(1) * g
            terms.append(t if bits[2 - axis] else -t)
        t = torch.stack(terms, -1).permute(0, 2, 1, 3).reshape(n, -1, c * len(terms))
        total = seqsum(t, 2)
        parts.append(mults[axis] * total)
    return torch.stack(parts, -1)


@decomposition(aten.grid_sampler_3d_backward.default)
def grid_sampler_3d_backward(grad, x, grid, interpolation_mode, padding_mode, align_corners,
                             output_mask):
    n, c = x.shape[:2]
    coords = [_source_index_grad(grid[..., k].reshape(n, -1), x.shape[4 - k], padding_mode,
                                 align_corners) for k in range(3)]
    (ix, gx), (iy, gy), (iz, gz) = coords
    corners = _corners(ix, iy, iz, interpolation_mode)
    g = grad.reshape(n, c, -1)
    gi = _scatter3d(x.shape, corners, g) if output_mask[0] else None
    gg = None
    if output_mask[1]:
        if interpolation_mode == 1:
            gg = torch.zeros_like(grid)
        else:
            gg = _grid_grad(x, corners, g, (gx, gy, gz)).reshape(grid.shape)
    return gi, gg


# ---- antialiased bilinear resize --------------------------------------------------------------

def _rounded(v: float, dtype) -> float:
    """v rounded to `dtype` (the CPU kernel keeps its scalars in the input's float type)."""
    return torch.tensor(v, dtype=dtype, device="cpu").item()


def _aa_weights(size: int, out: int, align_corners: bool, scale_opt, device, dtype):
    """[out, size] matrix of the CPU kernel's normalised triangle-filter weights, rounded as it
    rounds them (HelperInterpBase::_compute_indices_min_size_weights_aa: float scalars, double
    for double images)."""
    f64 = torch.float64
    t = f64 if dtype == f64 else torch.float32
    if align_corners:
        scale = _rounded((size - 1) / (out - 1), t) if out > 1 else 0.0
    elif scale_opt is not None and scale_opt > 0:
        scale = _rounded(1.0 / scale_opt, t)
    else:
        scale = _rounded(size / out, t)
    support = scale if scale >= 1.0 else 1.0            # interp_size / 2 = 1 for bilinear
    invscale = _rounded(1.0 / scale, t) if scale >= 1.0 else 1.0
    center = ((torch.arange(out, device=device, dtype=f64) + 0.5) * scale).to(t)
    lo = torch.clamp(torch.trunc((center - support).to(f64) + 0.5), min=0)
    hi = torch.clamp(torch.trunc((center + support).to(f64) + 0.5), max=size)
    hi = torch.minimum(hi, lo + (math.ceil(support) * 2 + 1))
    j = torch.arange(size, device=device, dtype=t).unsqueeze(0)
    arg = (((j - center.unsqueeze(1)).to(f64) + 0.5) * invscale).to(t).abs()
    inside = (j >= lo.unsqueeze(1)) & (j < hi.unsqueeze(1))
    w = torch.where(inside & (arg < 1), 1 - arg, 0)
    total = seqsum(w, 1, keepdim=True)           # the kernel's total_w
    return torch.where(total != 0, w / torch.where(total != 0, total, 1), 0).to(dtype)


def _aa_matrices(in_hw, out_hw, align_corners, scales_h, scales_w, like):
    return (_aa_weights(in_hw[0], out_hw[0], align_corners, scales_h, like.device, like.dtype),
            _aa_weights(in_hw[1], out_hw[1], align_corners, scales_w, like.device, like.dtype))


@decomposition(aten._upsample_bilinear2d_aa.default)
def _upsample_bilinear2d_aa(x, output_size, align_corners, scales_h=None, scales_w=None):
    if not x.dtype.is_floating_point:
        return _aa_uint8(x, output_size, align_corners, scales_h, scales_w)
    wh, ww = _aa_matrices(x.shape[-2:], output_size, align_corners, scales_h, scales_w, x)
    return torch.matmul(torch.matmul(wh, x), ww.mT)     # the CPU resizes H, then W


def _aa_uint8(x, output_size, align_corners, scales_h, scales_w):
    """uint8 images (ATen's only integer type here): as the CPU's separable uint8 kernel, W
    then H, each pass rounded to the nearest byte. Its weights are fixed-point, these float32;
    a result may differ from the CPU's by one."""
    f = x.to(torch.float32)
    wh, ww = _aa_matrices(x.shape[-2:], output_size, align_corners, scales_h, scales_w, f)
    wide = torch.matmul(f, ww.mT).round().clamp(0, 255)
    return torch.matmul(wh, wide).round().clamp(0, 255).to(x.dtype)


@decomposition(aten._upsample_bilinear2d_aa_backward.default)
def _upsample_bilinear2d_aa_backward(grad, output_size, input_size, align_corners,
                                     scales_h=None, scales_w=None):
    wh, ww = _aa_matrices(input_size[-2:], output_size, align_corners, scales_h, scales_w, grad)
    return torch.matmul(torch.matmul(wh.mT, grad), ww)
