"""ATen composite ops whose torch._decomp form rounds otherwise than the CPU's, or that it lacks.

logsumexp: torch._decomp's computes a half-precision input in float (its type-promotion
wrapper) and rounds once; ATen's logsumexp_out_impl runs amax, sub, exp, sum, log and add in the
input's dtype, rounding after each. For bfloat16 [-3.5, -2.5, 0] the CPU's sum rounds 1.1123 to
1.1094, so it returns 0.1040 where the float form gives 0.1064, 2.3% apart (bfloat16's tolerance
is 1.6%).

var, std (and var_mean, std_mean): torch._decomp's work in the input's dtype; ATen's CPU kernel
(std_var_kernel_impl) accumulates float32 and half inputs in double and rounds the result once.
The std of [1e20, 2e20, 3e20] is 1e20 on the CPU; in float32 its variance, 1e40, overflows and
wse gave inf.

index_add: ATen's CPU kernel is a scatter_add for most shapes, summing float16 and bfloat16
values in float32; torch._decomp's index_put(accumulate=True) rounds at every addition, so 64
additions of 0.002 to a bfloat16 1.0 left 1.0 where the CPU gives 1.125.

embedding_renorm (nn.Embedding(max_norm=...)): no decomposition, so it ran on the CPU, a sync
in every step.

native_dropout (nn.Dropout, F.dropout): ATen sends dropout on a device (PrivateUse1 included) to
native_dropout, whose torch._decomp form draws its mask with rand_like(x) < 1 - p; on the CPU
F.dropout draws it with bernoulli_(1 - p) (at::dropout's _dropout). So with one seed wse's mask
differed from the CPU's, and a model with dropout could not be checked against CPU eager,
though wse's bernoulli_ draws the CPU's numbers.
"""
from __future__ import annotations

import torch
from torch._decomp import decomposition_table

from ..trace import meta
from ..trace.build import HALF
from .vjp import decomposition

aten = torch.ops.aten


@decomposition(aten.logsumexp.default)
def logsumexp(x, dim, keepdim: bool = False):
    """ATen's logsumexp_out_impl, op by op in x's dtype (integers in the default float)."""
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        x = x.to(torch.get_default_dtype())
    if x.numel() == 0:
        return torch.sum(torch.exp(x), dim, keepdim).log()
    maxes = torch.amax(x, dim, keepdim=True)
    maxes = maxes.masked_fill(maxes.abs() == float("inf"), 0)
    squeezed = maxes if keepdim else maxes.squeeze(dim)
    return torch.sum(torch.exp(x - maxes), dim, keepdim).log().add(squeezed)


def _in_double(op):
    general = decomposition_table[op]

    def run(x, dim=None, *, correction=None, keepdim=False):
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return general(x, dim, correction=correction, keepdim=keepdim)
        out = general(x.double(), dim, correction=correction, keepdim=keepdim)
        return tuple(o.to(x.dtype) for o in out) if isinstance(out, tuple) else out.to(x.dtype)
    return run


for _op in (aten.var.correction, aten.std.correction, aten.var_mean.correction,
            aten.std_mean.correction):
    decomposition(_op)(_in_double(_op))


@decomposition(aten.embedding_renorm.default)
def embedding_renorm(weight, indices, max_norm: float, norm_type: float):
    """ATen's embedding_renorm_: each row `indices` names whose norm exceeds max_norm is scaled
    by max_norm / (norm + 1e-7), the scale computed in double as there. A row named twice is
    written twice with the same values."""
    rows = indices.reshape(-1)
    picked = weight.index_select(0, rows)
    norms = torch.linalg.vector_norm(picked, norm_type, dim=1, keepdim=True).double()
    scale = torch.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0).to(weight.dtype)
    return weight.index_put((rows,), picked * scale)


@decomposition(aten.index_add.default)
def index_add(x, dim: int, index, source, *, alpha=1):
    """ATen's index_add_cpu_: of a tensor of two dims or more along its first or last, with
    alpha 1, a long index and source's other sizes x's, it is a scatter_add, whose sum of
    float16 or bfloat16 values accumulates in float32 (lowering of scatter_add); otherwise
    torch._decomp's index_put(accumulate=True), rounding at every addition as ATen's loop of
    add_ calls does."""
    dims = x.dim()
    if dims > 1 and dim % dims in (0, dims - 1) and alpha == 1 and index.dtype is torch.int64 \
            and index.dim() == 1 and source.dim() == dims and all(
                a == b for i, (a, b) in enumerate(zip(x.shape, source.shape)) if i != dim % dims):
        d = dim % dims
        spread = index.reshape([-1 if i == d else 1 for i in range(dims)]).expand(source.shape)
        return x.scatter_add(d, spread, source)
    try:
        return _INDEX_ADD(x, dim, index, source, alpha=alpha)
    except RuntimeError:            # the CPU's message, where it has its own check
        error = meta.cpu_error(aten.index_add.default, (x, dim, index, source), {"alpha": alpha},
                               expand_large=False)
        if error is not None:
            raise error from None
        raise


_INDEX_ADD = decomposition_table[aten.index_add.default]


@decomposition(aten.native_group_norm.default)
def group_norm(x, weight, bias, n, c, hw, group, eps):
    """As ATen's kernel: a half-type input with float32 weights keeps its mean and rstd in
    float32 (wse kept them in the half type, and the backward read them rounded)."""
    mean_dtype = weight.dtype if x.dtype in HALF and weight is not None else x.dtype
    if mean_dtype is x.dtype:
        return _GROUP_NORM(x, weight, bias, n, c, hw, group, eps)
    out, mean, rstd = _GROUP_NORM(x.float(), weight, bias, n, c, hw, group, eps)
    return out.to(x.dtype), mean.to(mean_dtype), rstd.to(mean_dtype)


_GROUP_NORM = decomposition_table[aten.native_group_norm.default]


@decomposition(aten.native_group_norm_backward.default)
def group_norm_backward(grad_out, x, mean, rstd, weight, n, c, hw, group, output_mask):
    """ATen's kernel computes a half-type input's gradients in float and rounds each once;
    torch._decomp's form, run on the half-type tensors, rounded its products and sums there:
    the float32 weight gradient of a bfloat16 GroupNorm was 1e4 times further from exact than
    the CPU's."""
    if x.dtype not in HALF:
        return _GROUP_NORM_BACKWARD(grad_out, x, mean, rstd, weight, n, c, hw, group,
                                    output_mask)
    wide = [None if t is None else t.float() for t in (grad_out, x, mean, rstd, weight)]
    grads = _GROUP_NORM_BACKWARD(*wide, n, c, hw, group, output_mask)
    dtypes = (x.dtype, (weight if weight is not None else x).dtype,
              (weight if weight is not None else x).dtype)
    return tuple(None if g is None else g.to(d) for g, d in zip(grads, dtypes))


_GROUP_NORM_BACKWARD = decomposition_table[aten.native_group_norm_backward.default]


@decomposition(aten.native_dropout.default)
def native_dropout(x, p: float, train):
    """The CPU's F.dropout (ATen's _dropout): noise = bernoulli_(1 - p) of a tensor like x,
    divided by 1 - p, times x; the mask native_dropout also returns is noise != 0. p = 0 and
    p = 1 draw nothing, as there, so the numbers drawn after them stay the CPU's too."""
    if train is False or x.numel() == 0 or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    if p == 1:
        return x * torch.zeros_like(x), torch.zeros_like(x, dtype=torch.bool)
    noise = torch.empty_like(x).bernoulli_(1 - p)
    return x * noise.div(1 - p), noise.bool()
