"""Convolutions the CONV2D kernel does not take: 3-d, transposed, non-float32.

The compiled kernel (trace/lower.py) handles 1-d/2-d float32 non-transposed convolution. Every
other aten.convolution is written here as an im2col matmul in aten ops wse lowers: the padded
input's windows by unfold (strided views), a dilation by a strided slice of the window, then one
batched matmul per group. A transposed convolution is the convolution of the input with zeros
inserted between its elements (the stride), padded by dilation * (k - 1) - padding, with the
kernel flipped and its channel dims swapped. The backward is the traced vjp of the same function
(Note [Backward by vjp], tensor/vjp.py).
"""
from __future__ import annotations

import math

import torch

from ..trace import meta
from ..trace.build import HALF, Unsupported
from ..trace.lower_nn import _conv_ok
from .dispatch import lowered_op
from .vjp import Vjp, _backward, _RULES

aten = torch.ops.aten


def _native(x, transposed) -> bool:
    try:
        _conv_ok(x, transposed, x.dtype)
    except Unsupported:
        return False
    return True


def _conv(x, w, bias, stride, padding, dilation, groups, transposed=False):
    """Non-transposed N-d convolution of a batched input as unfold + matmul (`transposed`:
    for a transposed one's zero-inserted input)."""
    n = w.dim() - 2
    pads = []
    for d in reversed(range(n)):
        pads += [padding[d], padding[d]]
    xp = aten.constant_pad_nd(x, pads, 0.0) if any(pads) else x
    for d in range(n):
        span = dilation[d] * (w.shape[2 + d] - 1) + 1
        xp = xp.unfold(2 + d, span, stride[d])
        if dilation[d] > 1:
            xp = xp[..., ::dilation[d]]     # unfold appends the window dim last
    batch, out = x.shape[0], list(xp.shape[2:2 + n])
    cin_g, cout, k = w.shape[1], w.shape[0], math.prod(w.shape[2:])
    cols = xp.reshape(batch, groups, cin_g, math.prod(out), k)           # (N, G, Cg, O, K)
    cols = cols.permute(0, 1, 3, 2, 4).reshape(batch, groups, math.prod(out), cin_g * k)
    wg = w.reshape(groups, cout // groups, cin_g * k)                   # (G, Fg, Cg*K)
    # The CPU's half-type convolution starts its output from the bias and adds the GEMM's float
    # product to it, rounding once; the product rounded first, then the sum, differed in a
    # third of a conv1d's outputs. (The CPU's transposed one rounds its col2im sums in the
    # half type: neither order matches it.)
    once = bias is not None and x.dtype in HALF and not transposed
    if once:
        cols, wg = cols.float(), wg.float()
    y = torch.matmul(cols, wg.transpose(1, 2).unsqueeze(0))             # (N, G, O, Fg)
    y = y.permute(0, 1, 3, 2).reshape([batch, cout] + out)
    if bias is not None:
        y = y + bias.reshape([1, cout] + [1] * n)
    return y.to(x.dtype) if once else y


def _zero_insert(x, stride):
    """x with stride-1 zeros between neighbours along each spatial dim."""
    for d, s in enumerate(stride):
        if s == 1 or x.shape[2 + d] == 0:
            continue
        dim = 2 + d
        size = x.shape[dim]
        x = aten.constant_pad_nd(x.unsqueeze(dim + 1), [0] * (2 * (x.dim() - dim - 1)) + [0, s - 1])
        x = x.reshape(list(x.shape[:dim]) + [size * s] + list(x.shape[dim + 2:]))
        x = x.narrow(dim, 0, (size - 1) * s + 1)
    return x


def convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    n = w.dim() - 2
    stride, padding, dilation = (list(v) * (n if len(v) == 1 else 1)
                                 for v in (stride, padding, dilation))
    if not transposed:
        return _conv(x, w, bias, stride, padding, dilation, groups)
    output_padding = list(output_padding) * (n if len(output_padding) == 1 else 1)
    z = _zero_insert(x, stride)
    pads = []
    for d in reversed(range(n)):
        edge = dilation[d] * (w.shape[2 + d] - 1) - padding[d]
        pads += [edge, edge + output_padding[d]]
    z = aten.constant_pad_nd(z, pads, 0.0)
    cin, cout_g = w.shape[0], w.shape[1]
    wt = w.flip(list(range(2, 2 + n))).reshape([groups, cin // groups, cout_g] + list(w.shape[2:]))
    wt = wt.transpose(1, 2).reshape([groups * cout_g, cin // groups] + list(w.shape[2:]))
    return _conv(z, wt, bias, [1] * n, [0] * n, dilation, groups, transposed=True)


def _convolution(func, args, kwargs):
    x, transposed = args[0], args[6]
    if _refused(*args[:9]):
        error = meta.cpu_error(func, args, kwargs)
        if error is not None:
            raise error
    if _native(x, transposed):
        return lowered_op(func, args, kwargs)
    return convolution(*args, **kwargs)


def _refused(x, w, bias, stride, padding, dilation, transposed, output_padding, groups) -> bool:
    """Arguments the CPU's convolution checks and the meta kernel does not (a weight of 2
    output channels with groups=3 computed): the CPU's verdict is then asked for."""
    if w.dim() < 3:                 # (its first check: the rest would index missing dims)
        return True
    out_channels = w.shape[1] * groups if transposed else w.shape[0]
    # a transposed one's output_padding must be below its stride or its dilation
    too_wide = transposed and any(
        o >= s and o >= d for o, s, d in zip(*(list(v) * (w.dim() - 2 if len(v) == 1 else 1)
                                                for v in (output_padding, stride, dilation))))
    return (min(padding) < 0 or min(stride) <= 0 or min(dilation) <= 0 or groups <= 0
            or w.shape[0] < groups or w.shape[0] % groups != 0 or too_wide
            or (bias is not None and tuple(bias.shape) != (out_channels,)))


def _conv_backward_rule(a):
    def fwd(x, w, b):
        args = (a["stride"], a["padding"], a["dilation"], a["transposed"], a["output_padding"],
                a["groups"])
        if x.dtype in HALF:
            # The gradients of the half types in float, rounded once, as the CPU's kernels
            # give them: the vjp of the half-type matmuls summed the columns of the input's
            # gradient in bfloat16 (8% of a conv2d's input gradient off beyond tolerance)
            up = (x.float(), w.float(), None if b is None else b.float())
            return convolution(*up, *args).to(x.dtype)
        return convolution(x, w, b, *args)
    mask = tuple(a["output_mask"])
    # Without a bias gradient wanted, bias_sizes may describe no bias at all ([0]).
    bias = tuple(a["bias_sizes"]) if mask[2] and a["bias_sizes"] is not None else None
    return Vjp(fwd, [a["input"], a["weight"], bias], [], [a["grad_output"]], mask=mask,
               single=False)


def _convolution_backward(func, args, kwargs):
    x, transposed = args[1], args[7]
    if _native(x, transposed):
        return lowered_op(func, args, kwargs)
    return _backward(func, args, kwargs)


# Note [Replayed convolutions]
# A convolution the CONV2D kernel takes is recorded by lowered_op, through a replay plan; the
# handler's checks before it (_refused, the CPU's verdict, _native) cost 5-9 us of a 15-26 us
# call hot. They read only what a plan's signature holds (dtypes, shapes,
# strides, the int arguments), and a plan exists only once a call of its signature passed them,
# so a call with a plan is replayed by dispatch (`replays`, in C: Note [Native recording] in
# tensor/replay.py) without them; other calls, and the im2col convolutions, which make no plan
# under this op, come here.
_convolution.replays = True
_convolution_backward.replays = True


def register():
    from .dispatch import SPECIAL
    SPECIAL[aten.convolution.default] = _convolution
    SPECIAL[aten.convolution_backward.default] = _convolution_backward
    _RULES[aten.convolution_backward.default] = _conv_backward_rule


register()
