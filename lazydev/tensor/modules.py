"""Moving an nn.Module to or from wse keeps its Parameter objects where CUDA's would.

Note [Parameters leaving wse]
nn.Module._apply (what .cpu(), .to(device), .double() run) keeps each Parameter object when the
new tensor can take the old one's place: `param.data = new` for two plain tensors (CUDA -> CPU),
torch.utils.swap_tensors when the new one is a wrapper subclass (CPU -> wse). wse -> CPU is
neither: the old tensor is a wrapper subclass, the new one is not, so _apply made new Parameter
objects. An optimizer made before `model.cpu()` then updated the old, detached wse tensors (the
model no longer trained), and weights tied by identity (an embedding and its LM head) came
apart. PyTorch's own answer is swapping for every module (`torch.__future__`'s
swap_module_params_on_conversion, off by default); a module holding wse tensors gets it for its
conversions, so the same objects change device as on CUDA.
A swap is refused for a tensor something else references in C++: the old-style
`torch.nn.utils.weight_norm` keeps `weight` computed from `weight_g`, so `.to("wse")` of such a
module raised "Couldn't swap Linear.weight_g". Those conversions run again without swapping:
new Parameter objects, which is what PyTorch does for a device whose tensors cannot trade
places in memory (XLA's), with a warning that an optimizer made before the move does not see
them. (A user who turned swapping on gets PyTorch's error, as on the CPU.)
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings

import torch
from torch.nn.modules import module as _module

from .wse_tensor import WseTensor

_plain_apply = torch.nn.Module._apply
_inside = [False]       # an _apply below the first: the first has chosen for the whole tree


def _holds_wse(module: torch.nn.Module) -> bool:
    return any(isinstance(t, WseTensor) for t in module.parameters()) or \
        any(isinstance(t, WseTensor) for t in module.buffers())


@contextlib.contextmanager
def _swapping(wanted: bool):
    """Swapping on for this conversion if `wanted` (_apply runs only with it off)."""
    torch.__future__.set_swap_module_params_on_conversion(wanted)
    try:
        yield
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)


@contextlib.contextmanager
def _never_swapping():
    """_apply without swaps, even into wse's wrapper subclass: new Parameters where
    `param.data = new` cannot be done (its module-level name is what _apply looks up)."""
    original = _module.is_traceable_wrapper_subclass
    _module.is_traceable_wrapper_subclass = lambda t: False
    try:
        yield
    finally:
        _module.is_traceable_wrapper_subclass = original


def _caller_level() -> int:
    """warnings.warn's stacklevel for the first frame outside torch and this file (the user's
    model.to(...)), as seen from _apply; RNNs add a frame of their own _apply."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR):
        frame, level = frame.f_back, level + 1
    return level


_TORCH_DIR = os.path.dirname(torch.__file__)


def _first_changed(module: torch.nn.Module, fn):
    """None when `fn` returns every parameter, gradient and buffer of the module tree itself
    (model.to("wse") or .float() of a model already so: Tensor.to returns its tensor); else
    (t, fn(t)) for the first parameter it changes, or (t, None) for a gradient or buffer, or
    for a tree with its own _apply (an RNN's, a user's moving other tensors)."""
    if any(type(m)._apply is not _apply for m in module.modules()):
        return module, None
    with torch.no_grad():                               # as _apply converts parameters
        for t in module.parameters():
            out = fn(t)
            if out is not t:
                return t, out
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    for t in [*grads, *module.buffers()]:
        if fn(t) is not t:
            return t, None
    return None


def _reusing(fn, t, out):
    """`fn`, giving `out` for `t` the first time (the check above converted it already)."""
    pending = [out]

    def apply(x):
        if x is t and pending[0] is not None:
            done, pending[0] = pending[0], None
            return done
        return fn(x)
    return apply


def _no_lazy(fn):
    """`fn`, refusing to move a lazy module's uninitialised parameter to wse: it became an
    empty wse tensor, no longer uninitialised, and the module's first call then failed on its
    shape."""
    def apply(t):
        out = fn(t)
        if isinstance(t, _Uninitialized) and isinstance(out, WseTensor):
            raise RuntimeError(
                "a lazy module's uninitialised parameters cannot move to wse (their class is a "
                "tensor subclass, which a wse tensor cannot be): initialise the module by a dry "
                "run on the CPU, then move it with .to('wse')")
        return out
    return apply


_Uninitialized = torch.nn.parameter.UninitializedTensorMixin


def _apply(self, fn, recurse=True):
    if not _inside[0]:
        fn = _no_lazy(fn)
    if _inside[0] or torch.__future__.get_swap_module_params_on_conversion():
        return _plain_apply(self, fn, recurse)      # the user's own choice to swap is kept
    # A conversion that changes nothing is not run: swapping a Parameter for itself poisoned the
    # AccumulateGrad node of a graph not yet run backward (model.to("wse") between forward and
    # backward made loss.backward() raise), where the CPU's set_data changes nothing.
    first = _first_changed(self, fn) if recurse else ()
    if first is None:
        return self
    if first and first[1] is not None:
        fn = _reusing(fn, *first)
    _inside[0] = True
    try:
        if any(t.is_meta for t in self.parameters()):
            # to_empty of a model made on meta: new Parameter objects, as CUDA's (a meta tensor
            # and the new one cannot trade places), so ties come apart there too, to be made
            # again as PyTorch documents; swapped, a tied model kept one Parameter on wse only
            with _never_swapping():
                return _plain_apply(self, fn, recurse)
        try:
            with _swapping(_holds_wse(self)):
                out = _plain_apply(self, fn, recurse)
            _relink_hooks(self)
            return out
        except RuntimeError as e:
            if "Couldn't swap" not in str(e):
                raise
            refused = str(e).rsplit("swap ", 1)[-1]
        warnings.warn(
            f"lazydev: {refused} could not change device in place (something else holds it: a "
            "graph not yet run backward, a view of it, weight_norm's weight), so it and the "
            "tensors after it are new Parameter objects: an optimizer made before this move "
            "does not update them; make it after moving the model", stacklevel=_caller_level())
        ties = _ties(self)
        with _never_swapping():     # the tensors swapped so far are where they should be
            out = _plain_apply(self, fn, recurse)
        _relink_hooks(self)
        for (first, name), *others in ties:     # one new Parameter per old one, as before
            for module, other in others:
                module._parameters[other] = first._parameters[name]
        return out
    finally:
        _inside[0] = False


def _ties(module: torch.nn.Module) -> list:
    """[(module, name), ...] of each Parameter the tree holds in more than one place (an
    embedding and its LM head): _apply makes a new Parameter at each place, untying them."""
    places: dict = {}
    for m in module.modules():
        for name, p in m._parameters.items():
            if p is not None:
                places.setdefault(id(p), []).append((m, name))
    return [where for where in places.values() if len(where) > 1]


def _relink_hooks(module: torch.nn.Module) -> None:
    """swap_tensors leaves a tensor's hooks (register_hook, register_post_accumulate_grad_hook)
    with the TensorImpl it swapped out, so they stopped firing after model.to("wse"); set
    again, they are registered on the tensor the object now holds."""
    for t in (*module.parameters(), *module.buffers()):
        if t._backward_hooks:
            t._backward_hooks = t._backward_hooks
        if getattr(t, "_post_accumulate_grad_hooks", None):
            t._post_accumulate_grad_hooks = t._post_accumulate_grad_hooks


def register() -> None:
    torch.nn.Module._apply = _apply
