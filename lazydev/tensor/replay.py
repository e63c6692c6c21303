"""Replay plans: an op's lowering recorded once per argument signature, then replayed.

Note [Replay plans]
Recording an op the general way (tensor/dispatch.py) walks its arguments, infers its output
metadata, runs its lowering rule and wraps the result: tens of microseconds of Python. But a
lowering is a function of its arguments' metadata only, so the first time an op is seen with a
given signature (the op, every wse tensor's size/stride/offset/dtype, every int and special
float), it is lowered on placeholders, one per tensor argument, and the nodes it builds become a
plan: a list of node recipes whose sources are placeholders, earlier recipes, constant subgraphs
and scalar slots. Replaying a plan costs one Node per recipe and nothing else.

Float arguments are runtime scalars (Note [IR keys]), so they are not in the signature, except the
values a lowering may branch on (0, 1, -1, non-finite). To prove a plan does not depend on the
other float values, the lowering runs twice with two different probe values per float argument:
the two graphs must be identical except for scalar slots that carry exactly the probes, so every
runtime scalar comes straight from an argument (or is a constant of the lowering). Anything else
(a scalar derived from an argument, a CPU tensor argument, an upload, an Unsupported lowering,
any error) makes the signature "not replayable", and the op is recorded the general way.
"""
from __future__ import annotations

import _lazydev_node as _native
import torch

from .. import metrics
from ..trace import state
from ..trace.build import cast, scalar
from ..trace.ir import Node, Op, toposort
from ..trace.macro import MACRO_MIN, shared_macro
from ..trace.lower import LOWERINGS
from ..trace.meta import _VALUE_SENSITIVE, infer, uncompiled
from .wse_tensor import WseTensor, from_node, value, write
from . import dtypes

_PLANS: dict = {}           # signature -> Plan (a view op: its output specs), or None
# id -> op, for every op something keys by id: the signature here, dispatch's handler and
# in-place caches. OpOverload.__hash__ is Python code (0.2 µs a lookup); keeping the op alive
# means no other op ever gets its id.
KEPT_OPS: dict = {}
_MAX_PLANS = 20000          # a bound against signatures that never repeat (growing shapes)
_SPECIAL_FLOATS = (0.0, 1.0, -1.0)
_PROBES = ((1.2345678912345, 0.8765432198765), (2.7182818284, 0.3183098861))
_WRAPPED = {dt: f"cpu0-{dt}" for dt in (torch.float64, torch.float32, torch.float16,
                                       torch.bfloat16)}
_ATOMS = (int, bool, type(None), str, torch.dtype, torch.device, torch.layout,
          torch.memory_format)


def kept(cache: dict, func, make):
    """cache[id(func)] = make(func), with func kept alive in KEPT_OPS: how dispatch's handler
    and in-place caches key an op by id (a plan's signature is kept in _new_plan)."""
    made = cache[id(func)] = make(func)
    KEPT_OPS[id(func)] = func
    return made


class _NotReplayable(Exception):
    pass


class Plan:
    """An op's lowering for one signature: its Macro (trace/macro.py) and, per SCALAR recipe in
    order, where the scalar comes from: ("arg", j) for the j-th float argument, ("const", v)."""

    __slots__ = ("macro", "_scalars", "_as_calls", "_one", "args_only")

    def __init__(self, consts, recipes, out, n_inputs: int):
        self.macro = shared_macro(consts, recipes, out, n_inputs)
        self._scalars = [(r[4], r[1]) for r in recipes if r[3] is None]
        # Every runtime scalar is a float argument's (none a constant of the lowering): a
        # foreach call may then share this plan's scalar nodes among its elements.
        self.args_only = all(kind == "arg" for (kind, _), _ in self._scalars)
        self._as_calls = self.macro.n_nodes >= MACRO_MIN     # Note [Macro nodes]
        # One node on the inputs and runtime scalars (add, mm, x * 0.5: most ops), made
        # directly by `run`: its sources index `inputs + scalar nodes`, the value list.
        n = len(recipes)
        single = (n and not consts and out == n_inputs + n - 1 and recipes[-1][3]
                  and all(r[3] is None for r in recipes[:-1]))
        self._one = self.macro.steps[-1] if single else None

    def scalar_nodes(self, floats: list):
        if not self._scalars:
            return ()
        tr = state.current()
        nodes = []
        for (kind, v), dtype in self._scalars:
            if kind == "arg" and tr.shared_scalars is not None:
                nodes.append(_shared_scalar(tr, floats[v], dtype))
                continue
            nodes.append(state.scalar(floats[v] if kind == "arg" else v, dtype))
        return nodes

    def run(self, inputs: list, floats: list, scalars=None):
        """The plan's output node(s) on `inputs` (value nodes of the call's wse tensors);
        `scalars`: its runtime scalar nodes if already made (`scalar_nodes`)."""
        if scalars is None:
            scalars = self.scalar_nodes(floats) if self._scalars else ()
        if self._one is not None:
            op, dtype, shape, get, one, arg, local = self._one
            if scalars:
                inputs = inputs + scalars
            return Node.make(op, dtype, shape, (get(inputs),) if one else get(inputs), arg, local)
        if self._as_calls:
            return self.macro.call(inputs, scalars)
        return self.macro.apply(inputs, scalars)


# Note [Shared scalars]
# A _foreach_ call passes its non-list float arguments (AdamW's beta1, lr) as the same Python
# object to every element it records (tensor/foreach.py), so while it records, SCALAR recipes
# share one slot per (argument object, dtype): one node for all parameters instead of one each.
# Sharing follows the call's structure, never values: equal floats from different objects keep
# their own slots (state.scalar), so the graph key does not change when values happen to meet.
# The trace keeps the float object (in `scalars`) for the memo's lifetime, so ids are not reused.
def _shared_scalar(tr, x: float, dtype) -> Node:
    key = (id(x), dtype)
    node = tr.shared_scalars.get(key)
    if node is None:
        node = tr.shared_scalars[key] = state.scalar(x, dtype)
    return node


# ---- signatures -------------------------------------------------------------------------------

# Note [Native recording]
# Recording a replayed op cost about ten Python calls: __torch_dispatch__, dispatch, the
# handler, the signature (the op by id, its wse tensors' _lz_meta, its other arguments' parts,
# in argument order; _new_plan keeps the op alive, so no other op gets its id while a plan is
# keyed on it), the lookup, each argument's value, Plan.run, from_node, fresh. All of that is C
# now (csrc/wse_record.c), for the ops whose handler is lowered_op, view_op, alias_op, a
# _replayed_first's or a guards.plan_first's as they are (tensor/dispatch.py `_NATIVE`; the last
# replayed under its op's checked-plan key, Note [Checked plans of index ops] in
# tensor/guards.py), and for a foreach call's elements (tensor/foreach.py _replay). The C takes
# the common cases and calls back into Python for the rest, so each rule has one definition:
# `_part` for an argument other than a wse tensor, an int, None, an ordinary float or a list of
# ints; `_miss` and `_view_miss` for a new signature; Plan.scalar_nodes and Plan.run for a plan's
# scalars and a plan of several nodes; wse_tensor.value and write for a tensor that is not all of
# its storage's value; Storage.pending for a result's storage; `_tensors` for several outputs;
# dispatch.dispatch for every other call, and dispatch.failed for the error of a call replayed
# in C.
signature = _native.signature


def _part(a, tensors, floats):
    t = type(a)
    if t is WseTensor:
        tensors.append(a)
        return a._lz_meta
    if t is float:
        floats.append(a)
        return _float_part(a)
    if t is list or t is tuple:
        for x in a:
            if type(x) is not int:
                return (t, tuple([_part(x, tensors, floats) for x in a]))
        return (t, tuple(a))        # sizes and dims: each int is its own part
    if t is bool:
        return (bool, a)            # True == 1 as a key, but bool + True stays bool, + 1 not
    if t in _ATOMS:
        return a
    if t is torch.Tensor and a.dim() == 0 and a.is_cpu and a.dtype in _WRAPPED:
        v = a.item()                # a Python number wrapped by PyTorch (x * 0.9): a float
        floats.append(v)
        return (_WRAPPED[a.dtype], _float_part(v))
    raise _NotReplayable        # other CPU tensors, complex numbers, symbolic sizes, ...


def _float_part(v: float):
    """A float's part of a signature: its value if a lowering may branch on it, else `float`.
    A value is tagged and spelled out: as bare keys 1.0 == 1 (an int argument, which keeps an
    integer result integral) and -0.0 == 0.0 (x * -0.0 has the other zero's sign), and nan !=
    nan would make a new key at every call."""
    if v in _SPECIAL_FLOATS or v - v != 0.0:
        return (float, repr(v))
    return float


# ---- building a plan --------------------------------------------------------------------------

def _probe(a: float, i: int, probe_set: int) -> float:
    """The value standing in for the i-th float argument `a` while a plan is built."""
    if a in _SPECIAL_FLOATS or a - a != 0.0:
        return a                    # part of the signature: the real value
    return _PROBES[i % 2][probe_set] + i


def _substitute(a, holders: list, probes: list, probe_set: int):
    """The arguments as the lowering would get them (tensor/dispatch.py _node_args), with wse
    tensors replaced by placeholders and floats by probes. Runs inside the scratch trace."""
    t = type(a)
    if t is WseTensor:
        size, _, _, _, dtype = a._lz_meta
        n = Node(Op.PLACEHOLDER, dtype, size, (), len(holders))
        holders.append(n)
        return n
    if t is float:
        v = _probe(a, len(probes), probe_set)
        probes.append(v)
        return v
    if t is torch.Tensor:           # a 0-dim float CPU tensor (a wrapped Python number)
        v = _probe(a.item(), len(probes), probe_set)
        probes.append(v)
        return cast(scalar(v), a.dtype)
    if t is list or t is tuple:
        return t(_substitute(x, holders, probes, probe_set) for x in a)
    return a


def _lower_on_placeholders(fn, spec, args, kwargs, probe_set: int):
    """One run of `fn` on placeholders; returns (outputs, probes, scratch trace)."""
    holders, probes = [], []
    saved = state._current
    scratch = state._current = state.Trace()
    state.building_plan = True
    try:
        pargs = _substitute(args, holders, probes, probe_set)
        pkw = {k: _substitute(v, holders, probes, probe_set) for k, v in kwargs.items()}
        out = fn(spec, *pargs, **pkw)
    finally:
        state._current = saved
        state.building_plan = False
    if scratch.inputs or len(scratch.live):
        raise _NotReplayable        # the lowering uploaded or wrote data
    return out, probes, scratch


def _linearise(out, n_inputs: int, probes: list, scalars: list):
    """Outputs built on placeholders -> (consts, recipes, out refs, comparable form)."""
    outs = [out] if isinstance(out, Node) else list(out)
    if not all(o is None or isinstance(o, Node) for o in outs):
        raise _NotReplayable
    order = toposort([o for o in outs if o is not None])
    live = set()                    # ids of nodes that depend on placeholders or scalars
    for n in order:
        if n.op in (Op.PLACEHOLDER, Op.SCALAR) or any(id(s) in live for s in n.src):
            live.add(id(n))
    consts, ref = [], {}
    for n in order:
        if n.op is Op.PLACEHOLDER:
            ref[id(n)] = n.arg
    for n in order:                 # constant subgraphs used by live nodes: shared objects
        if id(n) in live:
            for s in n.src:
                if id(s) not in live and id(s) not in ref:
                    ref[id(s)] = n_inputs + len(consts)
                    consts.append(s)
    for o in outs:
        if o is not None and id(o) not in live and id(o) not in ref:
            ref[id(o)] = n_inputs + len(consts)
            consts.append(o)
    base = n_inputs + len(consts)
    recipes = []
    for n in order:
        if id(n) not in live or n.op is Op.PLACEHOLDER:
            continue
        if n.op is Op.SCALAR:
            arg = _scalar_source(scalars[n.arg], probes)
            recipes.append((Op.SCALAR, n.dtype, (), None, arg))
        else:
            recipes.append((n.op, n.dtype, n.shape, tuple([ref[id(s)] for s in n.src]), n.arg))
        ref[id(n)] = base + len(recipes) - 1
    out_refs = ref[id(out)] if isinstance(out, Node) else \
        tuple([None if o is None else ref[id(o)] for o in outs])
    return consts, recipes, out_refs, (tuple(c.key for c in consts), tuple(recipes), out_refs)


def _scalar_source(v: float, probes: list):
    """Where a runtime scalar's value comes from: a float argument (its probe) or a constant
    (special float arguments are in the signature, so they are constants of the plan)."""
    hits = [j for j, p in enumerate(probes) if p == v and p not in _SPECIAL_FLOATS]
    if len(hits) > 1:
        raise _NotReplayable        # ambiguous; cannot happen with distinct probes
    return ("arg", hits[0]) if hits else ("const", v)


def build(lowered, fn, args, kwargs, n_inputs: int) -> Plan:
    """Plan of lowering rule `fn` of op `lowered`: lowered twice with different probes, kept
    if both runs agree (Note [Replay plans])."""
    spec = infer(lowered, args, kwargs)
    if uncompiled((spec, args)):
        raise _NotReplayable
    if dtypes.has_rule(lowered):
        dtypes.check(lowered, args, kwargs)     # Note [Checked plans]
    return _plan_of(fn, spec, args, kwargs, n_inputs)


def _plan_of(fn, spec, args, kwargs, n_inputs: int) -> Plan:
    forms = []
    for probe_set in (0, 1):
        out, probes, scratch = _lower_on_placeholders(fn, spec, args, kwargs, probe_set)
        forms.append(_linearise(out, n_inputs, probes, scratch.scalars))
    if forms[0][3] != forms[1][3]:
        raise _NotReplayable        # the graph depends on a float argument's value
    consts, recipes, out_refs, _ = forms[0]
    return Plan(consts, recipes, out_refs, n_inputs)


# ---- entry points (called by the handlers in tensor/dispatch.py) ------------------------------

def _lookup(func, args, kwargs, make):
    """(plan, tensors, floats) for this call, or None when it must be recorded the general way.
    `make(tensors)` builds a new plan or raises; with `make` None a call without one gets
    None."""
    tensors, floats = [], []
    try:
        key = signature(func, args, kwargs, tensors, floats)
        plan = _PLANS[key]
    except _NotReplayable:
        return None
    except KeyError:
        if make is None:
            return None
        plan = _new_plan(key, func, make, tensors)
    except TypeError:               # an unhashable argument
        return None
    if plan is None:
        return None
    return plan, tensors, floats


def _new_plan(key, func, make, tensors):
    KEPT_OPS[id(func)] = func       # signature keys by id(func)
    plan = None
    if func not in _VALUE_SENSITIVE and not any(t.dtype.is_complex for t in tensors):
        try:
            plan = make(tensors)
        except Exception:           # noqa: BLE001 - the general path decides what happens
            plan = None
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = plan
    metrics.count("replay_plans" if plan is not None else "replay_refused")
    return plan


def _replay(func, args, kwargs, make):
    """The output node(s) of this call's plan (`make(tensors)` builds a new one), or None when
    it must be recorded the general way."""
    found = _lookup(func, args, kwargs, make)
    if found is None:
        return None
    plan, tensors, floats = found
    return plan.run([value(t) for t in tensors], floats)


def run_rule(rule, args):
    """The output node(s) of `rule(None, *args)`, a function of its arguments' metadata that is
    no aten op's lowering (guards.py's index checks), through a plan keyed by the function
    itself; None when it must run the general way. The plan's inputs are `args`' wse tensors
    only, so what it makes depends on nothing else."""
    return _replay(rule, args, {}, lambda ts: _plan_of(rule, None, args, {}, len(ts)))


class _Checked:
    """The key under which op `func`'s plans with its index checks are kept (Note [Checked
    plans of index ops] in tensor/guards.py), apart from func's own."""

    __slots__ = ("func",)

    def __init__(self, func):
        self.func = func


_CHECKED: dict = {}         # op -> its _Checked key (kept alive: signatures key by id)


def checked_key(func):
    """The key of func's checked plans, or None if it can have none. C replays a
    guards.plan_first handler's calls under it (tensor/dispatch.py `_NATIVE`)."""
    key = _CHECKED.get(func)
    if key is None and func not in _VALUE_SENSITIVE and func in LOWERINGS:
        key = _CHECKED[func] = _Checked(func)
    return key


def run_checked(func, specs, check, args, kwargs, new: bool = True):
    """func's new wse tensor(s) from the plan of its index checks and its lowering together,
    or None (general path). `specs(args, kwargs)`: the checks, (position, size, check id, low,
    allowed, wrap), raising for a call the CPU refuses; `check(node, size, cid, low, allowed,
    wrap)`: one check made on a node; `new`: a call without a plan gets one made."""
    key = checked_key(func)
    if key is None:
        return None

    def make(tensors):
        made, lower = specs(args, kwargs), LOWERINGS[func]

        def lowering(spec, *a, **kw):
            for pos, size, cid, low, allowed, wrap in made:
                if type(a[pos]) is Node:        # a wse tensor's placeholder
                    a = a[:pos] + (check(a[pos], size, cid, low, allowed, wrap),) + a[pos + 1:]
            return lower(spec, *a, **kw)
        return build(func, lowering, args, kwargs, len(tensors))
    out = _replay(key, args, kwargs, make if new else None)
    return None if out is None else _tensors(out)


def element_plan(func, fn, positions, args, kwargs):
    """(plan, tensors, floats) that run_inplace (`fn` the functional variant written back at
    `positions`) or, with `fn` None, run_lowered would replay for this call; or None."""
    if fn is None:
        return _lookup(func, args, kwargs,
                       lambda ts: build(func, LOWERINGS[func], args, kwargs, len(ts)))
    return _lookup(func, args, kwargs,
                   lambda ts: _inplace_plan(fn, positions, args, kwargs, ts))


# run_lowered(func, args, kwargs): a functional op through its plan, its new wse tensor(s), or
# None (general path); `_miss` builds a new signature's plan. In C (Note [Native recording]).
def _miss(key, func, args, kwargs, tensors):
    return _new_plan(key, func, lambda ts: build(func, LOWERINGS[func], args, kwargs, len(ts)),
                     tensors)


def _tensors(out):
    if type(out) is tuple:
        return tuple([None if o is None else from_node(o) for o in out])
    return from_node(out)


# Note [Checked plans]
# An op with a dtype rule (tensor/dtypes.py: mm, addmm, layer_norm) ran its check before every
# call, a fifth of an addmm's recording. But a plan is built only after that check passed (in
# `build`, whichever path builds it), and a rule that reads dtypes alone gives one verdict for
# every call of a signature, which holds every argument's dtype. So such an op's call replays
# an existing plan unchecked (`replayed`, tensor/dispatch.py _replayed_first), and only a call
# without one is checked, then recorded the usual way.
def replayed(func, args, kwargs):
    """func's new wse tensor(s) from the plan its signature already has, or None (no plan yet,
    or none can be made): run_lowered without building."""
    out = _replay(func, args, kwargs, None)
    return None if out is None else _tensors(out)


def run_nodes(func, fn, args, kwargs):
    """The output nodes of `fn`, a lowering rule for `func` written for this call's arguments
    (a handler's own, as batch norm's that also writes its running statistics), through a plan;
    None when it must run the general way."""
    out = _replay(func, args, kwargs, lambda ts: build(func, fn, args, kwargs, len(ts)))
    return out if out is None or type(out) is tuple else (out,)


def run_inplace(func, fn, positions, args, kwargs):
    """In-place op `func` through the plan of its functional variant `fn`: the written tensor,
    or None (general path)."""
    out = _replay(func, args, kwargs, lambda ts: _inplace_plan(fn, positions, args, kwargs, ts))
    if out is None:
        return None
    if type(out) is not tuple:
        out = (out,)
    for p, o in zip(positions, out):
        write(args[p], o)
    return args[positions[0]]


def _inplace_plan(fn, positions, args, kwargs, tensors) -> Plan:
    lower = LOWERINGS.get(fn)
    if lower is None or not positions or positions[-1] >= len(args):
        raise _NotReplayable
    plan = build(fn, lower, args, kwargs, len(tensors))    # checks fn's dtype rule
    out = plan.macro.out
    outs = [out] if type(out) is int else list(out)
    for p, ref in zip(positions, outs):
        target = args[p]
        if type(target) is not WseTensor or ref is None or may_overlap_itself(target):
            raise _NotReplayable    # (the general path raises where the CPU does)
        shape, dtype = _ref_meta(plan, ref, tensors)
        if shape != tuple(target.shape) or not torch.can_cast(dtype, target.dtype):
            raise _NotReplayable    # a result of another shape or kind: the general path decides
    return plan


def overlaps_itself(t: WseTensor) -> bool:
    """Whether elements of `t` share memory (an expanded tensor): the CPU's
    has_internal_overlap, which refuses most writes to it (not to one without elements)."""
    size, stride = t._lz_meta[:2]
    return 0 in stride and 0 not in size and any(s == 0 and n > 1 for n, s in zip(size, stride))


def may_overlap_itself(t: WseTensor) -> bool:
    """Whether two elements of `t` may be one memory location: an expanded tensor, or a view
    whose strides interleave (unfold with a step under its size). The CPU's has_internal_overlap
    finds the second 'too hard' and writes it element by element; a view whose dims, by
    increasing stride, each step past all the smaller ones is known not to overlap."""
    size, stride = t._lz_meta[:2]
    if _steps_past(zip(reversed(size), reversed(stride))):     # row-major: the usual view
        return False
    return 0 not in size and not _steps_past(sorted(zip(size, stride), key=lambda d: d[1]))


def _steps_past(dims) -> bool:
    """Whether each (size, stride) of `dims` steps past the offsets all earlier ones reach."""
    span = 0
    for n, st in dims:
        if n != 1:
            if st <= span:
                return False
            span += st * (n - 1)
    return True


def _ref_meta(plan, ref, tensors):
    """(shape, dtype) of the plan's value `ref`."""
    n_in, consts = len(tensors), plan.macro.consts
    if ref < n_in:
        return tuple(tensors[ref].shape), tensors[ref].dtype
    if ref < n_in + len(consts):
        return consts[ref - n_in].shape, consts[ref - n_in].dtype
    recipe = plan.macro.recipes[ref - n_in - len(consts)]
    return recipe[2], recipe[1]


# run_view(func, args, kwargs, base): a view op's new wse tensors over `base`'s storage from its
# output specs (the plan of a view: WseTensor.view_meta's, a list of them for several views),
# or None (general path); `_view_miss` makes a new signature's specs. In C, as run_lowered.
def _view_miss(key, func, args, kwargs, base, tensors):
    return _new_plan(key, func, lambda _: _view_specs(func, args, kwargs, base), tensors)


def _view_specs(func, args, kwargs, base):
    try:
        spec = infer(func, args, kwargs)
    except Exception:               # noqa: BLE001 - the general path raises or falls back
        return None
    specs = spec if isinstance(spec, tuple) else (spec,)
    if not specs or any(s is None or s.dtype != base.dtype for s in specs):
        return None
    made = [WseTensor.view_meta(base._st, s.shape, s.stride, s.offset) for s in specs]
    return made if isinstance(spec, tuple) else made[0]


def clear() -> None:
    _PLANS.clear()


_native.setup_replay(_PLANS, _part, _miss, _tensors, _NotReplayable, _view_miss)
run_lowered, run_view = _native.run_lowered, _native.run_view
