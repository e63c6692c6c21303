"""Moving an nn.Module off wse keeps its Parameter objects, as moving one off CUDA does.

Note [Parameters leaving wse]
nn.Module._apply (what .cpu(), .to(device), .double() run) keeps each Parameter object when the
new tensor can take the old one's place: `param.data = new` for two plain tensors (CUDA -> CPU),
torch.utils.swap_tensors when the new one is a wrapper subclass (CPU -> wse). wse -> CPU is
neither: the old tensor is a wrapper subclass, the new one is not, so _apply made new Parameter
objects. An optimizer made before `model.cpu()` then updated the old, detached wse tensors (the
model no longer trained), and weights tied by identity (an embedding and its LM head) came
apart. PyTorch's own answer is swapping for every module (`torch.__future__`'s
swap_module_params_on_conversion, off by default); a module holding wse tensors gets it for its
conversions, so the same objects change device as on CUDA. Where a swap is refused (a tensor
something else still references in C++, such as a graph kept with retain_graph), the move runs
PyTorch's default way, with new objects, rather than failing.
"""
from __future__ import annotations

import torch

from .wse_tensor import WseTensor

_plain_apply = torch.nn.Module._apply


def _holds_wse(module: torch.nn.Module) -> bool:
    return any(isinstance(t, WseTensor) for t in module.parameters()) or \
        any(isinstance(t, WseTensor) for t in module.buffers())


def _apply(self, fn, recurse=True):
    future = torch.__future__
    if future.get_swap_module_params_on_conversion() or not _holds_wse(self):
        return _plain_apply(self, fn, recurse)
    future.set_swap_module_params_on_conversion(True)
    try:
        return _plain_apply(self, fn, recurse)
    except RuntimeError as e:
        if "Couldn't swap" not in str(e):
            raise
    finally:
        future.set_swap_module_params_on_conversion(False)
    return _plain_apply(self, fn, recurse)     # the tensors swapped so far are moved already


def register() -> None:
    torch.nn.Module._apply = _apply
