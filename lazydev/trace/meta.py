"""Output metadata of an aten op, from PyTorch's meta kernels, cached per (op, input metadata).

Shape rules are never written by hand: the first call of an op with given input shapes, strides
and dtypes runs its meta kernel on empty meta tensors; later calls hit the cache. Float scalar
values do not enter the key (they never change an output's shape or dtype), except for the few
factories whose output length depends on them (arange, linspace).
"""
from __future__ import annotations

import warnings

import torch

from .. import log

aten = torch.ops.aten

# Ops whose output shape depends on float argument values.
_VALUE_SENSITIVE = frozenset({
    aten.arange.default, aten.arange.start, aten.arange.start_step, aten.linspace.default,
    aten.logspace.default,
})


class Spec:
    """Metadata of one tensor output."""

    __slots__ = ("shape", "dtype", "stride", "offset")

    def __init__(self, shape, dtype, stride, offset):
        self.shape, self.dtype, self.stride, self.offset = shape, dtype, stride, offset

    def __repr__(self):
        return f"Spec({list(self.shape)}, {self.dtype}, stride={self.stride}, offset={self.offset})"


# The dtypes the compiler generates code for (compile/cexpr.py STORE_TYPE). An op on another
# (complex, float8, uint16/32/64) runs on the CPU: recorded, a float8 cast failed the step's
# compilation at the next sync and lost every value the step computed.
COMPILED = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                      torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool})
NOT_COMPILED = "complex, float8 and uint16/32/64 dtypes are not compiled"


def uncompiled(x) -> bool:
    """Whether a spec, tensor or (nested) argument list involves a dtype not in COMPILED."""
    if isinstance(x, (torch.Tensor, Spec)):
        return x.dtype not in COMPILED
    if isinstance(x, (list, tuple, type({}.values()))):
        return any(uncompiled(v) for v in x)
    return False


class NestedUnsupported(NotImplementedError):
    """A nested tensor met a wse op: it has no strided sizes to record (torch.nested's jagged
    layout failed inside its symbolic sizes, the strided one in an internal assert)."""

    def __init__(self):
        super().__init__("nested tensors are not supported on wse (torch.nested is a prototype "
                         "API): pad the sequences to one length (torch.nested.to_padded_tensor "
                         "on the CPU, or lazydev.pad_to_bucket), or keep the nested tensor on "
                         "the CPU")


class MetaUnsupported(Exception):
    """The op has no meta kernel: the caller falls back to the CPU."""


_cache: dict = {}
_stats = {"hits": 0, "misses": 0}


def _sig(a, value_sensitive):
    """Hashable description of one argument, enough to reproduce its meta tensor."""
    meta = getattr(a, "_lz_meta", None)
    if meta is not None:                      # a wse tensor: (size, stride, offset, numel, dtype)
        return meta
    if isinstance(a, torch.Tensor):
        return ("cpu", tuple(a.shape), a.dtype, a.stride(), a.storage_offset())
    if isinstance(a, float):
        # Tagged: as bare keys 5.0 == 5, but arange(5.0) is float and arange(5) is int64.
        return float if not value_sensitive else (float, repr(a))
    if isinstance(a, bool):
        return (bool, a)        # True == 1 as a key, but bool + True stays bool, + 1 does not
    if isinstance(a, (list, tuple)):
        return (type(a), tuple([_sig(x, value_sensitive) for x in a]))
    return a


def clear() -> None:
    """Forget every spec (Note [Default dtype] in tensor/device.py)."""
    _cache.clear()


def infer(func, args, kwargs):
    """Specs (a Spec, a tuple of them, or None per non-tensor output) for func(*args, **kwargs)."""
    vs = func in _VALUE_SENSITIVE
    key = (func, _sig(args, vs), _sig(tuple(kwargs.items()), vs) if kwargs else None)
    try:
        out = _cache[key]
        _stats["hits"] += 1
        return out
    except KeyError:
        pass
    _stats["misses"] += 1
    out = _run_meta(func, args, kwargs)
    _cache[key] = out
    return out


def validate(func, args, kwargs):
    """infer(), for a caller that can do without it: None when the op has no meta kernel, or
    when its meta kernel refuses a call the CPU accepts; the CPU's error when both refuse."""
    try:
        return infer(func, args, kwargs)
    except MetaUnsupported:
        return None
    except Exception:               # noqa: BLE001 - the CPU's verdict decides
        if cpu_error(func, args, kwargs, expand_large=False) is not None:
            raise
        return None


def _to_meta(a):
    meta = getattr(a, "_lz_meta", None)
    if meta is not None:
        size, stride, offset, numel, dtype = meta
        base = torch.empty((max(numel, 1),), dtype=dtype, device="meta")
        return base.as_strided(size, stride, offset)
    if isinstance(a, torch.Tensor):
        if a.is_nested:
            raise NestedUnsupported()
        return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
    if isinstance(a, (list, tuple)):
        return type(a)(_to_meta(x) for x in a)
    if isinstance(a, torch.device):
        return torch.device("meta")
    return a


def _spec_of(r):
    if isinstance(r, torch.Tensor):
        return Spec(tuple(r.shape), r.dtype, tuple(r.stride()), r.storage_offset())
    if isinstance(r, (list, tuple)):
        return tuple(_spec_of(x) for x in r)
    return None


def _lstm_cell_meta(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """PyTorch's meta kernel of the fused LSTM cell reads the biases' devices, and nn.LSTM with
    bias=False passes none (AttributeError: it ran on the CPU, which has no kernel for it)."""
    zeros = input_gates.new_zeros(input_gates.shape[1:])
    return torch.ops.aten._thnn_fused_lstm_cell(
        input_gates, hidden_gates, cx, zeros if input_bias is None else input_bias,
        zeros if hidden_bias is None else hidden_bias)


def _scatter_reduce_meta(x, dim, index, src, reduce, *, include_self=True):
    """The meta kernel refuses reduce='max' and 'min', which the CPU's takes as amax, amin."""
    return torch.ops.aten.scatter_reduce.two(x, dim, index, src, REDUCE_ALIASES.get(
        reduce, reduce), include_self=include_self)


REDUCE_ALIASES = {"max": "amax", "min": "amin"}     # scatter_reduce's, in the CPU's kernel


def _where_meta(condition, x, y):
    """The meta kernel refuses a uint8 condition, which the CPU's takes, with a warning (the
    lowering reads the condition as bool, as it does)."""
    if condition.dtype is torch.uint8:
        warnings.warn("where received a uint8 condition tensor. This behavior is deprecated "
                      "and will be removed in a future version of PyTorch. Use a boolean "
                      "condition instead.", stacklevel=log.user_stacklevel())
        condition = condition.bool()
    return torch.ops.aten.where.self(condition, x, y)

# Meta kernels of PyTorch's that fail on calls its other kernels take.
_META = {torch.ops.aten._thnn_fused_lstm_cell.default: _lstm_cell_meta,
         torch.ops.aten.scatter_reduce.two: _scatter_reduce_meta,
         torch.ops.aten.where.self: _where_meta}


def _run_meta(func, args, kwargs):
    margs = _to_meta(args)
    mkw = {k: _to_meta(v) for k, v in kwargs.items()}
    if "device" in mkw:
        mkw["device"] = torch.device("meta")
    try:
        out = _META.get(func, func)(*margs, **mkw)
    except NotImplementedError as e:
        raise MetaUnsupported(str(e)) from e
    except RuntimeError as e:
        # Data-dependent ops and ops without meta kernels say so in a RuntimeError; anything
        # else (a shape mismatch, a bad dim) is the user's error.
        msg = str(e)
        if "meta" in msg.lower() or "data-dependent" in msg or "DataDependent" in type(e).__name__:
            raise MetaUnsupported(msg) from e
        raise users_error(func, args, kwargs, e) from None
    except Exception as e:
        if "DataDependent" in type(e).__name__ or "Unbacked" in type(e).__name__:
            raise MetaUnsupported(str(e)) from e
        raise users_error(func, args, kwargs, e) from None
    return _spec_of(out)


_CPU_RERUN_LIMIT = 1 << 22      # elements: a re-run on the CPU allocates the inputs


def users_error(func, args, kwargs, e: Exception) -> Exception:
    """The exception the CPU raises for this call, `e` (the meta kernel's) if it raises none.
    Meta kernels often say it differently (amax over an empty dim: "reducing over zero-size
    dimension ..." where the CPU raises IndexError "amax(): Expected reduction dim 0 to have
    non-zero size."), and a user expects the CPU's. Only on this error path, small inputs."""
    return cpu_error(func, args, kwargs, expand_large=False) or e


def too_large(args, kwargs) -> bool:
    """Whether the CPU re-run of cpu_error would allocate more than _CPU_RERUN_LIMIT elements."""
    leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    return sum(a.numel() for a in leaves if isinstance(a, torch.Tensor)) > _CPU_RERUN_LIMIT


def cpu_error(func, args, kwargs, expand_large: bool = True) -> Exception | None:
    """What the CPU raises for this call, run on zero-filled inputs of the same sizes and
    strides; None when it raises nothing or cannot be asked (a generator argument, or inputs
    over _CPU_RERUN_LIMIT elements unless `expand_large`: those are then one zero, expanded, so
    that errors the CPU raises from the arguments' metadata come without allocating them)."""
    leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    if any(isinstance(a, torch.Generator) for a in leaves):
        return None
    large = too_large(args, kwargs)
    if large and not expand_large:
        return None

    def cpu(a, fill):
        if isinstance(a, torch.Tensor):
            size, stride, offset, numel, dtype = getattr(a, "_lz_meta", None) or (
                a.shape, a.stride(), a.storage_offset(), a.numel(), a.dtype)
            if large:
                return torch.full((), fill, dtype=dtype, device="cpu").expand(size)
            flat = torch.full((max(numel, 1),), fill, dtype=dtype, device="cpu")
            return flat.as_strided(size, stride, offset)
        if isinstance(a, torch.device):
            return torch.device("cpu")
        return a
    # Zeros, and ones where zeros divide an integer by zero (fmod of a bool by a long raised
    # the probe's 'ZeroDivisionError' as the call's)
    for fill in (0, 1):
        try:
            cargs, ckwargs = torch.utils._pytree.tree_map(lambda a: cpu(a, fill), (args, kwargs))
        except RuntimeError:        # a tensor without strides (sparse): no stand-in, no verdict
            return None
        try:
            with torch.random.fork_rng(devices=[]):
                func(*cargs, **ckwargs)
        except Exception as raised:     # noqa: BLE001 - handed to the user, as the CPU's
            if fill == 0 and str(raised) == "ZeroDivisionError":
                continue
            return raised
        return None
    return None


def stats() -> dict:
    return dict(_stats, entries=len(_cache))
