"""Products and distances over pairs: _trilinear (nn.functional.bilinear), cdist, pdist.

None of these has a torch._decomp decomposition. _trilinear is an einsum (its derivative formula
calls _trilinear again, so its backward needs nothing more). The distance backwards are written
out rather than traced: the CPU kernels define the gradient as 0 where a distance is 0 (and, for
p < 1, where a coordinate difference is 0), which the autograd of the forward formula would make
NaN.
"""
from __future__ import annotations

import math
import string

import torch

from .vjp import decomposition

aten = torch.ops.aten


@decomposition(aten._trilinear.default)
def _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    total = i1.dim() + len(expand1)
    letters = string.ascii_letters[:total]

    def subscript(expand):
        return "".join(c for d, c in enumerate(letters) if d not in expand)
    present = set(subscript(expand1) + subscript(expand2) + subscript(expand3))
    out_dims = [d for d in range(total) if d not in sumdim]
    out = "".join(letters[d] for d in out_dims if letters[d] in present)
    y = torch.einsum(f"{subscript(expand1)},{subscript(expand2)},{subscript(expand3)}->{out}",
                     i1, i2, i3)
    # A dim expanded in all three inputs is size 1 and kept unless summed.
    for pos, d in enumerate(out_dims):
        if letters[d] not in present:
            y = y.unsqueeze(pos)
    return y


# ---- p-norm distances -------------------------------------------------------------------------

def _pnorm(diff, p: float):
    """The p-norm over the last dim, as the CPU cdist/pdist kernels define it for each p."""
    if p == 0:
        return (diff != 0).sum(-1).to(diff.dtype)
    if p == 1:
        return diff.abs().sum(-1)
    if p == 2:
        return (diff * diff).sum(-1).sqrt()
    if math.isinf(p):
        return diff.abs().amax(-1)
    return diff.abs().pow(p).sum(-1).pow(1.0 / p)


def _pnorm_grad(diff, dist, grad, p: float):
    """d(dist)/d(x1) * grad per pair and coordinate; dist and grad broadcast over the last dim."""
    dist, grad = dist.unsqueeze(-1), grad.unsqueeze(-1)
    zero = torch.zeros_like(diff)
    if p == 0:
        return zero
    if p == 1:
        return grad * diff.sign()
    if math.isinf(p):
        hit = 1 - torch.clamp((diff.abs() - dist).abs().ceil(), max=1)
        return grad * diff.sign() * hit
    if p == 2:
        return torch.where(dist == 0, zero, grad * diff / dist)
    if p < 2:
        g = diff.sign() * diff.abs().pow(p - 1) * grad / dist.pow(p - 1)
        skip = (dist == 0) | ((diff == 0) & (p < 1))
        return torch.where(skip, zero, g)
    return torch.where(dist == 0, zero, diff * diff.abs().pow(p - 2) * grad / dist.pow(p - 1))


def _use_mm(p, compute_mode, r1: int, r2: int) -> bool:
    return p == 2 and (compute_mode == 1 or (compute_mode in (None, 0) and (r1 > 25 or r2 > 25)))


def _euclidean_mm(x1, x2):
    """ATen's _euclidean_dist: sqrt of |a|^2 + |b|^2 - 2 a.b by one matmul."""
    n1 = x1.pow(2).sum(-1, keepdim=True)
    n2 = x2.pow(2).sum(-1, keepdim=True)
    a = torch.cat([-2 * x1, n1, torch.ones_like(n1)], -1)
    b = torch.cat([x2, torch.ones_like(n2), n2], -1)
    return a.matmul(b.mT).clamp_min(1e-30).sqrt()


@decomposition(aten._cdist_forward.default)
def _cdist_forward(x1, x2, p, compute_mode=None):
    if _use_mm(p, compute_mode, x1.shape[-2], x2.shape[-2]):
        return _euclidean_mm(x1, x2)
    return _pnorm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p)


@decomposition(aten._cdist_backward.default)
def _cdist_backward(grad, x1, x2, p, cdist):
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return _pnorm_grad(diff, cdist, grad, p).sum(-2)


def _pairs(n: int):
    """Row and column index of each pair i < j, in pdist's order (CPU tensors: graph inputs)."""
    ij = torch.triu_indices(n, n, 1)
    return ij[0], ij[1]


@decomposition(aten._pdist_forward.default)
def _pdist_forward(x, p=2.0):
    i, j = _pairs(x.shape[0])
    return _pnorm(x[i] - x[j], p)


@decomposition(aten._pdist_backward.default)
def _pdist_backward(grad, x, p, pdist):
    i, j = _pairs(x.shape[0])
    g = _pnorm_grad(x[i] - x[j], pdist, grad, p)
    zeros = torch.zeros_like(x)
    return zeros.index_put((i,), g, accumulate=True).index_put((j,), -g, accumulate=True)
