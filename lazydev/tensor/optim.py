"""Fused optimizer steps and mixed-precision loss scaling, recorded like any other ops.

torch.optim's `fused=True` (Adam, AdamW, SGD, Adagrad) and torch.amp.GradScaler call ops that
PyTorch implements per device in C++ (`_fused_adamw_`, `_amp_update_scale_` ...). wse had none,
so each ran on the CPU as a fallback: a sync in the middle of the step, every step, and the
parameters and optimizer state copied to the host and back. They are written here in _foreach_
ops, one Python call per step of the algorithm as in torch.optim's foreach path (one call per
parameter made a transformer's fused AdamW trace 47 ms, against 5 for foreach AdamW). The
arithmetic is the CPU kernels' (aten/src/ATen/native/cpu/FusedAdamKernel.cpp,
FusedSGDKernel.cpp, FusedAdagradKernel.cpp, AmpGradScalerKernels.cpp): float16 and bfloat16
computed in float32, unscaled gradients written back; the step's bias corrections are float32
here for float32 parameters (the kernels' doubles agree to float32's rounding), double for
float64 ones. A `found_inf` (GradScaler's) that is set leaves every tensor as it was, chosen on
the device with `where`, so that no step waits to learn whether it overflowed.
"""
from __future__ import annotations

import torch

from ..trace import state
from ..trace.build import (HALF, SCALAR_TYPE, broadcast_shape, cast, contiguous_strides, opmath,
                           reshape)
from ..trace.checks import element
from ..trace.ir import Node
from ..trace.lower import LOWERINGS
from ..trace.meta import Spec
from . import replay
from .vjp import decomposition
from .wse_tensor import from_node, write

aten = torch.ops.aten


def _opmath(ts: list) -> list:
    """The tensors in the dtype the CPU kernels compute in: float32 for float16 and bfloat16."""
    return [t.float() if t.dtype in HALF else t for t in ts]


class _Updates:
    """The new values of one step's tensors, written at the end: each kept as it was where
    GradScaler found an overflow (`skip`, a wse bool, or None)."""

    def __init__(self, found_inf):
        self.skip = None if found_inf is None else found_inf.reshape(()) == 1.0
        self.dsts: list = []
        self.values: list = []

    def set(self, dsts: list, values: list) -> None:
        self.dsts += dsts
        self.values += values

    def apply(self) -> None:
        values = self.values
        if self.skip is not None:
            values = [torch.where(self.skip, d, v.to(d.dtype)) for d, v in zip(self.dsts, values)]
        # The CPU's fused kernels leave version counters as they were (backward through a graph
        # kept with retain_graph works after a fused step; the copy made it raise)
        versions = [t._version for t in self.dsts]
        torch._foreach_copy_(self.dsts, values)
        torch._C._autograd._unsafe_set_version_counter(self.dsts, versions)


def _one_dtype(params, *lists) -> None:
    """The CPU's fused kernels take each parameter's gradient and state in its dtype (a model
    made bfloat16 after its fused Adam's first step: wse ran the update in mixed dtypes)."""
    for i, p in enumerate(params):
        for ts in lists:
            t = ts[i] if ts else None
            if t is not None and t.dtype is not p.dtype:
                raise RuntimeError(f"expected scalar type {SCALAR_TYPE.get(p.dtype, p.dtype)} "
                                   f"but found {SCALAR_TYPE.get(t.dtype, t.dtype)}")


def _start(params, grads, grad_scale, found_inf, maximize, weight_decay) -> tuple:
    """What every fused step begins with: (its _Updates, the gradients in their compute dtype,
    divided by GradScaler's scale (written back: the kernels store the unscaled gradients),
    negated to maximize, plus L2 weight decay; the parameters in their compute dtype)."""
    updates = _Updates(found_inf)
    g, x = _opmath(grads), _opmath(params)
    if grad_scale is not None:
        g = torch._foreach_div(g, grad_scale.reshape(()))
        updates.set(grads, g)
    if maximize:
        g = torch._foreach_neg(g)
    if weight_decay != 0:
        g = torch._foreach_add(g, x, alpha=weight_decay)
    return updates, g, x


@decomposition(aten._fused_adam_.default, aten._fused_adam_.tensor_lr)
def _fused_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, **kw):
    _adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, False, **kw)


@decomposition(aten._fused_adamw_.default, aten._fused_adamw_.tensor_lr)
def _fused_adamw(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, **kw):
    _adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, True, **kw)


def _adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, decoupled, *,
          lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None,
          found_inf=None):
    if not params:
        return
    _one_dtype(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs if amsgrad else None)
    if _adam_by_plans(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
                      decoupled, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize,
                      grad_scale, found_inf):
        return
    updates, g, x = _start(params, grads, grad_scale, found_inf, maximize,
                           0 if decoupled else weight_decay)
    if decoupled and weight_decay != 0:
        x = torch._foreach_mul(x, 1 - lr * weight_decay)
    m = torch._foreach_lerp(_opmath(exp_avgs), g, 1 - beta1)
    v = torch._foreach_add(torch._foreach_mul(_opmath(exp_avg_sqs), beta2),
                           torch._foreach_mul(torch._foreach_mul(g, 1 - beta2), g))
    updates.set(exp_avgs + exp_avg_sqs, m + v)
    if amsgrad:
        v = torch._foreach_maximum(_opmath(max_exp_avg_sqs), v)
        updates.set(max_exp_avg_sqs, v)
    # The step's factors, for all parameters at once (a few kernels, not a few per parameter),
    # then one 0-dim view per parameter: -lr / (1 - beta1 ** step), sqrt(1 - beta2 ** step).
    steps = torch.stack(state_steps)
    if _wide(params):
        steps = steps.double()
    step_size = ((-lr) / (1 - torch.pow(beta1, steps))).unbind(0)
    bias2_sqrt = torch.sqrt(1 - torch.pow(beta2, steps)).unbind(0)
    denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(v), bias2_sqrt), eps)
    updates.set(params, torch._foreach_add(
        x, torch._foreach_div(torch._foreach_mul(m, step_size), denom)))
    updates.apply()


# Note [Optimizer plans]
# Written in _foreach_ ops, a fused Adam step dispatched about fifteen of them through Python
# (SGD's, five), each recording an element op per parameter: `mlp_amp`'s fused AdamW (6
# parameters) took 1.0 ms of recording warm and 2.3 ms in its step (benchmarks/record_by_op.py),
# 70% of the step's recording. But one parameter's update is a function of its tensors'
# metadata, a few flags and float hyperparameters, as an op's lowering is: so it is lowered
# once, on placeholders, into a replay plan keyed by the rule (replay.run_rule, Note [Replay
# plans]), and each step replays it per parameter: a few CALL nodes (Note [Macro nodes]) and the
# writes. Adam's bias corrections of all parameters are one more plan, over the stacked step
# counts as in the foreach path: taken per parameter, each 0-dim factor was computed inline at
# every element of its update loop (two pow calls in double and a division: 2.5 ms for a
# 1024x1024 parameter against 1.1). A plan's runtime scalars must come straight from its float
# arguments, so the floats the step derives (1 - beta1, -lr, ...) are computed here, in double
# as the foreach path does, and passed in. The rules apply the foreach path's element ops in its
# order through the same lowerings, so the program and its bits are the same. What cannot be
# replayed (a tensor learning rate, step counts of two dtypes, a CPU tensor among the state)
# takes the foreach path.
def _spec(shape: tuple, dtype: torch.dtype) -> Spec:
    """The metadata a lowering gets of a contiguous output."""
    return Spec(shape, dtype, contiguous_strides(shape), 0)


def _ew(func, dtype: torch.dtype, *args, **kwargs) -> Node:
    """Elementwise aten op `func` on nodes and numbers, through its lowering, in `dtype`."""
    shape = broadcast_shape(*[a.shape for a in args if isinstance(a, Node)])
    return LOWERINGS[func](_spec(shape, dtype), *args, **kwargs)


def _wide(params) -> bool:
    """Whether the bias corrections are computed in double, as the CPU kernel's are: for
    float64 parameters (float32 ones agree to float32's rounding either way)."""
    return any(p.dtype is torch.float64 for p in params)


def _corrections_rule(spec, steps, neg_lr, beta1, beta2, wide):
    """The foreach path's bias corrections (_adam) on nodes, each factor as the vector of
    every parameter's."""
    stacked = LOWERINGS[aten.stack.default](_spec((len(steps),), steps[0].dtype), steps)
    dt = torch.float64 if wide else stacked.dtype
    stacked = cast(stacked, dt)
    bc1 = _ew(aten.rsub.Scalar, dt, _ew(aten.pow.Scalar, dt, beta1, stacked), 1)
    step_size = _ew(aten.mul.Tensor, dt, _ew(aten.reciprocal.default, dt, bc1), neg_lr)
    bc2 = _ew(aten.rsub.Scalar, dt, _ew(aten.pow.Scalar, dt, beta2, stacked), 1)
    return step_size, _ew(aten.sqrt.default, dt, bc2)


def _started(p, g, grad_scale, maximize, weight_decay):
    """_start on one parameter's nodes: (the parameter and the gradient in their compute dtype,
    the gradient as unscaled, or None without a scale)."""
    d = opmath(p.dtype)
    x, gw = cast(p, d), cast(g, d)
    if grad_scale is not None:
        gw = _ew(aten.div.Tensor, d, gw, reshape(grad_scale, ()))
    unscaled = gw if grad_scale is not None else None
    if maximize:
        gw = _ew(aten.neg.default, d, gw)
    if weight_decay != 0:
        gw = _ew(aten.add.Tensor, d, gw, x, alpha=weight_decay)
    return x, gw, unscaled


def _kept(pairs, found_inf) -> tuple:
    """Each (old, new) pair's new value in old's dtype, or old where GradScaler found an
    overflow; None where nothing is written."""
    skip = None if found_inf is None else _ew(aten.eq.Scalar, torch.bool,
                                              reshape(found_inf, ()), 1.0)
    out = []
    for old, new in pairs:
        if new is not None:
            new = cast(new, old.dtype)
            if skip is not None:
                new = _ew(aten.where.self, old.dtype, skip, old, new)
        out.append(new)
    return tuple(out)


def _adam_rule(spec, p, g, m, v, vmax, step_sizes, bias2_sqrts, i, grad_scale, found_inf,
               beta2, eps, weight_decay, one_b1, one_b2, decay, decoupled, amsgrad, maximize):
    """One parameter's Adam step on nodes (the i-th of the call's): the new values of p, g, m,
    v and vmax."""
    step_size, bias2_sqrt = element(step_sizes, i), element(bias2_sqrts, i)
    x, gw, unscaled = _started(p, g, grad_scale, maximize, 0 if decoupled else weight_decay)
    d = x.dtype
    if weight_decay != 0 and decoupled:
        x = _ew(aten.mul.Scalar, d, x, decay)
    m2 = _ew(aten.lerp.Scalar, d, cast(m, d), gw, one_b1)
    v2 = _ew(aten.add.Tensor, d, _ew(aten.mul.Scalar, d, cast(v, d), beta2),
             _ew(aten.mul.Tensor, d, _ew(aten.mul.Scalar, d, gw, one_b2), gw))
    vmax2 = _ew(aten.maximum.default, d, cast(vmax, d), v2) if amsgrad else None
    root = _ew(aten.sqrt.default, d, vmax2 if amsgrad else v2)
    denom = _ew(aten.add.Scalar, d, _ew(aten.div.Tensor, d, root, bias2_sqrt), eps)
    p2 = _ew(aten.add.Tensor, d, x, _ew(aten.div.Tensor, d, _ew(aten.mul.Tensor, d, m2,
                                                                step_size), denom))
    return _kept(((p, p2), (g, unscaled), (m, m2), (v, v2), (vmax, vmax2)), found_inf)


def _sgd_rule(spec, p, g, buf, grad_scale, found_inf, weight_decay, momentum, one_damp, lr,
              nesterov, maximize, is_first_step):
    """One parameter's SGD step on nodes: the new values of p, g and buf."""
    x, gw, unscaled = _started(p, g, grad_scale, maximize, weight_decay)
    d, buf2 = x.dtype, None
    if momentum != 0:
        buf2 = gw if is_first_step else _ew(
            aten.add.Tensor, d, _ew(aten.mul.Scalar, d, cast(buf, d), momentum),
            _ew(aten.mul.Scalar, d, gw, one_damp))
        gw = _ew(aten.add.Tensor, d, gw, _ew(aten.mul.Scalar, d, buf2, momentum)) \
            if nesterov else buf2
    p2 = _ew(aten.sub.Tensor, d, x, _ew(aten.mul.Scalar, d, gw, lr))
    return _kept(((p, p2), (g, unscaled), (buf, buf2)), found_inf)


def _by_plans(rule, tensors: list, rest: list) -> bool:
    """Each parameter's step through the plan of `rule` on its tensors (tensors[i]) and the
    rest of its arguments (rest[i]), writing the new values into those tensors (Note [Optimizer
    plans]); False, with nothing written, when one cannot be replayed."""
    tr = state.current()
    tr.shared_scalars = {}          # Note [Shared scalars] in tensor/replay.py
    made = []
    try:
        for ts, more in zip(tensors, rest):
            out = replay.run_rule(rule, (*ts, *more))
            if out is None:
                return False
            made.append((ts, out))
    finally:
        tr.shared_scalars = None
    for ts, out in made:
        for dst, new in zip(ts, out):
            if new is not None:
                write(dst, new)
    return True


def _adam_by_plans(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
                   decoupled, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize,
                   grad_scale, found_inf) -> bool:
    """The Adam step through plans (Note [Optimizer plans]), or False."""
    if type(lr) not in (float, int) or len({t.dtype for t in state_steps}) != 1:
        return False
    lr, beta1, beta2, eps, wd = (float(a) for a in (lr, beta1, beta2, eps, weight_decay))
    factors = replay.run_rule(_corrections_rule, (list(state_steps), -lr, beta1, beta2,
                                                         _wide(params)))
    if factors is None:
        return False
    step_sizes, bias2_sqrts = (from_node(f) for f in factors)
    floats = (beta2, eps, wd, 1 - beta1, 1 - beta2, 1 - lr * wd)
    vmaxes = max_exp_avg_sqs if amsgrad else [None] * len(params)
    return _by_plans(_adam_rule, list(zip(params, grads, exp_avgs, exp_avg_sqs, vmaxes)),
                     [(step_sizes, bias2_sqrts, i, grad_scale, found_inf, *floats, decoupled,
                       amsgrad, maximize) for i in range(len(params))])


@decomposition(aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr)
def _fused_sgd(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
               nesterov, maximize, is_first_step, grad_scale=None, found_inf=None):
    if not params:
        return
    _one_dtype(params, grads, momentum_buffer_list)
    if type(lr) in (float, int) and _by_plans(
            _sgd_rule, list(zip(params, grads, momentum_buffer_list or [None] * len(params))),
            [(grad_scale, found_inf, float(weight_decay), float(momentum), 1 - dampening,
              float(lr), nesterov, maximize, is_first_step)] * len(params)):
        return
    updates, g, x = _start(params, grads, grad_scale, found_inf, maximize, weight_decay)
    if momentum != 0:
        buf = g if is_first_step else torch._foreach_add(
            torch._foreach_mul(_opmath(momentum_buffer_list), momentum),
            torch._foreach_mul(g, 1 - dampening))
        updates.set(momentum_buffer_list, buf)
        g = torch._foreach_add(g, torch._foreach_mul(buf, momentum)) if nesterov else buf
    updates.set(params, torch._foreach_sub(x, torch._foreach_mul(g, lr)))
    updates.apply()


@decomposition(aten._fused_adagrad_.default, aten._fused_adagrad_.tensor_lr)
def _fused_adagrad(params, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps,
                   maximize, grad_scale=None, found_inf=None):
    if not params:
        return
    _one_dtype(params, grads, state_sums)
    updates, g, x = _start(params, grads, grad_scale, found_inf, maximize, weight_decay)
    total = torch._foreach_add(_opmath(state_sums), torch._foreach_mul(g, g))
    updates.set(state_sums, total)
    # The decayed learning rate lr / (1 + (step - 1) * lr_decay), as the Adam factors.
    steps = torch.stack(state_steps)
    if _wide(params):
        steps = steps.double()
    clr = (lr / (1 + (steps - 1) * lr_decay)).unbind(0)
    std = torch._foreach_add(torch._foreach_sqrt(total), eps)
    updates.set(params, torch._foreach_sub(x, torch._foreach_div(torch._foreach_mul(g, clr),
                                                                 std)))
    updates.apply()


@decomposition(aten._amp_foreach_non_finite_check_and_unscale_.default)
def _unscale(grads, found_inf, inv_scale):
    """GradScaler.unscale_: every gradient times `inv_scale`; `found_inf` set to 1 if any value
    was infinite or NaN before."""
    if not grads:
        return
    finite = torch.stack([torch.isfinite(g).all() for g in grads]).all()
    found_inf.copy_(torch.where(finite, found_inf, torch.ones_like(found_inf)))
    torch._foreach_copy_(grads, torch._foreach_mul(_opmath(grads), inv_scale.reshape(())))


@decomposition(aten._amp_update_scale_.default)
def _update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                  growth_interval):
    """GradScaler.update: back off after an overflow, grow after `growth_interval` clean
    steps (unless the grown scale would be infinite); the count of clean steps kept in
    `growth_tracker`."""
    found = found_inf != 0
    successful = growth_tracker + 1
    grow = successful == growth_interval
    # float times double, rounded to float: the kernel's arithmetic
    grown = (scale.double() * growth_factor).to(scale.dtype)
    kept = torch.where(grow & torch.isfinite(grown), grown, scale)
    backed_off = (scale.double() * backoff_factor).to(scale.dtype)
    scale.copy_(torch.where(found, backed_off, kept))
    growth_tracker.copy_(torch.where(found | grow, torch.zeros_like(successful), successful))
    return scale
