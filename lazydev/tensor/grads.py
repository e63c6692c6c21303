"""Gradients handed to backward for wse outputs are checked for their device; and the
half-type backward composites run in float.

Note [Root gradients on another device]
The autograd engine checks that a gradient passed to backward (`y.backward(g)`,
`torch.autograd.grad(y, x, g)`) is on its output's device, moving a 0-dim one there and raising
for any other ("invalid gradient at index 0 - expected device cuda:0 but got cpu"), but it
skips the check for tensor subclasses, and a wse tensor is one. A CPU gradient of a wse output
then ran the backward of elementwise ops on the CPU and left `.grad` of a wse leaf on the CPU,
and the error came at opt.step(), far from its cause. The gradients are checked where
torch.autograd builds them (`_make_grads`, which backward and grad both call), as the engine
checks a CUDA output's.
"""
from __future__ import annotations

import torch
import torch.autograd

from ..trace.build import HALF

_plain_make_grads = torch.autograd._make_grads


def _on_device(index: int, out, grad):
    if not isinstance(grad, torch.Tensor) or not isinstance(out, torch.Tensor):
        return grad
    if out.device.type != "wse" or grad.device == out.device:
        return grad
    if grad.dim() == 0:
        return grad.to(out.device)
    raise RuntimeError(
        f"invalid gradient at index {index} - expected device {out.device} but got "
        f"{grad.device}: make the gradient on wse (torch.ones(..., device='wse')) or move it "
        f"with .to('wse')")


def _make_grads(outputs, grads, is_grads_batched):
    made = _plain_make_grads(outputs, grads, is_grads_batched)
    return tuple(_on_device(i, out, g) for i, (out, g) in enumerate(zip(outputs, made)))


def register() -> None:
    torch.autograd._make_grads = _make_grads


# Note [Half-type backward composites]
# silu_backward and mish_backward have no kernel for PrivateUse1, so PyTorch runs their
# CompositeImplicitAutograd forms on wse tensors before lazydev sees them, in the tensors' dtype:
# a bfloat16 SiLU's gradient was rounded at each of its five ops (half its elements off, 3% past
# bfloat16's tolerance), where the CPU's kernel computes in float and rounds once. Their kernels
# before autograd run the same composites on float copies of half-type inputs.
def _in_float(op):
    def run(grad, x):
        if x.dtype in HALF and x.device.type == "wse":
            return op.decompose(grad.float(), x.float()).to(x.dtype)
        return op.decompose(grad, x)
    return run


# Note [Composite out= by copy]
# linalg_matrix_rank's out= forms are CompositeImplicitAutograd, and for a tensor subclass ATen's
# composite computes the functional result and never writes it into `out`: matrix_rank(a,
# out=o) left o as it was (the CPU behaves alike under a TorchDispatchMode). matmul's out= form
# writes a reshape of `out` and, as a subclass's reshape is no alias to is_alias_of, copies it
# into `out` with its own shape, (6, 5) into (2, 3, 5), which the overlap check refused. Their
# kernels before autograd compute the functional form and copy it into `out`.
_OUT_BY_COPY = {"atol_rtol_tensor_out": "atol_rtol_tensor", "atol_rtol_float_out":
                "atol_rtol_float", "out": "default", "out_tol_tensor": "tol_tensor"}


def _by_copy(functional):
    def run(*args, out, **kwargs):
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                           for t in (out, *args)):
            raise RuntimeError(f"{functional.__name__.split('.')[0]}(): functions with out=... "
                               "arguments don't support automatic differentiation, but one of "
                               "the arguments requires grad.")
        result = functional(*args, **kwargs)
        if out.shape != result.shape:
            out.resize_(result.shape)
        return out.copy_(result)
    return run


def register_composites(lib) -> None:
    for name in ("silu_backward", "mish_backward"):
        lib.impl(name, _in_float(getattr(torch.ops.aten, name).default), "AutogradPrivateUse1")
    rank = torch.ops.aten.linalg_matrix_rank
    for out_form, functional in _OUT_BY_COPY.items():
        lib.impl(f"linalg_matrix_rank.{out_form}", _by_copy(getattr(rank, functional)),
                 "AutogradPrivateUse1")
    lib.impl("matmul.out", _by_copy(torch.ops.aten.matmul.default), "AutogradPrivateUse1")
    lib.impl("set_.source_Tensor_storage_offset", _set_with_geometry, "AutogradPrivateUse1")


def _set_with_geometry(self, source, storage_offset, size, stride=()):
    """t.set_(source_tensor, offset, size, stride): ATen's composite passes source's storage on,
    and a wse storage is no CPU storage ('a wse storage holds no values'): the tensor shares
    source's storage, then takes the geometry asked for (bounds checked, as_strided_)."""
    self.set_(source)
    stride = tuple(stride) if len(stride) else torch.empty(size, device="meta").stride()
    return self.as_strided_(size, stride, storage_offset)
