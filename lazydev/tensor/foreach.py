"""_foreach_* ops (the multi-tensor path of torch.optim), recorded element by element.

WseTensor is registered as a foreach-capable type (as CUDA tensors are), so stock optimizers
update all parameters with one Python call per step of the algorithm instead of one per
parameter. Each element is recorded by calling the element op's handler directly: no C++
dispatch round trip per element, and the element op replays its plan (tensor/replay.py).
"""
from __future__ import annotations

from itertools import repeat

import _lazydev_node as _native
import torch
import torch.optim.optimizer as _optimizer

from ..trace import state
from . import replay
from .wse_tensor import WseTensor

aten = torch.ops.aten

# foreach overload -> element overloads to try, in order
_OVERLOADS = {"List": ("Tensor",), "Scalar": ("Scalar", "default"),
              "ScalarList": ("Scalar", "default"), "default": ("default",)}
_LAYOUTS: dict = {}     # foreach OpOverload -> (element OpOverload, per-arg layout) or None
# Element ops by another name: ATen's _foreach_maximum/minimum by numbers are clamps (there is no
# maximum(Tensor, Scalar); torch.maximum refused the number).
_BY_NUMBER = {"maximum": "clamp_min", "maximum_": "clamp_min_", "minimum": "clamp_max",
              "minimum_": "clamp_max_"}


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
    if func._overloadname in ("Scalar", "ScalarList"):
        name = _BY_NUMBER.get(name, name)
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


def _element_args(args, arg_layout, kwargs, i):
    """Positional and keyword arguments of element i."""
    pos, kw = [], dict(kwargs)
    for a, (is_list, kwname) in zip(args, arg_layout):
        v = a[i] if is_list else a
        if kwname is None:
            pos.append(v)
        else:
            kw[kwname] = v
    return tuple(pos), kw


def run(func, args, kwargs, dispatch):
    """Record func element by element through `dispatch`, or return NotImplemented."""
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
            out.append(dispatch(elem, *_element_args(args, arg_layout, kwargs, i)))
    finally:
        tr.shared_scalars = None
    return out if returns_list else None


# Note [Foreach plans]
# An optimizer's _foreach_ calls record the same element ops on the same parameters every step.
# Recorded element by element, each element paid a signature, a plan lookup and dispatch's
# handler walk: about 5 us hot, and AdamW records 432 elements a step in the transformer. So a
# call is keyed once, on every element's signature together (its arguments' parts, as
# replay.signature makes them), and its value holds each element's replay plan and where the
# element's tensors and floats come from among the call's arguments. Replaying it costs, per
# element, the plan's nodes and the write. A call is recorded element by element when an
# argument has no signature part (a CPU tensor), when an element has no plan, or when a plan's
# inputs are not the call's own arguments (a wrapped number's value, a float inside a list).
_LIST_PLANS: dict = {}      # key -> ListPlan, or None (record element by element)
_MAX_LIST_PLANS = 2000


class _Refused(Exception):
    pass


class ListPlan:
    """Per element: its Plan, the indices of its tensors and floats in its value list (the
    element's arguments, in signature order) and whether its scalar nodes are shared with the
    call's other elements; `targets`: the value indices an in-place element writes, or None for
    a functional op."""

    __slots__ = ("elements", "targets")

    def __init__(self, elements, targets):
        self.elements, self.targets = elements, targets


def _sources(args, arg_layout, kwargs):
    """(is_list, value) per element argument in the order replay.signature walks an element's
    arguments: positional, then keyword (the call's own, then those taken from its lists)."""
    pos = [(l, a) for a, (l, kw) in zip(args, arg_layout) if kw is None]
    named = [(kw, l, a) for a, (l, kw) in zip(args, arg_layout) if kw is not None]
    if any(kw in kwargs for kw, _, _ in named):
        raise _Refused              # given twice: the element's keyword order would differ
    return pos + [(False, v) for v in kwargs.values()] + [(l, a) for _, l, a in named]


def _key(func, sources) -> tuple:
    """Every element's signature parts at once, made by replay's own `_part` (so the key tells
    apart whatever an element's signature does); the tensors and floats it collects are not
    needed here."""
    key, tensors, floats = [func], [], []
    part = replay._part
    for is_list, a in sources:
        key.append(tuple([part(x, tensors, floats) for x in a]) if is_list
                   else part(a, tensors, floats))
    return tuple(key)


def run_planned(func, found, args, kwargs, element_plan, inplace):
    """Record func through its ListPlan (Note [Foreach plans]), or return NotImplemented.
    `found`: func's layout(); `element_plan(elem, args, kwargs)`: replay's (plan, tensors,
    floats) or None; `inplace`: the element op's written positions, or None for a functional
    op."""
    elem, arg_layout, returns_list = found
    try:
        sources = _sources(args, arg_layout, kwargs)
        key = _key(func, sources)
    except (_Refused, replay._NotReplayable, TypeError):
        return NotImplemented
    n = next((len(a) for is_list, a in sources if is_list), 0)
    plan = _LIST_PLANS.get(key, False)
    if plan is False:
        plan = _new_list_plan(key, elem, args, arg_layout, kwargs, sources, n, element_plan,
                              inplace)
    if plan is None:
        return NotImplemented
    out = _replay(plan, sources)
    return out if returns_list else None


def _new_list_plan(key, elem, args, arg_layout, kwargs, sources, n, element_plan, inplace):
    elements = []
    for i in range(n):
        found = element_plan(elem, *_element_args(args, arg_layout, kwargs, i))
        vals = [a[i] if is_list else a for is_list, a in sources]
        tensors = tuple(j for j, v in enumerate(vals) if type(v) is WseTensor)
        floats = tuple(j for j, v in enumerate(vals) if type(v) is float)
        # The plan's inputs must be exactly what the indices pick, in its order (compared by
        # identity: == on wse tensors would record an op).
        if found is None or not _same([vals[j] for j in tensors], found[1]) \
                or not _same([vals[j] for j in floats], found[2]):
            elements = None
            break
        # Its scalars are the call's own floats, the same objects for every element: its
        # plan's scalar nodes are made once per call (Note [Shared scalars]).
        shares = bool(found[0].args_only and floats and not any(sources[j][0] for j in floats))
        elements.append((found[0], tensors, floats, shares))
    targets = None
    if inplace is not None:
        n_pos = sum(kw is None for _, kw in arg_layout[:len(args)])
        if any(p >= n_pos for p in inplace):
            elements = None         # a written keyword argument: not from the lists' order
        targets = tuple(inplace)
    plan = ListPlan(elements, targets) if elements is not None else None
    if len(_LIST_PLANS) >= _MAX_LIST_PLANS:
        _LIST_PLANS.clear()
    _LIST_PLANS[key] = plan
    return plan


def _same(xs: list, ys: list) -> bool:
    return len(xs) == len(ys) and all(x is y for x, y in zip(xs, ys))


def _replay(plan: ListPlan, sources):
    """The call's elements replayed, in C (csrc/wse_record.c replay_elements: Note [Native
    recording] in tensor/replay.py): per element, its plan run on its tensors' values with its
    floats or the scalar nodes it shares with the call's other elements that have its plan
    (made once per call, Note [Shared scalars]); the results are new tensors, or are written
    to the element's `targets`."""
    tr = state.current()
    tr.shared_scalars = {}          # Note [Shared scalars] in tensor/replay.py
    n = len(plan.elements)
    # Each element's value list, made by zip in C.
    rows = zip(*[a if is_list else repeat(a, n) for is_list, a in sources])
    try:
        out = _native.replay_elements(plan.elements, plan.targets, rows)
    finally:
        tr.shared_scalars = None
    tr.nodes += n
    return out
