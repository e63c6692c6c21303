"""The lazy IR: one immutable node class and the primitive op set.

Note [IR keys]
A node's `key` is a structural hash computed once, when the node is made, from its op, dtype,
shape, argument (by a per-process id, see _arg_id) and its sources' keys. A graph's key is then
the hash of its output keys, so the cache lookup at a sync costs O(#outputs), not O(#nodes).
Tensor data never enters a key: device buffers are DATA leaves named by their input slot in the
current trace, and floating-point Python scalars are SCALAR leaves named by their scalar slot,
so a changing learning rate does not change the key. Keys use Python's tuple hash; they are per
process (string hashes are salted). The on-disk cache keys by the generated source instead
(compile/cache.py).
"""
from __future__ import annotations

from enum import IntEnum

import torch


class Op(IntEnum):
    # leaves
    DATA = 1        # arg = input slot; a device buffer bound at run time
    SCALAR = 2      # arg = scalar slot; a float bound at run time (double)
    CONST = 3       # arg = a Python int/bool/float fixed at compile time
    INDEX = 4       # arg = dim; the coordinate along `dim` of the output position (int64)
    PLACEHOLDER = 5  # arg = argument index; only inside replay plans (tensor/replay.py)
    # macro
    CALL = 8        # arg = (Macro, output index); src = the call's inputs, then its scalars;
                    # expanded before the compiler's passes (trace/macro.py, Note [Macro nodes])
    # elementwise unary
    NEG = 10; ABS = 11; EXP = 12; LOG = 13; SQRT = 14; RSQRT = 15; SIN = 16; COS = 17
    TANH = 18; SIGMOID = 19; ERF = 20; FLOOR = 21; CEIL = 22; ROUND = 23; TRUNC = 24
    SIGN = 25; RECIPROCAL = 26; LOG1P = 27; EXPM1 = 28; NOT = 29; BITNOT = 30
    ISNAN = 31; TAN = 32; ASIN = 33; ACOS = 34; ATAN = 35; SINH = 36; COSH = 37
    ASINH = 38; ACOSH = 39; ATANH = 40; ERFC = 41; EXP2 = 42; LOG2 = 43; LOG10 = 44
    RELU = 45; ISINF = 46; LGAMMA = 47; ERFINV = 48; SIGNBIT = 49; ISFINITE = 50
    CAST = 51       # arg = target dtype
    BITCAST = 52    # src (x,) of this dtype's item size: x's bits read as this dtype (view(dtype))
    # elementwise binary
    ADD = 60; SUB = 61; MUL = 62; DIV = 63; POW = 64; MAX = 65; MIN = 66
    EQ = 67; NE = 68; LT = 69; LE = 70; GT = 71; GE = 72
    AND = 73; OR = 74; XOR = 75; BITAND = 76; BITOR = 77; BITXOR = 78
    FLOORDIV = 79; TRUNCDIV = 80; MOD = 81; FMOD = 82; ATAN2 = 83
    SHL = 84; SHR = 85; HYPOT = 86; COPYSIGN = 87; NEXTAFTER = 88
    # elementwise ternary
    WHERE = 90
    SPECIAL = 91    # arg = (name, *int constants): wsesp_<name>(srcs..., constants...), a special
                    # function from csrc/wse_special.h (Bessel, gamma family, polynomials...)
    LERP = 92       # src = (start, end, weight); torch.lerp
    CHECK = 93      # arg = check id; src = (value, bad, shown): value, failing the program where
                    # bad is true (trace/checks.py, Note [Device-side checks])
    FMA = 94        # src = (a, b, c): a * b + c rounded once (C's fma), as ATen's addcmul
    # movement: change which element is read, never the values
    EXPAND = 100      # arg = None; src same rank, size-1 dims broadcast to `shape`
    RESHAPE = 101     # arg = None
    PERMUTE = 102     # arg = permutation
    AS_STRIDED = 103  # arg = (stride, offset) over the source read as a flat array
    CAT = 104         # arg = dim
    PAD = 105         # arg = ((lo, hi) per dim); src = (x, fill value)
    GATHER = 106      # arg = dim; src = (x, index); torch.gather semantics
    INDEX_ND = 107    # arg = (first indexed dim, number of index tensors, index ndim, front)
    # reductions; output keeps reduced dims as size 1
    SUM = 120; PROD = 121; RMAX = 122; RMIN = 123   # arg = reduced axes
    ARGMAX = 124; ARGMIN = 125                      # arg = axis
    ANY = 126; ALL = 127
    CUMSUM = 128                                    # arg = axis; scan, output same shape
    SEQSUM = 129    # arg = reduced axes; accumulates in the output dtype in index order, as
                    # PyTorch's scalar CPU kernels do (SUM accumulates floats in double)
    CUMPROD = 136; LOGCUMSUMEXP = 137               # arg = axis; scans like CUMSUM
    # materialising kernels
    SCATTER_STRIDED = 140   # arg = (size, stride, offset); src = (base, value): as_strided_scatter
    INDEX_PUT = 141         # arg = (first dim, n indices, index ndim, front, accumulate)
    SCATTER = 142           # arg = (dim, reduce); src = (base, index, value); reduce None|'add'
    #                         |'mul'|'max'|'min' (the element hit is combined with the value)
    MATMUL = 150            # batched (..., M, K) @ (..., K, N)
    CONV2D = 151            # arg = params (stride, padding, dilation, groups)
    CONV2D_BWD_INPUT = 152  # src = (grad_out, weight)
    CONV2D_BWD_WEIGHT = 153  # src = (grad_out, input)
    LINALG = 154            # arg = (routine, params); packed outputs (trace/lower_linalg.py)
    # row kernels (trace/lower_sort.py): int64 positions along one axis
    SORT = 170          # arg = (axis, descending); stable sorting permutation of each row
    SEARCHSORTED = 171  # arg = right; src = (sorted rows [.., N], values [.., M]) or 1-d rows
    CUMARG = 172        # arg = (axis, is_max); index of the running max/min (cummax/cummin)
    # windows (trace/lower_nn.py)
    POOL_ARGMAX = 180   # arg = (kh, kw, sh, sw, ph, pw, dh, dw); src = (x [.., H, W],): int64
    #                     [.., OH, OW], the index ih * W + iw of each window's maximum


UNARY = frozenset(op for op in Op if 10 <= op < 60)
BINARY = frozenset(op for op in Op if 60 <= op < 90)
ELEMENTWISE = UNARY | BINARY | {Op.WHERE, Op.LERP, Op.SPECIAL, Op.CHECK, Op.FMA}
# Elementwise ops whose C form is a math function of floating values (compile/cexpr.py): of
# integers or bools no node is made (trace/build.py `ew`), as C has none to give and the CPU
# refuses most (nextafter of int32 failed the whole step at the sync, losing its other values)
FLOAT_ONLY = frozenset({
    Op.EXP, Op.LOG, Op.SQRT, Op.SIN, Op.COS, Op.TANH, Op.ERF, Op.LOG1P, Op.EXPM1, Op.TAN,
    Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.ASINH, Op.ACOSH, Op.ATANH, Op.ERFC,
    Op.EXP2, Op.LOG2, Op.LOG10, Op.LGAMMA, Op.ERFINV, Op.ATAN2, Op.HYPOT, Op.COPYSIGN,
    Op.NEXTAFTER})
MOVEMENT = frozenset(op for op in Op if 100 <= op < 120)
REDUCE = frozenset(op for op in Op if 120 <= op < 140) | {Op.CUMARG}
LEAF = frozenset({Op.DATA, Op.SCALAR, Op.CONST, Op.INDEX})
LIBRARY = frozenset({Op.MATMUL, Op.CONV2D, Op.CONV2D_BWD_INPUT, Op.CONV2D_BWD_WEIGHT, Op.LINALG,
                     Op.SORT, Op.SEARCHSORTED, Op.POOL_ARGMAX})
SCATTERS = frozenset({Op.SCATTER_STRIDED, Op.INDEX_PUT, Op.SCATTER})
COMPARE = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE})


_ARG_IDS: dict = {}


def _arg_id(arg):
    """A small int per distinct argument, distinct by ==, for node keys. hash(arg) would not
    do: CPython hashes -1 and -2 alike (and so tuples differing only there), which merged
    arange(-1, n) with arange(-2, n), or a flip's stride -1 with -2. Floats are told apart by
    repr (0.0 == -0.0, and nan != nan would make a new key at every trace)."""
    if arg.__class__ is float:
        arg = ("float", repr(arg))
    try:
        return _ARG_IDS[arg]
    except KeyError:
        return _ARG_IDS.setdefault(arg, len(_ARG_IDS))
    except TypeError:               # unhashable (a list): its repr identifies it
        return repr(arg)


def local_key(op, dtype, shape, arg) -> int:
    """The part of a node's key that does not depend on its sources."""
    return hash((op, dtype, shape, arg if arg is None else _arg_id(arg)))


# Note [Native nodes]
# Node is a C type (csrc/wse_node.c): fields op, dtype, shape, src, arg and key, read-only, and
# Node.make(op, dtype, shape, src, arg, local), which takes the node's local_key from the caller
# (a replay plan computes it once per recipe, tensor/replay.py). Made in C, a node costs 68 ns
# against 622 for the __slots__ class it replaces (make, its arguments in locals), and it is not
# tracked by the cyclic GC, which scanned every node of a trace at each young collection
# (csrc/wse_node.c says why that is safe). The methods below are not on the recording path and
# stay in Python.
from _lazydev_node import Node  # noqa: E402


def _node_new(cls, op: Op, dtype: torch.dtype, shape: tuple, src: tuple = (), arg=None):
    return Node.make(op, dtype, shape, src, arg, local_key(op, dtype, shape, arg))


def _numel(self) -> int:
    n = 1
    for d in self.shape:
        n *= d
    return n


def _replace(self, **kw) -> "Node":
    fields = dict(op=self.op, dtype=self.dtype, shape=self.shape, src=self.src, arg=self.arg)
    fields.update(kw)
    return Node(**fields)


def _repr(self) -> str:
    dt = str(self.dtype).replace("torch.", "")
    return f"Node({self.op.name}, {dt}{list(self.shape)}, arg={self.arg!r}, nsrc={len(self.src)})"


Node.__new__ = _node_new
Node.numel = property(_numel)
Node.replace = _replace
Node.__repr__ = _repr
Node.__module__ = __name__


def toposort(outputs) -> list[Node]:
    """Post-order of the nodes reachable from `outputs`, iterative (graphs can be deep)."""
    order, seen = [], set()
    for root in outputs:
        if id(root) in seen:
            continue
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            for s in reversed(node.src):
                if id(s) not in seen:
                    stack.append((s, False))
    return order
