"""Ops with their own handlers: transfers between devices, reads of values, random numbers.

Random numbers are drawn on the CPU from PyTorch's CPU generator (so torch.manual_seed makes wse
runs reproducible and equal to what a CPU run draws for the same calls) and uploaded as graph
inputs: no sync, and no recompile, since the data is an input, not a constant.
"""
from __future__ import annotations

import torch

from .. import log
from ..trace import build
from .dispatch import SPECIAL, _node_args, _upload, dispatch
from .wse_tensor import WseTensor, from_cpu, to_cpu, value, write

aten = torch.ops.aten


def special(*ops):
    def deco(fn):
        for op in ops:
            SPECIAL[op] = fn
        return fn
    return deco


@special(aten.copy_.default)
def _copy_(func, args, kwargs):
    dst, src = args[0], args[1]
    if not isinstance(dst, WseTensor):                       # wse -> cpu
        dst.copy_(to_cpu(src, reason="cpu"))
        return dst
    if isinstance(src, WseTensor):
        write(dst, value(src))
        return dst
    if dst._lz_full and tuple(src.shape) == dst._lz_meta[0]:   # a whole-tensor upload
        st = dst._st
        cpu = src.detach().to(dst.dtype).contiguous()
        st.replace_buffer(from_cpu(cpu)._st.buf, origin=log.user_frame())
        return dst
    write(dst, value(_upload(src)))
    return dst


@special(aten._to_copy.default)
def _to_copy(func, args, kwargs):
    x = args[0]
    device = kwargs.get("device")
    dtype = kwargs.get("dtype") or x.dtype
    if device is not None and torch.device(device).type == "cpu":
        return to_cpu(x, reason="cpu").to(dtype)
    if not isinstance(x, WseTensor):
        return _upload(x.to(dtype))
    kw = {k: v for k, v in kwargs.items() if k in ("dtype",)}
    from .dispatch import lowered_op
    return lowered_op(func, (x,), kw)


@special(torch.ops.prims.copy_to.default)
def _prims_copy_to(func, args, kwargs):
    dst, src = args[0], args[1]
    if isinstance(dst, WseTensor) and isinstance(src, WseTensor):
        write(dst, value(src))
        return dst
    return _copy_(func, args, kwargs)


@special(aten._local_scalar_dense.default)
def _item(func, args, kwargs):
    return to_cpu(args[0], reason="item").item()


@special(aten.is_nonzero.default)
def _is_nonzero(func, args, kwargs):
    return to_cpu(args[0], reason="bool").is_nonzero()


@special(aten.equal.default)
def _equal(func, args, kwargs):
    a, b = (to_cpu(t, reason="equal") if isinstance(t, WseTensor) else t for t in args[:2])
    return torch.equal(a, b)


def _random(draw):
    """In-place random op: draw on the CPU into a fresh tensor and write it."""
    def handler(func, args, kwargs):
        t = args[0]
        cpu = torch.empty(t.shape, dtype=t.dtype)
        draw(cpu, *args[1:], **kwargs)
        write(t, value(_upload(cpu)))
        return t
    return handler


SPECIAL[aten.normal_.default] = _random(lambda c, *a, **k: c.normal_(*a, **k))
SPECIAL[aten.uniform_.default] = _random(lambda c, *a, **k: c.uniform_(*a, **k))
SPECIAL[aten.exponential_.default] = _random(lambda c, *a, **k: c.exponential_(*a, **k))
for _ov in ("default", "from", "to"):
    SPECIAL[getattr(aten.random_, _ov)] = _random(lambda c, *a, **k: c.random_(*a, **k))
for _name in ("cauchy_", "geometric_", "log_normal_"):
    SPECIAL[getattr(aten, _name).default] = _random(
        lambda c, *a, _m=_name, **k: getattr(c, _m)(*a, **k))
SPECIAL[aten.bernoulli_.float] = _random(lambda c, *a, **k: c.bernoulli_(*a, **k))


@special(aten.bernoulli_.Tensor)
def _bernoulli_tensor_(func, args, kwargs):
    t, p = args[0], args[1]
    write(t, value(_bernoulli_of(p, t.shape, kwargs.get("generator"))))
    return t


def _bernoulli_of(p, shape, generator):
    u = torch.rand(shape, generator=generator)
    return dispatch(aten.lt.Tensor, (_upload(u), p), {})


@special(aten.bernoulli.default)
def _bernoulli(func, args, kwargs):
    p = args[0]
    out = _bernoulli_of(p, p.shape, kwargs.get("generator"))
    return dispatch(aten._to_copy.default, (out,), {"dtype": p.dtype})


@special(aten.bernoulli.p)
def _bernoulli_p(func, args, kwargs):
    t, p = args[0], args[1]
    cpu = torch.empty(t.shape, dtype=t.dtype).bernoulli_(p, generator=kwargs.get("generator"))
    return _upload(cpu)


@special(aten.rand_like.default, aten.randn_like.default)
def _rand_like(func, args, kwargs):
    x = args[0]
    dtype = kwargs.get("dtype") or x.dtype
    draw = torch.rand if func is aten.rand_like.default else torch.randn
    return _upload(draw(x.shape, dtype=dtype))


@special(aten.resize_.default)
def _resize_(func, args, kwargs):
    t, size = args[0], tuple(args[1])
    if size == tuple(t.shape):
        return t
    raise NotImplementedError("resizing a wse tensor is not supported; allocate a new tensor "
                              "with the wanted shape instead")


@special(aten.arange.start_out)
def _arange_out(func, args, kwargs):
    out = kwargs["out"]
    start, end, step = (list(args) + [1])[:3]
    result = dispatch(aten.arange.start_step, (start, end, step),
                      {"dtype": out.dtype, "device": out.device})
    return _set_(None, (out, result), {})


@special(aten.set_.source_Tensor)
def _set_(func, args, kwargs):
    t, src = args
    if not isinstance(src, WseTensor):
        src = _upload(src)
    size, stride, offset = src._lz_meta[:3]
    need = offset + sum((d - 1) * s for d, s in zip(size, stride)) + 1 if all(size) else 0
    if need * src.dtype.itemsize > t.untyped_storage().nbytes():
        # PyTorch's own storage of the wrapper cannot grow; factories that resize an out=
        # tensor are registered as PrivateUse1 kernels instead (tensor/device.py).
        raise NotImplementedError("growing a wse tensor in place (set_/resize_) is not supported")
    from torch.utils._mode_utils import no_dispatch
    with no_dispatch():
        aten.as_strided_.default(t, size, stride, offset)
    t._st = src._st
    t._set_meta(size, stride, offset)
    return t


@special(aten.empty_like.default, aten.new_empty.default, aten.new_empty_strided.default,
         aten.empty.memory_format)
def _empty_like(func, args, kwargs):
    from .device import empty_tensor
    x = args[0]
    size = args[1] if func is not aten.empty_like.default else x.shape
    return empty_tensor(size, kwargs.get("dtype") or x.dtype)


__all__ = ["build", "_node_args"]


@special(aten.rrelu_with_noise.default)
def _rrelu_with_noise(func, args, kwargs):
    """Training mode draws one uniform per non-positive element, in element order, from the CPU
    generator (the CPU kernel's order), so the draws depend on x's signs: x's sign mask is read
    (a sync) to draw exactly as many as the CPU does. Eval mode is leaky_relu."""
    names = ("self", "noise", "lower", "upper", "training", "generator")
    defaults = (None, None, 0.125, 1.0 / 3.0, False, None)
    given = dict(zip(names, args), **kwargs)
    x, noise, lower, upper, training, gen = (given.get(n, d) for n, d in zip(names, defaults))
    if not training:
        return dispatch(aten.leaky_relu.default, (x, (lower + upper) / 2), {})
    neg = to_cpu(x, reason="rrelu draws") <= 0
    # The kernel's bounds are in the input's float type; each draw is a double, then rounded.
    lo, hi = (torch.tensor(v, dtype=x.dtype).item() for v in (lower, upper))
    draws = torch.empty(int(neg.sum()), dtype=torch.float64).uniform_(lo, hi, generator=gen)
    cpu_noise = torch.ones(x.shape, dtype=x.dtype)
    cpu_noise[neg] = draws.to(x.dtype)
    w = _upload(cpu_noise)
    if isinstance(noise, WseTensor):
        write(noise, value(w))
    return dispatch(aten.mul.Tensor, (x, w), {})
