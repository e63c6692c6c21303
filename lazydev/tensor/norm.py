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
from ..trace.ir import Node, Op
from ..trace.lower_nn import _bin, _un, batch_norm_train
from . import replay
from .dispatch import SPECIAL
from .wse_tensor import WseTensor, from_node, value, write

aten = torch.ops.aten


def _node(t):
    return value(t) if isinstance(t, WseTensor) else None


def _running(stat: Node, new: Node, momentum: float) -> Node:
    """stat * (1 - momentum) + new * momentum, with momentum a runtime scalar (so a replay plan
    takes it from the argument, Note [Replay plans])."""
    m = as_node(momentum, new.dtype)
    keep = _bin(Op.SUB, as_node(1.0, new.dtype), m)
    return _bin(Op.ADD, _bin(Op.MUL, cast(stat, new.dtype), keep), _bin(Op.MUL, new, m))


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


def _nodes(x, weight, bias, rmean, rvar, training, momentum, eps):
    """(out, save_mean, save_invstd, new running mean, new running var) as nodes, the last two
    None when there is nothing to update."""
    if training:
        out, mean, invstd, var, n = batch_norm_train(x, weight, bias, eps)
        new_mean = None if rmean is None else _running(rmean, mean, momentum)
        unbiased = _bin(Op.MUL, var, as_node(n / max(n - 1, 1), var.dtype))
        new_var = None if rvar is None else _running(rvar, unbiased, momentum)
        return out, mean, invstd, new_mean, new_var
    empty = full(0, x.dtype, (0,))
    return _eval(x, weight, bias, rmean, rvar, eps), empty, empty, None, None


def _supported(bn_args) -> bool:
    """Recorded here, or by the decomposition (half precision, no channel dim, eval mode
    without running stats, a CPU tensor among the arguments)."""
    x, rmean, rvar, training = bn_args[0], bn_args[3], bn_args[4], bn_args[5]
    return (x.dtype in (torch.float32, torch.float64) and x.dim() >= 2
            and (training or (rmean is not None and rvar is not None))
            and all(a is None or isinstance(a, WseTensor) for a in bn_args[:5]))


def _variant(arrange):
    """A handler for one batch-norm op: `arrange` maps its arguments to (x, weight, bias,
    running mean, running var, training, momentum, eps) and says how to shape the result.
    Replayed from a plan when it can be (its ~40 nodes cost ~180 us to build each call)."""
    def lowering(spec, *args, **kwargs):
        return _nodes(*arrange(*args, **kwargs)[0])

    def handler(func, args, kwargs):
        bn_args, finish = arrange(*args, **kwargs)
        if not _supported(bn_args):
            return decomposition_table[func](*args, **kwargs)
        nodes = replay.run_nodes(func, lowering, args, kwargs)
        if nodes is None:
            nodes = _nodes(*[_node(a) if isinstance(a, WseTensor) else a for a in bn_args])
        out, mean, invstd, new_mean, new_var = nodes
        for stat, new in ((bn_args[3], new_mean), (bn_args[4], new_var)):
            if new is not None:
                write(stat, new)
        return finish((from_node(out), from_node(mean), from_node(invstd)))
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
