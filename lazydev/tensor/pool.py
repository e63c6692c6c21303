"""Pooling for wse: forwards written as gathers over windows, backwards as their vjp.

torch._decomp has no decomposition of avg_pool2d/3d, _adaptive_avg_pool3d, or the general case
of adaptive_max_pool2d/3d (it returns NotImplemented when the input size is not a multiple of the
output size). These are written here in aten ops that wse lowers: a window gather (unfold of
the padded input, or an index with per-output window starts) and a reduction. Their backwards
are traced vjps of the same functions (Note [Backward by vjp], tensor/vjp.py); the backwards of
max pooling, which get the argmax indices, scatter-add the gradient at those indices.
"""
from __future__ import annotations

import math

import torch

from .vjp import Vjp, decomposition, rule

aten = torch.ops.aten


def _ntuple(v, n: int, default=None) -> list:
    if isinstance(v, int):
        v = [v]
    v = list(v) if v else list(default or [])
    return v * n if len(v) == 1 else v


def _out_size(size, k, s, p, ceil_mode, d=1) -> int:
    """pooling_output_shape of ATen."""
    span = size + 2 * p - d * (k - 1) - 1 + ((s - 1) if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _outer_product(per_dim: list) -> torch.Tensor:
    """[O1, ..., On] from 1-d [O_d] factors (per-dimension window sizes -> divisors)."""
    n = len(per_dim)
    out = None
    for d, v in enumerate(per_dim):
        v = v.reshape([-1] + [1] * (n - 1 - d))
        out = v if out is None else out * v
    return out


# ---- average pooling --------------------------------------------------------------------------

def _avg_pool(n: int):
    def avg_pool(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        k = _ntuple(kernel_size, n)
        s, p = _ntuple(stride, n, k), _ntuple(padding, n, [0])
        size = x.shape[-n:]
        out = [_out_size(size[d], k[d], s[d], p[d], ceil_mode) for d in range(n)]
        pads = []
        for d in reversed(range(n)):    # constant_pad_nd lists the last dim first
            extra = max(0, (out[d] - 1) * s[d] + k[d] - (size[d] + 2 * p[d]))
            pads += [p[d], p[d] + extra]
        xp = aten.constant_pad_nd(x, pads, 0.0)
        first = x.dim() - n
        for d in range(n):
            xp = xp.unfold(first + d, k[d], s[d]).narrow(first + d, 0, out[d])
        total = xp.sum(dim=tuple(range(-n, 0)))
        divisor = divisor_override or _avg_counts(size, out, k, s, p, count_include_pad, x)
        if x.dtype.is_floating_point:
            return total / divisor
        # ATen divides an integer window's sum in the input's type: C's truncating division.
        return torch.div(total, divisor, rounding_mode="trunc").to(x.dtype)
    return avg_pool


def _avg_counts(size, out, k, s, p, count_include_pad, x) -> torch.Tensor:
    """ATen's divisor per output position: the window clipped to the padded input, or (without
    count_include_pad) to the input."""
    counts = []
    for d in range(len(size)):
        start = torch.arange(out[d], device=x.device) * s[d] - p[d]
        end = torch.clamp(start + k[d], max=size[d] + p[d])
        if not count_include_pad:
            start, end = torch.clamp(start, min=0), torch.clamp(end, max=size[d])
        counts.append(end - start)
    return _outer_product(counts).to(x.dtype)


decomposition(aten.avg_pool2d.default)(_avg_pool(2))
decomposition(aten.avg_pool3d.default)(_avg_pool(3))


def _avg_pool_backward(fwd):
    """avg_poolNd_backward(grad_output, self, *params) is the vjp of avg_poolNd(self, *params)."""
    def make(a):
        params = [a[k] for k in ("kernel_size", "stride", "padding", "ceil_mode",
                                 "count_include_pad", "divisor_override")]
        return Vjp(lambda x: fwd(x, *params), [a["self"]], [], [a["grad_output"]])
    return make


rule(aten.avg_pool2d_backward.default)(_avg_pool_backward(_avg_pool(2)))
rule(aten.avg_pool3d_backward.default)(_avg_pool_backward(_avg_pool(3)))


# ---- adaptive pooling -------------------------------------------------------------------------

def _adaptive_windows(size: int, out: int, device):
    """Input index [out, K] of each element of each adaptive window (clamped into range), and
    whether it is inside the window; window o is [floor(o*size/out), ceil((o+1)*size/out))."""
    k = max(-(-(o + 1) * size // out) - (o * size // out) for o in range(out))
    o = torch.arange(out, device=device)
    start = o * size // out
    end = ((o + 1) * size + out - 1) // out
    idx = start.unsqueeze(1) + torch.arange(k, device=device)
    return torch.clamp(idx, max=size - 1), idx < end.unsqueeze(1), end - start


def _adaptive_gather(x, output_size):
    """(values [..., O1..On, K], valid [O1..On, K], flat input index [O1..On, K], window
    lengths) over the adaptive windows of the last n dims, K the product of the extents."""
    n = len(output_size)
    size = x.shape[-n:]
    wins = [_adaptive_windows(size[d], output_size[d], x.device) for d in range(n)]
    return (*_gather_windows(x, output_size, [(i, v) for i, v, _ in wins]),
            [w[2] for w in wins])


def _gather_windows(x, output_size, wins):
    """(values [..., O1..On, K], valid [O1..On, K], flat input index [O1..On, K]) of windows
    given per dim d as (input index [Od, Kd] clamped into range, inside the input [Od, Kd])."""
    n = len(output_size)
    size = x.shape[-n:]
    idx, valid, flat = [], None, None
    stride = math.prod(size)
    for d, (i, v) in enumerate(wins):
        stride //= size[d]
        # dims (O1, K1, O2, K2, ...): window d occupies positions 2d, 2d+1
        shape = [1] * (2 * d) + list(i.shape) + [1] * (2 * (n - 1 - d))
        i, v = i.reshape(shape), v.reshape(shape)
        idx.append(i)
        valid = v if valid is None else valid & v
        flat = i * stride if flat is None else flat + i * stride
    vals = x[(Ellipsis, *idx)]
    lead = x.dim() - n
    order = list(range(lead)) + [lead + 2 * d for d in range(n)] + \
        [lead + 2 * d + 1 for d in range(n)]
    window = math.prod(w[0].shape[1] for w in wins)
    vals = vals.permute(order).reshape(list(x.shape[:lead]) + list(output_size) + [window])

    def spatial(t):
        t = t.expand([output_size[d // 2] if d % 2 == 0 else wins[d // 2][0].shape[1]
                      for d in range(2 * n)])
        return t.permute([2 * d for d in range(n)] + [2 * d + 1 for d in range(n)]) \
            .reshape(list(output_size) + [window])
    return vals, spatial(valid), spatial(flat)


def _max_of_windows(vals, valid, flat):
    """(maximum, flat input index) of each window as ATen's CPU kernels pick them: the first
    maximum among the positions inside the input (the first of them when all are -inf), and
    the last NaN where there is one. (argmax over the windows gave the first NaN, and over
    padding read as -inf a padding position.)"""
    masked = torch.where(valid, vals, float("-inf"))
    top = masked.amax(-1, keepdim=True)
    first = ((masked == top) & valid).to(torch.uint8).argmax(-1, keepdim=True)
    slot = torch.arange(vals.shape[-1], device=vals.device)
    last_nan = torch.where(vals.isnan() & valid, slot, -1).amax(-1, keepdim=True)
    arg = torch.where(last_nan >= 0, last_nan, first)
    index = torch.gather(flat.expand(vals.shape), -1, arg).squeeze(-1)
    return torch.gather(masked, -1, arg).squeeze(-1), index


@decomposition(aten._adaptive_avg_pool3d.default)
def _adaptive_avg_pool3d(x, output_size):
    vals, valid, _, lengths = _adaptive_gather(x, list(output_size))
    total = torch.where(valid, vals, 0).sum(-1)
    return total / _outer_product(lengths).to(x.dtype)


@rule(aten._adaptive_avg_pool3d_backward.default)
def _adaptive_avg_pool3d_backward(a):
    size = list(a["grad_output"].shape[-3:])
    return Vjp(lambda x: _adaptive_avg_pool3d(x, size), [a["self"]], [],
               [a["grad_output"]])


def _adaptive_max_pool(n: int):
    def adaptive_max_pool(x, output_size):
        output_size = list(output_size)
        if 0 in output_size:
            shape = list(x.shape[:-n]) + output_size
            return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)
        vals, valid, flat, _ = _adaptive_gather(x, output_size)
        return _max_of_windows(vals, valid, flat)
    return adaptive_max_pool


decomposition(aten.adaptive_max_pool2d.default)(_adaptive_max_pool(2))
decomposition(aten.adaptive_max_pool3d.default)(_adaptive_max_pool(3))


@decomposition(aten.max_pool3d_with_indices.default)
def _max_pool3d(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """As ATen's CPU kernel picks (_max_of_windows): torch._decomp's form let a padding position
    win a window of -inf (a negative index; backward raised) and took the first NaN."""
    k = _ntuple(kernel_size, 3)
    s, p, d = _ntuple(stride, 3, k), _ntuple(padding, 3, [0]), _ntuple(dilation, 3, [1])
    size = x.shape[-3:]
    out = [_out_size(size[i], k[i], s[i], p[i], ceil_mode, d[i]) for i in range(3)]
    wins = []
    for i in range(3):
        pos = (torch.arange(out[i], device=x.device) * s[i] - p[i]).unsqueeze(1) + \
            torch.arange(k[i], device=x.device) * d[i]
        wins.append((pos.clamp(0, size[i] - 1), (pos >= 0) & (pos < size[i])))
    return _max_of_windows(*_gather_windows(x, out, wins))


# ---- fractional max pooling -------------------------------------------------------------------

def _fractional_starts(u, size: int, out: int, k: int):
    """Window starts [N, C, out] from the samples u [N, C, 1], in float32 as the CPU kernel's
    generate_intervals: trunc((i + u) * alpha) - trunc(u * alpha), the last at size - k."""
    last = torch.full(list(u.shape[:2]) + [out], size - k, dtype=torch.int64, device=u.device)
    if out <= 1:
        return last
    alpha = torch.tensor((size - k) / (out - 1), dtype=torch.float32, device="cpu").item()
    i = torch.arange(out, dtype=torch.float32, device=u.device)
    seq = ((i + u) * alpha).to(torch.int64) - (u * alpha).to(torch.int64)
    return torch.where(i == out - 1, last, seq)


def _fractional_max_pool(n: int, sample_of_dim: tuple):
    """fractional_max_poolNd: per plane, random window starts; the first maximum of each window
    and its flat spatial index. sample_of_dim[d]: which random sample spatial dim d uses."""
    def pool(x, kernel_size, output_size, random_samples):
        batched = x.dim() == n + 2
        x = x if batched else x.unsqueeze(0)
        nb, c, size = x.shape[0], x.shape[1], list(x.shape[2:])
        k, out = _ntuple(kernel_size, n), list(output_size)
        flat, stride = None, math.prod(size)
        for d in range(n):
            stride //= size[d]
            u = random_samples[..., sample_of_dim[d]].reshape(nb, c, 1).to(torch.float32)
            idx = _fractional_starts(u, size[d], out[d], k[d]).unsqueeze(-1) + \
                torch.arange(k[d], device=x.device)
            term = idx.reshape([nb, c] + [1] * (2 * d) + [out[d], k[d]] + [1] * (2 * (n - 1 - d)))
            flat = term * stride if flat is None else flat + term * stride
        order = [0, 1] + [2 + 2 * d for d in range(n)] + [3 + 2 * d for d in range(n)]
        flat = flat.permute(order).reshape([nb, c] + out + [math.prod(k)])
        vals = torch.gather(x.reshape(nb, c, math.prod(size)), 2,
                            flat.reshape(nb, c, math.prod(out) * math.prod(k))).reshape(flat.shape)
        index = torch.gather(flat, -1, vals.argmax(-1, keepdim=True)).squeeze(-1)
        values = vals.amax(-1)
        return (values, index) if batched else (values.squeeze(0), index.squeeze(0))
    return pool


decomposition(aten.fractional_max_pool2d.default)(_fractional_max_pool(2, (1, 0)))
decomposition(aten.fractional_max_pool3d.default)(_fractional_max_pool(3, (0, 1, 2)))


# ---- backwards of max pooling: scatter the gradient to the argmax -----------------------------

def _to_argmax(n: int):
    """*_backward(grad_output, self, ..., indices): grad_output added at the flat spatial
    input index each output took its maximum from."""
    def backward(grad, x, *params):
        indices = params[-1]
        lead = list(x.shape[:-n])
        zeros = torch.zeros(lead + [math.prod(x.shape[-n:])], dtype=grad.dtype,
                            device=grad.device)
        outs = lead + [math.prod(grad.shape[len(lead):])]
        return zeros.scatter_add(-1, indices.reshape(outs), grad.reshape(outs)).reshape(x.shape)
    return backward


for _op, _n in ((aten.adaptive_max_pool2d_backward, 2), (aten.adaptive_max_pool3d_backward, 3),
                (aten.max_pool3d_with_indices_backward, 3),
                (aten.fractional_max_pool2d_backward, 2),
                (aten.fractional_max_pool3d_backward, 3)):
    decomposition(_op.default)(_to_argmax(_n))
