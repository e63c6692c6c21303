"""Dtype rules that the CPU's kernels enforce and PyTorch's meta kernels do not check.

A float64 batch into a float32 nn.Linear (numpy data not cast), a float32 input with float64
class weights, a float index to F.embedding, argmax of a bool tensor: the CPU raises, and wse
computed (in float64, or indexing by truncated floats), so code that ran on wse failed on the
CPU. (Dtypes the CPU has no kernel for at all, NotImplementedError "... not implemented for
'Half'", are left computed: devices differ in those, as CUDA's do; but not float-only math of
integers, bool arithmetic or bit operations of floats, whose values no device gives.) A call
that breaks a rule below asks the CPU for its verdict, on zero inputs of the same sizes
(meta.cpu_error), and raises the CPU's exception, message included. Some mixes are the CPU's
to allow (a bfloat16 input with float32 weights to layer_norm): the rules only say when to
ask, and a mix the CPU accepted is remembered and not asked again.
"""
from __future__ import annotations

import math

import torch

from ..trace import meta

aten = torch.ops.aten

# Op -> the tensor arguments that must share a dtype.
_SAME = {
    aten.mm.default: ("self", "mat2"),
    aten.heaviside.default: ("self", "values"),
    aten.linalg_cross.default: ("self", "other"),
    aten.addmm.default: ("self", "mat1", "mat2"),
    aten.baddbmm.default: ("self", "batch1", "batch2"),
    aten.addbmm.default: ("self", "batch1", "batch2"),
    aten.mv.default: ("self", "vec"),
    aten.addmv.default: ("self", "mat", "vec"),
    aten.native_layer_norm.default: ("input", "weight", "bias"),
    aten.index_put.default: ("self", "values"),
    aten._unsafe_index_put.default: ("self", "values"),
    aten.index_add.default: ("self", "source"),
    aten.index_copy.default: ("self", "source"),
    aten.put.default: ("self", "source"),
    aten._prelu_kernel.default: ("self", "weight"),
    aten.nll_loss_forward.default: ("self", "weight"),
    aten.nll_loss2d_forward.default: ("self", "weight"),
    aten.grid_sampler_2d.default: ("input", "grid"),
    aten.grid_sampler_3d.default: ("input", "grid"),
    aten.binary_cross_entropy.default: ("self", "target", "weight"),
    aten.convolution.default: ("input", "weight", "bias"),
}
for _bn in (aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
            aten._native_batch_norm_legit_no_training.default,
            aten._batch_norm_with_update.default):
    _SAME[_bn] = ("input", "weight", "bias", "running_mean", "running_var")


def _is_bool(d) -> bool:
    return d is torch.bool


def _not_class_index(d) -> bool:
    return d is not torch.int64 and d is not torch.uint8


def _not_bool(d) -> bool:
    return d is not torch.bool


def _not_float(d) -> bool:
    return not d.is_floating_point


def _not_index(d) -> bool:
    return d not in (torch.int64, torch.int32)


def _integral(d) -> bool:
    return not (d.is_floating_point or d.is_complex)


def _inexact(d) -> bool:
    return d.is_floating_point or d.is_complex


def _inexact_or_bool(d) -> bool:
    return d is torch.bool or d.is_floating_point or d.is_complex


# Op -> (tensor arguments, the dtypes its CPU kernel refuses for any of them).
_REFUSED = {
    aten.embedding.default: (("indices",), _not_index),
    aten.index_select.default: (("index",), _not_index),
    aten.argmax.default: (("self",), _is_bool),
    aten.argmin.default: (("self",), _is_bool),
    aten.topk.default: (("self",), _is_bool),
    aten.relu.default: (("self",), _is_bool),
    aten._cdist_forward.default: (("x1", "x2"), _not_float),
    aten.soft_margin_loss.default: (("self",), _not_float),
    # class targets are Long or Byte (an int32 one was taken)
    aten.nll_loss_forward.default: (("target",), _not_class_index),
    aten.nll_loss2d_forward.default: (("target",), _not_class_index),
    aten.addcdiv.default: (("tensor1", "tensor2"), _integral),
    aten.masked_scatter.default: (("mask",), _not_bool),
    # Float-only kernels. wse computed them for integers too (gelu of a long tensor truncated
    # to [0, 0, 2], var of ints in integer arithmetic), values no device gives.
    aten.var.correction: (("self",), _integral),
    aten.std.correction: (("self",), _integral),
    aten.var_mean.correction: (("self",), _integral),
    aten.std_mean.correction: (("self",), _integral),
    aten.lerp.Scalar: (("self", "end"), _integral),
    aten.lerp.Tensor: (("self", "end", "weight"), _integral),
    aten.avg_pool2d.default: (("self",), _integral),
    # Bool has no arithmetic: `long - bool` and abs/floor of bool raise on the CPU.
    aten.sub.Tensor: (("self", "other", "alpha"), _is_bool),
    # ... nor does `1 - mask`, `True - x` or a bool alpha of a result that is not bool (wse
    # computed them). A Python bool argument counts as a bool dtype (`dtype` below).
    aten.rsub.Tensor: (("self", "other", "alpha"), _is_bool),
    aten.rsub.Scalar: (("self", "other", "alpha"), _is_bool),
    aten.sub.Scalar: (("self", "other", "alpha"), _is_bool),
    # ... and a float alpha has none of an integral result (add(mask, True, alpha=0.5))
    aten.add.Tensor: (("alpha",), _inexact_or_bool),
    aten.add.Scalar: (("alpha",), _inexact_or_bool),
    aten.fmod.Tensor: (("self", "other"), _is_bool),
    aten.fmod.Scalar: (("self",), _is_bool),
    aten.remainder.Tensor: (("self", "other"), _is_bool),
    aten.remainder.Scalar: (("self",), _is_bool),
    aten.median.default: (("self",), _is_bool),
    aten.dot.default: (("self", "tensor"), _is_bool),
    # Bit operations of floats: no C operator either (wse failed in the C compiler, at the
    # sync, and the step's other values were lost).
    aten.bitwise_and.Tensor: (("self", "other"), _inexact),
    aten.bitwise_or.Tensor: (("self", "other"), _inexact),
    aten.bitwise_xor.Tensor: (("self", "other"), _inexact),
    aten.__lshift__.Tensor: (("self", "other"), _inexact),
    aten.__rshift__.Tensor: (("self", "other"), _inexact),
    aten.bitwise_left_shift.Tensor: (("self", "other"), _inexact),
    aten.bitwise_right_shift.Tensor: (("self", "other"), _inexact),
}
for _op in ("gelu", "silu", "mish", "celu", "softplus", "hardswish", "hardsigmoid",
            "log_sigmoid_forward", "hardshrink", "glu", "_softmax", "_log_softmax", "frac"):
    _REFUSED[getattr(aten, _op).default] = (("self",), _integral)
for _op in ("abs", "floor", "ceil", "round", "trunc"):
    _REFUSED[getattr(aten, _op).default] = (("self",), _is_bool)
# round to decimals has no integer kernel (wse gave zeros: x * 10 ** d in integers, rounded)
_REFUSED[aten.round.decimals] = (("self",), _integral)
# bitwise ops have no floating kernel, whichever operand (a Python float too) makes the result
# floating: bitwise_or(uint8, -2.5) compiled `|` of floats, failing the whole step at the sync
for _op in ("bitwise_and", "bitwise_or", "bitwise_xor", "__lshift__", "__rshift__"):
    _REFUSED[getattr(aten, _op).Scalar] = (("self", "other"), _inexact)
    _REFUSED[getattr(aten, _op).Tensor] = (("self", "other"), _inexact)
_REFUSED[aten.bitwise_not.default] = (("self",), _inexact)
# Bool has no order or sums either: a bool median, search or running sum raises on the CPU (wse
# computed one). A `dtype=` argument or a Python bool counts by its dtype: clamp(min=False) of
# a bool tensor is refused, clamp(0, 1) (an int64 result) is not.
for _op, _names in ((aten.cumsum.default, ("dtype",)), (aten.cumprod.default, ("dtype",)),
                    (aten.median.dim, ("self",)), (aten.nanmedian.default, ("self",)),
                    (aten.nanmedian.dim, ("self",)),
                    (aten.searchsorted.Tensor, ("sorted_sequence", "self")),
                    (aten.searchsorted.Scalar, ("sorted_sequence", "self")),
                    (aten.clamp.default, ("self", "min", "max")),
                    (aten.clamp.Tensor, ("self", "min", "max")),
                    (aten.pow.Tensor_Tensor, ("self", "exponent")),
                    (aten.pow.Scalar, ("self", "exponent")),
                    (aten.mvlgamma.default, ("self",))):        # "may not be a boolean tensor"
    _REFUSED[_op] = (_names, _is_bool)

# Op -> (the arguments whose dtype its numbers are converted to, the first given one, and the
# number arguments). ATen converts these with checked_convert, which raises where a number
# overflows the dtype (fill_(300) of uint8, clamp(min=1e10) of half); other ops wrap (x + 300)
# and so does wse.
_CONVERTED = {
    aten.fill.Scalar: (("self",), ("value",)),
    aten.fill_.Scalar: (("self",), ("value",)),
    aten.masked_fill.Scalar: (("self",), ("value",)),
    aten.masked_fill_.Scalar: (("self",), ("value",)),
    aten.clamp.default: (("self",), ("min", "max")),
    aten.clamp_.default: (("self",), ("min", "max")),
    aten.clamp_min.default: (("self",), ("min",)),
    aten.clamp_max.default: (("self",), ("max",)),
    aten.full.default: (("dtype",), ("fill_value",)),
    aten.full_like.default: (("dtype", "self"), ("fill_value",)),
    aten.new_full.default: (("dtype", "self"), ("fill_value",)),
    aten.scatter.value: (("self",), ("value",)),
    aten.scatter_.value: (("self",), ("value",)),
    aten.index_fill.int_Scalar: (("self",), ("value",)),
    aten.index_fill_.int_Scalar: (("self",), ("value",)),
    aten.pow.Tensor_Scalar: (("self",), ("exponent",)),
    aten.pow_.Scalar: (("self",), ("exponent",)),
    aten.threshold.default: (("self",), ("value", "threshold")),
    aten.threshold_.default: (("self",), ("value", "threshold")),
}
# Numbers the CPU converts to a floating tensor's opmath type, not to its own: threshold's
# (F.threshold(half, 1e10, 0) is accepted; of an int8 tensor, 1000 raises).
_OPMATH_NUMBERS = frozenset({(aten.threshold.default, "threshold"),
                             (aten.threshold_.default, "threshold")})
_C_TYPES = {torch.uint8: "uint8_t", torch.int8: "int8_t", torch.int16: "int16_t",
            torch.int32: "int", torch.int64: "int64_t", torch.float16: "c10::Half",
            torch.bfloat16: "c10::BFloat16", torch.float32: "float", torch.float64: "double"}


def _overflows(v, dtype) -> bool:
    """c10's overflows<T>(v): out of T's range; an unsigned T takes -max..max of an integer
    (negatives wrap) but only 0..max of a float (fill_(-1.0) of uint8 raises), a float T any
    infinity or NaN."""
    if dtype.is_floating_point:
        return math.isfinite(v) and abs(v) > torch.finfo(dtype).max
    if v != v:
        return True
    info = torch.iinfo(dtype)
    if info.min == 0 and type(v) is int:
        return v > info.max or -v > info.max
    return v < info.min or v > info.max


# The CPU fills a one-element half or bfloat16 tensor without the check (its scalar_fill):
# scalar_tensor(-1e9, dtype=half), which torch.where(mask, x, -1e9) makes of its number, and
# x[0] = -1e9 give -inf where fill_ of more elements raises (float32 raises for both).
_UNCHECKED_ONE = (torch.float16, torch.bfloat16)
_FILLS = frozenset({aten.fill.Scalar, aten.fill_.Scalar, aten.full.default,
                    aten.full_like.default, aten.new_full.default})


def _fills_one(args, kwargs, names) -> bool:
    """Whether a fill or full call makes a one-element tensor."""
    if "size" in names:
        p = names.index("size")
        return math.prod(args[p] if p < len(args) else kwargs["size"]) == 1
    return args[0].numel() == 1


def _check_numbers(func, names):
    """Per call: raise as checked_convert for a number argument of func that overflows."""
    target_names, number_names = _CONVERTED[func]
    targets = tuple(names.index(n) for n in target_names)
    numbers = tuple(names.index(n) for n in number_names)

    def arg(p, args, kwargs):
        return args[p] if p < len(args) else kwargs.get(names[p])

    def check(args, kwargs):
        dtype = None
        for p in targets:
            t = arg(p, args, kwargs)
            dtype = t if isinstance(t, torch.dtype) else getattr(t, "dtype", None)
            if dtype is not None:
                break
        if dtype is None or dtype is torch.bool or dtype.is_complex:
            return
        if func in _PROMOTES and not dtype.is_floating_point and any(
                type(arg(p, args, kwargs)) is float for p in numbers):
            # clamp(int tensor, 1.5, 300) is float, and converts its bounds to float
            dtype = torch.get_default_dtype()
        for p in numbers:
            v = arg(p, args, kwargs)
            if dtype.is_floating_point and (func, names[p]) in _OPMATH_NUMBERS:
                continue
            if type(v) in (int, float) and _overflows(v, dtype):
                if (dtype in _UNCHECKED_ONE and func in _FILLS
                        and _fills_one(args, kwargs, names)):
                    continue
                raise RuntimeError(f"value cannot be converted to type "
                                   f"{_C_TYPES.get(dtype, dtype)} without overflow")
    return check


_PROMOTES = frozenset({aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default,
                       aten.pow.Tensor_Scalar, aten.pow_.Scalar})

_accepted: set = set()      # (op, dtypes) the CPU accepted
_checks: dict = {}          # op -> its check(args, kwargs)


def check(func, args, kwargs) -> None:
    """Raise the CPU's error if this call breaks func's dtype rule and the CPU refuses it."""
    fn = _checks.get(func)
    if fn is None:
        fn = _checks[func] = _make_check(func)
    fn(args, kwargs)


def _make_check(func):
    # Built once per op: the check runs before every mm and addmm.
    names = [a.name for a in func._schema.arguments]
    if func not in _CONVERTED:
        return _check_dtypes(func, names)
    numbers = _check_numbers(func, names)
    if func not in _SAME and func not in _REFUSED:
        return numbers
    dtypes = _check_dtypes(func, names)

    def both(args, kwargs):             # clamp: its number conversions and its dtypes
        dtypes(args, kwargs)
        numbers(args, kwargs)
    return both


def _check_dtypes(func, names):
    same = tuple(names.index(n) for n in _SAME.get(func, ()))
    given, refused = _REFUSED.get(func, ((), None))
    checked = tuple(names.index(n) for n in given)

    def dtype(p, args, kwargs):
        v = args[p] if p < len(args) else kwargs.get(names[p])
        d = getattr(v, "dtype", None)           # a tensor: the common case, before every mm
        if d is None and isinstance(v, (bool, float, torch.dtype)):
            return torch.bool if type(v) is bool else torch.float64 if type(v) is float else v
        return d

    def breaks(args, kwargs) -> bool:
        for p in checked:
            d = dtype(p, args, kwargs)
            if d is not None and refused(d):
                return True
        first = None
        for p in same:
            d = dtype(p, args, kwargs)
            if first is None:
                first = d
            elif d is not None and d is not first:
                return True
        return False

    every = tuple(range(len(names)))

    def check(args, kwargs):
        if breaks(args, kwargs):
            # the verdict is kept under every argument's dtype, not only the checked ones':
            # add(x_float, y, alpha=0.5) accepted, then add(mask, True, alpha=0.5) went through
            ask(func, args, kwargs, tuple(dtype(p, args, kwargs) for p in every))
    return check


def ask(func, args, kwargs, dtypes: tuple, expand_large: bool = True) -> None:
    """Raise the CPU's error for this call, unless the CPU accepted these `dtypes` before."""
    kind = _KIND.get(func)
    if kind is not None:
        dtypes += kind(*args)
    if (func, dtypes) not in _accepted:
        error = meta.cpu_error(func, args, kwargs, expand_large)
        if error is not None:
            raise error
        _accepted.add((func, dtypes))


def _index_put_kind(self, indices, values, *rest) -> tuple:
    """What besides dtypes decides whether the CPU takes an index_put: one bool mask and one
    value make it a masked_fill, which casts the value (x[x > 50] = -2.5 of a long x); other
    indices refuse a value of another dtype (an earlier masked fill had let x[[1]] = 2.5
    through, truncated)."""
    return (tuple(None if i is None else i.dtype for i in indices), values.numel() == 1)


_KIND = {aten.index_put.default: _index_put_kind, aten._unsafe_index_put.default: _index_put_kind}


def check_cast(func, args, kwargs, result: torch.dtype, target: torch.dtype) -> None:
    """In-place op `func` writes a result of dtype `result` into a tensor of dtype `target`:
    where PyTorch's casting rule refuses (a float result into a long tensor, a long one into a
    bool tensor), raise the CPU's error rather than truncate. Over _CPU_RERUN_LIMIT elements the
    CPU is not asked, and the error is the CPU's usual one."""
    if torch.can_cast(result, target) or (func, (result, target)) in _accepted:
        return
    error = meta.cpu_error(func, args, kwargs, expand_large=False)
    if error is None and meta.too_large(args, kwargs):
        error = RuntimeError(f"result type {result} can't be cast to the desired output type "
                             f"{target}")
    if error is not None:
        raise error
    _accepted.add((func, (result, target)))


def has_rule(func) -> bool:
    return func in _SAME or func in _REFUSED or func in _CONVERTED


def by_dtypes(func) -> bool:
    """func's rule reads its arguments' dtypes only (not numbers' values, as _CONVERTED's)."""
    return (func in _SAME or func in _REFUSED) and func not in _CONVERTED


def checked(func, handler):
    """`handler`, checking func's dtype rule first; `handler` itself for ops without one."""
    if not has_rule(func):
        return handler
    check = _checks[func] = _make_check(func)

    def run(func, args, kwargs):
        check(args, kwargs)
        return handler(func, args, kwargs)
    run.unchecked = getattr(handler, "unchecked", handler)
    return run
