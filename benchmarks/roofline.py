"""What the machine allows a training step: the cores' multiply-add peak, and how much of eager's
own step is matrix products, in one process.

Issue 4 quotes GEMM limits beside its step-time targets (about 0.78x of eager for the MLP, 0.6x
for the transformer); this measures them on the machine at hand. A step cannot run faster than
its GEMM FLOPs at the cores' FMA peak, and eager's step is mostly the same GEMMs (torch's MKL),
so eager's GEMM share is what a backend with equally fast GEMMs and nothing else would reach.

    python benchmarks/roofline.py [--workloads mlp,transformer] [--steps 8]

Per workload it prints eager's median step, the GEMM time and FLOPs of steps run under a
dispatch mode that times the products (GemmTimer), eager's GEMM rate, and two ratios to eager's
step: the GEMM share (GEMMs at MKL's rate) and the floor (GEMM FLOPs at the FMA peak). The FMA
peak is a register-only loop of independent multiply-adds, one chain set per thread, compiled
with -march=native: no GEMM reaches it, as it ignores loads.
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from cffi import FFI  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import backends  # noqa: E402
from worker import run_steps  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")

# 12 independent accumulators per thread: Zen 3 and Skylake retire two FMAs a cycle with a
# latency of 4, so at least 8 chains are needed to keep both pipes busy. The vector width
# follows the compiler's target (-march=native), so AVX-512 machines are measured at 512 bits.
PEAK_C = r"""
#include <omp.h>
#ifdef __AVX512F__
#define WIDTH 16
#else
#define WIDTH 8
#endif
typedef float vf __attribute__((vector_size(WIDTH * 4)));

static float chains(long iters) {
  vf a[12], b, c;
  for (int l = 0; l < WIDTH; l++) { b[l] = 0.999999f; c[l] = 1e-7f; }
  for (int i = 0; i < 12; i++) for (int l = 0; l < WIDTH; l++) a[i][l] = (float)i;
  for (long n = 0; n < iters; n++) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) a[i] = a[i] * b + c;
  }
  float s = 0;
  for (int i = 0; i < 12; i++) s += a[i][0];
  return s;
}

/* FLOPs per second of `threads` threads, each running `iters` rounds of 12 vector FMAs. */
double fma_flops(int threads, long iters) {
  float sink = 0;
  double t0 = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(+:sink)
  sink += chains(iters);
  double dt = omp_get_wtime() - t0;
  return sink == -1.0f ? 0 : threads * (double)iters * 12 * WIDTH * 2 / dt;
}
"""


def peak_library():
    """The FMA loop, built with cffi into a temporary directory and loaded."""
    ffi = FFI()
    ffi.cdef("double fma_flops(int threads, long iters);")
    ffi.set_source("_roofline_peak", PEAK_C, extra_compile_args=[
        "-O2", "-march=native", "-ffp-contract=fast", "-fopenmp"], extra_link_args=["-fopenmp"])
    with tempfile.TemporaryDirectory() as tmp:
        ffi.compile(tmpdir=tmp, verbose=False)
        sys.path.insert(0, tmp)
        try:
            return importlib.import_module("_roofline_peak").lib
        finally:
            sys.path.remove(tmp)


def fma_peak(lib, threads: int, reps: int = 9) -> float:
    """Best GFLOP/s of `reps` runs of about 0.1 s each: the host's other guests take a core
    away for tenths of a second at a time here, and only the best run shows the cores' peak."""
    return max(lib.fma_flops(threads, 10_000_000) for _ in range(reps)) / 1e9


class GemmTimer(TorchDispatchMode):
    """Times the matrix products a step runs and counts their FLOPs. Lighter than
    torch.profiler (about 30 µs per event here, which added a third to the transformer's step):
    the mode costs a few µs per op, and only around the GEMMs does it read the clock."""

    def __init__(self):
        super().__init__()
        self.seconds, self.flops = 0.0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        if name not in GEMM_OPS:
            return func(*args, **(kwargs or {}))
        t0 = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.seconds += time.perf_counter() - t0
        a = args[1] if name in ("aten::addmm", "aten::baddbmm") else args[0]
        self.flops += 2 * out.numel() * a.shape[-1]     # 2 m n k (times the batch)
        return out


def eager_profile(name: str, steps: int) -> dict:
    """Eager's median step, then `steps` steps under GemmTimer: GEMM ms and GFLOP a step."""
    eager = backends.make("eager")
    step = WORKLOADS[name](eager.device, eager.wrap)
    run_steps(step, eager, 0, 3)
    times = [r["step_s"] for r in run_steps(step, eager, 0, steps)]
    with GemmTimer() as timer:
        timed = sum(r["step_s"] for r in run_steps(step, eager, 0, steps)) / steps
    return {"step_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
            "gemm_ms": timer.seconds / steps * 1e3, "gflop": timer.flops / steps / 1e9,
            "timed_ms": timed * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="mlp,transformer")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(2)
    threads = os.cpu_count() or 1
    lib = peak_library()
    peak1, peak = fma_peak(lib, 1), fma_peak(lib, threads)
    console = Console(width=170)
    console.print(f"FMA peak: {peak1:.0f} GFLOP/s on 1 thread, {peak:.0f} on {threads}")
    table = Table(title="Eager's step against its GEMMs (the GEMM share is of the timed step, "
                        "the other ratios of the median step)")
    for col in ("workload", "eager step", "GEMM GFLOP", "eager GEMMs (timed step)",
                "MKL GFLOP/s", "GEMM share", "floor at peak", "GFLOP/s for 0.75x",
                "GFLOP/s for 0.85x"):
        table.add_column(col, justify="left" if col == "workload" else "right")
    for name in args.workloads.split(","):
        p = eager_profile(name, args.steps)
        # The share is of the timed step, whose other ops carry the mode's overhead: it
        # understates the share an untimed step has, never overstates it.
        gemm_ms, step_s = p["gemm_ms"], p["step_ms"] / 1e3
        table.add_row(
            name, f"{p['step_ms']:.1f} ms (min {p['min_ms']:.1f})", f"{p['gflop']:.2f}",
            f"{gemm_ms:.1f} ms of {p['timed_ms']:.1f}", f"{p['gflop'] / gemm_ms * 1e3:.0f}",
            f"{gemm_ms / p['timed_ms']:.2f}x", f"{p['gflop'] / peak / step_s:.2f}x",
            *(f"{p['gflop'] / (r * step_s):.0f}" for r in (0.75, 0.85)))
    console.print(table)
    console.print("rate for Rx: the GEMM rate a step needs to run in R x eager's step when "
                  "nothing but its GEMMs takes time; the peak above bounds every rate.")


if __name__ == "__main__":
    main()
