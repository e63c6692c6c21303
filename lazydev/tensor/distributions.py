"""torch.multinomial recorded, as the CPU kernel computes it (aten/src/ATen/native/
Distributions.cpp and cpu/MultinomialKernel.cpp), from the same draws of the CPU generator.

Without replacement, or for one sample: argmax (topk for several) of p / q with q ~ Exp(1)
drawn by exponential_, the Gumbel trick ATen uses. With replacement: each row's cumulative
distribution normalised by its sum, its last bucket set to 1, and a binary search for one
uniform double per sample, drawn row by row as the CPU kernel draws them. The checks of the
probabilities (negative, inf or NaN, a zero row) read values: they are device-side checks
(torch._assert_async, as ATen writes the first path itself), so a generation loop samples a
token per step without a sync.
"""
from __future__ import annotations

import torch

from .vjp import decomposition

aten = torch.ops.aten


# ATen's names of the dtypes its message may name
_SCALAR_TYPE = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
                torch.complex128: "ComplexDouble"}


def _static_checks(p, n: int, replacement: bool) -> None:
    if p.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not p.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{_SCALAR_TYPE.get(p.dtype, p.dtype)}")
    if n <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and n > p.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    if p.shape[-1] > 2 ** 24:
        raise RuntimeError("number of categories cannot exceed 2^24")


@decomposition(aten.multinomial.default)
def multinomial(p, n_sample: int, replacement: bool = False, *, generator=None):
    _static_checks(p, n_sample, replacement)
    rows = p if p.dim() == 2 else p.unsqueeze(0)
    if rows.shape[0] == 0:
        return torch.empty(tuple(p.shape[:-1]) + (n_sample,), dtype=torch.int64,
                           device=p.device)
    if not replacement or n_sample == 1:
        out = _gumbel(p, n_sample, generator)
    else:
        out = _inverse_cdf(rows, n_sample, generator)
        if p.dim() == 1:
            out = out.squeeze(0)
    return out


def _gumbel(p, n: int, generator):
    low, high = torch.aminmax(p)
    torch._assert_async((high < float("inf")) & (low >= 0),
                        "probability tensor contains either `inf`, `nan` or element < 0")
    zero = p.sum() == 0 if p.dim() == 1 else (p.sum(1) == 0).any()
    torch._assert_async(~zero, "invalid multinomial distribution (sum of probabilities <= 0)")
    q = torch.empty_like(p).exponential_(1, generator=generator)
    q = p / q
    if n == 1:
        return q.argmax(-1, keepdim=True)
    return q.topk(n)[1]


def _inverse_cdf(rows, n: int, generator):
    torch._assert_async((rows >= 0).all(),
                        "invalid multinomial distribution (encountering probability entry < 0)")
    torch._assert_async(rows.isfinite().all(), "invalid multinomial distribution "
                        "(encountering probability entry = infinity or NaN)")
    # The CPU kernel sums in the dtype (float for half and bfloat16), in order.
    acc = rows if rows.dtype in (torch.float32, torch.float64) else rows.float()
    cum = torch.cumsum(acc, -1)
    total = cum[:, -1:]
    torch._assert_async((total > 0).all(),
                        "invalid multinomial distribution (sum of probabilities <= 0)")
    cum = torch.cat([(cum / total)[:, :-1], torch.ones_like(total)], 1)
    u = torch.rand((rows.shape[0], n), dtype=torch.float64, generator=generator,
                   device=rows.device)
    return torch.searchsorted(cum.double(), u)
