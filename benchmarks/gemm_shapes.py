"""GEMM throughput on a workload's shapes (the transformer's, or the MLP's): the OpenBLAS
lazydev loads (2 threads) against torch.mm (MKL), in one process. The GEMM floor of a step is its
GEMM FLOPs over this.

    python benchmarks/gemm_shapes.py [--workload transformer|mlp]
"""
from __future__ import annotations

import argparse
import ctypes
import time

import torch

import lazydev.runtime as rt

# (trans_a, trans_b, M, N, K) of the transformer step's GEMMs (d=256, 4x MLP, 1024 tokens).
TRANSFORMER = [(0, 1, 1024, 1024, 256), (0, 1, 1024, 256, 1024), (0, 0, 1024, 1024, 256),
          (0, 0, 1024, 256, 1024), (1, 0, 1024, 256, 1024), (1, 0, 256, 1024, 1024),
          (0, 1, 1024, 768, 256), (1, 0, 768, 256, 1024), (0, 1, 1024, 256, 256),
          (1, 0, 256, 256, 1024)]
# The MLP step's (784-1024-1024-10, batch 128): forward x @ W.T, then dX = dY @ W, dW = dY.T @ X.
MLP = [(0, 1, 128, 1024, 784), (0, 1, 128, 1024, 1024), (0, 1, 128, 10, 1024),
       (0, 0, 128, 1024, 10), (1, 0, 10, 1024, 128), (0, 0, 128, 1024, 1024),
       (1, 0, 1024, 1024, 128), (1, 0, 1024, 784, 128)]
SHAPES = {"transformer": TRANSFORMER, "mlp": MLP}


def _best(fn, reps: int = 10) -> float:
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", choices=sorted(SHAPES), default="transformer")
    shapes = SHAPES[parser.parse_args().workload]
    torch.set_num_threads(2)
    blas = ctypes.CDLL(rt.blas_library_path)
    blas.scipy_openblas_set_num_threads(2)
    sgemm = blas.scipy_cblas_sgemm
    sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
                                           ctypes.c_void_p, ctypes.c_int, ctypes.c_float,
                                           ctypes.c_void_p, ctypes.c_int]
    for ta, tb, m, n, k in shapes:
        a = torch.randn(k, m) if ta else torch.randn(m, k)
        b = torch.randn(n, k) if tb else torch.randn(k, n)
        c = torch.empty(m, n)
        flops = 2 * m * n * k

        def openblas():
            sgemm(101, 112 if ta else 111, 112 if tb else 111, m, n, k, 1.0, a.data_ptr(),
                  a.shape[1], b.data_ptr(), b.shape[1], 0.0, c.data_ptr(), n)

        def mkl():
            torch.mm(a.t() if ta else a, b.t() if tb else b, out=c)
        print(f"{'T' if ta else 'N'}{'T' if tb else 'N'} {m}x{n}x{k}: OpenBLAS "
              f"{flops / _best(openblas) / 1e9:.0f} GFLOP/s, torch (MKL) "
              f"{flops / _best(mkl) / 1e9:.0f} GFLOP/s")


if __name__ == "__main__":
    main()
