"""Backward ops derived from the autograd of their forward's decomposition.

Note [Backward by vjp]
Most nn backward kernels (upsample_*_backward, replication_pad*_backward, the shrink and margin
loss backwards, grid_sampler_2d_backward) are the vector-Jacobian product of a forward that
torch._decomp already decomposes into lowered ops (gathers, elementwise, reductions). Instead of
a hand-written lowering per backward op, the backward is traced once per (op, argument
metadata): make_fx runs torch.autograd.grad over the decomposed forward on meta tensors, which
records the forward's gathers transposed into scatter-adds (index_put with accumulate) and so
on. The recorded aten graph, with its dead forward-only part removed, is cached and replayed on
wse tensors through the ordinary dispatch, so every op in it is lowered, decomposed, or handled
as usual (the trace itself decomposes nothing: views stay views, lowered ops stay whole). A
backward that cannot be traced runs on the CPU, as it did before.

A rule maps a backward op's bound arguments to its forward: a function of the differentiated
inputs and the other tensor inputs (both graph inputs; scalars are baked into the trace and
so are part of the cache key), the incoming gradients, and which input gradients are wanted.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch._decomp import decomposition_table
from torch.fx.experimental.proxy_tensor import make_fx

from ..trace import meta
from .dispatch import SPECIAL, handler_for
from .fallback import fallback_op
from .wse_tensor import WSE

aten = torch.ops.aten

# The dispatch-key state of ordinary Python code. Inside __torch_dispatch__ the autograd keys
# are excluded, so tracing torch.autograd.grad there needs this state restored.
_TLS = (torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set())


@dataclass
class Vjp:
    forward: object          # callable(*primals, *others) -> tensor or tuple of tensors
    primals: list            # differentiated inputs: tensors, or shapes if that is all known
    others: list             # other tensor inputs (None allowed)
    grads: list              # incoming gradients, one per differentiated forward output
    outputs: tuple = (0,)    # which forward outputs the gradients belong to
    mask: tuple = None       # which input gradients are returned (None: all)
    single: bool = True      # the backward op returns one tensor, not a tuple


_RULES: dict = {}
_GRAPHS: dict = {}
DECOMPOSITIONS: dict = {}     # forwards torch._decomp lacks, written for wse (tensor/pool.py ...)


def decomposition(*ops):
    """Register `fn` as the wse implementation of `ops`, run on wse tensors (each op it calls
    is dispatched as usual), and as the forward the vjp rules of their backwards trace."""
    def deco(fn):
        for op in ops:
            DECOMPOSITIONS[op] = fn
            SPECIAL[op] = _decomposed
        return fn
    return deco


def _decomposed(func, args, kwargs):
    meta.validate(func, args, kwargs)       # the arguments' errors (a pad over half a window)
    return DECOMPOSITIONS[func](*args, **kwargs)


def rule(*ops):
    def deco(fn):
        for op in ops:
            _RULES[op] = fn
            SPECIAL[op] = _backward
        return fn
    return deco


def _bind(func, args, kwargs) -> dict:
    """The op's arguments by schema name, defaults filled in."""
    out = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        else:
            out[a.name] = a.default_value if a.has_default_value() else None
    return out


def _sig(v):
    if isinstance(v, torch.Tensor):
        return ("T", tuple(v.shape), v.dtype)
    if isinstance(v, (list, tuple)):
        return tuple(_sig(x) for x in v)
    return v


def _backward(func, args, kwargs):
    a = _bind(func, args, kwargs)
    vjp = _RULES[func](a)
    key = (func, tuple((k, _sig(v)) for k, v in a.items()))
    try:
        gm = _GRAPHS.get(key)
        if gm is None:
            gm = _GRAPHS[key] = _trace(vjp)
        outs = _replay(gm, vjp)
    except _Untraceable as e:
        return fallback_op(func, args, kwargs, why=f"backward not traceable: {e}")
    return outs[0] if vjp.single else tuple(outs)


class _Untraceable(Exception):
    pass


def _meta(v, dtype=torch.float32):
    """A meta stand-in: of a tensor, or of an input given by its shape (of `dtype`)."""
    if v is None:
        return None
    if isinstance(v, torch.Tensor):
        shape, dtype = v.shape, v.dtype
    else:
        shape = v
    return torch.empty(tuple(shape), dtype=dtype, device="meta")


def _trace(vjp: Vjp) -> torch.fx.GraphModule:
    n_g, n_p = len(vjp.grads), len(vjp.primals)
    mask = vjp.mask or (True,) * n_p

    def f(*flat):
        grads, primals, others = flat[:n_g], flat[n_g:n_g + n_p], flat[n_g + n_p:]
        primals = [p.detach().requires_grad_() if p is not None else None for p in primals]
        with torch.enable_grad():
            out = vjp.forward(*primals, *others)
        outs = out if isinstance(out, (list, tuple)) else (out,)
        wanted = [p for p, m in zip(primals, mask) if m]
        got = torch.autograd.grad([outs[i] for i in vjp.outputs], wanted, grads,
                                  allow_unused=True)
        # An input the forward uses only through a zero-gradient path (grid_sampler's nearest
        # mode rounds the grid) gets None from autograd; the backward kernels return zeros.
        got = iter([g if g is not None else torch.zeros_like(p) for g, p in zip(got, wanted)])
        return [(next(got) if m else None) for m in mask]

    dtype = vjp.grads[0].dtype
    example = [_meta(v, dtype) for v in (*vjp.grads, *vjp.primals, *vjp.others)]
    try:
        with torch._C._ForceDispatchKeyGuard(*_TLS):
            gm = make_fx(f)(*example)
    except Exception as e:          # noqa: BLE001 - any tracing failure means: use the CPU
        raise _Untraceable(f"{type(e).__name__}: {e}") from e
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def _replay(gm: torch.fx.GraphModule, vjp: Vjp) -> list:
    """Run the traced graph on wse tensors, op by op, through the wse dispatch."""
    inputs = [*vjp.grads, *vjp.primals, *vjp.others]
    env = {}
    placeholders = iter(inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            v = next(placeholders)
            if not isinstance(v, torch.Tensor) and v is not None and node.users:
                raise _Untraceable("the backward reads an input only its shape is known of")
            # as traced: on contiguous stand-ins (`_meta`), whose graph may view what a
            # strided input cannot (a bf16 conv1d's backward of a transposed input failed)
            env[node] = v.contiguous() if isinstance(v, torch.Tensor) else v
        elif node.op == "call_function":
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: env[n])
            if kwargs.get("device") is not None:
                kwargs = dict(kwargs, device=WSE)
            env[node] = _run(node.target, args, kwargs)
        elif node.op == "output":
            return list(torch.fx.node.map_arg(node.args[0], lambda n: env[n]))
        else:
            raise _Untraceable(f"graph node {node.op} {node.target}")
    raise AssertionError("traced graph without output")


def _run(func, args, kwargs):
    """One op of the replay: its wse handler directly (not through dispatch's backward-error
    deferral: a failure here must fail the whole backward op)."""
    if not isinstance(func, torch._ops.OpOverload):
        return func(*args, **kwargs)            # operator.getitem on tuple outputs
    return handler_for(func)(func, args, kwargs)


# ---- rules ------------------------------------------------------------------------------------

def _decomp(op):
    return DECOMPOSITIONS.get(op) or decomposition_table[op]


def _upsample(fwd):
    """upsample_*_backward(grad_output, output_size, input_size, *scales) is the vjp of
    upsample_*(input, output_size, *scales) in its input, of which only the shape is known."""
    def make(a):
        rest = [v for k, v in a.items() if k not in ("grad_output", "output_size", "input_size")]
        return Vjp(lambda x: _decomp(fwd)(x, a["output_size"], *rest), [a["input_size"]], [],
                   [a["grad_output"]])
    return make


for _name in ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
              "_upsample_nearest_exact1d", "_upsample_nearest_exact2d",
              "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
              "upsample_bicubic2d", "upsample_trilinear3d"):
    rule(getattr(aten, _name + "_backward").default)(_upsample(getattr(aten, _name).default))


def _unary_backward(fwd, *params):
    """op_backward(grad, self, *params) is the vjp of op(self, *params)."""
    def make(a):
        grad = next(iter(a.values()))       # named grad_output or grad_out
        return Vjp(lambda x: _decomp(fwd)(x, *[a[p] for p in params]), [a["self"]], [], [grad])
    return make


rule(aten.softshrink_backward.default)(_unary_backward(aten.softshrink.default, "lambd"))
rule(aten.hardshrink_backward.default)(_unary_backward(aten.hardshrink.default, "lambd"))
for _n in (1, 2, 3):
    rule(getattr(aten, f"replication_pad{_n}d_backward").default)(
        _unary_backward(getattr(aten, f"replication_pad{_n}d").default, "padding"))


@rule(aten._adaptive_avg_pool2d_backward.default)
def _adaptive_avg_pool2d(a):
    size = tuple(a["grad_output"].shape[-2:])
    return Vjp(lambda x: _decomp(aten._adaptive_avg_pool2d.default)(x, size), [a["self"]], [],
               [a["grad_output"]])


@decomposition(aten.multi_margin_loss.default)
def _multi_margin_loss_forward(x, target, p=1, margin=1, weight=None, reduction=1):
    """torch._decomp's, with ATen's shape: of an unbatched input, reduction='none' gives one
    loss of shape () (the decomposition's [1] failed backward against the CPU's gradient)."""
    out = decomposition_table[aten.multi_margin_loss.default](x, target, p, margin, weight,
                                                             reduction)
    return out.reshape(()) if x.dim() == 1 and reduction == 0 else out


@rule(aten.multi_margin_loss_backward.default)
def _multi_margin_loss(a):
    def fwd(x, target, weight):
        return _multi_margin_loss_forward(x, target, a["p"], a["margin"], weight, a["reduction"])
    return Vjp(fwd, [a["self"]], [a["target"], a["weight"]], [a["grad_output"]])


@rule(aten.multilabel_margin_loss_backward.default)
def _multilabel_margin_loss(a):
    def fwd(x, target):
        return _decomp(aten.multilabel_margin_loss_forward.default)(x, target, a["reduction"])
    return Vjp(fwd, [a["self"]], [a["target"]], [a["grad_output"]])


@rule(aten.grid_sampler_2d_backward.default)
def _grid_sampler_2d(a):
    def fwd(x, grid):
        return _decomp(aten.grid_sampler_2d.default)(x, grid, a["interpolation_mode"],
                                                      a["padding_mode"], a["align_corners"])
    return Vjp(fwd, [a["input"], a["grid"]], [], [a["grad_output"]],
               mask=tuple(a["output_mask"]), single=False)


@rule(aten._weight_norm_interface_backward.default)
def _weight_norm(a):
    """nn.utils.parametrizations.weight_norm's backward (it fell back to the CPU: a sync in the
    middle of every training step)."""
    def fwd(v, g):
        return _decomp(aten._weight_norm_interface.default)(v, g, a["dim"])
    return Vjp(fwd, [a["saved_v"], a["saved_g"]], [], [a["grad_w"]], single=False)


@decomposition(aten.multilabel_margin_loss_forward.default)
def _multilabel_margin_loss_forward(x, target, reduction):
    """torch._decomp's formula with its bug fixed: target slots after a row's first -1 were
    gathered as input[0] and counted in the loss (a wrong loss whenever a row ends early)."""
    x2, t2 = torch.atleast_2d(x), torch.atleast_2d(target)
    c = x2.shape[1]
    pos = torch.arange(c, device=t2.device)
    live = pos < torch.where(t2 == -1, pos, c).amin(-1, keepdim=True)    # the row's targets
    is_target = (pos == torch.where(live, t2, -1).unsqueeze(-1)).any(1)
    # margin of each target y (dim 1) over each class j (dim 2), kept for non-target j where
    # positive (the kernel's test: no gradient at exactly 0, which clamp_min would pass)
    z = (1 - x2.gather(1, torch.where(live, t2, 0)).unsqueeze(-1) + x2.unsqueeze(1)) / c
    z = torch.where(live.unsqueeze(-1) & ~is_target.unsqueeze(1) & (z > 0), z, 0)
    rows = z.sum((1, 2))
    loss = rows.mean() if reduction == 1 else rows.sum() if reduction == 2 else \
        rows.reshape(x.shape[:-1])
    return loss, is_target.to(x.dtype).reshape(target.shape)
