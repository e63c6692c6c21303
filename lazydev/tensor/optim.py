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
here (the kernels' doubles agree to float32's rounding). A `found_inf` (GradScaler's) that is
set leaves every tensor as it was, chosen on the device with `where`, so that no step waits to
learn whether it overflowed.
"""
from __future__ import annotations

import torch

from .vjp import decomposition

aten = torch.ops.aten

_LOW = (torch.float16, torch.bfloat16)


def _opmath(ts: list) -> list:
    """The tensors in the dtype the CPU kernels compute in: float32 for float16 and bfloat16."""
    return [t.float() if t.dtype in _LOW else t for t in ts]


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
        torch._foreach_copy_(self.dsts, values)


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
    step_size = ((-lr) / (1 - torch.pow(beta1, steps))).unbind(0)
    bias2_sqrt = torch.sqrt(1 - torch.pow(beta2, steps)).unbind(0)
    denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(v), bias2_sqrt), eps)
    updates.set(params, torch._foreach_add(
        x, torch._foreach_div(torch._foreach_mul(m, step_size), denom)))
    updates.apply()


@decomposition(aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr)
def _fused_sgd(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
               nesterov, maximize, is_first_step, grad_scale=None, found_inf=None):
    if not params:
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
    updates, g, x = _start(params, grads, grad_scale, found_inf, maximize, weight_decay)
    total = torch._foreach_add(_opmath(state_sums), torch._foreach_mul(g, g))
    updates.set(state_sums, total)
    # The decayed learning rate lr / (1 + (step - 1) * lr_decay), as the Adam factors.
    clr = (lr / (1 + (torch.stack(state_steps) - 1) * lr_decay)).unbind(0)
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
