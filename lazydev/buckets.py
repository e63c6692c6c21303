"""Shape bucketing: pad a varying dimension up to one of a few sizes so programs are reused.

A program is specialised to its shapes (every shape is a compile-time constant in the C), so a
dimension that changes every step (the last, short batch; variable sequence lengths) compiles
a program per size. Padding that dimension to the next bucket bounds the number of programs by
the number of buckets. The padding must not change the result: `pad_to_bucket` returns a mask
of the real entries, to weight per-example losses with (see the example below).

    x, keep = lazydev.pad_to_bucket(x, dim=0)                  # buckets from lazydev.config
    per_example = F.cross_entropy(model(x), y_padded, reduction="none")
    loss = (per_example * keep).sum() / keep.sum()
"""
from __future__ import annotations

import warnings

import torch

from .config import config


def bucket_size(n: int, buckets=None) -> int:
    """The smallest bucket >= n (powers of two past the largest bucket)."""
    buckets = sorted(buckets or config.buckets)
    for b in buckets:
        if b >= n:
            return b
    size = buckets[-1] if buckets else 1
    while size < n:
        size *= 2
    return size


def pad_to_bucket(x: torch.Tensor, dim: int = 0, buckets=None, value=0):
    """(x padded along `dim` to its bucket with `value`, bool mask of the real entries along
    `dim`). Both live on x's device. Pad a CPU tensor, then upload it: a wse tensor's padding is
    recorded on the device, on an input of the unpadded size, so each size still compiles its
    own program (it warns)."""
    dim = dim % x.dim()
    n = x.shape[dim]
    size = bucket_size(n, buckets)
    if x.device.type == "wse" and size != n:
        warnings.warn("lazydev.pad_to_bucket of a tensor already on wse: the padding is recorded "
                      "on the device, so each size still compiles its own program; pad the CPU "
                      "tensor before .to('wse')", stacklevel=2)
    keep = torch.zeros(size, dtype=torch.bool, device="cpu")
    keep[:n] = True
    if size == n:
        return x, keep.to(x.device)
    pad_shape = list(x.shape)
    pad_shape[dim] = size - n
    filler = torch.full(pad_shape, value, dtype=x.dtype, device=x.device)
    return torch.cat([x, filler], dim=dim), keep.to(x.device)
