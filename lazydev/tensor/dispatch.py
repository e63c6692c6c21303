"""__torch_dispatch__: every aten op on wse tensors comes here and is recorded, not run.

How an op is handled is decided once per OpOverload (`_choose`) and cached in `_HANDLERS`:
  special handlers (transfers, item, RNG, factories) -> views (generic, via meta strides) ->
  in-place (functional variant + write back) -> lowering table (trace/lower.py) ->
  torch._decomp decomposition -> CompositeImplicit decomposition -> CPU fallback.
"""
from __future__ import annotations

import warnings

import _lazydev_node as _native
import torch
from torch._decomp import decomposition_table
from torch.utils import _pytree as pytree

from .. import log, metrics
from ..trace import build, meta, state
from ..trace.build import Unsupported
from ..trace.ir import Node
from ..trace.lower import LOWERINGS
from ..trace.lower_linalg import DECOMPOSITIONS
from . import dtypes, foreach, guards, overlap, replay
from .device import check_format, check_index
from .fallback import _mutated_positions, _out_names, _to_cpu_args, _upload, fallback_op
from .overlap import arg_at
from .wse_tensor import (ComplexValue, WseTensor, bitcasts, check_in_bounds, from_node, restride,
                          value, write, write_tensor)

aten = torch.ops.aten
# id(OpOverload) -> its handler, keyed by id as the replay signature is (replay.KEPT_OPS, which
# keeps every op given a handler alive).
_HANDLERS: dict = {}
_NATIVE: dict = {}      # handler -> how C replays its ops' calls (Note [Native recording])
SPECIAL: dict = {}      # filled by tensor/special.py


class DeviceMismatch(RuntimeError):
    @classmethod
    def of_cpu(cls, what: str = "the CPU tensor", device="cpu") -> "DeviceMismatch":
        """PyTorch's message for a tensor of another device (the CPU's, with the way out)
        among wse ones."""
        hint = f" (move {what} with .to('wse'))" if str(device) == "cpu" else ""
        return cls("Expected all tensors to be on the same device, but found at least two "
                   f"devices, wse:0 and {device}!{hint}")


def dispatch(func, args, kwargs, handler=None):
    """`handler` is given by sparse tensors (tensor/sparse.py), which run every op on the CPU."""
    if handler is None:
        handler = _HANDLERS.get(id(func))
        if handler is None:
            handler = handler_for(func)
    state._current.nodes += 1
    if _deferred and torch._C._current_graph_task_id() == -1:
        _raise_deferred()
    try:
        return handler(func, args, kwargs)
    except Exception as e:          # noqa: BLE001 - inside backward: deferred, see the note
        return failed(e, func, args, kwargs)


def failed(e: Exception, func, args, kwargs):
    """Raise `e`, which recording this call raised, as the user's error (the CPU's, if it raises
    one), or inside a backward pass defer it (Note [Errors inside backward]). Also for a call
    replayed in C (Note [Native recording]), which is why it raises `e` again first: the CPU's
    error then has lazydev's as its context on both paths."""
    try:
        raise e
    except Exception:               # noqa: BLE001 - as above
        if isinstance(e, _PYTHON_ERRORS) and not isinstance(e, ComplexValue):
            e = meta.users_error(func, args, kwargs, e)
        if not _DEFER[0] or torch._C._current_graph_task_id() == -1:
            raise e
        return _in_backward(e, func, args, kwargs)


def handler_for(func):
    """func's handler, chosen once (`_choose`) and cached by id (`_HANDLERS`)."""
    return _HANDLERS.get(id(func)) or replay.kept(_HANDLERS, func, _choose)


# Errors of lazydev's own Python (a lowering meeting an output_size it did not expect): what
# the CPU raises for the call is the user's error, if it raises; if not, a lazydev bug, as is.
_PYTHON_ERRORS = (AttributeError, TypeError, ValueError, KeyError, IndexError,
                  ZeroDivisionError)


# Note [Errors inside backward]
# With PyTorch's Python device guard, an exception raised here while the autograd engine runs
# a C++ backward formula for a wse node aborts the process: the guard calls into Python while
# the error is still set (torch/csrc/acc/Module.cpp, PythonDeviceGuard::exchangeStream is
# noexcept). So with that guard an error inside a backward pass is deferred: the op returns
# zeros of the right shape, and the error is raised by the next wse op outside the backward
# pass (reading a gradient, an optimizer step). lazydev's own guard (Note [The device's C++
# side] in compile/hooks.py) never calls Python there, so with it (whenever it could be built)
# the error is raised where it happened and leaves backward() as on the CPU. Whether the op
# runs inside a backward pass is asked only when it raised (or an error waits): the question
# costs a tenth of a microsecond, every op.
_DEFER = [True]
_deferred: list = []


def raise_errors_in_backward() -> None:
    """lazydev's device guard is installed: errors need not wait for the backward pass to end."""
    _DEFER[0] = False


class BackwardError(RuntimeError):
    pass


def _in_backward(e: Exception, func, args, kwargs):
    try:
        out = _placeholder(func, args, kwargs)
    except Exception:               # noqa: BLE001 - no shape to stand in with: raise as it is
        raise e from None
    _deferred.append(e)
    log.emit("fallback", f"{func} failed in a backward pass: {type(e).__name__}: {e}")
    return out


def _placeholder(func, args, kwargs):
    positions = _mutated_positions(func)
    if positions:
        return args[positions[0]]
    from .device import empty_tensor

    def make(s):
        if s is None:
            raise TypeError("non-tensor output")
        return empty_tensor(s.shape, s.dtype)
    spec = meta.infer(func, args, kwargs)
    return type(spec)(make(s) for s in spec) if isinstance(spec, tuple) else make(spec)


def _raise_deferred():
    first = _deferred[0]
    _deferred.clear()
    raise BackwardError(f"an op failed during the backward pass: {type(first).__name__}: "
                        f"{first}") from first


def _choose(func):
    chosen = _choose_handler(func)
    if func.name().startswith("aten::_foreach_") and _mutated_positions(func):
        chosen = _bumping_versions(chosen)
    inner = guards.guarded(func, chosen, lowered=chosen is lowered_op)
    handler = dtypes.checked(func, inner)
    replays = getattr(SPECIAL.get(func), "replays", False)     # Note [Replayed convolutions]
    if inner is lowered_op and dtypes.by_dtypes(func) or replays and (
            dtypes.by_dtypes(func) or not dtypes.has_rule(func)):
        handler = _replayed_first(handler)
    elif getattr(inner, "specs", None) is not None:
        if dtypes.by_dtypes(func):
            handler = guards.plan_first(handler, inner.specs)
        key = replay.checked_key(func)
        if key is not None and (handler is not inner or not dtypes.has_rule(func)):
            _NATIVE[handler] = key      # replayed in C under it (Note [Native recording])
    if func in _AS_STRIDED:
        handler = _in_bounds(handler)
    names = {a.name for a in func._schema.arguments}
    if "layout" in names:
        handler = _strided_only(handler)
    if "device" in names:
        handler = _one_device(handler, func)
    if func in _OVERWRITES:
        handler = _revives_lost(handler)
    written = [i for i in _mutated_positions(func) if func._schema.arguments[i].type.kind()
               == "TensorType"]
    if written and torch.Tag.inplace_view not in func.tags and func not in overlap.MAY_OVERLAP \
            and not func.name().startswith("aten::_foreach_"):
        partial = torch.Tag.pointwise in func.tags or func is aten.copy_.default
        handler = overlap.refused(handler, written, partial, _to_cpu_args)
    handler = overlap.no_overlap(func, handler, _to_cpu_args)
    return overlap.on_shared_memory(func, handler, _to_cpu_args)


_AS_STRIDED = frozenset({aten.as_strided.default, aten.as_strided_.default})


def _in_bounds(handler):
    def run(func, args, kwargs):
        t = args[0]
        if type(t) is WseTensor:
            size, stride = (arg_at(func, i, args, kwargs) for i in (1, 2))
            check_in_bounds(t, size, stride, arg_at(func, 3, args, kwargs))
        return handler(func, args, kwargs)
    return run


def _replayed_first(checked):
    """`checked` (lowered_op behind func's dtype rule, or a special handler that `replays`),
    with a call that replays a plan not checked again (Note [Checked plans] in
    tensor/replay.py)."""
    def run(func, args, kwargs):
        out = replay.replayed(func, args, kwargs)
        return checked(func, args, kwargs) if out is None else out
    run.unchecked = getattr(checked, "unchecked", checked)
    _NATIVE[run] = _native.REPLAYED     # replayed in C, not built (Note [Native recording])
    return run


# In-place ops that write every element without reading one: they may overwrite a tensor whose
# value was lost (made in a step that failed), as copy_ may.
_OVERWRITES = frozenset(
    {aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default, aten.uniform_.default,
     aten.normal_.default, aten.random_.default, getattr(aten.random_, "from"), aten.random_.to,
     aten.bernoulli_.float, aten.bernoulli_.Tensor, aten.exponential_.default,
     aten.geometric_.default, aten.cauchy_.default, aten.log_normal_.default})


def _revives_lost(handler):
    def run(func, args, kwargs):
        t = args[0] if args else kwargs.get("self")
        if isinstance(t, WseTensor) and t._lz_full and t._st.lost() and t.dtype is t._st.dtype:
            write(t, build.full(0, t.dtype, tuple(t.shape)))     # a value for the op to replace
        return handler(func, args, kwargs)
    return run


def _one_device(handler, op):
    """An op that takes a device (new_empty, zeros_like, _to_copy): wse:1 is refused, not
    quietly made wse:0 (device.py check_index); a result asked for on another device is made
    there (_made_elsewhere; _to_copy's handler moves values itself). Which kind `op` is is
    decided here, once, not per call (_to_copy runs for every upload)."""
    reads = op in _READING_FACTORIES
    movable = reads or op in _VALUE_FREE

    def run(func, args, kwargs):
        device = kwargs.get("device")
        if device is None and reads:
            device = torch.get_default_device()
        if movable and device is not None and torch.device(device).type != "wse":
            return _made_elsewhere(func, args, dict(kwargs, device=device))
        check_index(device)
        if "memory_format" in kwargs and isinstance(args[0], torch.Tensor):
            check_format(kwargs["memory_format"], args[0].shape, "like")
        return handler(func, args, kwargs)
    return run


def _overloads(*names) -> frozenset:
    return frozenset(getattr(getattr(aten, n), o) for n in names
                     for o in getattr(aten, n).overloads())


# Factories whose ends may be 0-dim tensors: ATen reads their values (.item(), a sync) and
# makes the result on the device asked for, the default device when none is.
_READING_FACTORIES = frozenset(getattr(getattr(aten, name), overload)
                               for name in ("linspace", "logspace")
                               for overload in ("Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor"))
# Ops that read only their tensor arguments' sizes, strides and dtypes. (Others with a device
# argument keep their handlers: _to_copy moves values, _resize_output writes its argument.)
_VALUE_FREE = _overloads("empty_like", "full_like", "ones_like", "zeros_like", "rand_like",
                         "randn_like", "randint_like", "new_empty", "new_empty_strided",
                         "new_full", "new_ones", "new_zeros")


def _made_elsewhere(func, args, kwargs):
    """func's result on a device other than wse (zeros_like(x, device="cpu")): computed from
    CPU stand-ins of the wse tensors (their sizes, strides and dtype: a *_like op reads no
    values, so nothing syncs), or from their values for a factory that reads them."""
    if func in _READING_FACTORIES:
        return func(*_to_cpu_args(args), **kwargs)

    def stand_in(t):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
    return func(*pytree.tree_map_only(WseTensor, stand_in, args), **kwargs)


def _strided_only(handler):
    """An op that can make a tensor of any layout (zeros_like(x, layout=torch.sparse_coo)): a
    sparse one is made on the CPU and kept there (tensor/sparse.py); the handlers make strided
    tensors only."""
    def run(func, args, kwargs):
        layout = kwargs.get("layout")
        if layout is not None and layout != torch.strided:
            return fallback_op(func, args, kwargs, why="sparse tensors are host-resident")
        return handler(func, args, kwargs)
    return run


def _choose_handler(func):
    if func in SPECIAL:
        return _real_only(SPECIAL[func])
    if func.name().startswith("aten::_foreach_") and foreach.layout(func) is not None:
        return foreach_op
    if torch.Tag.inplace_view in func.tags:
        return inplace_view_op
    if _has_composite(func):
        return composite_op           # e.g. aten.to/reshape: may or may not alias; decompose
    if func in _ALIASES:
        return alias_op
    if func.is_view or func is _UNSAFE_VIEW:
        return view_op
    schema = func._schema
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        if _out_names(func):       # out=, or max's (max=, max_values=) from out=(v, i)
            return out_op if out_functional(func) is not None else fallback_op
        if functional_variant(func) is not None:
            return inplace_op
        return fallback_op
    if func in LOWERINGS:
        return lowered_op
    if func.name().startswith("aten::_foreach_"):
        return foreach_op
    if func in decomposition_table or func in DECOMPOSITIONS:
        return decomposed_op
    if _custom_impl(func) is not None:
        return custom_op
    return fallback_op


def _real_only(handler):
    """A special handler that reads the value of a complex tensor (ComplexValue) runs the op on
    the CPU instead: handlers are written for real values."""
    def run(func, args, kwargs):
        try:
            return handler(func, args, kwargs)
        except ComplexValue:
            return fallback_op(func, args, kwargs, why=meta.NOT_COMPILED)
    return run


def _custom_impl(func):
    """The Python function of a torch.library.custom_op (torch.nn's chunked
    linear_cross_entropy is one), or None. Not for prims: their Python implementation calls
    the aten op that decomposes into them."""
    from torch._library.custom_ops import _maybe_get_opdef
    if func.namespace in ("aten", "prims"):
        return None
    opdef = _maybe_get_opdef(func)
    return getattr(opdef, "_init_fn", None)


def custom_op(func, args, kwargs):
    """A custom op runs its Python implementation on wse tensors: each op it calls is recorded."""
    return _custom_impl(func)(*args, **kwargs)


def _has_composite(func) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")


# ---- arguments --------------------------------------------------------------------------------

class _ComplexArg(Exception):
    """A tensor argument of a dtype not compiled (complex, float8, ...): the op runs on the
    CPU."""


_COMPILED = meta.COMPILED


def _node_args(a, allow_cpu=False):
    """wse tensors -> value nodes; 0-dim CPU tensors -> runtime scalars; lists recursively.
    Raises _ComplexArg for tensors of a dtype not compiled (checked here, in the one walk over
    the arguments)."""
    if isinstance(a, WseTensor):
        if a.dtype not in _COMPILED or a._st.dtype not in _COMPILED:     # (x.view(uint8))
            raise _ComplexArg
        return value(a)
    if isinstance(a, torch.Tensor):
        if a.device.type != "cpu":          # (a meta tensor: the message named the CPU)
            raise DeviceMismatch.of_cpu(device=a.device)
        if a.dtype not in _COMPILED:
            raise _ComplexArg
        if a.dim() == 0 and a.dtype.is_floating_point:
            return build.cast(build.scalar(a.item()), a.dtype)
        if a.dim() == 0 or allow_cpu:
            if a.dim() == 0 and a.dtype != torch.int64:
                return build.const(a.item(), a.dtype)
            return value(_upload(a))
        raise DeviceMismatch.of_cpu(device=a.device)
    if isinstance(a, (list, tuple)):
        return type(a)(_node_args(x, allow_cpu) for x in a)
    return a


def _wrap(out):
    if isinstance(out, Node):
        return from_node(out)
    if isinstance(out, (list, tuple)):
        return type(out)(_wrap(o) for o in out)
    return out


# ---- handlers ---------------------------------------------------------------------------------

def lowered_op(func, args, kwargs):
    try:
        out = replay.run_lowered(func, args, kwargs)
    except ComplexValue:        # a plan's argument viewing values not compiled (x.view(uint8))
        return fallback_op(func, args, kwargs, why=meta.NOT_COMPILED)
    if out is not None:
        return out
    try:
        spec = meta.infer(func, args, kwargs)
    except meta.MetaUnsupported as e:
        return fallback_op(func, args, kwargs, why=f"no meta kernel: {e}")
    allow_cpu = func in _CPU_INDEX_OK
    if allow_cpu:
        _check_index_devices(func, args, kwargs)
    try:
        if meta.uncompiled(spec):
            raise _ComplexArg
        nargs = _node_args(args, allow_cpu)
        nkwargs = {k: _node_args(v, allow_cpu) for k, v in kwargs.items()} if kwargs else {}
        out = LOWERINGS[func](spec, *nargs, **nkwargs)
    except _ComplexArg:
        # run outside the handler: an error of the CPU's kernel is its own, not chained to
        # this internal signal
        out = _ComplexArg
    except Unsupported as e:
        if func in decomposition_table:
            return decomposed_op(func, args, kwargs)
        return fallback_op(func, args, kwargs, why=str(e))
    if out is _ComplexArg:
        return fallback_op(func, args, kwargs, why=meta.NOT_COMPILED)
    return _wrap(out)


def _check_index_devices(func, args, kwargs):
    """CPU indices into a wse tensor are allowed, as with CUDA; not wse indices into a CPU
    tensor, nor values on the CPU but a 0-dim one (CUDA's TensorIterator refuses them: values
    that required grad were accepted and broke backward, at an autograd INTERNAL ASSERT)."""
    if not isinstance(args[0], WseTensor):
        raise RuntimeError(f"indices should be either on cpu or on the same device as the "
                           f"indexed tensor ({args[0].device})")
    values = args[2] if len(args) > 2 else kwargs.get("values")
    if func in _INDEX_PUTS and not isinstance(values, WseTensor) and values.dim() > 0:
        raise DeviceMismatch.of_cpu("the values")


_INDEX_PUTS = frozenset({aten.index_put.default, aten._unsafe_index_put.default})
_CPU_INDEX_OK = frozenset({aten.index.Tensor, aten._unsafe_index.Tensor, aten.index_put.default,
                           aten._unsafe_index_put.default})


def decomposed_op(func, args, kwargs):
    if meta.uncompiled((args, kwargs.values())) or _complex_out(func, args, kwargs):
        return fallback_op(func, args, kwargs, why=meta.NOT_COMPILED)
    own = DECOMPOSITIONS.get(func)
    if own is not None:
        try:
            return own(*args, **kwargs)
        except Unsupported as e:
            return fallback_op(func, args, kwargs, why=str(e))
    syncs = metrics.syncs()
    try:
        out = decomposition_table[func](*args, **kwargs)
    except Exception as e:
        if metrics.syncs() != syncs:    # it read values: the error may be theirs, not the call's
            raise
        # The decomposition's ops (amin and amax for aminmax) or its asserts speak for it,
        # unless the CPU accepts the call (addcmul of ints by value=0.5): then the CPU runs it.
        # Not when it has CPU tensors with wse ones: all on the CPU, the call may be fine (an
        # index_copy_ of a CPU source ran there, and a source that required grad then broke
        # backward at an autograd INTERNAL ASSERT)
        if _on_cpu_too(args, kwargs):
            raise
        error = meta.cpu_error(func, args, kwargs, expand_large=False)
        if error is not None:
            raise error from None
        return fallback_op(func, args, kwargs, why=f"the decomposition refuses it: {e}")
    if out is NotImplemented:       # the decomposition does not cover these arguments
        return fallback_op(func, args, kwargs, why="decomposition returned NotImplemented")
    return out


def _on_cpu_too(args, kwargs) -> bool:
    """Whether the arguments have a CPU tensor that is not 0-dim (a 0-dim one is a number)."""
    return any(isinstance(a, torch.Tensor) and not isinstance(a, WseTensor) and a.dim() > 0
               for a in pytree.tree_leaves((args, kwargs)))


def _complex_out(func, args, kwargs) -> bool:
    # (meta.validate raises what a decomposition might not check: reflection_pad1d's pad
    # wider than the input, which it would read outside of)
    return meta.uncompiled(meta.validate(func, args, kwargs))


def composite_op(func, args, kwargs):
    out = func.decompose(*args, **kwargs)
    if out is NotImplemented:
        return fallback_op(func, args, kwargs, why="decomposition returned NotImplemented")
    return out


_ALIASES = frozenset({aten.detach.default, aten.alias.default})
# Not a view to autograd, but an alias of its input as on the CPU: kron's out= writes through
# one of the out= tensor (as a new value, kron(a, b, out=o) left o unwritten).
_UNSAFE_VIEW = aten._unsafe_view.default


def alias_op(func, args, kwargs):
    """detach/alias: a view with the tensor's own size, stride and offset, made directly (autograd
    detaches every gradient it stores and every tensor it saves: two or more per parameter per
    training step; a detach from Python took 6.2 us through the general view path, 4.8 here)."""
    t = args[0]
    if _inference_mode() is not t.is_inference():
        return _view_as_base(func, args, kwargs)
    if type(t) is not WseTensor or t._lz_meta[4] is not t._st.dtype:    # complex, bitcast
        return view_op(func, args, kwargs)
    size, stride, offset, _, _ = meta = t._lz_meta
    return WseTensor._view(t._st, size, stride, offset, meta, t._lz_full)


# Note [Views in inference mode]
# A wse view is a new wrapper tensor, and one made inside torch.inference_mode() is an inference
# tensor; PyTorch then links it to its base as a view, which fails for a base made outside the
# block ("Cannot set version_counter for inference tensor"): x[1:], x.view(...), cache[:, t] = v
# of a mask or KV cache made before the block raised where the CPU gives a normal tensor. So
# views of normal tensors are made with inference mode off, as normal tensors; and views of
# inference tensors with it on, as inference tensors, as the CPU's are (made outside the block,
# they were normal: writes through c[0] of an inference c were allowed, and a c[0] saved for
# backward then changed under it, giving a wrong gradient).
_inference_mode = torch.is_inference_mode_enabled


def _view_as_base(func, args, kwargs):
    with torch.inference_mode(args[0].is_inference()):
        return view_op(func, args, kwargs) if func not in _ALIASES else alias_op(
            func, args, kwargs)


def view_op(func, args, kwargs):
    if isinstance(args[0], torch.Tensor) and _inference_mode() is not args[0].is_inference():
        return _view_as_base(func, args, kwargs)
    base = args[0] if args and type(args[0]) is WseTensor else None
    # Not complex: its dtype is its storage's (`base.dtype.is_complex` costs 0.2 us).
    if base is not None and base._lz_meta[4] is base._st.dtype:
        out = replay.run_view(func, args, kwargs, base)
        if out is not None:
            return out
    try:
        spec = meta.infer(func, args, kwargs)
    except meta.MetaUnsupported as e:
        return fallback_op(func, args, kwargs, why=str(e))
    base = next(a for a in args if isinstance(a, WseTensor))
    if func in _VALUE_VIEWS:
        return fallback_op(func, args, kwargs, why="a conjugate or negative view")
    real = base._st.dtype

    def make(s):
        stored = s.dtype.to_real() if s.dtype.is_complex else s.dtype
        if s.dtype != base.dtype and stored != real and not bitcasts(s.dtype, real):
            raise NotImplementedError(
                f"{func}: a wse view with a dtype of another element size or kind ({s.dtype} of "
                f"{base.dtype}) is not supported; use .to(dtype) to convert instead")
        # view_as_real/view_as_complex alias too: complex storages hold real pairs.
        return WseTensor(base._st, s.shape, s.stride, s.offset, dtype=s.dtype)
    if isinstance(spec, tuple):
        return type(spec)(make(s) for s in spec)
    return make(spec)


# Views that change the values read (PyTorch's conjugate and negative bits): wse values have no
# such bits, so these run on the CPU (which resolves them) and return a copy.
_VALUE_VIEWS = frozenset({aten._conj.default, aten._neg_view.default})


def inplace_view_op(func, args, kwargs):
    spec = meta.infer(func, args, kwargs)
    t = args[0]
    restride(t, spec.shape, spec.stride, spec.offset)
    return t


_functional_cache: dict = {}


def functional_variant(func):
    """add_.Tensor -> add.Tensor; None when there is none."""
    if func in _functional_cache:
        return _functional_cache[func]
    name = func._schema.name.split("::")[1]
    found = None
    if name.endswith("_"):
        packet = getattr(aten, name[:-1], None)
        if packet is not None:
            # Match by argument types, not overload name: pow_.Scalar(Tensor, Scalar) is
            # pow.Tensor_Scalar, while pow.Scalar is (Scalar, Tensor).
            want = _arg_types(func)
            names = [func._overloadname] + [o for o in packet.overloads()
                                            if o != func._overloadname]
            found = next((getattr(packet, o) for o in names if hasattr(packet, o)
                          and _arg_types(getattr(packet, o)) == want), None)
    _functional_cache[func] = found
    return found


def out_functional(func):
    """mm.out -> mm.default, div.out -> div.Tensor: the overload taking the same arguments
    without the out= ones; None when there is none."""
    key = ("out", func)
    if key in _functional_cache:
        return _functional_cache[key]
    outs = set(_out_names(func))
    want = [str(a.type) for a in func._schema.arguments if a.name not in outs]
    packet = getattr(aten, func._schema.name.split("::")[1], None)
    found = None
    if packet is not None and func.namespace == "aten":
        found = next((getattr(packet, o) for o in packet.overloads()
                      if getattr(packet, o) is not func and _arg_types(getattr(packet, o)) == want
                      and not _mutated_positions(getattr(packet, o))), None)
    _functional_cache[key] = found
    return found


def out_op(func, args, kwargs):
    """op.out(..., out=t): the functional op, its result written into t. An out= tensor of
    another shape (which PyTorch would resize) goes to the CPU path instead."""
    names = _out_names(func)
    outs = [kwargs.get(n) for n in names]
    if any(isinstance(o, torch.Tensor) and not isinstance(o, WseTensor) for o in outs):
        raise DeviceMismatch.of_cpu("the out= tensor")  # (it was written by a CPU fallback)
    kwargs_in = {k: v for k, v in kwargs.items() if k not in names}
    if func in _OUT_DTYPE_SUMS and kwargs_in.get("dtype") is None \
            and isinstance(outs[0], torch.Tensor):
        kwargs_in["dtype"] = outs[0].dtype      # ATen sums in the out= tensor's dtype
    result = dispatch(out_functional(func), args, kwargs_in)
    results = result if isinstance(result, (list, tuple)) else (result,)
    if len(results) != len(outs) or any(
            not isinstance(o, WseTensor) or not isinstance(r, WseTensor)
            for o, r in zip(outs, results)):
        return fallback_op(func, args, kwargs, why="out= of another kind than its result")
    for o, r in zip(outs, results):
        if tuple(o.shape) != tuple(r.shape):
            _resize_output(o, tuple(r.shape))
    if any(o.dtype is not r.dtype for o, r in zip(outs, results)):
        # Some out= kernels cast (add), others refuse another dtype (gather, amax): the CPU's
        # verdict, on its own zero tensors (an expanded out= would refuse to be written).
        dtypes.ask(func, args, kwargs, tuple(t.dtype for t in outs + list(results)), False)
    for o, r in zip(outs, results):
        _write_back(o, r)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _resize_output(out, shape) -> None:
    """ATen's resize_output: an out= tensor of another shape is resized in place, over its own
    storage (a view stays a view of its base), with a warning unless it was empty. It ran as a
    CPU fallback, whose copy back gave the tensor a storage of its own: the base of a view, and
    other views of it, never saw the result."""
    if out.numel():
        warnings.warn(
            f"An output with one or more elements was resized since it had shape "
            f"{list(out.shape)}, which does not match the required output shape {list(shape)}. "
            "This behavior is deprecated, and in a future PyTorch release outputs will not be "
            "resized unless they have zero elements. You can explicitly reuse an out tensor t "
            "by resizing it, inplace, to zero elements with t.resize_(0).", stacklevel=2)
    SPECIAL[aten.resize_.default](aten.resize_.default, (out, shape), {})


# Sums and products whose out= kernel casts the input to the out= tensor's dtype when no dtype=
# is given: sum of [0.6, 2.5] into a long tensor is 0 + 2 (wse summed 3.1, then truncated).
_OUT_DTYPE_SUMS = frozenset({aten.sum.IntList_out, aten.sum.out, aten.prod.int_out,
                             aten.prod.out, aten.cumsum.out, aten.cumprod.out})


def _arg_types(func) -> list:
    return [str(a.type) for a in func._schema.arguments]


def _inplace_info(func) -> tuple:
    """(functional variant, mutated positions, whether a replay plan may record it). A plan
    runs the functional op's lowering itself: not for one whose index is checked first, nor one
    with a handler of its own (index_put reads a uint8 index as a mask; its lowering would take
    it for positions)."""
    fn = functional_variant(func)
    return fn, _mutated_positions(func), fn not in guards.RULES and fn not in SPECIAL


_INPLACE: dict = {}     # id(func) -> _inplace_info(func); keyed by id as _HANDLERS is


def _inplace(func) -> tuple:
    """func's _inplace_info, made once and cached by id."""
    return _INPLACE.get(id(func)) or replay.kept(_INPLACE, func, _inplace_info)


def inplace_op(func, args, kwargs):
    fn, positions, planned = _INPLACE.get(id(func)) or _inplace(func)   # inline hit: hot path
    if planned:
        out = replay.run_inplace(func, fn, positions, args, kwargs)
        if out is not None:
            return out
    result = dispatch(fn, args, kwargs)
    # A tuple holds one result per mutated argument; anything else (a tensor, or a foreach op's
    # list of tensors) is the result for the first one (rrelu_with_noise_ writes its noise itself).
    results = result if isinstance(result, tuple) else (result,)
    targets = [arg_at(func, pos, args, kwargs) for pos in positions]
    for target, res in zip(targets, results):
        if isinstance(target, WseTensor) and isinstance(res, WseTensor):
            dtypes.check_cast(func, args, kwargs, res.dtype, target.dtype)
    for target, res in zip(targets, results):
        if isinstance(target, WseTensor) and isinstance(res, WseTensor) \
                and tuple(res.shape) != tuple(target.shape):
            if func not in _RESIZES_SELF:
                # Run the op on the CPU with its own semantics (most raise) rather than
                # broadcast into the wrong shape.
                return fallback_op(func, args, kwargs, why="in-place result of another shape")
            SPECIAL[aten.resize_.default](aten.resize_.default, (target, res.shape), {})
    for target, res in zip(targets, results):
        _write_back(target, res)
    return targets[0] if func._schema.returns else None


# In-place ops whose CPU kernel is the out= kernel with self as out: it resizes self to the
# result's shape (addbmm_ of a one-element self) instead of raising as other in-place ops do.
_RESIZES_SELF = frozenset({aten.addbmm_.default})


def _write_back(target, res):
    if isinstance(target, (list, tuple)):
        for t, r in zip(target, res):
            _write_back(t, r)
        return
    if not isinstance(target, WseTensor):
        raise DeviceMismatch(f"cannot write a wse result into a {target.device} tensor in place")
    if isinstance(res, WseTensor):
        write_tensor(target, res)
    else:
        write(target, _node_args(res))


def _bumping_versions(handler):
    """`handler` of an in-place _foreach_ op, then its lists' version counters bumped, as the
    CPU's (which runs X_ per element through the dispatcher) and CUDA's (increment_version) do:
    autograd's check that a saved tensor was not modified sees an optimizer step (or
    clip_grad_norm_'s scaling) between two backwards."""
    def run(func, args, kwargs):
        out = handler(func, args, kwargs)
        torch._C._increment_version([t for pos in _mutated_positions(func)
                                     for t in arg_at(func, pos, args, kwargs)])
        return out
    return run


def foreach_op(func, args, kwargs):
    """_foreach_X(lists...) -> [X(elements...)], recorded per element (tensor/foreach.py; the
    generic path below calls the element op through torch for the overloads it cannot map)."""
    if func._overloadname == "Tensor" and len(args) == 4:
        # addcmul/addcdiv by a tensor of scalars: ATen reads it into a list of numbers
        # (convert_tensor_to_scalar_list), so the call is its ScalarList overload. A tensor that
        # does not fit raises here; dispatch raises the CPU's error instead (meta.users_error).
        if args[3].dim() != 1 or len(args[3]) != len(args[0]):
            raise ValueError(f"{func}: {args[3].shape} scalars for {len(args[0])} tensors")
        return dispatch(func.overloadpacket.ScalarList, (*args[:3], args[3].tolist()), kwargs)
    out = _planned_foreach(func, args, kwargs)
    if out is NotImplemented:
        out = foreach.run(func, args, kwargs, dispatch)
    if out is not NotImplemented:
        return out
    name = func._schema.name.split("::")[1][len("_foreach_"):]
    per = torch.linalg.vector_norm if name == "norm" else getattr(torch, name, None)
    if per is None:
        return fallback_op(func, args, kwargs, why="no per-element op")
    n = len(next(a for a in args if isinstance(a, (list, tuple))))

    def pick(a, i):
        return a[i] if isinstance(a, (list, tuple)) else a
    out = []
    for i in range(n):
        elem_args = [pick(a, i) for a in args]
        elem_kw = {k: pick(v, i) for k, v in kwargs.items()}
        if isinstance(elem_args[-1], torch.Tensor) and elem_args[-1].device.type == "cpu" \
                and elem_args[-1].dim() == 0 and name in ("addcdiv", "addcmul"):
            elem_kw["value"] = elem_args.pop().item()
        out.append(per(*elem_args, **elem_kw))
    return out


def _planned_foreach(func, args, kwargs):
    """func through its foreach plan (tensor/foreach.py, Note [Foreach plans]) when its element
    op is in place or lowered, outside a backward pass and with no deferred error (dispatch's
    per-op checks, made once for the call); else NotImplemented."""
    found = foreach.layout(func)
    if found is None or _deferred or torch._C._current_graph_task_id() != -1:
        return NotImplemented
    elem = found[0]
    handler = handler_for(elem)
    handler = getattr(handler, "unchecked", handler)
    if handler is inplace_op:
        fn, positions, _ = _inplace(elem)
    elif handler is lowered_op:
        fn, positions = None, None
    else:
        return NotImplemented

    def element_plan(e, a, kw):
        return replay.element_plan(e, fn, positions, a, kw)
    return foreach.run_planned(func, found, args, kwargs, element_plan, positions)


# Note [Native recording] (tensor/replay.py): WseTensor.__torch_dispatch__ is C, and replays
# the plan of an op whose handler (in `_HANDLERS`) is lowered_op, view_op, alias_op, a
# _replayed_first's or a guards.plan_first's, unwrapped, itself: `_NATIVE` says how (for the
# last, the key of its op's checked plans). Any other call, an op without a
# plan (built only for the first two), and one in inference mode (a view) or with errors
# waiting (Note [Errors inside backward]) come to `dispatch`; the error of a call replayed
# there goes to `failed`, as every op's.
_NATIVE.update({lowered_op: _native.LOWERED, view_op: _native.VIEW, alias_op: _native.ALIAS})
_native.setup_dispatch(dispatch, failed, _HANDLERS, _NATIVE, _deferred, state,
                       torch.is_inference_mode_enabled)
