"""Linear algebra: LAPACK routines as LINALG nodes, and the linalg ops built from them.

Note [LAPACK nodes]
A LINALG node runs one routine of csrc/wse_linalg.c per batch element. Its arg is a flat tuple
of ints, (routine, element size, batch, params...), and its value is every output of the
routine packed one after another (`lapack` returns a node per output, reading its part of the
packed buffer). Integer outputs (pivots, LAPACK info) are packed as floats and cast back.
Routines are the ones ATen's CPU kernels call (getrf/getrs for solve and inv, gesdd for svd,
syevd for eigh, geqrf/orgqr for qr, ...), so results agree with the CPU, signs of QR/SVD/eigh
factors included. LAPACK's info never syncs: `_linalg_check_errors` records a device-side
check that the next sync computes, and a nonzero info fails that program with the error the
CPU would have raised (Note [Deferred linalg errors]).

Composite ops (solve, inv, det, slogdet, pinv) are decomposed at the tensor level instead
(DECOMPOSITIONS, run by tensor/dispatch.py), exactly as ATen composes them: det and slogdet,
for one, factor A^T when A is contiguous and return that LU, which only the tensor level can
see. Ops without a meta kernel (geqrf, lstsq) are node decompositions: they map value nodes to
nodes themselves.
"""
from __future__ import annotations

import math
import struct

import torch

from . import checks
from .build import (Unsupported, broadcast_shape, cast, contiguous_strides, expand, full, permute,
                    reduce, reshape)
from .ir import Node, Op
from .lower import register

aten = torch.ops.aten
DECOMPOSITIONS: dict = {}       # aten op -> function over tensors (see the module docstring)

# Routine ids of csrc/wse_linalg.c (its enum); the params of each are documented there.
ROUTINES = {"trsm": 1, "potrf": 2, "potri": 3, "getrf": 4, "getrs": 5, "perm": 6, "geqrf": 7,
            "orgqr": 8, "ormqr": 9, "qr": 10, "gesdd": 11, "syevd": 12, "sytrf": 13,
            "sytrs": 14, "gels": 15}


def decomposition(*ops):
    def deco(fn):
        for op in ops:
            DECOMPOSITIONS[op] = fn
        return fn
    return deco


# ---- building blocks --------------------------------------------------------------------------

def _float(dtype) -> torch.dtype:
    if dtype not in (torch.float32, torch.float64):
        raise Unsupported(f"LAPACK routines take float32 or float64, not {dtype}")
    return dtype


def lapack(routine: str, dtype, batch: tuple, params, srcs, blocks) -> list:
    """Run `routine` on every batch element of `srcs` (already shaped batch + matrix, in
    `dtype`; pivots int32). Returns one node per output block, of shape batch + block."""
    nb = math.prod(batch)
    sizes = [math.prod(b) * nb for b in blocks]
    arg = (ROUTINES[routine], dtype.itemsize, nb) + tuple(int(p) for p in params)
    packed = Node(Op.LINALG, dtype, (sum(sizes),), tuple(srcs), arg)
    outs, offset = [], 0
    for block, size in zip(blocks, sizes):
        shape = tuple(batch) + tuple(block)
        outs.append(Node(Op.AS_STRIDED, dtype, shape, (packed,),
                         (contiguous_strides(shape), offset)))
        offset += size
    return outs


def _mat(x: Node, batch: tuple, dims: tuple, dtype) -> Node:
    """x as a batch + dims operand: cast, broadcast over the batch."""
    return expand(cast(x, dtype), tuple(batch) + tuple(dims))


def _ints(x: Node, batch: tuple, dims: tuple) -> Node:
    return expand(cast(x, torch.int32), tuple(batch) + tuple(dims))


def mT(x: Node) -> Node:
    nd = len(x.shape)
    return permute(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def triangle(x: Node, lower: bool, diagonal: int = 0) -> Node:
    """tril(x, diagonal) or triu(x, diagonal) over the last two dims."""
    i = Node(Op.INDEX, torch.int64, x.shape, (), len(x.shape) - 2)
    j = Node(Op.INDEX, torch.int64, x.shape, (), len(x.shape) - 1)
    d = Node(Op.SUB, torch.int64, x.shape, (j, i))
    keep = Node(Op.LE if lower else Op.GE, torch.bool, x.shape,
                (d, Node(Op.CONST, torch.int64, (), (), diagonal)))
    zero = Node(Op.CONST, x.dtype, (), (), 0.0)
    return Node(Op.WHERE, x.dtype, x.shape, (keep, x, zero))


def _eye_mask(shape: tuple) -> Node:
    i = Node(Op.INDEX, torch.int64, shape, (), len(shape) - 2)
    j = Node(Op.INDEX, torch.int64, shape, (), len(shape) - 1)
    return Node(Op.EQ, torch.bool, shape, (i, j))


def _empty(spec) -> Node:
    return full(0, spec.dtype, spec.shape)


# ---- deferred error checks --------------------------------------------------------------------

# Note [Deferred linalg errors]
# aten._linalg_check_errors raises on the CPU when a LAPACK info is nonzero. Reading the info
# would sync, so the check is a device-side check of info == 0 instead, kept alive by the trace
# until the next sync computes it (Note [Device-side checks] in checks.py); a nonzero info fails
# that program with the error ATen would raise, built from the info and its batch index.

def deferred_check(info: Node, api_name: str, is_matrix: bool) -> None:
    info = cast(info, torch.int32)
    cid = checks.check_id(f"linalg: {api_name}: {is_matrix}",
                          lambda value, index: linalg_error(value, index, api_name, is_matrix))
    checks.keep(checks.compare(info, Op.NE, 0), info, cid)


def linalg_error(info: int, batch: int, api_name: str, is_matrix: bool) -> Exception:
    """The exception ATen raises for LAPACK info `info` at batch index `batch`."""
    infos = torch.zeros(() if is_matrix else (batch + 1,), dtype=torch.int32, device="cpu")
    infos.view(-1)[-1] = info
    try:
        torch._linalg_check_errors(infos, api_name, is_matrix=is_matrix)
    except Exception as e:          # noqa: BLE001 - the CPU's own error is what we want
        return e
    return RuntimeError(f"{api_name}: LAPACK error code {info}")


@register(aten._linalg_check_errors.default)
def _check_errors(spec, info, api_name, *, is_matrix):
    deferred_check(info, api_name, is_matrix)


# ---- triangular solves and Cholesky -----------------------------------------------------------

def solve_triangular(a: Node, b: Node, upper: bool, left: bool, unit: bool, dtype) -> Node:
    """A^-1 B (left) or B A^-1 with A triangular; batch dims broadcast."""
    m, n = b.shape[-2:]
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    k = m if left else n
    srcs = (_mat(a, batch, (k, k), dtype), _mat(b, batch, (m, n), dtype))
    return lapack("trsm", dtype, batch, (left, upper, unit, m, n), srcs, [(m, n)])[0]


@register(aten.linalg_solve_triangular.default)
def _linalg_solve_triangular(spec, A, B, *, upper, left=True, unitriangular=False):
    x = solve_triangular(A, B, upper, left, unitriangular, _float(spec.dtype))
    return expand(x, spec.shape)


@register(aten.triangular_solve.default)
def _triangular_solve(spec, B, A, upper=True, transpose=False, unitriangular=False):
    dt = _float(spec[0].dtype)
    a = expand(cast(A, dt), spec[1].shape)
    x = solve_triangular(mT(a) if transpose else a, B, upper != transpose, True, unitriangular,
                         dt)
    return expand(x, spec[0].shape), a


def cholesky(A: Node, upper: bool, dtype) -> tuple:
    n, batch = A.shape[-1], A.shape[:-2]
    L, info = lapack("potrf", dtype, batch, (upper, n), (_mat(A, batch, (n, n), dtype),),
                     [(n, n), ()])
    return L, cast(info, torch.int32)


@register(aten.linalg_cholesky_ex.default)
def _linalg_cholesky_ex(spec, A, *, upper=False, check_errors=False):
    L, info = cholesky(A, upper, _float(spec[0].dtype))
    if check_errors:
        deferred_check(info, "linalg.cholesky_ex", len(A.shape) == 2)
    return L, info


@register(aten.cholesky.default)
def _cholesky(spec, A, upper=False):
    L, info = cholesky(A, upper, _float(spec.dtype))
    deferred_check(info, "cholesky", len(A.shape) == 2)
    return L


@register(aten.cholesky_inverse.default)
def _cholesky_inverse(spec, L, upper=False):
    dt, n, batch = _float(spec.dtype), L.shape[-1], L.shape[:-2]
    return lapack("potri", dt, batch, (upper, n), (_mat(L, batch, (n, n), dt),), [(n, n)])[0]


@register(aten.cholesky_solve.default)
def _cholesky_solve(spec, B, L, upper=False):
    """potrs: A = L L^T (or U^T U), two triangular solves."""
    dt = _float(spec.dtype)
    first, second = (mT(L), L) if upper else (L, mT(L))
    y = solve_triangular(first, B, False, True, False, dt)
    return expand(solve_triangular(second, y, True, True, False, dt), spec.shape)


# ---- LU ---------------------------------------------------------------------------------------

def lu_factor(A: Node, dtype) -> tuple:
    m, n = A.shape[-2:]
    batch, k = A.shape[:-2], min(m, n)
    LU, piv, info = lapack("getrf", dtype, batch, (m, n), (_mat(A, batch, (m, n), dtype),),
                           [(m, n), (k,), ()])
    return LU, cast(piv, torch.int32), cast(info, torch.int32)


@register(aten.linalg_lu_factor_ex.default)
def _linalg_lu_factor_ex(spec, A, *, pivot=True, check_errors=False):
    if not pivot:
        raise Unsupported("LU without pivoting is not implemented on the CPU either")
    LU, piv, info = lu_factor(A, _float(spec[0].dtype))
    if check_errors:
        deferred_check(info, "torch.linalg.lu_factor_ex", len(A.shape) == 2)
    return LU, piv, info


@register(aten.linalg_lu_solve.default)
def _linalg_lu_solve(spec, LU, pivots, B, *, left=True, adjoint=False):
    dt = _float(spec.dtype)
    b = B if left else mT(B)
    n, r = b.shape[-2:]
    batch = broadcast_shape(LU.shape[:-2], pivots.shape[:-1], b.shape[:-2])
    srcs = (_mat(LU, batch, (n, n), dt), _ints(pivots, batch, (n,)), _mat(b, batch, (n, r), dt))
    x = lapack("getrs", dt, batch, (n, r, adjoint != (not left)), srcs, [(n, r)])[0]
    return x if left else mT(x)


def lu_unpack(spec, LU: Node, pivots: Node, unpack_data: bool, unpack_pivots: bool) -> tuple:
    """(P, L, U) as ATen's lu_unpack: P from the row swaps, L unit lower, U upper."""
    p_spec, l_spec, u_spec = spec
    m, n = LU.shape[-2:]
    k = min(m, n)
    P, L, U = _empty(p_spec), _empty(l_spec), _empty(u_spec)
    if unpack_data:
        L = triangle(_narrow(LU, -1, k), True, -1)
        L = Node(Op.WHERE, L.dtype, L.shape, (_eye_mask(L.shape), full(1, L.dtype, ()), L))
        U = triangle(_narrow(LU, -2, k), False)
    if unpack_pivots and p_spec.shape and math.prod(p_spec.shape):
        batch = pivots.shape[:-1]
        perm = lapack("perm", LU.dtype, batch, (m, k), (_ints(pivots, batch, (k,)),), [(m,)])[0]
        # P[..., i, j] = 1 where perm[j] == i (ATen: P.scatter_(-2, perm.unsqueeze(-2), 1))
        shape = tuple(batch) + (m, m)
        row = cast(Node(Op.INDEX, torch.int64, shape, (), len(shape) - 2), LU.dtype)
        hit = Node(Op.EQ, torch.bool, shape, (row, expand(reshape(perm, batch + (1, m)), shape)))
        P = cast(hit, p_spec.dtype)
    return P, L, U


def _narrow(x: Node, dim: int, size: int) -> Node:
    dim %= len(x.shape)
    if x.shape[dim] == size:
        return x
    shape = x.shape[:dim] + (size,) + x.shape[dim + 1:]
    return Node(Op.AS_STRIDED, x.dtype, shape, (reshape(x, (x.numel,)),),
                (contiguous_strides(x.shape), 0))


@register(aten.lu_unpack.default)
def _lu_unpack(spec, LU, pivots, unpack_data=True, unpack_pivots=True):
    return lu_unpack(spec, cast(LU, _float(spec[1].dtype)), pivots, unpack_data, unpack_pivots)


@register(aten.linalg_lu.default)
def _linalg_lu(spec, A, *, pivot=True):
    if not pivot:
        raise Unsupported("LU without pivoting is not implemented on the CPU either")
    LU, piv, _ = lu_factor(A, _float(spec[1].dtype))
    return lu_unpack(spec, LU, piv, True, True)


# ---- QR ---------------------------------------------------------------------------------------

_QR_MODES = {"reduced": 0, "complete": 1, "r": 2}


@register(aten.linalg_qr.default)
def _linalg_qr(spec, A, mode="reduced"):
    dt = _float(spec[1].dtype)
    m, n = A.shape[-2:]
    batch, k = A.shape[:-2], min(m, n)
    code = _QR_MODES[mode]
    qc, rr = (m if code == 1 else k if code == 0 else 0), (m if code == 1 else k)
    Q, R = lapack("qr", dt, batch, (m, n, code), (_mat(A, batch, (m, n), dt),),
                  [(m, qc), (rr, n)])
    return (Q if code != 2 else _empty(spec[0])), R


def node_decomposition(*ops):
    """For ops without a meta kernel: `fn` maps value nodes (and other arguments) to nodes;
    registered as a tensor-level decomposition that unwraps and wraps wse tensors."""
    def deco(fn):
        def run(*args, **kwargs):
            from ..tensor.wse_tensor import WseTensor, from_node, value
            nodes = [value(a) if isinstance(a, WseTensor) else a for a in args]
            out = fn(*nodes, **kwargs)
            return tuple(map(from_node, out)) if isinstance(out, tuple) else from_node(out)
        return decomposition(*ops)(run)
    return deco


@node_decomposition(aten.geqrf.default)
def _geqrf(A):
    if not isinstance(A, Node) or len(A.shape) < 2:
        raise Unsupported("geqrf of a CPU tensor or of fewer than 2 dims")
    dt = _float(A.dtype)
    m, n = A.shape[-2:]
    batch = A.shape[:-2]
    return tuple(lapack("geqrf", dt, batch, (m, n), (_mat(A, batch, (m, n), dt),),
                        [(m, n), (min(m, n),)]))


@register(aten.linalg_householder_product.default)
def _householder_product(spec, A, tau):
    dt = _float(spec.dtype)
    m, n = A.shape[-2:]
    k, batch = tau.shape[-1], A.shape[:-2]
    srcs = (_mat(A, batch, (m, n), dt), _mat(tau, batch, (k,), dt))
    return lapack("orgqr", dt, batch, (m, n, k), srcs, [(m, n)])[0]


@register(aten.ormqr.default)
def _ormqr(spec, A, tau, C, left=True, transpose=False):
    dt = _float(spec.dtype)
    m, n = C.shape[-2:]
    k = tau.shape[-1]
    r = m if left else n
    batch = broadcast_shape(A.shape[:-2], tau.shape[:-1], C.shape[:-2])
    srcs = (_mat(_narrow(A, -1, k), batch, (r, k), dt), _mat(tau, batch, (k,), dt),
            _mat(C, batch, (m, n), dt))
    return lapack("ormqr", dt, batch, (m, n, k, left, transpose), srcs, [(m, n)])[0]


# ---- SVD and symmetric eigendecomposition -----------------------------------------------------

@register(aten._linalg_svd.default)
def _linalg_svd(spec, A, full_matrices=False, compute_uv=True, driver=None):
    dt = _float(spec[1].dtype)
    m, n = A.shape[-2:]
    batch, k = A.shape[:-2], min(m, n)
    if compute_uv and m < n and k:
        # Singular vectors are unique up to sign, and for wide matrices MKL's gesdd (PyTorch's
        # CPU LAPACK) picks other signs than reference LAPACK, in no pattern we could match.
        raise Unsupported("singular vectors of a wide matrix (MKL's signs)")
    jobz = 0 if not compute_uv else (2 if full_matrices else 1)
    uc, vr = (m, n) if jobz == 2 else (k, k) if jobz else (0, 0)
    U, S, Vh, info = lapack("gesdd", dt, batch, (m, n, jobz), (_mat(A, batch, (m, n), dt),),
                            [(m, uc), (k,), (vr, n), ()])
    if k:
        deferred_check(info, "linalg.svd", len(A.shape) == 2)
    if not compute_uv:
        U, Vh = _empty(spec[0]), _empty(spec[2])
    return U, S, Vh


@register(aten._linalg_eigh.default)
def _linalg_eigh(spec, A, UPLO="L", compute_v=True):
    dt = _float(spec[0].dtype)
    n, batch = A.shape[-1], A.shape[:-2]
    w, V, info = lapack("syevd", dt, batch, (n, UPLO == "U", compute_v),
                        (_mat(A, batch, (n, n), dt),), [(n,), (n, n if compute_v else 0), ()])
    if n:
        deferred_check(info, "linalg.eigh", len(A.shape) == 2)
    return w, (V if compute_v else _empty(spec[1]))


# ---- LDL ----------------------------------------------------------------------------------------

@register(aten.linalg_ldl_factor_ex.default)
def _ldl_factor_ex(spec, A, *, hermitian=False, check_errors=False):
    dt = _float(spec[0].dtype)
    n, batch = A.shape[-1], A.shape[:-2]
    LD, piv, info = lapack("sytrf", dt, batch, (n,), (_mat(A, batch, (n, n), dt),),
                           [(n, n), (n,), ()])
    info = cast(info, torch.int32)
    if check_errors:
        deferred_check(info, "torch.linalg.ldl_factor_ex", len(A.shape) == 2)
    return LD, cast(piv, torch.int32), info


@register(aten.linalg_ldl_solve.default)
def _ldl_solve(spec, LD, pivots, B, *, hermitian=False):
    dt = _float(spec.dtype)
    n, r = B.shape[-2:]
    batch = broadcast_shape(LD.shape[:-2], pivots.shape[:-1], B.shape[:-2])
    srcs = (_mat(LD, batch, (n, n), dt), _ints(pivots, batch, (n,)), _mat(B, batch, (n, r), dt))
    return expand(lapack("sytrs", dt, batch, (n, r), srcs, [(n, r)])[0], spec.shape)



# ---- tensor-level decompositions (as ATen composes these ops on the CPU) ----------------------

def _lu_det_P(pivots):
    """The determinant (+1 or -1) of the permutation that the row swaps `pivots` make."""
    swaps = aten.ne.Tensor(pivots, torch.arange(1, pivots.shape[-1] + 1, dtype=pivots.dtype,
                                                 device=pivots.device))
    return 1 - 2 * torch.remainder(swaps.sum(-1), 2)


def _lu_of_transpose_if_contiguous(A):
    """The LU that ATen's _linalg_det and _linalg_slogdet factor and return: of A^T when A is
    contiguous (it saves them a copy to column-major), else of A."""
    return aten.linalg_lu_factor_ex.default(A.mT if A.is_contiguous() else A)


@decomposition(aten._linalg_solve_ex.default)
def _linalg_solve_ex(A, B, *, left=True, check_errors=False):
    # The CPU returns the LU of A itself here (unlike det), whatever A's strides.
    LU, pivots, info = aten.linalg_lu_factor_ex.default(A)
    if check_errors:
        aten._linalg_check_errors.default(info, "torch.linalg.solve_ex", is_matrix=A.dim() == 2)
    vector = B.dim() == 1 or (A.dim() - 1 == B.dim() and B.shape == A.shape[:-1])
    X = aten.linalg_lu_solve.default(LU, pivots, B.unsqueeze(-1) if vector else B, left=left)
    return (X.squeeze(-1) if vector else X), LU, pivots, info


@decomposition(aten.linalg_inv_ex.default)
def _linalg_inv_ex(A, *, check_errors=False):
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand(A.shape)
    X, _, _, info = aten._linalg_solve_ex.default(A, eye)
    if check_errors:
        aten._linalg_check_errors.default(info, "linalg.inv_ex", is_matrix=A.dim() == 2)
    return X, info


@decomposition(aten._linalg_det.default)
def _linalg_det(A):
    LU, pivots, _ = _lu_of_transpose_if_contiguous(A)
    return _lu_det_P(pivots) * LU.diagonal(0, -2, -1).prod(-1), LU, pivots


@decomposition(aten._linalg_slogdet.default)
def _linalg_slogdet(A):
    LU, pivots, _ = _lu_of_transpose_if_contiguous(A)
    diag = LU.diagonal(0, -2, -1)
    sign = diag.sign().prod(-1) * _lu_det_P(pivots)
    return sign, diag.abs().log().sum(-1), LU, pivots


@decomposition(aten.linalg_pinv.atol_rtol_tensor)
def _linalg_pinv(A, *, atol=None, rtol=None, hermitian=False):
    """ATen's linalg_pinv: V diag(1/S) U^H with singular values below the tolerance zeroed."""
    f64 = dict(dtype=torch.float64, device=A.device)
    if rtol is None:
        rtol = torch.full((), torch.finfo(A.dtype).eps * max(A.shape[-2:]), **f64)
        if atol is not None:
            rtol = torch.where(atol > 0, torch.zeros((), **f64), rtol)
    if atol is None:
        atol = torch.zeros((), **f64)
    if A.shape[-2] < A.shape[-1] and not hermitian:     # pinv(A) = pinv(A^T)^T: a tall SVD
        return _linalg_pinv(A.mT, atol=atol, rtol=rtol).mT
    if A.numel() == 0:
        U, S, Vh = torch.linalg.svd(A, full_matrices=False)
        return torch.matmul(Vh.mH * S.reciprocal().unsqueeze(-2), U.mH)
    if hermitian:       # singular values are the eigenvalues' magnitudes
        S, U = torch.linalg.eigh(A)
        return _pinv_product(U, S, S.abs(), S.abs().amax(-1, keepdim=True), atol, rtol, U.mH)
    U, S, Vh = torch.linalg.svd(A, full_matrices=False)
    return _pinv_product(Vh.mH, S, S, S.narrow(-1, 0, 1), atol, rtol, U.mH)


def _pinv_product(left, S, magnitude, largest, atol, rtol, right):
    """left @ diag(1/S) @ right, with the values whose magnitude is within the tolerance
    max(atol, rtol * largest) zeroed."""
    tol = torch.max(atol.unsqueeze(-1), rtol.unsqueeze(-1) * largest)
    zero = torch.zeros((), dtype=S.dtype, device=S.device)
    S_inv = torch.where(magnitude > tol, S.reciprocal(), zero).to(left.dtype)
    return torch.matmul(left * S_inv.unsqueeze(-2), right)

@node_decomposition(aten.linalg_lstsq.default)
def _linalg_lstsq(A, B, rcond=None, *, driver=None):
    """gels or gelsy (the CPU default), as ATen's linalg_lstsq (which has no meta kernel).
    gelsd/gelss (their residuals' shape depends on the computed rank) run on the CPU."""
    driver = driver or "gelsy"
    if driver not in ("gels", "gelsy") or not isinstance(A, Node) or not isinstance(B, Node) \
            or A.dtype != B.dtype or len(A.shape) < 2:
        raise Unsupported(f"lstsq with driver {driver!r}")
    dt = _float(A.dtype)
    m, n = A.shape[-2:]
    vector = len(B.shape) == 1 or (len(A.shape) - 1 == len(B.shape) and B.shape == A.shape[:-1])
    b = reshape(B, B.shape + (1,)) if vector else B
    k, mx = b.shape[-1], max(m, n)
    if b.shape[-2] != m:
        raise Unsupported("lstsq: A and B have different numbers of rows")
    batch = broadcast_shape(A.shape[:-2], b.shape[:-2])
    rcond = torch.finfo(dt).eps * mx if rcond is None else rcond
    bits = int.from_bytes(struct.pack("<d", float(rcond)), "little", signed=True)
    X, rank, info = lapack("gels", dt, batch, (m, n, k, driver == "gelsy", bits),
                           (_mat(A, batch, (m, n), dt), _mat(b, batch, (m, k), dt)),
                           [(mx, k), (), ()])
    deferred_check(info, "torch.linalg.lstsq", math.prod(batch) <= 1)
    residuals = full(0, dt, (0,))
    if m > n and driver == "gels":     # LAPACK leaves the residual's rows below the solution
        rows = Node(Op.AS_STRIDED, dt, batch + (m - n, k), (X,),
                    (contiguous_strides(X.shape), n * k))
        residuals = reduce(Op.SUM, Node(Op.MUL, dt, rows.shape, (rows, rows)), (-2,), False, dt)
    X = _narrow(X, -2, n) if m else full(0, dt, batch + (n, k))
    rank = cast(rank, torch.int64) if driver == "gelsy" else full(0, torch.int64, (0,))
    return (reshape(X, batch + (n,)) if vector else X), residuals, rank, full(0, dt, (0,))

def _register_errors() -> None:
    from ..runtime import device
    device.ERROR_DECODERS[4] = lambda err: RuntimeError(   # WSE_ERR_NO_LAPACK
        f"LAPACK is not available: {device.blas_library_path} lacks a routine lazydev needs; "
        "reinstall scipy-openblas32")


_register_errors()
