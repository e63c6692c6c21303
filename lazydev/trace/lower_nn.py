"""Native lowerings of the composite ops every training step uses.

torch._decomp has decompositions for all of these; lowering them here instead records a few
nodes directly, where the decomposition would dispatch (and meta-infer) a dozen or more aten ops
through Python each step. The formulas are the decompositions' own. Convolution and its
gradients, which run the C library's kernels, are at the end.
"""
from __future__ import annotations

import math

import torch

from .build import (HALF, Unsupported, as_node, broadcast_shape, cast, const, contiguous_strides,
                    ew, expand, full, opmath, reduce, reshape, take_rows, wrap_dim)
from .ir import Node, Op
from .lower import register

aten = torch.ops.aten


_dim = wrap_dim


def _float(x: Node, dtype) -> Node:
    if not dtype.is_floating_point or dtype not in (torch.float32, torch.float64):
        raise Unsupported(f"{dtype}: left to the decomposition (half precision rounding)")
    return cast(x, dtype)


def _bin(op: Op, a: Node, b: Node) -> Node:
    """Elementwise with broadcasting between node shapes."""
    shape = broadcast_shape(a.shape, b.shape)
    return ew(op, a.dtype, shape, a, b)


def _un(op: Op, a: Node) -> Node:
    return Node(op, a.dtype, a.shape, (a,))


def _k(value, like: Node) -> Node:
    return as_node(value, like.dtype)


def _wide(x: Node, dtype) -> Node:
    """x in the dtype ATen's kernels compute `dtype` in (opmath: float for float16 and
    bfloat16, which they convert, compute in float and round once at the end)."""
    if not dtype.is_floating_point:
        raise Unsupported(f"{dtype}: a floating-point op")
    return cast(x, opmath(dtype))


# Note [Half-precision in float]
# The four softmax ops of a half-precision step (autocast's cross-entropy of a bfloat16 logit)
# and GELU's two were left to torch's decompositions: a dozen aten ops dispatched through Python
# per call, 400 us each in the mixed-precision MLP's step and 330 us each of GELU's in a bfloat16
# transformer's. They are lowered in float and rounded once, as ATen's vectorised kernels compute
# them and as the decompositions do. Against the CPU, bit for bit: softmax and the two softmax
# backward ops differ in 0-3 elements of 18944 (512 x 37 randn; the decompositions in as many or
# more), log_softmax in the last bit of the same 16% as the decomposition (float32's lowering:
# 13%), GELU and its backward in the same elements as the decompositions (0.2-4% of 4096).
@register(aten._log_softmax.default)
def _log_softmax(spec, x, dim, half_to_float):
    x = _wide(x, spec.dtype)
    d = _dim(x, dim)
    shifted = _bin(Op.SUB, x, reduce(Op.RMAX, x, (d,), True, x.dtype))
    lse = _un(Op.LOG, reduce(Op.SUM, _un(Op.EXP, shifted), (d,), True, x.dtype))
    return cast(_bin(Op.SUB, shifted, lse), spec.dtype)


@register(aten._softmax.default)
def _softmax(spec, x, dim, half_to_float):
    x = _wide(x, spec.dtype)
    d = _dim(x, dim)
    e = _un(Op.EXP, _bin(Op.SUB, x, reduce(Op.RMAX, x, (d,), True, x.dtype)))
    # Times the sum's reciprocal, as PyTorch's CPU kernel does: one division per row, not per
    # element (the transformer's attention softmax: 75 -> 58 us a call), and equal to its result
    # bit for bit more often (70% of elements of 8 x 4 x 128 x 128 randn, against 45%).
    return cast(_bin(Op.MUL, e, _un(Op.RECIPROCAL, reduce(Op.SUM, e, (d,), True, x.dtype))),
                spec.dtype)


@register(aten._log_softmax_backward_data.default)
def _log_softmax_backward(spec, grad, out, dim, input_dtype):
    grad, out = _wide(grad, spec.dtype), _wide(out, spec.dtype)
    d = _dim(grad, dim)
    total = reduce(Op.SUM, grad, (d,), True, grad.dtype)
    return cast(_bin(Op.SUB, grad, _bin(Op.MUL, _un(Op.EXP, out), total)), spec.dtype)


@register(aten._softmax_backward_data.default)
def _softmax_backward(spec, grad, out, dim, input_dtype):
    grad, out = _wide(grad, spec.dtype), _wide(out, spec.dtype)
    d = _dim(grad, dim)
    dot = reduce(Op.SUM, _bin(Op.MUL, grad, out), (d,), True, grad.dtype)
    return cast(_bin(Op.MUL, out, _bin(Op.SUB, grad, dot)), spec.dtype)


def _nll_parts(x, target, weight, ignore_index):
    if weight is not None or len(x.shape) not in (1, 2):
        raise Unsupported("nll_loss with class weights or spatial dims: decomposition")
    valid = ew(Op.NE, torch.bool, target.shape, target, as_node(ignore_index, target.dtype))
    safe = ew(Op.WHERE, target.dtype, target.shape, valid, target, as_node(0, target.dtype))
    return valid, safe


@register(aten.nll_loss_forward.default)
def _nll_loss_forward(spec, x, target, weight, reduction, ignore_index):
    x = _float(x, spec[0].dtype)
    valid, safe = _nll_parts(x, target, weight, ignore_index)
    if len(x.shape) == 2:
        idx = reshape(safe, (safe.shape[0], 1))
        picked = reshape(Node(Op.GATHER, x.dtype, idx.shape, (x, idx), 1), target.shape)
    else:
        picked = reshape(Node(Op.GATHER, x.dtype, (1,), (x, reshape(safe, (1,))), 0), ())
    loss = ew(Op.WHERE, x.dtype, picked.shape, valid, _un(Op.NEG, picked), _k(0, x))
    count = reduce(Op.SUM, cast(valid, x.dtype), range(len(valid.shape)), False, x.dtype)
    if reduction == 0:
        return loss, full(0, x.dtype, ())
    total = reduce(Op.SUM, loss, range(len(loss.shape)), False, x.dtype)
    return (_bin(Op.DIV, total, count) if reduction == 1 else total), count


@register(aten.nll_loss_backward.default)
def _nll_loss_backward(spec, grad, x, target, weight, reduction, ignore_index, total_weight):
    grad = _float(grad, spec.dtype)
    valid, safe = _nll_parts(x, target, weight, ignore_index)
    if reduction == 1:
        grad = _bin(Op.DIV, grad, cast(total_weight, grad.dtype))
    if len(x.shape) == 2:
        cls = Node(Op.INDEX, torch.int64, x.shape, (), 1)
        hit = ew(Op.EQ, torch.bool, x.shape, cls, expand(reshape(safe, (x.shape[0], 1)), x.shape))
        keep = expand(reshape(valid, (x.shape[0], 1)), x.shape)
        g = grad if reduction != 0 else reshape(grad, (x.shape[0], 1))
    else:
        hit = ew(Op.EQ, torch.bool, x.shape, Node(Op.INDEX, torch.int64, x.shape, (), 0), safe)
        keep, g = valid, grad
    mask = ew(Op.AND, torch.bool, x.shape, hit, keep)
    return ew(Op.WHERE, grad.dtype, x.shape, mask, _un(Op.NEG, expand(g, x.shape)), _k(0, grad))


@register(aten.logit.default)
def _logit(spec, x, eps=None):
    """Of float16/bfloat16 as ATen's kernel: the clamp's bounds eps and 1 - eps rounded to the
    tensor's type (1 - 1e-6 is 1.0 in half: logit(1.0, 1e-6) is inf there), 1 - x and the odds
    rounded to it, the log in float. The decomposition clamped with float bounds and rounded
    once (an ulp off in a tenth of the elements). Float32/64: the decomposition."""
    dt = spec.dtype
    if dt not in HALF or x.dtype is not dt:
        raise Unsupported("logit of a float32/float64 tensor: the decomposition")
    w = cast(x, torch.float32)
    if eps is not None:
        lo, hi = (float(torch.tensor(v, dtype=dt)) for v in (eps, 1 - eps))
        low = ew(Op.LT, torch.bool, w.shape, w, as_node(lo, w.dtype))
        high = ew(Op.GT, torch.bool, w.shape, w, as_node(hi, w.dtype))
        w = ew(Op.WHERE, w.dtype, w.shape, low, as_node(lo, w.dtype),
               ew(Op.WHERE, w.dtype, w.shape, high, as_node(hi, w.dtype), w))
    def rounded(n):
        return cast(cast(n, dt), torch.float32)
    odds = rounded(_bin(Op.DIV, w, rounded(_bin(Op.SUB, _k(1, w), w))))
    return cast(_un(Op.LOG, odds), dt)


@register(aten.threshold.default)
def _threshold(spec, x, threshold, value):
    """Of integers, as ATen's kernel: the threshold and value converted to the tensor's type
    (0.5 to 0), the comparison in integers; the decomposition compared in float, rounding
    2**24 + 1 and turning INT_MAX into INT_MIN. Floating types: the decomposition."""
    dt = spec.dtype
    if dt.is_floating_point or dt is torch.bool or x.dtype is not dt:
        raise Unsupported("threshold of a floating or bool tensor: the decomposition")
    below = ew(Op.LE, torch.bool, spec.shape, x, as_node(threshold, dt))
    return ew(Op.WHERE, dt, spec.shape, below, as_node(value, dt), x)


@register(aten.threshold_backward.default)
def _threshold_backward(spec, grad, x, threshold):
    below = ew(Op.LE, torch.bool, spec.shape, x, as_node(threshold, x.dtype))
    return ew(Op.WHERE, spec.dtype, spec.shape, below, as_node(0, spec.dtype),
              cast(grad, spec.dtype))


def _norm_axes(x, normalized_shape):
    k = len(normalized_shape)
    return tuple(range(len(x.shape) - k, len(x.shape)))


@register(aten.native_layer_norm.default)
def _layer_norm(spec, x, normalized_shape, weight, bias, eps):
    x = _float(x, spec[0].dtype)
    axes = _norm_axes(x, normalized_shape)
    n = math.prod(x.shape[a] for a in axes)
    mean = _bin(Op.DIV, reduce(Op.SUM, x, axes, True, x.dtype), _k(n, x))
    xc = _bin(Op.SUB, x, mean)
    var = _bin(Op.DIV, reduce(Op.SUM, _bin(Op.MUL, xc, xc), axes, True, x.dtype), _k(n, x))
    rstd = _un(Op.RSQRT, _bin(Op.ADD, var, as_node(eps, x.dtype)))
    out = _bin(Op.MUL, xc, rstd)
    if weight is not None:
        out = _bin(Op.MUL, out, cast(weight, x.dtype))
    if bias is not None:
        out = _bin(Op.ADD, out, cast(bias, x.dtype))
    return out, reshape(mean, spec[1].shape), reshape(rstd, spec[2].shape)


@register(aten.native_layer_norm_backward.default)
def _layer_norm_backward(spec, grad, x, normalized_shape, mean, rstd, weight, bias, mask):
    dt = spec[0].dtype if spec[0] is not None else x.dtype
    grad, x = _float(grad, dt), _float(x, dt)
    axes = _norm_axes(x, normalized_shape)
    batch = tuple(range(len(x.shape) - len(axes)))
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    mean, rstd = reshape(cast(mean, dt), kept), reshape(cast(rstd, dt), kept)
    xhat = _bin(Op.MUL, _bin(Op.SUB, x, mean), rstd)
    g = _bin(Op.MUL, grad, cast(weight, dt)) if weight is not None else grad
    n = math.prod(x.shape[a] for a in axes)
    outs = [None, None, None]
    if mask[0]:
        m1 = _bin(Op.DIV, reduce(Op.SUM, g, axes, True, dt), _k(n, g))
        m2 = _bin(Op.DIV, reduce(Op.SUM, _bin(Op.MUL, g, xhat), axes, True, dt), _k(n, g))
        inner = _bin(Op.SUB, _bin(Op.SUB, g, m1), _bin(Op.MUL, xhat, m2))
        outs[0] = _bin(Op.MUL, inner, rstd)
    if mask[1] and weight is not None:
        xh = _fma_xhat(x, mean, rstd) if dt == torch.float32 else xhat
        outs[1] = cast(reduce(Op.SUM, _bin(Op.MUL, grad, xh), batch, False, dt), weight.dtype)
    if mask[2] and bias is not None:
        outs[2] = cast(reduce(Op.SUM, grad, batch, False, dt), bias.dtype)
    return tuple(outs)


def _fma_xhat(x: Node, mean: Node, rstd: Node) -> Node:
    """x_hat as the CPU kernel computes it for the weight gradient: fma(rstd, x, -(rstd*mean))
    with the product rstd*mean rounded to float32 first. (x - mean) * rstd rounds differently;
    where x == mean (a normalised dim of size 1) the two differ by rstd's rounding error,
    ~1e-5 for the default eps, which the weight gradient then shows."""
    f64 = torch.float64
    b = cast(_un(Op.NEG, _bin(Op.MUL, rstd, mean)), f64)
    return cast(_bin(Op.ADD, _bin(Op.MUL, cast(rstd, f64), cast(x, f64)), b), torch.float32)


_SQRT1_2 = math.sqrt(0.5)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


@register(aten.gelu.default)
def _gelu(spec, x, approximate="none"):
    x = _wide(x, spec.dtype)        # Note [Half-precision in float]
    half = _k(0.5, x)
    if approximate == "tanh":
        cube = _bin(Op.MUL, _bin(Op.MUL, x, x), x)
        inner = _bin(Op.MUL, _k(math.sqrt(2 / math.pi), x),
                     _bin(Op.ADD, x, _bin(Op.MUL, _k(0.044715, x), cube)))
        out = _bin(Op.MUL, _bin(Op.MUL, half, x), _bin(Op.ADD, _k(1, x), _un(Op.TANH, inner)))
        return cast(out, spec.dtype)
    cdf = _bin(Op.MUL, half, _bin(Op.ADD, _k(1, x), _un(Op.ERF, _bin(Op.MUL, x, _k(_SQRT1_2, x)))))
    return cast(_bin(Op.MUL, x, cdf), spec.dtype)


@register(aten.gelu_backward.default)
def _gelu_backward(spec, grad, x, approximate="none"):
    if approximate != "none":
        raise Unsupported("tanh gelu backward: decomposition")
    grad, x = _wide(grad, spec.dtype), _wide(x, spec.dtype)
    cdf = _bin(Op.MUL, _k(0.5, x),
               _bin(Op.ADD, _k(1, x), _un(Op.ERF, _bin(Op.MUL, x, _k(_SQRT1_2, x)))))
    pdf = _bin(Op.MUL, _un(Op.EXP, _bin(Op.MUL, _k(-0.5, x), _bin(Op.MUL, x, x))),
               _k(_INV_SQRT_2PI, x))
    return cast(_bin(Op.MUL, grad, _bin(Op.ADD, cdf, _bin(Op.MUL, x, pdf))), spec.dtype)


def _addc_lowering(op: Op):
    def lower(spec, x, t1, t2, value=1):
        if not spec.dtype.is_floating_point:
            raise Unsupported("integer addcdiv/addcmul: decomposition")
        # ATen's kernel: self + (value * t1) op t2 in float for the half types, addcmul's
        # product fused into the add (one rounding).
        dt, shape = opmath(spec.dtype), spec.shape
        scaled = ew(Op.MUL, dt, shape, cast(t1, dt), as_node(value, dt))
        if op is Op.MUL:
            out = ew(Op.FMA, dt, shape, scaled, cast(t2, dt), cast(x, dt))
        else:
            out = ew(Op.ADD, dt, shape, cast(x, dt), ew(op, dt, shape, scaled, cast(t2, dt)))
        return cast(out, spec.dtype)
    return lower


register(aten.addcmul.default)(_addc_lowering(Op.MUL))
register(aten.addcdiv.default)(_addc_lowering(Op.DIV))


@register(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(spec, start, end, weight):
    if not spec.dtype.is_floating_point:
        raise Unsupported("integer lerp")
    dt = opmath(spec.dtype)     # ATen: in float for the half types, the weight as given
    w = as_node(weight, dt)
    return cast(ew(Op.LERP, dt, spec.shape, cast(start, dt), cast(end, dt), w), spec.dtype)


def batch_norm_train(x: Node, weight, bias, eps: float):
    """Training-mode batch norm over all dims but 1: (out, mean [C], invstd [C], var [C])."""
    dt = x.dtype
    axes = (0,) + tuple(range(2, len(x.shape)))
    n = math.prod(x.shape[a] for a in axes)
    keep = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    mean = _bin(Op.DIV, reduce(Op.SUM, x, axes, True, dt), _k(n, x))
    xc = _bin(Op.SUB, x, mean)
    var = _bin(Op.DIV, reduce(Op.SUM, _bin(Op.MUL, xc, xc), axes, True, dt), _k(n, x))
    invstd = _un(Op.RSQRT, _bin(Op.ADD, var, as_node(eps, dt)))
    out = _bin(Op.MUL, xc, invstd)
    if weight is not None:
        out = _bin(Op.MUL, out, reshape(cast(weight, dt), keep))
    if bias is not None:
        out = _bin(Op.ADD, out, reshape(cast(bias, dt), keep))
    c = (x.shape[1],)
    return out, reshape(mean, c), reshape(invstd, c), reshape(var, c), n


@register(aten.native_batch_norm_backward.default)
def _batch_norm_backward(spec, grad, x, weight, running_mean, running_var, save_mean,
                         save_invstd, train, eps, mask):
    if not train or save_mean is None:
        raise Unsupported("eval-mode batch norm backward: decomposition")
    dt = x.dtype
    grad, x = _float(grad, dt), _float(x, dt)
    axes = (0,) + tuple(range(2, len(x.shape)))
    n = math.prod(x.shape[a] for a in axes)
    keep = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    mean, invstd = reshape(cast(save_mean, dt), keep), reshape(cast(save_invstd, dt), keep)
    xhat = _bin(Op.MUL, _bin(Op.SUB, x, mean), invstd)
    gb = reduce(Op.SUM, grad, axes, True, dt)
    gw = reduce(Op.SUM, _bin(Op.MUL, grad, xhat), axes, True, dt)
    outs = [None, None, None]
    if mask[0]:
        scale = invstd if weight is None else _bin(Op.MUL, invstd, reshape(cast(weight, dt), keep))
        centred = _bin(Op.SUB, _bin(Op.SUB, grad, _bin(Op.DIV, gb, _k(n, x))),
                       _bin(Op.MUL, xhat, _bin(Op.DIV, gw, _k(n, x))))
        outs[0] = _bin(Op.MUL, centred, scale)
    c = (x.shape[1],)
    if mask[1] and weight is not None:
        outs[1] = cast(reshape(gw, c), weight.dtype)
    if mask[2]:
        outs[2] = reshape(gb, c)
    return tuple(outs)


def _pair(v, default=None):
    """A 2-d pooling parameter as [h, w] (ints, 1-lists and empty lists accepted)."""
    if isinstance(v, int):
        v = [v]
    v = list(v) if v else list(default or [])
    return v * 2 if len(v) == 1 else v


@register(aten.max_pool2d_with_indices.default)
def _max_pool2d(spec, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    if not x.dtype.is_floating_point or len(x.shape) not in (3, 4):
        raise Unsupported("max_pool2d of non-float or non-2d input: decomposition")
    k, p, d = _pair(kernel_size), _pair(padding, [0]), _pair(dilation, [1])
    s = _pair(stride, k)
    index = Node(Op.POOL_ARGMAX, torch.int64, tuple(spec[1].shape), (x,),
                 (k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]))
    # The maximum is the element at its index (a NaN where the window has one), gathered from
    # the input plane: one read per output, in the consumer's loop.
    lead, (h, w) = x.shape[:-2], x.shape[-2:]
    outs = index.shape[-2] * index.shape[-1]
    values = Node(Op.GATHER, x.dtype, lead + (outs,),
                  (reshape(x, lead + (h * w,)), reshape(index, lead + (outs,))), len(lead))
    values = reshape(values, tuple(spec[0].shape))
    bad = [_padding_only(n, size, *a) for n, size, a in
           zip(index.shape[-2:], (h, w), zip(k, s, p, d))]
    if bad[0] or bad[1]:
        return _padding_windows(values, index, bad, w, s, p, d)
    return values, index


def _padding_only(n: int, size: int, k: int, s: int, p: int, d: int) -> list:
    """The output positions along one axis whose window taps padding only (with dilation)."""
    return [o for o in range(n) if all(not 0 <= o * s - p + i * d < size for i in range(k))]


def _padding_windows(values: Node, index: Node, bad: list, w: int, s, p, d):
    """Windows of padding only (a dilated pool's edge; the kernel leaves their index -1): the
    CPU gives -inf, and as index its first row and column in or past the input, stepping from
    the window's start by the dilation (ih * W + iw, which may lie outside the input)."""
    if len(bad[0]) + len(bad[1]) > 64:
        raise Unsupported("max_pool2d with many windows of padding only: decomposition")
    shape, i64 = index.shape, torch.int64
    axes = (len(shape) - 2, len(shape) - 1)
    at = [Node(Op.INDEX, i64, shape, (), a) for a in axes]
    hit = None
    for pos, rows in zip(at, bad):
        for o in rows:
            eq = ew(Op.EQ, torch.bool, shape, pos, const(o, i64))
            hit = eq if hit is None else ew(Op.OR, torch.bool, shape, hit, eq)
    first = []
    for pos, sk, pk, dk in zip(at, s, p, d):
        start = ew(Op.SUB, i64, shape, ew(Op.MUL, i64, shape, pos, const(sk, i64)),
                   const(pk, i64))
        behind = ew(Op.MAX, i64, shape, ew(Op.NEG, i64, shape, start), const(0, i64))
        steps = ew(Op.FLOORDIV, i64, shape, ew(Op.ADD, i64, shape, behind, const(dk - 1, i64)),
                   const(dk, i64))
        first.append(ew(Op.ADD, i64, shape, start, ew(Op.MUL, i64, shape, steps, const(dk, i64))))
    cpu = ew(Op.ADD, i64, shape, ew(Op.MUL, i64, shape, first[0], const(w, i64)), first[1])
    low = const(-math.inf, values.dtype)
    return (ew(Op.WHERE, values.dtype, values.shape, hit, low, values),
            ew(Op.WHERE, i64, shape, hit, cpu, index))


@register(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(spec, grad, x, kernel_size, stride, padding, dilation, ceil_mode,
                         indices):
    """Each window's gradient is added at its maximum's index, plane by plane (the planes run
    in parallel, Op.SCATTER's leading dims): overlapping windows add up, as on the CPU."""
    if not x.dtype.is_floating_point:
        raise Unsupported("integer max_pool2d backward")
    lead = x.shape[:-2]
    plane = x.shape[-2] * x.shape[-1]
    outs = grad.shape[-2] * grad.shape[-1]
    base = full(0, spec.dtype, lead + (plane,))
    idx = reshape(indices, lead + (outs,))
    val = reshape(cast(grad, spec.dtype), lead + (outs,))
    gi = Node(Op.SCATTER, spec.dtype, base.shape, (base, idx, val), (len(lead), "add"))
    return reshape(gi, spec.shape)


def _chunks(x: Node, n: int, dim: int = 1):
    size = x.shape[dim] // n
    strides = contiguous_strides(x.shape)
    flat = reshape(x, (x.numel,))
    return [Node(Op.AS_STRIDED, x.dtype, x.shape[:dim] + (size,) + x.shape[dim + 1:], (flat,),
                 (strides, k * size * strides[dim])) for k in range(n)]


@register(aten._thnn_fused_lstm_cell.default)
def _lstm_cell(spec, input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """The fused LSTM cell PyTorch uses on accelerators: (hy, cy, workspace = activated gates),
    computed as CUDA's kernel does, half precision in float and rounded once (it fell back to
    the CPU, which has no kernel: nn.LSTMCell in bfloat16 raised)."""
    dt = spec[0].dtype
    gates = _bin(Op.ADD, _wide(input_gates, dt), _wide(hidden_gates, dt))
    cd = gates.dtype
    for b in (input_bias, hidden_bias):
        if b is not None:
            gates = _bin(Op.ADD, gates, cast(b, cd))
    i, f, g, o = _chunks(gates, 4)
    i, f, g, o = _un(Op.SIGMOID, i), _un(Op.SIGMOID, f), _un(Op.TANH, g), _un(Op.SIGMOID, o)
    cy = _bin(Op.ADD, _bin(Op.MUL, f, cast(cx, cd)), _bin(Op.MUL, i, g))
    hy = _bin(Op.MUL, o, _un(Op.TANH, cy))
    workspace = Node(Op.CAT, cd, gates.shape, (i, f, g, o), 1)
    return cast(hy, dt), cast(cy, dt), reshape(cast(workspace, dt), spec[2].shape)


@register(aten._thnn_fused_lstm_cell_backward_impl.default)
def _lstm_cell_backward(spec, grad_hy, grad_cy, cx, cy, workspace, has_bias):
    dt = cy.dtype
    i, f, g, o = _chunks(_wide(workspace, dt), 4)
    cy = _wide(cy, dt)
    cd = cy.dtype
    one = _k(1, cy)
    tanh_cy = _un(Op.TANH, cy)
    gcy = cast(grad_cy, cd) if grad_cy is not None else full(0, cd, cy.shape)
    go = full(0, cd, cy.shape)
    if grad_hy is not None:
        grad_hy = cast(grad_hy, cd)
        dtanh = _bin(Op.SUB, one, _bin(Op.MUL, tanh_cy, tanh_cy))
        gcy = _bin(Op.ADD, gcy, _bin(Op.MUL, _bin(Op.MUL, grad_hy, o), dtanh))
        go = _bin(Op.MUL, _bin(Op.MUL, grad_hy, tanh_cy), _bin(Op.MUL, o, _bin(Op.SUB, one, o)))
    gi = _bin(Op.MUL, _bin(Op.MUL, gcy, g), _bin(Op.MUL, i, _bin(Op.SUB, one, i)))
    gf = _bin(Op.MUL, _bin(Op.MUL, gcy, cast(cx, cd)), _bin(Op.MUL, f, _bin(Op.SUB, one, f)))
    gg = _bin(Op.MUL, _bin(Op.MUL, gcy, i), _bin(Op.SUB, one, _bin(Op.MUL, g, g)))
    shape = cy.shape[:1] + (4 * cy.shape[1],)
    grad_gates = cast(Node(Op.CAT, cd, shape, (gi, gf, expand(gg, gi.shape), expand(go, gi.shape)),
                           1), dt)
    grad_cx = cast(_bin(Op.MUL, gcy, f), dt)
    grad_bias = reduce(Op.SUM, grad_gates, (0,), False, dt) if has_bias else None
    if grad_bias is None and spec[2] is not None:
        grad_bias = full(0, dt, spec[2].shape)
    return grad_gates, grad_cx, grad_bias


def _tri(keep_op: Op):
    """tril (keep col - row <= diagonal) / triu (>=), zero elsewhere. The decomposition builds
    the mask from two aranges; two INDEX leaves do it inside the one loop."""
    def lower(spec, x, diagonal=0):
        if len(spec.shape) < 2:
            raise Unsupported("tril/triu of fewer than 2 dims")
        nd, i64, shape = len(spec.shape), torch.int64, spec.shape
        off = ew(Op.SUB, i64, shape, Node(Op.INDEX, i64, shape, (), nd - 1),
                 Node(Op.INDEX, i64, shape, (), nd - 2))
        keep = ew(keep_op, torch.bool, shape, off, as_node(int(diagonal), i64))
        return ew(Op.WHERE, spec.dtype, shape, keep, cast(x, spec.dtype), as_node(0, spec.dtype))
    return lower


register(aten.tril.default)(_tri(Op.LE))
register(aten.triu.default)(_tri(Op.GE))


@register(aten.smooth_l1_loss_backward.default)
def _smooth_l1_backward(spec, grad, x, target, reduction, beta):
    """ATen's CPU kernel: -norm * g where x - y <= -beta, norm * g where >= beta, else
    norm * (x - y) * g / beta; so a NaN difference gives NaN (the decomposition's sign() gave 0)
    and beta = 0 gives -norm * g at a zero difference. Half types: the decomposition."""
    dt = spec.dtype
    if dt not in (torch.float32, torch.float64):
        raise Unsupported(f"smooth_l1_loss_backward of {dt}: left to the decomposition")
    shape = tuple(spec.shape)
    d = ew(Op.SUB, dt, shape, cast(x, dt), cast(target, dt))
    norm = as_node(1.0 / math.prod(shape) if reduction == 1 and shape else 1.0, dt)
    g = cast(grad, dt)
    lo = ew(Op.MUL, dt, shape, ew(Op.NEG, dt, norm.shape, norm), g)
    hi = ew(Op.MUL, dt, shape, norm, g)
    mid = ew(Op.DIV, dt, shape, ew(Op.MUL, dt, shape, ew(Op.MUL, dt, shape, norm, d), g),
             as_node(float(beta), dt))
    below = ew(Op.LE, torch.bool, shape, d, as_node(-float(beta), dt))
    above = ew(Op.GE, torch.bool, shape, d, as_node(float(beta), dt))
    return ew(Op.WHERE, dt, shape, below, lo, ew(Op.WHERE, dt, shape, above, hi, mid))


@register(aten.embedding.default)
def _embedding(spec, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """weight[indices]: rows of a 2-d weight, the indices already checked to lie in [0, rows)
    (tensor/guards.py). Lowered rather than left to torch's decomposition, which ran its Python
    (index_select or weight[indices]) at every call: 65 µs warm, 215 inside a transformer step,
    where a lowering is replayed (tensor/replay.py)."""
    if len(weight.shape) != 2:
        raise Unsupported("embedding of a weight that is not 2-d: left to the decomposition")
    return reshape(take_rows(weight, reshape(indices, (indices.numel,))), spec.shape)


@register(aten.embedding_dense_backward.default)
def _embedding_dense_backward(spec, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """grad_weight[indices[i]] += grad[i], rows of padding_idx left zero (index_put, accumulate)."""
    if scale_grad_by_freq:
        raise Unsupported("scale_grad_by_freq: left to the decomposition")
    d = spec.shape[-1]
    n = 1
    for s in indices.shape:
        n *= s
    idx = reshape(cast(indices, torch.int64), (n,))
    g = reshape(cast(grad, spec.dtype), (n, d))
    if padding_idx is not None and padding_idx >= 0:
        pad = ew(Op.EQ, torch.bool, (n,), idx, as_node(int(padding_idx), torch.int64))
        g = ew(Op.WHERE, spec.dtype, (n, d), expand(reshape(pad, (n, 1)), (n, d)),
               as_node(0, spec.dtype), g)
    zeros = full(0, spec.dtype, spec.shape)
    return Node(Op.INDEX_PUT, spec.dtype, spec.shape, (zeros, g, idx), (0, 1, 1, False, True))


# ---- convolution (Op.CONV2D and its gradients: csrc/wse_conv.c) -------------------------------

def _conv_params(x_shape, w_shape, stride, padding, dilation, groups):
    def two(v):
        v = list(v)
        return v * 2 if len(v) == 1 else v
    return tuple(two(stride)) + tuple(two(padding)) + tuple(two(dilation)) + (groups,)


def _conv_ok(x, transposed, dt):
    if transposed or len(x.shape) not in (3, 4) or dt != torch.float32:
        raise Unsupported("only 1-d/2-d float32 non-transposed convolution is compiled")


def _as4d(n: Node) -> Node:
    return reshape(n, n.shape[:2] + (1,) + n.shape[2:]) if len(n.shape) == 3 else n


@register(aten.convolution.default)
def _convolution(spec, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    _conv_ok(x, transposed, spec.dtype)
    one_d = len(x.shape) == 3
    if one_d:
        stride, padding, dilation = [1] + list(stride), [0] + list(padding), [1] + list(dilation)
    x4, w4 = _as4d(x), _as4d(w)
    params = _conv_params(x4.shape, w4.shape, stride, padding, dilation, groups)
    out_shape = spec.shape if not one_d else spec.shape[:2] + (1,) + spec.shape[2:]
    y = Node(Op.CONV2D, torch.float32, tuple(out_shape), (x4, w4), params)
    if bias is not None:
        y = ew(Op.ADD, torch.float32, y.shape, y, reshape(bias, (1, bias.shape[0], 1, 1)))
    return reshape(y, spec.shape)


@register(aten.convolution_backward.default)
def _convolution_backward(spec, gy, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    _conv_ok(x, transposed, x.dtype)
    one_d = len(x.shape) == 3
    if one_d:
        stride, padding, dilation = [1] + list(stride), [0] + list(padding), [1] + list(dilation)
    gy4, x4, w4 = _as4d(gy), _as4d(x), _as4d(w)
    params = _conv_params(x4.shape, w4.shape, stride, padding, dilation, groups)
    outs = [None, None, None]
    if output_mask[0]:
        gi = Node(Op.CONV2D_BWD_INPUT, torch.float32, x4.shape, (gy4, w4), params)
        outs[0] = reshape(gi, x.shape)
    if output_mask[1]:
        gw = Node(Op.CONV2D_BWD_WEIGHT, torch.float32, w4.shape, (gy4, x4), params)
        outs[1] = reshape(gw, w.shape)
    if output_mask[2]:
        outs[2] = reduce(Op.SUM, gy4, (0, 2, 3), False, torch.float32)
    return tuple(outs)
