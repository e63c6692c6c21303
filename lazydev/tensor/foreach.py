"""_foreach_* ops (the multi-tensor path of torch.optim), recorded element by element.

WseTensor is registered as a foreach-capable type (as CUDA tensors are), so stock optimizers
update all parameters with one Python call per step of the algorithm instead of one per
parameter. Each element is recorded by calling the element op's handler directly: no C++
dispatch round trip per element, and the element op replays its plan (tensor/replay.py).
"""
from __future__ import annotations

import torch
import torch.optim.optimizer as _optimizer

from ..trace import state

aten = torch.ops.aten

# foreach overload -> element overloads to try, in order
_OVERLOADS = {"List": ("Tensor",), "Scalar": ("Scalar", "default"),
              "ScalarList": ("Scalar", "default"), "default": ("default",)}
_LAYOUTS: dict = {}     # foreach OpOverload -> (element OpOverload, per-arg layout) or None


def register() -> None:
    """Let torch.optim choose its foreach implementations for wse parameters."""
    from .wse_tensor import WseTensor
    # torch.optim keeps its own list (torch/optim/optimizer.py), apart from torch.utils'.
    if WseTensor not in _optimizer._foreach_supported_types:
        _optimizer._foreach_supported_types.append(WseTensor)


def layout(func):
    """(element op, [(is_list, kwarg name or None) per foreach argument]) or None."""
    if func in _LAYOUTS:
        return _LAYOUTS[func]
    found = None
    name = func._schema.name.split("::")[1][len("_foreach_"):]
    packet = getattr(aten, name, None)
    if packet is not None:
        for ov in _OVERLOADS.get(func._overloadname, ()):
            elem = getattr(packet, ov, None)
            found = elem and _match(func, elem)
            if found:
                break
    _LAYOUTS[func] = found
    return found


def _match(func, elem):
    """The argument layout if `elem` takes one element of each of func's list arguments (and
    its other arguments as they are) at the same positions, else None."""
    outer = [a for a in func._schema.arguments if not a.kwarg_only]
    inner = elem._schema.arguments
    names = {a.name for a in inner}
    if len(outer) > len(inner) or any(a.kwarg_only and a.name not in names
                                      for a in func._schema.arguments):
        return None         # keyword arguments (alpha) pass through by name
    if any(not a.has_default_value() for a in inner[len(outer):]):
        return None
    args = []
    for a, b in zip(outer, inner):
        kind = str(a.type)
        is_list = kind.startswith("List[")
        if (kind[5:-1] if is_list else kind) != str(b.type):
            return None
        args.append((is_list, b.name if b.kwarg_only else None))
    return elem, args, bool(func._schema.returns)


def run(func, args, kwargs, dispatch, fast=None):
    """Record func element by element through `dispatch`, or return NotImplemented. `fast(elem,
    args, kwargs)`, if given, records one element straight through its replay plan (skipping
    dispatch's per-op work, done once here for the whole list) or returns None."""
    found = layout(func)
    if found is None:
        return NotImplemented
    elem, arg_layout, returns_list = found
    n = next((len(a) for a, (is_list, _) in zip(args, arg_layout) if is_list), 0)
    out = []
    tr = state.current()
    tr.shared_scalars = {}          # Note [Shared scalars] in tensor/replay.py
    try:
        for i in range(n):
            pos, kw = [], dict(kwargs)
            for a, (is_list, kwname) in zip(args, arg_layout):
                v = a[i] if is_list else a
                if kwname is None:
                    pos.append(v)
                else:
                    kw[kwname] = v
            pos = tuple(pos)
            r = fast(elem, pos, kw) if fast is not None else None
            if r is None:
                r = dispatch(elem, pos, kw)
            else:
                tr.nodes += 1
            out.append(r)
    finally:
        tr.shared_scalars = None
    return out if returns_list else None
