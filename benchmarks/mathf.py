"""Cost and accuracy of the float math functions generated loops call (Note [Own float math] in
csrc/wse_prefix.h): ours and libmvec's, each in a vectorised loop compiled as generated programs
are, so the choice of which to call can be re-measured on another machine or compiler.

    python benchmarks/mathf.py                  # ns per float, in-L1 loop on one core
    python benchmarks/mathf.py --range 0 1e5    # inputs uniform in [lo, hi] (big sin arguments)
    python benchmarks/mathf.py --ulp            # also the worst error over all 2^32 floats
                                                # against double libm (a minute per function)
"""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile

from cffi import FFI
from rich.console import Console
from rich.table import Table

import lazydev.runtime as rt
from lazydev.compile import build

# (label, C expression of float x, double libm reference)
FUNCS = [("wse_expf", "wse_expf(x)", "exp"), ("libmvec expf", "exp(x)", "exp"),
         ("wse_erff", "wse_erff(x)", "erf"), ("libmvec erff", "erf(x)", "erf"),
         ("libmvec sinf", "sin(x)", "sin"), ("libmvec cosf", "cos(x)", "cos"),
         ("libmvec tanhf", "tanh(x)", "tanh"), ("libmvec logf", "log(x)", "log"),
         ("wse_tanhf (libmvec's with AVX-512)", "wse_tanhf(x)", "tanh"),
         ("wse_sinf_small (|x| < 2^17 only)", "wse_sinf_small(x)", "sin"),
         ("wse_expf_normal (|x| < 87 only)", "wse_expf_normal(x)", "exp")]

CDEF = """
double bench(int fn, float lo, float hi, int reps);
void worst_ulp(int fn, double* out);
"""

# One loop per function; `x` is float, so <tgmath.h> picks the float (libmvec) variants.
LOOP = """    case %(k)d:
      #pragma omp simd
      for (int i = 0; i < n; i++) { const float x = in[i]; out[i] = %(expr)s; }
      break;"""
REF = "    case %(k)d: return %(ref)s(x);"

SOURCE = r"""
#include <time.h>
static void run(int fn, const float* restrict in, float* restrict out, int n) {
  switch (fn) {
%(loops)s
  }
}
static double ref(int fn, double x) {
  switch (fn) {
%(refs)s
  }
  return 0;
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + 1e-9 * t.tv_nsec; }
#define N 4096
double bench(int fn, float lo, float hi, int reps) {
  static float in[N] WSE_BENCH_ALIGNED, out[N] WSE_BENCH_ALIGNED;
  for (int i = 0; i < N; i++) in[i] = lo + (hi - lo) * (float)((i * 2654435761u) %% N) / N;
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double t = now();
    for (int k = 0; k < 100; k++) { run(fn, in, out, N); __asm__ volatile("" ::: "memory"); }
    t = now() - t;
    best = t < best ? t : best;
  }
  return best / (100.0 * N) * 1e9;
}
/* |y - ref| in units of the float spacing at ref; NaN and infinities must match exactly. */
static double ulps(float y, double want) {
  if (want != want) return y != y ? 0 : 1e30;
  float wf = (float)want;
  if (isinf(wf)) return y == wf ? 0 : 1e30;
  if (y != y || isinf(y)) return 1e30;
  int e; frexp(fabs((double)wf), &e);
  return fabs((double)y - want) / ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}
void worst_ulp(int fn, double* result) {
  double worst = 0, at = 0;
  #pragma omp parallel
  {
    float in[N] WSE_BENCH_ALIGNED, out[N] WSE_BENCH_ALIGNED;
    double w = 0, a = 0;
    #pragma omp for schedule(dynamic, 64)
    for (int64_t c = 0; c < (1LL << 32); c += N) {
      for (int i = 0; i < N; i++) { uint32_t b = (uint32_t)(c + i); memcpy(&in[i], &b, 4); }
      run(fn, in, out, N);
      for (int i = 0; i < N; i++) {
        double u = ulps(out[i], ref(fn, in[i]));
        if (u > w) { w = u; a = in[i]; }
      }
    }
    #pragma omp critical
    if (w > worst) { worst = w; at = a; }
  }
  result[0] = worst; result[1] = at;
}
"""


def compile_functions(directory: str):
    loops = "\n".join(LOOP % dict(k=k, expr=expr) for k, (_, expr, _) in enumerate(FUNCS))
    refs = "\n".join(REF % dict(k=k, ref=ref) for k, (_, _, ref) in enumerate(FUNCS))
    src, so = os.path.join(directory, "mathf.c"), os.path.join(directory, "mathf.so")
    with open(src, "w") as f:
        f.write("#include <tgmath.h>\n#define WSE_BENCH_ALIGNED __attribute__((aligned(64)))\n"
                + rt.prefix_source() + SOURCE % dict(loops=loops, refs=refs))
    subprocess.run([build.CC, *build.FLAGS, src, "-o", so, "-lm"], check=True)
    ffi = FFI()
    ffi.cdef(CDEF)
    return ffi, ffi.dlopen(so)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--range", nargs=2, type=float, default=(-3.0, 3.0), metavar=("LO", "HI"))
    p.add_argument("--reps", type=int, default=30, help="timed runs; the fastest is kept")
    p.add_argument("--ulp", action="store_true", help="worst error over all floats")
    a = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")        # the timing loop is one core's
    ffi, lib = compile_functions(tempfile.mkdtemp(prefix="lazydev-mathf-"))
    table = Table(title=f"float functions, inputs in [{a.range[0]:g}, {a.range[1]:g}]")
    for col in ("function", "ns / float", *(("worst ulp", "at x") if a.ulp else ())):
        table.add_column(col, justify="left" if col == "function" else "right")
    for k, (label, _, _) in enumerate(FUNCS):
        row = [label, f"{lib.bench(k, a.range[0], a.range[1], a.reps):.3f}"]
        if a.ulp:
            out = ffi.new("double[2]")
            lib.worst_ulp(k, out)
            row += [f"{out[0]:.3f}", f"{out[1]:.9g}"]
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()
