"""Sparse tensors on wse: host-resident, every op on them runs through the CPU fallback.

The device compiles dense (strided) values only. A sparse wse tensor is a wrapper with the
sparse layout, shape and dtype PyTorch expects of it, holding the CPU sparse tensor (`_host`)
it stands for. It subclasses WseTensor only so that its __torch_dispatch__ comes first (PyTorch
tries subclasses before their bases): any op with a sparse wse argument, in any position, comes
here and runs on the CPU (fallback.fallback_op, counted and logged as every fallback is). A
dense result is uploaded as an ordinary wse tensor, a sparse one is wrapped again; autograd
works at the wrapper's level as for any wse tensor.
"""
from __future__ import annotations

import copy

import functools
from multiprocessing.reduction import ForkingPickler

import torch

from ..trace import state
from .wse_tensor import WSE, WseTensor, reduce_for_process

aten = torch.ops.aten

# Queries answered from the host tensor's metadata: no computation, so neither a sync nor a
# fallback (as sizes are not). The layout is asked for through Python (dispatch_layout): a
# wrapper's C++ TensorImpl cannot name a compressed layout (CSR, CSC, BSR, BSC) itself.
_QUERIES = frozenset({torch.ops.prim.layout.default, aten._nnz.default, aten.sparse_dim.default,
                      aten.dense_dim.default, aten.is_coalesced.default})
# Aliases of the host tensor (autograd detaches saved tensors and outputs): no computation.
_ALIASES = frozenset({aten.detach.default, aten.alias.default})


class WseSparseTensor(WseTensor):
    """A sparse tensor on wse, its values kept on the host (`_host`, a CPU sparse tensor)."""

    @staticmethod
    def __new__(cls, host: torch.Tensor):
        t = torch.Tensor._make_wrapper_subclass(cls, host.shape, dtype=host.dtype,
                                                layout=host.layout, device=WSE,
                                                dispatch_layout=True)
        t._host = host
        return t

    @classmethod
    @state.recorder
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from .dispatch import dispatch
        return dispatch(func, args, kwargs or {}, handler=host_op)

    def __tensor_flatten__(self):
        return ["_host"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return WseSparseTensor(inner["_host"])

    def __repr__(self, *, tensor_contents=None):
        # PyTorch's text: the host's contents (indices, values: before its first suffix, size=)
        # and the wrapper's suffixes (device, size, nnz, layout, autograd). Subclasses are named
        # in the prefix, and indented by its length: print as tensor( as any device does.
        host = torch._tensor_str._str_intern(self._host)
        contents = host[len("tensor("):host.rindex("size=")].rstrip().rstrip(",")
        prefix = f"{type(self).__name__}("
        text = torch._tensor_str._str_intern(self, tensor_contents=contents)
        suffixes = text[len(prefix) + len(contents):]
        return "tensor(" + contents + suffixes.replace("\n" + " " * len(prefix), "\n       ")

    def __reduce_ex__(self, protocol):
        # As WseTensor's: pickling stores a CPU tensor.
        cpu = self._host.clone()
        if self.requires_grad:
            cpu.requires_grad_()
        return cpu.__reduce_ex__(protocol)

    def __copy__(self):
        return WseSparseTensor(self._host)      # aliasing, as the CPU's copy.copy

    def __deepcopy__(self, memo):
        """As the CPU's: a copy of the host tensor (WseTensor's copies a dense storage)."""
        if id(self) not in memo:
            new = memo[id(self)] = WseSparseTensor(copy.deepcopy(self._host, memo))
            new.requires_grad_(self.requires_grad)
        return memo[id(self)]

    def __bool__(self):
        return bool(self._host)

    def tolist(self):
        return self._host.tolist()


def host_op(func, args, kwargs):
    """Any op with a sparse wse argument: a metadata query, a move to the CPU, or a fallback."""
    from .fallback import fallback_op
    if func in _QUERIES:
        return func(args[0]._host)
    if func in _ALIASES:
        return WseSparseTensor(func(args[0]._host))
    if func is aten._to_copy.default and torch.device(kwargs.get("device") or WSE).type == "cpu":
        return func(args[0]._host, **kwargs)           # .cpu(), .to("cpu"): a copy
    return fallback_op(func, args, kwargs, why="sparse tensors are host-resident")


@state.recorder
def _to_wse(x, **kwargs):
    """aten._to_copy of a CPU sparse tensor to wse: a CPU copy, held by a wrapper. A transfer,
    not a fallback (nothing runs but the copy, so nothing is counted and nothing syncs)."""
    if x.device.type == "wse":      # not a wrapper: PyTorch built it around wse members
        raise NotImplementedError(
            f"this {x.layout} tensor was made on wse by a path lazydev does not see, so no wse "
            "kernel can run it: make it on the CPU and move it with .to('wse')")
    kwargs["device"] = torch.device("cpu")
    return WseSparseTensor(aten._to_copy.default(x, **kwargs))


@state.recorder
def _make_on_host(op, *args, **kwargs):
    """A sparse tensor made on wse (torch.empty(..., layout=torch.sparse_coo, device="wse")):
    made on the CPU and kept there, a fallback like any other."""
    from .fallback import fallback_op
    return fallback_op(op, args, kwargs, why="sparse tensors are host-resident")


_fallbacks = None       # the Library holding _make_on_host: registered while it lives


def register(lib) -> None:
    # PyTorch picks these keys from the layout and device of the tensor to be made: a move of a
    # sparse tensor to wse, or a sparse factory with device="wse". Left to PyTorch, _to_copy
    # and zeros (their kernels for any backend) would build a native sparse tensor around wse
    # members, which no wse kernel can run.
    global _fallbacks
    _fallbacks = torch.library.Library("_", "IMPL")
    for key in ("SparsePrivateUse1", "SparseCsrPrivateUse1"):
        lib.impl("_to_copy", _to_wse, key)
        lib.impl("zeros", functools.partial(_make_on_host, aten.zeros.default), key)
        _fallbacks.fallback(_make_on_host, key)


ForkingPickler.register(WseSparseTensor, reduce_for_process)    # Note [Sending to another process]
