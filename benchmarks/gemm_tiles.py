"""GEMM throughput on two threads by tiles per thread: what cutting a product into more tiles
costs the host's team (Note [Program-sized tiles] in csrc/wse_kernels.c).

Each tile is one single-threaded call of the OpenBLAS lazydev loads, as in the runtime; the
tiles are rows when the product is at least as tall as wide, else columns, and an OpenMP static
loop deals them to the threads. The loop is a small C program built here with gcc (Python
threads calling BLAS through ctypes ran the tiles of a product half as fast as the runtime
does). Best of 28 runs after two, GFLOP/s.

    python benchmarks/gemm_tiles.py [--workload transformer|mlp]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile

import lazydev.runtime as rt
from gemm_shapes import SHAPES

PER_THREAD = (1, 2, 4)      # tiles per thread; the runtime's default is 4
THREADS = 2

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
void scipy_openblas_set_num_threads(int);
void scipy_cblas_sgemm(int, int, int, int, int, int, float, const float*, int, const float*,
                       int, float, float*, int);
static double now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char** argv) {
  int ta = atoi(argv[1]), tb = atoi(argv[2]), M = atoi(argv[3]), N = atoi(argv[4]);
  int K = atoi(argv[5]), count = atoi(argv[6]);
  int lda = ta ? M : K, ldb = tb ? K : N, rows = M >= N;
  float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
  float *C = malloc(sizeof(float) * M * N);
  for (long i = 0; i < (long)M * K; i++) A[i] = (float)rand() / RAND_MAX;
  for (long i = 0; i < (long)K * N; i++) B[i] = (float)rand() / RAND_MAX;
  scipy_openblas_set_num_threads(1);
  double best = 1e9;
  for (int rep = 0; rep < 30; rep++) {
    double t0 = now();
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < count; t++) {
      long i0 = rows ? (long)M * t / count : 0, i1 = rows ? (long)M * (t + 1) / count : M;
      long j0 = rows ? 0 : (long)N * t / count, j1 = rows ? N : (long)N * (t + 1) / count;
      scipy_cblas_sgemm(101, ta ? 112 : 111, tb ? 112 : 111, i1 - i0, j1 - j0, K, 1.0f,
                        A + (ta ? i0 : i0 * lda), lda, B + (tb ? j0 * ldb : j0), ldb, 0.0f,
                        C + i0 * N + j0, N);
    }
    double dt = now() - t0;
    if (rep >= 2 && dt < best) best = dt;
  }
  printf("%.0f\n", 2.0 * M * N * K / best / 1e9);
  return 0;
}
"""


def build(work: str) -> str:
    lib_dir = os.path.dirname(rt.blas_library_path)
    src, exe = os.path.join(work, "tiles.c"), os.path.join(work, "tiles")
    with open(src, "w") as f:
        f.write(HARNESS)
    name = os.path.basename(rt.blas_library_path)[3:].split(".so")[0]    # libX.so -> X
    subprocess.run(["gcc", "-O2", "-fopenmp", src, "-o", exe, f"-L{lib_dir}", f"-l{name}",
                    f"-Wl,-rpath,{lib_dir}"], check=True)
    return exe


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=sorted(SHAPES), default="transformer")
    a = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    with tempfile.TemporaryDirectory() as work:
        exe = build(work)
        print("GFLOP/s on two threads, tiles per thread " + " / ".join(map(str, PER_THREAD)))
        for ta, tb, m, n, k in SHAPES[a.workload]:
            rates = [subprocess.run([exe, *map(str, (ta, tb, m, n, k, THREADS * per))],
                                    env=env, capture_output=True, text=True,
                                    check=True).stdout.strip() for per in PER_THREAD]
            print(f"{'T' if ta else 'N'}{'T' if tb else 'N'} {m}x{n}x{k}: " + " / ".join(rates))


if __name__ == "__main__":
    main()
