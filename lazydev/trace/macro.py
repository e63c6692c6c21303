"""Macros: an op's lowering as a list of node recipes, replayed when the op is recorded or, for
a larger lowering, recorded as one CALL node per output and expanded when a graph is compiled.

Note [Macro nodes]
A replay plan (tensor/replay.py, Note [Replay plans]) makes one Node per recipe each time its op
is recorded: eighteen for a layer norm, thirty-five for a batch norm, at about a microsecond and
a half each. But a graph is compiled once and recorded every step, so for a lowering of
MACRO_MIN nodes or more only what the cache lookup needs is made at record time: one CALL node
per output, whose sources are the call's input values and its runtime scalars and whose argument
is (macro, output index). Its key is structural like every node's (Note [IR keys]): the macro
stands for its recipes, the sources for everything else. On a cache miss the compiler's first
step (`expand_calls`) replaces each CALL by the nodes the recipes make from its sources, the
same nodes the replay would have made at record time, so the compiled program is the same.
This is Lazy Tensor Core's design (an IR node per aten op, lowered on a miss) for the ops whose
lowering is large, without giving up the per-node IR where lowerings are small.
"""
from __future__ import annotations

from operator import itemgetter

from .ir import Node, Op, _arg_id, local_key, toposort

MACRO_MIN = 3       # node recipes from which a plan is recorded as CALL nodes
_MAX_SHARED = 20000  # macros kept by structure (as replay's plans: a bound, not a working size)
_CALL = Op.CALL      # read once: `Op.X` costs a tenth of a microsecond (trace/state.py)


def _no_sources(vals) -> tuple:
    return ()


def _step(op, dtype, shape, refs, arg) -> tuple:
    """What `apply` needs of a recipe, precomputed: its sources as one C-level itemgetter call
    (`one`: the getter returns the single source itself) and the node's local key."""
    if refs is None:                # a runtime scalar
        return op, dtype, shape, None, False, arg, None
    get = itemgetter(*refs) if refs else _no_sources
    return op, dtype, shape, get, len(refs) == 1, arg, local_key(op, dtype, shape, arg)


# Note [Shared macros]
# A CALL node's key holds its macro object, and a plan, and so its macro, is made per signature,
# which holds each tensor argument's strides and offset. So a window of device data at a new
# offset each step (softmax(data[i * b:(i + 1) * b]), Note [Windows]) made a new macro of the
# same recipes, a new graph key, and a compilation per step. The recipes do not depend on
# strides or offsets (a lowering sees placeholders of a shape and dtype), so plans of the same
# structure share one macro.
_SHARED: dict = {}


def shared_macro(consts, recipes, out, n_inputs: int) -> "Macro":
    """The Macro of these recipes, one per structure (Note [Shared macros])."""
    # A runtime scalar's recipe says where its value comes from, which the plan reads and the
    # macro does not (it takes the scalar nodes it is given): x * step of a half x made a plan
    # per int (ints are in signatures), each with the scalar's value as its source, and so a
    # macro, a graph key and a compilation per step.
    key = (tuple([c.key for c in consts]), n_inputs, out,
           tuple([(op, dtype, shape, refs, None if arg is None or refs is None else _arg_id(arg))
                  for op, dtype, shape, refs, arg in recipes]))
    macro = _SHARED.get(key)
    if macro is None:
        if len(_SHARED) >= _MAX_SHARED:
            _SHARED.clear()
        macro = _SHARED[key] = Macro(consts, recipes, out, n_inputs)
    return macro


class Macro:
    """Recipes (op, dtype, shape, source refs, arg) in topological order. A ref indexes the
    value list `inputs + consts + recipe results`; a SCALAR recipe (refs None) takes the next
    runtime scalar node given to `apply`. `out`: the ref of the result, or a tuple of refs
    (None for an output that is not a tensor)."""

    __slots__ = ("consts", "recipes", "out", "n_inputs", "steps", "n_nodes", "_calls")

    def __init__(self, consts, recipes, out, n_inputs: int):
        self.consts, self.recipes, self.out, self.n_inputs = consts, recipes, out, n_inputs
        self.steps = [_step(*r) for r in recipes]
        self.n_nodes = sum(r[3] is not None for r in recipes)
        refs = [out] if type(out) is int else list(out)
        self._calls = [self._call_spec(i, r) for i, r in enumerate(refs)]

    def _call_spec(self, i: int, ref):
        """How output i is recorded as a call: None (not a tensor), ("in", k), ("const", node)
        or ("call", dtype, shape, local key of its CALL node)."""
        if ref is None:
            return None
        if ref < self.n_inputs:
            return ("in", ref)
        if ref < self.n_inputs + len(self.consts):
            return ("const", self.consts[ref - self.n_inputs])
        _, dtype, shape, _, _ = self.recipes[ref - self.n_inputs - len(self.consts)]
        return ("call", dtype, shape, local_key(Op.CALL, dtype, shape, (self, i)))

    def apply(self, inputs, scalars):
        """The macro's results on `inputs`, making its nodes (the value list's output refs)."""
        vals = list(inputs) + self.consts
        make = Node.make
        k = 0
        for op, dtype, shape, get, one, arg, local in self.steps:
            if get is None:
                vals.append(scalars[k])
                k += 1
            else:
                vals.append(make(op, dtype, shape, (get(vals),) if one else get(vals), arg, local))
        out = self.out
        if type(out) is int:
            return vals[out]
        return tuple([None if i is None else vals[i] for i in out])

    def call(self, inputs, scalars):
        """The macro's results on `inputs` as CALL nodes (Note [Macro nodes])."""
        src = (*inputs, *scalars)
        outs = []
        for i, spec in enumerate(self._calls):
            if spec is None:
                outs.append(None)
            elif spec[0] == "in":
                outs.append(inputs[spec[1]])
            elif spec[0] == "const":
                outs.append(spec[1])
            else:
                outs.append(Node.make(_CALL, spec[1], spec[2], src, (self, i), spec[3]))
        return outs[0] if type(self.out) is int else tuple(outs)

    def expand(self, src) -> list:
        """The results of a call whose sources are `src` (inputs, then scalars), as a list."""
        out = self.apply(src[:self.n_inputs], src[self.n_inputs:])
        return [out] if type(self.out) is int else list(out)


def expand_calls(outputs: list) -> list:
    """`outputs` with every CALL node replaced by its macro's nodes (the compiler's first step,
    Note [Macro nodes]). Nodes above a call are rebuilt on the new sources; the outputs of one
    call share one expansion."""
    order = toposort(outputs)
    if not any(n.op is Op.CALL for n in order):
        return outputs
    new: dict = {}
    expansions: dict = {}
    for n in order:
        src = tuple([new.get(id(s), s) for s in n.src])
        if n.op is Op.CALL:
            macro, i = n.arg
            key = (id(macro), tuple(map(id, src)))
            outs = expansions.get(key)
            if outs is None:
                outs = expansions[key] = macro.expand(src)
            new[id(n)] = outs[i]
        elif any(a is not b for a, b in zip(src, n.src)):
            new[id(n)] = Node(n.op, n.dtype, n.shape, src, n.arg)
    return [new.get(id(o), o) for o in outputs]
