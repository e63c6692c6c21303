"""Small constructors for IR nodes, used by the lowerings (trace/lower.py) and by tensor/."""
from __future__ import annotations

import math

import torch

from .ir import FLOAT_ONLY, Node, Op
from .state import reshape, scalar

__all__ = ["const", "cast", "expand", "ew", "as_node", "permute", "reduce", "reshape", "scalar",
           "full", "contiguous_strides", "is_contiguous", "extent", "Unsupported"]


class Unsupported(Exception):
    """A lowering cannot handle these arguments: the op falls back to the CPU."""


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def broadcast_shape(*shapes) -> tuple:
    """torch.broadcast_shapes for plain int shapes. Torch's goes through the symbolic-shape
    guards of torch._refs (about 35 us a call), which a lowering run every step cannot afford."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s, ndim - len(s)):
            if d != 1:
                if out[i] not in (1, d):
                    raise RuntimeError(f"shapes {[list(x) for x in shapes]} cannot be broadcast "
                                       f"together (dim {i}: {out[i]} vs {d})")
                out[i] = d
    return tuple(out)


def is_contiguous(size, stride) -> bool:
    """Row-major dense, ignoring the strides of size-1 dims (they are never stepped)."""
    return all(s == c or d == 1 for d, s, c in zip(size, stride, contiguous_strides(size)))


def extent(size, stride, offset: int) -> int:
    """How many storage elements a view needs: one past the last element it reads."""
    if not all(size):
        return 0
    return offset + sum((d - 1) * s for d, s in zip(size, stride)) + 1


def const(value, dtype: torch.dtype) -> Node:
    """A compile-time constant. Only for values that fix program structure or never change
    (ints, bools, infinities); floats from user code go through `scalar` instead."""
    if dtype.is_floating_point:
        value = float(value)
    elif dtype is torch.bool:
        value = bool(value)
    else:
        value = _wrapped(int(value), dtype)
    return Node(Op.CONST, dtype, (), (), value)


def _wrapped(v: int, dtype: torch.dtype) -> int:
    """`v` converted to integer `dtype` as C converts it (two's complement): ATen converts a
    number operand to the tensor's dtype, so uint8 `x > -1` compares with 255."""
    bits = 8 * dtype.itemsize
    v &= (1 << bits) - 1
    return v - (1 << bits) if dtype.is_signed and v >> (bits - 1) else v


def as_node(v, dtype: torch.dtype) -> Node:
    """A Python number (or a node) as a 0-dim node of `dtype`."""
    if isinstance(v, Node):
        return cast(v, dtype)
    if isinstance(v, float) and math.isfinite(v):
        # A float dtype reads the runtime scalar directly (no CAST node: one node per scalar).
        return scalar(v, dtype) if dtype.is_floating_point else cast(scalar(v), dtype)
    if isinstance(v, complex):
        raise Unsupported("complex scalars are not supported on wse")
    return const(v, dtype)


def cast(n: Node, dtype: torch.dtype) -> Node:
    if n.dtype == dtype:
        return n
    if n.op is Op.CONST:
        return const(n.arg, dtype)
    return Node(Op.CAST, dtype, n.shape, (n,), dtype)


def opmath(dtype: torch.dtype) -> torch.dtype:
    """The dtype ATen's CPU kernels compute `dtype` in: float for the half-precision types,
    rounding once at the end where a chain of nodes of `dtype` would round at each."""
    return torch.float32 if dtype in HALF else dtype


def expand(n: Node, shape: tuple) -> Node:
    if n.shape == shape:
        return n
    if len(n.shape) < len(shape):
        n = reshape(n, (1,) * (len(shape) - len(n.shape)) + n.shape)
        if n.shape == shape:
            return n
    if len(n.shape) > len(shape) or any(a != b and a != 1 for a, b in zip(n.shape, shape)):
        # Callers check broadcasts as PyTorch does; a node that does not broadcast would make
        # a kernel read past its buffer, so it is refused here too.
        raise RuntimeError(f"lazydev: cannot expand a value of shape {list(n.shape)} to "
                           f"{list(shape)}")
    return Node(Op.EXPAND, n.dtype, shape, (n,))


def ew(op: Op, dtype: torch.dtype, shape: tuple, *srcs: Node) -> Node:
    """An elementwise node: sources broadcast to `shape`. 0-dim sources stay 0-dim (a scalar
    reads the same at every position), which saves two nodes per scalar operand."""
    if op in FLOAT_ONLY and not dtype.is_floating_point:
        # the op runs on the CPU, whose kernel gives its value or its error
        raise Unsupported(f"{op.name} of {dtype}: no C form for values that are not floating")
    return Node(op, dtype, shape, tuple([s if not s.shape else expand(s, shape) for s in srcs]))


def full(value, dtype: torch.dtype, shape: tuple) -> Node:
    return expand(as_node(value, dtype), tuple(shape))


def take_rows(x: Node, index: Node) -> Node:
    """x[index] for a 1-d index: the rows of x it names, in its order (an INDEX_ND on dim 0)."""
    return Node(Op.INDEX_ND, x.dtype, index.shape + x.shape[1:], (x, index), (0, 1, 1, False))


HALF = (torch.float16, torch.bfloat16)     # the half types, which ATen computes in float
# ATen's names of the floating types, as its messages give them ("expected scalar type Float")
SCALAR_TYPE = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
               torch.bfloat16: "BFloat16"}


def permute(n: Node, perm) -> Node:
    perm = tuple(perm)
    if perm == tuple(range(len(perm))):
        return n
    shape = tuple(n.shape[p] for p in perm)
    return Node(Op.PERMUTE, n.dtype, shape, (n,), perm)


def wrap_dim(x: Node, dim: int) -> int:
    """`dim` of `x` as a non-negative axis, or the CPU's IndexError (a 0-d tensor has dims 0
    and -1). Where the meta kernel does not check (_softmax, sort)."""
    n = max(len(x.shape), 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    return dim % n if x.shape else 0


def reduce(op: Op, x: Node, axes, keepdim: bool, dtype: torch.dtype) -> Node:
    """Reduce `x` over `axes`; the reduce node keeps the axes as size 1."""
    nd = len(x.shape)
    axes = tuple(sorted({a % nd for a in axes})) if nd else ()
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    out = Node(op, dtype, kept, (x,), axes)
    if keepdim:
        return out
    return reshape(out, tuple(d for i, d in enumerate(x.shape) if i not in axes))
