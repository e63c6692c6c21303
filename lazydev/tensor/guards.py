"""Index arguments checked as the CPU checks them, on the device (Note [Device-side checks] in
trace/checks.py).

The kernels wrap a negative index and fail on one past either end, which is Python's indexing
(x[i], take, put, index_fill). gather, scatter, index_select, index_add, embedding and the
losses' targets take no negative index: there the CPU raises, and without a check a -1 read or
wrote the last row. Each op below gets its index argument through a device-side check of the
range the CPU allows, raising the CPU's exception with its message; its handler then runs as
before. In-place and out= variants reach these through their functional op. Probabilities
(binary_cross_entropy's input, bernoulli's p) are checked to lie in [0, 1] the same way, and
embedding_bag's offsets to start at 0 and end within the indices.
"""
from __future__ import annotations

import math

import torch

from ..trace import checks, meta
from ..trace.build import const, ew
from ..trace.ir import Node, Op
from . import replay
from .wse_tensor import WseTensor, from_node, value

aten = torch.ops.aten


def _checked(t, size: int, cid: int, low: int = 0, allowed=None, wrap: bool = False):
    """`t` checked to lie in [low, size) (or equal `allowed`); `wrap`: Python's negative
    indices, made non-negative after the check."""
    if not isinstance(t, WseTensor) or not _ranged(t.dtype):
        return t          # a CPU index is the handler's to refuse
    # Through a replay plan: built the general way, a check made about ten nodes each step
    # (nll_loss_forward's first call in a trace took 80-90 µs to record, 40-60 through a plan).
    node = replay.run_rule(_range_check, (t, size, cid, low, allowed, wrap))
    if node is None:
        node = _range_check(None, value(t), size, cid, low, allowed, wrap)
    return from_node(node)


def _ranged(dtype) -> bool:
    """Whether an index of `dtype` is range-checked: a mask (bool) or a float has no range."""
    return dtype is not torch.bool and not dtype.is_floating_point


def _range_check(spec, index, size: int, cid: int, low: int, allowed, wrap: bool):
    """`index` (a node) checked to lie in [low, size) or equal `allowed`. A wrapping op's
    decomposition may pass its index on to one that takes no negative index (index_fill's, to
    index_copy): `wrap` gives it the index wrapped. `spec` is unused (replay.run_rule's)."""
    node = checks.in_range(index, size, cid, low, allowed)
    return checks.wrapped(node, size) if wrap else node


def in_unit_interval(t, cid: int):
    """`t` (floating), failing where it is not in [0, 1] (NaN included)."""
    if not isinstance(t, WseTensor) or not t.dtype.is_floating_point:
        return t
    x = value(t)
    ok = ew(Op.AND, torch.bool, x.shape, checks.compare(x, Op.GE, 0), checks.compare(x, Op.LE, 1))
    bad = ew(Op.NOT, torch.bool, x.shape, ok)
    return from_node(checks.checked(x, bad, const(0, torch.int64), cid))


def _probabilities(*checked: tuple):
    """(..., input at pos, ...) that must lie in [0, 1], for each (pos, message) of `checked`."""
    def rule(args, kwargs):
        for pos, template in checked:
            cid = checks.message(RuntimeError, template)
            args = _replace(args, pos, in_unit_interval(args[pos], cid))
        return args, kwargs
    return rule


def _replace(args: tuple, pos: int, new) -> tuple:
    return args[:pos] + (new,) + args[pos + 1:]


# Note [Checked plans of index ops]
# An op whose only guard is a range check of index arguments (a loss's targets, embedding's
# indices, gather's or take's index) was recorded as the check's plan, a new checked tensor,
# then the op's own plan, with the rule's Python around them each call: nll_loss_forward took 33 µs
# against an add's 12 (105 inside an MLP step). Such a rule is written as `specs(args,
# kwargs)`, the checks to make as (position, size, check id, low, allowed, wrap), every one a
# function of the call's signature (shapes, dtypes, ints: the ignore_index); `_index_rule` makes
# the rule the general path runs from it. Where the op's handler is its lowering (dispatch.py
# lowered_op), the call is replayed instead from one plan of the checks and the lowering
# together (replay.run_checked), keyed apart from the op's own plans, which have no checks; a
# call whose plan exists is replayed in C under that key (Note [Native recording]).
def _index_rule(specs):
    """The rule making `specs(args, kwargs)`'s checks with `_checked`; its `specs` are kept for
    the op's checked plan (Note [Checked plans of index ops])."""
    def rule(args, kwargs):
        for pos, size, cid, low, allowed, wrap in specs(args, kwargs):
            args = _replace(args, pos, _checked(args[pos], size, cid, low, allowed, wrap))
        return args, kwargs
    rule.specs = specs
    return rule


def check_node(index, size: int, cid: int, low: int, allowed, wrap: bool):
    """`index` (a node) checked as `_checked` checks a tensor: a checked plan's check."""
    if not _ranged(index.dtype):
        return index
    return _range_check(None, index, size, cid, low, allowed, wrap)


def plan_first(checked, specs):
    """`checked` (a lowering guarded by index checks, behind func's dtype rule), with a call
    that replays its checked plan not checked again (dispatch.py `_replayed_first` does the
    same for an op's own plans: Note [Checked plans] in tensor/replay.py)."""
    def run(func, args, kwargs):
        out = replay.run_checked(func, specs, check_node, args, kwargs, new=False)
        return checked(func, args, kwargs) if out is None else out
    run.unchecked = checked.unchecked
    return run


def _along_dim(kind: type, template: str, wraps: bool = False):
    """(self, dim, index, ...): the index against self's size along dim. `template` may name
    {dim} and {size}; {{value}} is the index that failed."""
    def specs(args, kwargs):
        x, dim = args[0], args[1]
        d = dim % x.dim() if x.dim() else 0
        size = x.shape[d] if x.dim() else 1
        cid = checks.message(kind, template.format(dim=d, size=size))
        return ((2, size, cid, -size if wraps else 0, None, wraps),)
    return _index_rule(specs)


def _index_add(args, kwargs):
    """index_add: the index's range, and (the CPU's check, not the meta kernel's) a source of
    self's rank: a row of source was added to every indexed row, broadcast."""
    x, source = args[0], args[3]
    if isinstance(source, torch.Tensor) and source.dim() != x.dim():
        error = meta.cpu_error(aten.index_add.default, args, kwargs, expand_large=False)
        if error is not None:
            raise error
    return _INDEX_ADD(args, kwargs)


def _index_select(args, kwargs):
    """index_select: the CPU's kernel along dim 1 has its own message, and one for an axis of
    size 0 (of a 0-element x, wse selected nothing and raised nothing)."""
    x = args[0]
    if x.dim() and x.shape[args[1] % x.dim()] == 0 and args[2].numel():
        raise RuntimeError("index_select(): self indexing axis dim should be positive")
    return (_SELECT_DIM1 if x.dim() > 1 and args[1] % x.dim() == 1 else _SELECT)(args, kwargs)


@_index_rule
def _flat(args, kwargs):
    """take / put: a flat index into self, Python's wrap allowed."""
    n = args[0].numel()
    cid = checks.message(IndexError, "out of range: tried to access index {value} on a tensor "
                         f"of {n} elements.")
    return ((1, n, cid, -n, None, True),)


def _bag(args, kwargs):
    """_embedding_bag(weight, indices, offsets, ...): indices in [0, rows); offsets start at 0
    and end within the indices."""
    n = args[0].shape[0]
    cid = checks.message(RuntimeError, "Index {index} of input takes value {value} which is "
                         f"not in the valid range [0, {n})")
    offsets = args[2]
    if isinstance(offsets, WseTensor) and offsets.numel() and args[1].dim() == 1:
        o = value(offsets)
        kind = "LongTensor" if o.dtype is torch.int64 else "IntTensor"
        first, last = checks.element(o, 0), checks.element(o, o.numel - 1)
        checks.keep(checks.compare(first, Op.NE, 0), first, checks.message(
            RuntimeError, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
            f"has to start from position 0. However, got {{value}}\n[ torch.{kind}{{{{}}}} ]"))
        length = args[1].numel()
        checks.keep(checks.compare(last, Op.GT, length), last, checks.message(
            RuntimeError, f"offsets[-1] can not be greater than input's length {length} but got "
            "offsets[-1] of {value}"))
        if o.numel > 1:     # the CPU's kernel fails an internal check ("Expected i < index_size")
            pairs = (o.numel - 1,)
            later, earlier = (Node(Op.AS_STRIDED, o.dtype, pairs, (o,), ((1,), k)) for k in (1, 0))
            checks.keep(ew(Op.LT, torch.bool, pairs, later, earlier), later, checks.message(
                RuntimeError, "offsets of embedding_bag must not decrease, but an offset of "
                "{value} follows a larger one"))
    return _replace(args, 1, _checked(args[1], n, cid)), kwargs


@_index_rule
def _embedding(args, kwargs):
    """embedding(weight, indices, ...): indices in [0, rows). Its lowering (trace/lower_nn.py)
    gathers rows unchecked, and the decomposition a weight that is not 2-d falls back to would
    index with weight[indices], which wraps -1."""
    return ((1, args[0].shape[0], checks.message(IndexError, _SELF), 0, None, False),)


@_index_rule
def _unpool(args, kwargs):
    """max_unpool2d/3d(self, indices, output_size, ...): positions in one output plane."""
    size = tuple(args[2])
    cid = checks.message(RuntimeError, "Found an invalid max index: {value} (output volumes are "
                         f"of size {'x'.join(map(str, size))})")
    return ((1, math.prod(size), cid, 0, None, False),)


def _targets(pos: int, kind: type, template: str, ignore_at=None, low: int = 0,
             weights: str | None = None):
    """Losses (..., self at pos - 1, target at pos, ...): class indices in [low, C), except
    the ignore_index at position `ignore_at`. `weights`: the message for a class weight (at
    pos + 1) not of C elements, a static check (torch._decomp's asserts it)."""
    def specs(args, kwargs):
        x = args[pos - 1]
        classes = x.shape[1] if x.dim() > 1 else x.shape[0] if x.dim() else 1
        weight = args[pos + 1] if weights and len(args) > pos + 1 else None
        if isinstance(weight, torch.Tensor) and weight.numel() != classes:
            raise RuntimeError(weights.format(classes=classes, shape=list(weight.shape)))
        allowed = None if ignore_at is None else args[ignore_at]
        return ((pos, classes, checks.message(kind, template), low, allowed, False),)
    return _index_rule(specs)


_UNIT = "all elements of input should be between 0 and 1"
_MULTILABEL = "argument #2 'target' is out of range"
_BOUNDS = "index {{value}} is out of bounds for dimension {dim} with size {size}"
_SELF = "index out of range in self"
_TARGET = "Target {value} is out of bounds."
_INDEX_ADD = _along_dim(RuntimeError, _BOUNDS)
_SELECT = _along_dim(IndexError, _SELF)
_SELECT_DIM1 = _along_dim(RuntimeError, "INDICES element is out of DATA bounds, id={{value}} "
                          "axis_dim={size}")
_WEIGHT = "weight tensor should be defined either for all or no classes"
_WEIGHT_OF_C = ("weight tensor should be defined either for all {classes} classes or no classes "
                "but got weight tensor of shape: {shape}")

@_index_rule
def _renorm(args, kwargs):
    """embedding_renorm(weight, indices, ...): ATen selects each named row, so an index may be
    negative, as in weight[i]; the embedding after it refuses those."""
    rows = args[0].shape[0]
    cid = checks.message(IndexError, "select(): index {value} out of range for tensor of size "
                         f"{list(args[0].shape)} at dimension 0")
    return ((1, rows, cid, -rows, None, True),)


RULES: dict = {
    **{op: _along_dim(RuntimeError, _BOUNDS)
       for op in (aten.gather.default, aten.scatter.src, aten.scatter.value, aten.scatter.reduce,
                  aten.scatter.value_reduce, aten.scatter_add.default, aten.scatter_reduce.two)},
    aten.index_add.default: _index_add,
    aten.index_copy.default: _along_dim(IndexError, "index_copy_(): " + _BOUNDS),
    aten.index_select.default: _index_select,
    aten.index_reduce.default: _along_dim(IndexError, _SELF),
    aten.index_fill.int_Scalar: _along_dim(IndexError, _BOUNDS, wraps=True),
    aten.index_fill.int_Tensor: _along_dim(IndexError, _BOUNDS, wraps=True),
    aten.take.default: _flat,
    aten.put.default: _flat,
    aten.embedding.default: _embedding,
    aten.embedding_renorm.default: _renorm,
    aten._embedding_bag.default: _bag,
    aten._embedding_bag_forward_only.default: _bag,
    aten.max_unpool2d.default: _unpool,
    aten.max_unpool3d.default: _unpool,
    aten.nll_loss_forward.default: _targets(1, IndexError, _TARGET, 4, weights=_WEIGHT_OF_C),
    aten.nll_loss2d_forward.default: _targets(1, IndexError, _TARGET, 4, weights=_WEIGHT),
    aten.nll_loss_backward.default: _targets(2, IndexError, _TARGET, 5, weights=_WEIGHT),
    aten.nll_loss2d_backward.default: _targets(2, IndexError, _TARGET, 5, weights=_WEIGHT),
    # -1 ends a row's targets; the CPU checks those after it too
    aten.multilabel_margin_loss_forward.default: _targets(1, RuntimeError, _MULTILABEL, low=-1),
    aten.multilabel_margin_loss_backward.default: _targets(2, RuntimeError, _MULTILABEL, low=-1),
    # the forward checks the target too (the CPU's kernel, per element after the input)
    aten.binary_cross_entropy.default: _probabilities(
        (0, _UNIT), (1, "all elements of target should be between 0 and 1")),
    aten.binary_cross_entropy_backward.default: _probabilities((1, _UNIT)),
    aten.multi_margin_loss.default: _targets(1, RuntimeError, "target out of range"),
    aten.multi_margin_loss_backward.default: _targets(2, RuntimeError, "target out of range"),
}


def assert_async(func, args, kwargs):
    """torch._assert_async(cond[, msg]): a device-side check of cond, not a read of it."""
    t = args[0]
    if t.numel() != 1:
        which = "no values" if t.numel() == 0 else "more than one value"
        raise RuntimeError(f"Boolean value of Tensor with {which} is ambiguous")
    if func is aten._assert_async.msg:
        text = (args[1] or "Assertion is failed").replace("{", "{{").replace("}", "}}")
        cid = checks.message(RuntimeError, text)
    else:
        cid = checks.message(RuntimeError,
                             "Expected Tensor with single nonzero value, but got zero")
    node = value(t)
    checks.keep(checks.compare(node, Op.EQ, 0), const(0, torch.int64), cid)


def register(lib) -> None:
    # F.one_hot is a composite that checks nothing for PrivateUse1 (it counted on a scatter's
    # device assert, and no longer scatters): its kernel before autograd checks the classes.
    lib.impl("one_hot", _one_hot, "AutogradPrivateUse1")


def _one_hot(x, num_classes=-1):
    if isinstance(x, WseTensor) and x.dtype is not torch.int64:     # (the CPU's static check)
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if isinstance(x, WseTensor) and x.numel():
        node = checks.bounded(value(x), Op.LT, 0, checks.message(
            RuntimeError, "Class values must be non-negative."))
        if num_classes > 0:
            node = checks.bounded(node, Op.GE, num_classes, checks.message(
                RuntimeError, "Class values must be smaller than num_classes."))
        return _call(lambda t: aten.one_hot.default.decompose(t, num_classes),
                     (from_node(node),), (x,))
    return aten.one_hot.default.decompose(x, num_classes)


def _call(fn, checked: tuple, given: tuple):
    """fn(*checked), `given` with some indices checked. If it raises, the checked copies are
    dropped: alive in the traceback, they would be computed, and fail, at the next sync."""
    try:
        return fn(*checked)
    except BaseException as e:
        for new, old in zip(checked, given):
            if new is not old:
                new._st.discard(f"{type(e).__name__}: {e}")
        raise


def guarded(func, handler, lowered: bool = False):
    """`handler`, with func's index argument checked first if func has a rule; `lowered`:
    the handler is func's lowering, and a rule of index checks is replayed with it from one
    plan where it can be (Note [Checked plans of index ops])."""
    rule = RULES.get(func)
    if rule is None:
        return handler
    specs = getattr(rule, "specs", None) if lowered else None

    def run(func, args, kwargs):
        if specs is not None:
            out = replay.run_checked(func, specs, check_node, args, kwargs)
            if out is not None:
                return out
        checked, kwargs = rule(tuple(args), kwargs)
        return _call(lambda *a: handler(func, a, kwargs), checked, args)
    run.specs = specs
    return run
