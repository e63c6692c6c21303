"""The CPU fallback: an op with no lowering runs PyTorch's CPU kernel on host copies of its wse
arguments, and its results are uploaded (each counted in `lazydev.metrics` and logged under
"fallback"). Also what it shares with tensor/dispatch.py: `_upload` (a CPU tensor onto the
device) and two facts of an op's schema, its out= names and the positions it writes.
"""
from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from .. import log, metrics
from ..trace import sync
from ..trace.meta import NestedUnsupported
from .overlap import arg_at
from .sparse import WseSparseTensor
from .wse_tensor import WseTensor, from_cpu, to_cpu, write_tensor

aten = torch.ops.aten


def _upload(cpu: torch.Tensor) -> WseTensor:
    if cpu.is_nested:
        raise NestedUnsupported()
    if cpu.layout != torch.strided:     # host-resident (tensor/sparse.py)
        return WseSparseTensor(cpu.detach())
    return from_cpu(cpu.detach().contiguous())


def _out_names(func) -> list:
    return [a.name for a in func._schema.arguments
            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]


_positions_cache: dict = {}


def _mutated_positions(func):
    found = _positions_cache.get(func)
    if found is None:
        found = _positions_cache[func] = [i for i, a in enumerate(func._schema.arguments)
                                          if a.alias_info is not None and a.alias_info.is_write]
    return found


def fallback_op(func, args, kwargs, why="no lowering"):
    """Run on the CPU: materialise the inputs, run PyTorch's CPU kernel, upload the outputs."""
    name = str(func)
    outs = _out_names(func)
    if _reads_device_values(args, kwargs, outs):
        sync.sync(f"fallback:{name}")      # (strict_syncs may refuse it: then not counted)
    metrics.fallback(name)
    log.emit("fallback", f"{name} runs on the CPU ({why}) at [green]{log.user_frame()}[/]")
    cpu_args = _to_cpu_args(args)
    cpu_kwargs = {k: _blank(v) if k in outs else _to_cpu_args(v) for k, v in kwargs.items()}
    if isinstance(cpu_kwargs.get("device"), torch.device) or cpu_kwargs.get("device") == "wse":
        cpu_kwargs["device"] = torch.device("cpu")
    out = func(*cpu_args, **cpu_kwargs)
    positions = _mutated_positions(func)
    for pos in positions:
        _copy_back(arg_at(func, pos, args, kwargs), arg_at(func, pos, cpu_args, cpu_kwargs))
    returns = func._schema.returns
    if positions and returns and returns[0].alias_info is not None:
        written = [arg_at(func, pos, args, kwargs) for pos in positions[:len(returns)]]
        return written[0] if len(returns) == 1 else tuple(written)
    return _upload_out(out)


def _blank(out):
    """A CPU stand-in for an out= argument: the kernel overwrites it, so its values are not
    downloaded (which would sync)."""
    if isinstance(out, (list, tuple)):
        return type(out)(_blank(o) for o in out)
    if _dense(out):
        return torch.empty(out.shape, dtype=out.dtype, device="cpu")
    return _to_cpu_args(out)


def _dense(t) -> bool:
    """A wse tensor whose values are on the device (a sparse one's are on the host)."""
    return isinstance(t, WseTensor) and not isinstance(t, WseSparseTensor)


def _reads_device_values(args, kwargs, outs) -> bool:
    """Whether the CPU kernel reads a dense wse tensor's value, which needs a sync first. Not
    for a factory (randperm with device="wse"), an out= tensor (named in `outs`) it only
    writes, or a sparse tensor (tensor/sparse.py): the trace goes on uncut."""
    named = [v for k, v in kwargs.items() if k not in outs]
    return any(_dense(t) for t in pytree.tree_leaves([list(args), named]))


def _copy_back(dst, src):
    if isinstance(dst, (list, tuple)):
        for d, s in zip(dst, src):
            _copy_back(d, s)
    elif type(dst) is WseSparseTensor:      # its host tensor (or an alias) updated in place
        if tuple(dst.shape) != tuple(src.shape):
            raise NotImplementedError("resizing a sparse wse tensor in place is not supported")
        if src is not dst._host:
            dst._host = src.detach()
    elif isinstance(dst, WseTensor):
        if tuple(dst.shape) != tuple(src.shape):     # an out= tensor PyTorch resized:
            from .dispatch import SPECIAL               # (dispatch imports this module)
            # in place, over its own storage, as there (set_ to an upload gave it a storage of
            # its own: the base of a view, and other views of it, never saw the values)
            SPECIAL[aten.resize_.default](aten.resize_.default, (dst, tuple(src.shape)), {})
        write_tensor(dst, _upload(src))


def _to_cpu_args(a):
    if isinstance(a, WseTensor):
        cpu = _host_arg(a) if type(a) is WseSparseTensor else to_cpu(a, reason="fallback")
        # Some CPU kernels read requires_grad (_sparse_mm_reduce_impl saves the argmax for the
        # backward pass only then): they see the flag as on the CPU. No graph is recorded: the
        # op runs below autograd.
        return cpu.requires_grad_() if a.requires_grad and not cpu.requires_grad else cpu
    if isinstance(a, (list, tuple)):
        return type(a)(_to_cpu_args(x) for x in a)
    if isinstance(a, torch.device) and a.type == "wse":
        return torch.device("cpu")
    return a


def _host_arg(a: WseSparseTensor):
    """A sparse tensor's own host tensor, not a copy (an in-place op updates it in place); an
    alias of it (detach) if it is to require grad, as the host tensor itself never does."""
    return a._host.detach() if a.requires_grad else a._host


def _upload_out(out):
    if isinstance(out, torch.Tensor):
        return _upload(out)
    if isinstance(out, (list, tuple)):
        return type(out)(_upload_out(o) for o in out)
    return out
