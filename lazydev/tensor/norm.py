"""Batch norm and its variants, recorded directly (the decompositions dispatch ~30 ops each).

native_batch_norm, _native_batch_norm_legit (with and without running stats),
_native_batch_norm_legit_no_training and _batch_norm_with_update differ only in their arguments
and in what they return. Training mode normalises with the batch statistics and blends them into
the running statistics in place (which native_batch_norm's schema does not even mark as a
mutation); eval mode normalises with the running statistics and, as the CPU kernels do, returns
empty save_mean/save_invstd. Half-precision inputs use torch's decomposition instead (its rounding
of the statistics); the result then is the same ops, just more of them.
"""
from __future__ import annotations

import torch
from torch._decomp import decomposition_table

from ..trace.build import as_node, cast, full, reshape
from ..trace.ir import Op
from ..trace.lower_nn import _bin, _un, batch_norm_train
from .dispatch import SPECIAL
from .wse_tensor import WseTensor, from_node, value, write

aten = torch.ops.aten


def _node(t):
    return value(t) if isinstance(t, WseTensor) else None


def _update_running(rmean, rvar, mean, var, n, momentum):
    for stat, new in ((rmean, mean), (rvar, var)):
        if not isinstance(stat, WseTensor):
            continue
        if stat is rvar:
            new = _bin(Op.MUL, new, as_node(n / max(n - 1, 1), new.dtype))
        old = cast(value(stat), new.dtype)
        write(stat, _bin(Op.ADD, _bin(Op.MUL, old, as_node(1 - momentum, new.dtype)),
                         _bin(Op.MUL, new, as_node(momentum, new.dtype))))


def _eval(x, weight, bias, rmean, rvar, eps):
    dt = x.dtype
    keep = tuple(d if i == 1 else 1 for i, d in enumerate(x.shape))
    invstd = _un(Op.RSQRT, _bin(Op.ADD, reshape(cast(rvar, dt), keep), as_node(eps, dt)))
    out = _bin(Op.MUL, _bin(Op.SUB, x, reshape(cast(rmean, dt), keep)), invstd)
    if weight is not None:
        out = _bin(Op.MUL, out, reshape(cast(weight, dt), keep))
    if bias is not None:
        out = _bin(Op.ADD, out, reshape(cast(bias, dt), keep))
    return out


def batch_norm(x, weight, bias, rmean, rvar, training, momentum, eps):
    """(out, save_mean, save_invstd) of native_batch_norm, or None when the decomposition
    should run instead (half precision, no channel dim, eval mode without running stats)."""
    if x.dtype not in (torch.float32, torch.float64) or x.dim() < 2:
        return None
    xs, w, b = _node(x), _node(weight), _node(bias)
    if training:
        out, mean, invstd, var, n = batch_norm_train(xs, w, b, eps)
        _update_running(rmean, rvar, mean, var, n, momentum)
        return from_node(out), from_node(mean), from_node(invstd)
    if rmean is None or rvar is None:
        return None
    empty = from_node(full(0, x.dtype, (0,)))
    return from_node(_eval(xs, w, b, value(rmean), value(rvar), eps)), empty, empty


def _variant(arrange):
    """A handler for one batch-norm op: `arrange` maps its arguments to batch_norm's and its
    result to the op's outputs."""
    def handler(func, args, kwargs):
        bn_args, finish = arrange(*args, **kwargs)
        out = batch_norm(*bn_args)
        if out is None:
            return decomposition_table[func](*args, **kwargs)
        return finish(out)
    return handler


def _same(out):
    return out


def _with_reserve(out):
    return (*out, from_node(full(0, torch.uint8, (0,))))


SPECIAL[aten.native_batch_norm.default] = _variant(
    lambda x, w, b, rm, rv, training, momentum, eps: ((x, w, b, rm, rv, training, momentum, eps),
                                                      _same))
SPECIAL[aten._native_batch_norm_legit.default] = SPECIAL[aten.native_batch_norm.default]
SPECIAL[aten._native_batch_norm_legit.no_stats] = _variant(
    lambda x, w, b, training, momentum, eps: ((x, w, b, None, None, training, momentum, eps),
                                              _same))
SPECIAL[aten._native_batch_norm_legit_no_training.default] = _variant(
    lambda x, w, b, rm, rv, momentum, eps: ((x, w, b, rm, rv, False, momentum, eps), _same))
SPECIAL[aten._batch_norm_with_update.default] = _variant(
    lambda x, w, b, rm, rv, momentum, eps: ((x, w, b, rm, rv, True, momentum, eps),
                                            _with_reserve))
