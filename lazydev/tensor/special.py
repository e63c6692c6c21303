"""Ops with their own handlers: transfers between devices, reads of values, random numbers.

Random numbers are drawn on the CPU from PyTorch's CPU generator (so torch.manual_seed makes wse
runs reproducible and equal to what a CPU run draws for the same calls) and uploaded as graph
inputs: no sync, and no recompile, since the data is an input, not a constant.
"""
from __future__ import annotations

import warnings

import torch

from .. import log
from ..trace import build, checks, meta, sync
from . import guards
from .dispatch import SPECIAL, _node_args, dispatch
from .fallback import _upload
from .wse_tensor import (WseTensor, from_cpu, restride, to_bool, to_cpu, to_item, value, write,
                          write_tensor)

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
        # x[i] += v is x[i].add_(v), then x[i] = (that view): a copy of a view onto itself,
        # which changes nothing; written, it read the view back at its offset, a constant of
        # the graph, and a loop doing it at a new i each step compiled a program per step.
        if src._st is dst._st and src._lz_meta == dst._lz_meta:
            return dst
        write_tensor(dst, src)
        return dst
    _has_data(src)
    # (size(), not .shape: an nn.UninitializedParameter refuses its shape, not its size)
    if dst._lz_full and tuple(src.size()) == dst._lz_meta[0]:   # a whole-tensor upload
        st = dst._st
        cpu = src if src.dtype is dst.dtype else src.to(dst.dtype)   # made contiguous below
        buf = from_cpu(cpu)._st.buf if cpu.dtype.is_complex else sync.upload(cpu)
        st.replace_buffer(buf, origin=log.user_frame())
        return dst
    write_tensor(dst, _upload(src))
    return dst


def _has_data(t) -> None:
    """A meta tensor raises the CPU's error (nn.Module._apply adds 'use to_empty()' to it);
    the upload said 'expected a CPU tensor, got one on meta'."""
    if t.is_meta:
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")


@special(aten._to_copy.default)
def _to_copy(func, args, kwargs):
    x = args[0]
    device = kwargs.get("device")
    dtype = kwargs.get("dtype") or x.dtype
    kind = torch.device(device).type if device is not None else "wse"
    if kind == "meta":              # (functorch's zero tangents go through meta for shapes)
        return func(meta._to_meta(x), **kwargs)
    if kind != "wse":               # the CPU, or through it to another device (or its error)
        layout = {"memory_format": kwargs["memory_format"]} if kwargs.get("memory_format") \
            is not None else {}     # (channels_last was ignored)
        return to_cpu(x, reason="cpu").to(dtype=dtype, device=device, **layout)
    if not isinstance(x, WseTensor):
        _has_data(x)
        return _upload(x.to(dtype))
    kw = {k: v for k, v in kwargs.items() if k in ("dtype",)}
    from .dispatch import lowered_op
    return lowered_op(func, (x,), kw)


@special(torch.ops.prims.copy_to.default)
def _prims_copy_to(func, args, kwargs):
    dst, src = args[0], args[1]
    if isinstance(dst, WseTensor) and isinstance(src, WseTensor):
        write_tensor(dst, src)
        return dst
    return _copy_(func, args, kwargs)


@special(aten._local_scalar_dense.default)
def _item(func, args, kwargs):
    return to_item(args[0], reason="item")


@special(aten.is_nonzero.default)
def _is_nonzero(func, args, kwargs):
    return to_bool(args[0])


@special(aten.is_set_to.default)
def _is_set_to(func, args, kwargs):
    """Whether two tensors are the same view of one storage (the fallback compared two CPU
    copies: always False)."""
    a, b = args[0], args[1]
    return (type(a) is WseTensor and type(b) is WseTensor and a._st is b._st
            and a._lz_meta == b._lz_meta)


@special(aten.equal.default)
def _equal(func, args, kwargs):
    if args[0].device != args[1].device:        # as CUDA's equal checks, 0-dim tensors too
        raise RuntimeError(f"Cannot compare two tensors on different devices. Got: "
                           f"{args[0].device} and {args[1].device}")
    a, b = (to_cpu(t, reason="equal") if isinstance(t, WseTensor) else t for t in args[:2])
    return torch.equal(a, b)


@special(aten.allclose.default)
def _allclose(func, args, kwargs):
    """isclose(...).all() compiled; only the Python bool is read (a sync)."""
    close = dispatch(aten.isclose.default, args, kwargs)
    every = dispatch(aten.all.default, (close,), {})
    return bool(to_cpu(every, reason="allclose").item())


@special(aten._is_any_true.default, aten._is_all_true.default)
def _is_any_or_all_true(func, args, kwargs):
    """A bool tensor's any() / all(), as a 0-dim wse bool (torch.autograd.detect_anomaly asks
    one per backward op): recorded, not run on the CPU."""
    op = aten.any.default if func is aten._is_any_true.default else aten.all.default
    return dispatch(op, args, {})


SPECIAL[aten._assert_async.default] = SPECIAL[aten._assert_async.msg] = guards.assert_async


@special(aten._has_same_storage_numel.default)
def _has_same_storage_numel(func, args, kwargs):
    """Forward-mode AD asks it of a primal and its tangent: storage sizes, not values."""
    def numel(t):
        if not isinstance(t, WseTensor):
            return t.untyped_storage().nbytes() // t.dtype.itemsize
        return t._st.numel * t._st.dtype.itemsize // t.dtype.itemsize
    return numel(args[0]) == numel(args[1])


def _random(draw):
    """In-place random op: draw on the CPU into a fresh tensor and write it."""
    def handler(func, args, kwargs):
        t = args[0]
        try:
            cpu = torch.empty(t.shape, dtype=t.dtype, device="cpu")
            draw(cpu, *args[1:], **kwargs)
        except Exception as e:
            _unmade(t, e)
            raise
        write_tensor(t, _upload(cpu))
        return t
    return handler


def _unmade(t, error) -> None:
    """A draw failed (the host had no memory for torch.rand(2**37, device="wse")) into a tensor
    `empty` made just now: it is dropped from the trace. Pending, it stayed in it while an
    exception's frames held it, and the next sync, of unrelated values, ran out of memory
    computing its zeros and failed."""
    st = t._st
    if st.buf is None and st.version <= 1 and st.node is not None:
        st.node, st.error = None, f"{type(error).__name__}: {error}"


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


# ATen's message, word for word
_BERNOULLI_P = ("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
                "message be improved?  If so, please report an enhancement request to PyTorch.)")


def _bernoulli_of(p, shape, generator):
    p = guards.in_unit_interval(p, checks.message(RuntimeError, _BERNOULLI_P))
    # ATen draws a double per element for float64 probabilities, a float for the others.
    wide = isinstance(p, torch.Tensor) and p.dtype is torch.float64
    u = torch.rand(shape, generator=generator, dtype=torch.float64 if wide else torch.float32,
                   device="cpu")
    return dispatch(aten.lt.Tensor, (_upload(u), p), {})


@special(aten.bernoulli.default)
def _bernoulli(func, args, kwargs):
    p = args[0]
    out = _bernoulli_of(p, p.shape, kwargs.get("generator"))
    return dispatch(aten._to_copy.default, (out,), {"dtype": p.dtype})


@special(aten.bernoulli.p)
def _bernoulli_p(func, args, kwargs):
    t, p = args[0], args[1]
    cpu = torch.empty(t.shape, dtype=t.dtype, device="cpu").bernoulli_(
        p, generator=kwargs.get("generator"))
    return _upload(cpu)


@special(aten.rand_like.default, aten.randn_like.default)
def _rand_like(func, args, kwargs):
    x = args[0]
    dtype = kwargs.get("dtype") or x.dtype
    draw = torch.rand if func is aten.rand_like.default else torch.randn
    return _upload(draw(x.shape, dtype=dtype))


@special(aten.resize_.default)
def _resize_(func, args, kwargs):
    """As on the CPU: new contiguous strides (or the memory format's) at the same offset; a
    storage too small grows in place, keeping its values (Storage.grow)."""
    t = args[0]
    m = meta._to_meta(t)
    func(m, *args[1:], **kwargs)
    size, stride, offset = tuple(m.shape), tuple(m.stride()), m.storage_offset()
    if size == tuple(t.shape) and stride != t.stride() and t.is_contiguous() and t.numel():
        return _relaid(t, stride)
    reals = 2 if t.dtype.is_complex else 1       # Note [Complex storage]
    need = build.extent(size, stride, offset) * reals
    if need > t._st.numel:
        t._st.grow(need)
    restride(t, size, stride, offset)
    return t


@special(aten.resize_as_.default)
def _resize_as_(func, args, kwargs):
    """resize_ to the template's sizes, as ATen's resize_as_ (preserve_format: the template's
    suggested format). It reached no handler of its own: the storage did not grow, the step's
    program read past its buffer and failed, losing the step's other updates."""
    t, template = args[0], args[1]
    fmt = kwargs.get("memory_format")
    if fmt is torch.preserve_format:        # ATen's suggest_memory_format
        last = (template.dim() == 4 and not template.is_contiguous()
                and template.is_contiguous(memory_format=torch.channels_last))
        fmt = torch.channels_last if last else torch.contiguous_format
    return _resize_(aten.resize_.default, (t, tuple(template.shape)),
                    {} if fmt is None else {"memory_format": fmt})


def _relaid(t, stride):
    """resize_ to its own size in another memory format, of a row-major tensor: the layout
    asked for, with the values kept. On the CPU such a tensor is mostly in that format already
    (w.clone(memory_format=channels_last).resize_(size, memory_format=channels_last), which
    torch.nn.utils.convert_conv2d_weight_memory_format does); wse's clone is row-major, and the
    new strides over its buffer permuted a convolution's weights."""
    order = sorted(range(t.dim()), key=lambda d: -stride[d])
    flat = t.permute(order).contiguous().reshape(-1)
    offset = t.storage_offset()
    write_tensor(WseTensor(t._st, (t.numel(),), (1,), offset, dtype=t.dtype), flat)
    restride(t, tuple(t.shape), stride, offset)
    return t


@special(aten.arange.start_out)
def _arange_out(func, args, kwargs):
    out = kwargs["out"]
    start, end, step = (list(args) + [1])[:3]
    result = dispatch(aten.arange.start_step, (start, end, step),
                      {"dtype": out.dtype, "device": out.device})
    if out.numel() != result.numel():
        # resized over its own storage, as ATen's arange_out (set_ to the result gave a view
        # out= a storage of its own: its base never saw the values)
        if out.numel():
            warnings.warn(f"The number of elements in the out tensor of shape {list(out.shape)} "
                          f"is {out.numel()} which does not match the computed number of "
                          f"elements {result.numel()}. Note that this may occur as a result of "
                          "rounding error. The out tensor will be resized to a tensor of shape "
                          f"({result.numel()},).", stacklevel=2)
        _resize_(aten.resize_.default, (out, tuple(result.shape)), {})
    write_tensor(out, result)
    return out


@special(aten.set_.source_Tensor)
def _set_(func, args, kwargs):
    t, src = args
    if not isinstance(src, WseTensor):
        # as CUDA's: sharing another device's memory is not possible (an upload here made a
        # copy that looked shared)
        raise RuntimeError(f"set_: the source is on {src.device}, the tensor on wse:0; share "
                           "a wse tensor's memory (t.set_(src.to('wse')))")
    t._st = src._st
    restride(t, *src._lz_meta[:3])
    return t


@special(aten.set_.source_Storage_storage_offset, aten.set_.source_Storage)
def _set_storage_(func, args, kwargs):
    """t.set_(storage, offset, size, stride) on a storage torch.load made for wse: a view of
    its bytes, uploaded once per storage and dtype (Note [Loading onto wse], device.py)."""
    t, storage = args[0], args[1]
    host = getattr(storage, "_lz_host", None)
    if host is None and storage.device.type != "wse":
        raise RuntimeError(f"set_: the storage is on {storage.device}, the tensor on wse:0; "
                           "share a wse tensor's memory (t.set_(src.to('wse')))")
    if host is None:
        # Also what a wse tensor's own storage's reading methods (tolist, printing) reach:
        # torch implements them as set_ on an empty tensor.
        raise RuntimeError(
            "a wse storage holds no values (a wse tensor's values live in the lazydev "
            "runtime's buffers), so set_ with it and the storage's reading methods (tolist, "
            "printing) do not work; use the tensor: t.cpu().untyped_storage() "
            "for its bytes, t.set_(other) or a view of other to share another wse tensor's "
            "values. Only the storages torch.load(..., map_location='wse') makes can be set_ "
            "from")
    flat = storage._lz_flat.get(t.dtype)
    if flat is None:
        cpu = torch.empty((0,), dtype=t.dtype, device="cpu").set_(host)
        flat = storage._lz_flat[t.dtype] = _upload(cpu)
    if func is aten.set_.source_Storage:
        size, stride, offset = (flat.numel(),), (1,), 0
    else:
        offset, size = args[2], args[3]
        stride = args[4] if len(args) > 4 else kwargs.get("stride", ())
        stride = tuple(stride) or build.contiguous_strides(tuple(size))
    t._st = flat._st
    restride(t, size, stride, offset)
    return t


@special(aten.empty_like.default, aten.new_empty.default, aten.new_empty_strided.default,
         aten.empty.memory_format)
def _empty_like(func, args, kwargs):
    from .device import empty_tensor
    x = args[0]
    size = args[1] if func is not aten.empty_like.default else x.shape
    return empty_tensor(size, kwargs.get("dtype") or x.dtype)


__all__ = ["build", "_node_args"]


@special(aten.polygamma_.default)
def _polygamma_(func, args, kwargs):
    """x.polygamma_(n): its functional form takes (n, x), in the other order, so the generic
    in-place path (tensor/dispatch.py functional_variant) does not find it."""
    x, n = args[0], args[1] if len(args) > 1 else kwargs["n"]
    out = dispatch(aten.polygamma.default, (n, x), {})
    if out.dtype != x.dtype:
        raise RuntimeError(f"result type {out.dtype} can't be cast to the desired output type "
                           f"{x.dtype}")
    write(x, value(out))
    return x


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
    lo, hi = (torch.tensor(v, dtype=x.dtype, device="cpu").item() for v in (lower, upper))
    draws = torch.empty(int(neg.sum()), dtype=torch.float64, device="cpu").uniform_(
        lo, hi, generator=gen)
    cpu_noise = torch.ones(x.shape, dtype=x.dtype, device="cpu")
    cpu_noise[neg] = draws.to(x.dtype)
    w = _upload(cpu_noise)
    if isinstance(noise, WseTensor):
        write(noise, value(w))
    return dispatch(aten.mul.Tensor, (x, w), {})


# Note [No nested tensors]
# nn.TransformerEncoder in eval mode under no_grad, given a padding mask, asks
# _nested_tensor_from_mask_left_aligned whether the batch can become a nested tensor (its
# "sparsity fast path"), and if so runs the layers on one. wse has no nested tensors: the
# conversion fell back to the CPU and failed ("NestedTensorImpl doesn't support sizes"). The
# answer here is no, which sends the encoder down the dense path PyTorch takes in training or
# with enable_nested_tensor=False: the same values at the real positions; at padded positions
# the dense path's values where the nested path leaves zeros.
@special(aten._nested_tensor_from_mask_left_aligned.default)
def _no_nested_fast_path(func, args, kwargs):
    return False


@special(aten._nested_tensor_from_mask.default)
def _nested_tensor_from_mask(func, args, kwargs):
    raise NotImplementedError(
        "wse has no nested tensors: build nn.TransformerEncoder with enable_nested_tensor=False "
        "(or leave mask_check on) to run it on wse with a padding mask")


from . import special_sort  # noqa: E402,F401  (sorting/selection handlers that read values)


@special(aten._new_zeros_with_same_feature_meta.default)
def _new_zeros_with_same_feature_meta(func, args, kwargs):
    """Forward-mode AD's zero tangent of a view (make_dual, jvp): zeros over a storage the size
    of `other`'s, viewed with its sizes, strides and offset, after `self`'s first
    `self_num_batch_dims` sizes (ATen's, in FunctionsManual.cpp). Made on the CPU and uploaded
    it came back row-major, and autograd's check that a tangent has its primal's layout
    failed (an internal assert in jvp of x.t()[0], hessian of a convolution)."""
    self, other = args[0], args[1]
    batch = args[2] if len(args) > 2 else kwargs.get("self_num_batch_dims", 0)
    if type(other) is not WseTensor:
        return func(to_cpu(self, reason="cpu") if type(self) is WseTensor else self, other,
                    batch)
    numel = other._st.numel
    sizes = list(self.shape[:batch]) + list(other.shape)
    strides, prod = [0] * batch, numel
    for i in reversed(range(batch)):
        strides[i] = prod
        prod *= sizes[i]
    zeros = torch.zeros(prod, dtype=other.dtype, device=other.device)
    return zeros.as_strided(sizes, strides + list(other.stride()), other.storage_offset())
