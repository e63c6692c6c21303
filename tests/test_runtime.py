"""Tests for the wse C runtime and its cffi boundary (lazydev.runtime).

Generated programs are simulated by tiny hand-written C files that paste
prefix_source(), exactly as the compiler will; each is compiled once per module.
"""

import gc
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import lazydev
import lazydev.runtime as rt
from conftest import assert_same, build_program, padded_operand
from lazydev.runtime import Buffer, DeviceOutOfMemoryError, Program

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def restore_capacity():
    cap = rt.memory_stats()["capacity"]
    yield
    rt.set_capacity(cap)


def stats():
    gc.collect()
    return rt.memory_stats()


# ----------------------------------------------------------------- memory


def test_alloc_free_accounting():
    s0 = stats()
    b = Buffer(1000)
    s1 = rt.memory_stats()
    assert s1["bytes_in_use"] == s0["bytes_in_use"] + 1000
    assert s1["num_buffers"] == s0["num_buffers"] + 1
    assert b.nbytes == 1000 and b.addr % 64 == 0
    del b
    s2 = rt.memory_stats()  # cffi frees on refcount drop, no gc needed
    assert s2["bytes_in_use"] == s0["bytes_in_use"]
    assert s2["num_buffers"] == s0["num_buffers"]


def test_zero_size_and_explicit_free():
    s0 = stats()
    z = Buffer(0)
    assert z.nbytes == 0 and z.addr != 0
    assert rt.memory_stats()["num_buffers"] == s0["num_buffers"] + 1
    assert z.to_tensor(torch.float32, (0, 3)).shape == (0, 3)
    b = Buffer(4096)
    b.free()
    b.free()  # idempotent
    z.free()
    assert rt.memory_stats()["bytes_in_use"] == s0["bytes_in_use"]
    with pytest.raises(RuntimeError, match="freed"):
        b.to_tensor(torch.uint8, (1,))
    with pytest.raises(ValueError):
        Buffer(-1)


def test_peak_tracking():
    s0 = stats()
    rt.reset_peak()
    assert rt.memory_stats()["peak_bytes"] == s0["bytes_in_use"]
    a, b = Buffer(1 << 20), Buffer(1 << 10)
    del a, b
    s1 = rt.memory_stats()
    assert s1["peak_bytes"] == s0["bytes_in_use"] + (1 << 20) + (1 << 10)
    rt.reset_peak()
    assert rt.memory_stats()["peak_bytes"] == s1["bytes_in_use"]


def test_freed_large_blocks_are_reused_not_counted():
    """Large freed blocks go to the block cache (a step re-allocates the same sizes) and
    come back for the next allocation of their size class; accounting counts live bytes only,
    and empty_cache() returns cached blocks to the host."""
    s0 = stats()
    a = Buffer(3 << 20)
    addr = a.addr
    del a
    s1 = rt.memory_stats()
    assert s1["bytes_in_use"] == s0["bytes_in_use"]
    assert s1["cached_bytes"] >= 3 << 20
    b = Buffer((3 << 20) + 4096)           # same size class: the cached block is handed out
    assert b.addr == addr
    assert rt.memory_stats()["cached_bytes"] < s1["cached_bytes"]
    b.write(torch.arange(((3 << 20) + 4096) // 4, dtype=torch.int32))
    assert b.to_tensor(torch.int32, (5,), start=7).tolist() == [7, 8, 9, 10, 11]
    del b
    rt.empty_cache()
    assert rt.memory_stats()["cached_bytes"] == 0
    small = Buffer(100)                     # small blocks bypass the cache
    del small
    assert rt.memory_stats()["cached_bytes"] == 0


def test_to_tensor_range_is_checked():
    b = Buffer(64)
    with pytest.raises(ValueError, match="from element 10"):
        b.to_tensor(torch.float32, (8,), start=10)


def test_capacity_oom_message(restore_capacity):
    rt.device.relieve()     # what a failed allocation frees first (lazydev.debug's inputs)
    s0 = stats()
    rt.set_capacity(s0["bytes_in_use"] + 10_000)
    keep = Buffer(8_000)
    with pytest.raises(DeviceOutOfMemoryError) as ei:
        Buffer(5_000)
    msg = str(ei.value)
    assert "(5000 bytes)" in msg and "capacity" in msg and "in use" in msg
    assert "set_capacity" in msg and "LAZYDEV_DEVICE_MEMORY" in msg
    assert isinstance(ei.value, RuntimeError)
    # a failed allocation leaves the accounting untouched
    assert rt.memory_stats()["bytes_in_use"] == s0["bytes_in_use"] + 8_000
    del keep
    Buffer(10_000)  # fits exactly once the other buffer is gone
    with pytest.raises(ValueError):
        rt.set_capacity(-1)


def test_capacity_from_env():
    # Load device.py by path: the env var is read once per process, and this
    # keeps the check independent of whatever the rest of the package imports.
    code = ("import importlib.util, sys, warnings; warnings.simplefilter('always');"
            "spec = importlib.util.spec_from_file_location('wse_device', sys.argv[1]);"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m);"
            "print(m.memory_stats()['capacity'])")
    procs = {val: subprocess.Popen([sys.executable, "-c", code, rt.device.__file__], text=True,
                                   env=dict(os.environ, LAZYDEV_DEVICE_MEMORY=val),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for val in ("123456789", "8GB")}  # run both imports concurrently
    out = {val: p.communicate() for val, p in procs.items()}
    assert out["123456789"][0].strip() == "123456789", out["123456789"][1]
    assert out["8GB"][0].strip() == str(16 << 30), out["8GB"][1]  # malformed -> default
    assert "not a byte count" in out["8GB"][1]


def test_accounting_is_thread_safe():
    s0 = stats()

    def churn():
        for i in range(2000):
            Buffer(64 + i % 7).free()

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s1 = rt.memory_stats()
    assert s1["bytes_in_use"] == s0["bytes_in_use"]
    assert s1["num_buffers"] == s0["num_buffers"]


# ----------------------------------------------------------------- buffers

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool,
          torch.float16, torch.bfloat16, torch.complex64]


def _sample(dtype, shape):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, dtype=dtype)
    return torch.randint(0, 100, shape, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_buffer_round_trip(dtype):
    t = _sample(dtype, (5, 7))
    views = [t, t.t(), t[:, ::2], t[1:4, 2:].t(), t[:1].expand(3, 7)]  # incl. stride 0
    for v in views:
        b = Buffer.from_tensor(v)
        assert b.nbytes == v.numel() * v.element_size()
        out = b.to_tensor(dtype, v.shape)
        assert out.is_contiguous() and out.dtype == dtype
        assert torch.equal(out, v)
        assert out.data_ptr() != v.data_ptr()


def test_buffer_write_and_numpy_view():
    b = Buffer(4 * 6)
    src = torch.arange(6, dtype=torch.float32)
    b.write(src.view(2, 3))
    view = b.numpy_view(np.float32, 6)
    np.testing.assert_array_equal(view, src.numpy())
    view[0] = 42.0  # zero-copy: visible through the buffer
    assert b.to_tensor(torch.float32, (6,))[0] == 42.0
    b.write(torch.arange(12, dtype=torch.float32).view(3, 4)[:, :2])  # non-contiguous ok
    assert b.to_tensor(torch.float32, (6,)).tolist() == [0, 1, 4, 5, 8, 9]
    with pytest.raises(ValueError):
        b.write(torch.zeros(5))
    with pytest.raises(ValueError):
        b.to_tensor(torch.float64, (6,))
    with pytest.raises(ValueError):
        b.numpy_view(np.float32, 7)


def test_buffer_resolves_lazy_conj_and_neg():
    z = torch.randn(4, dtype=torch.complex64)
    assert torch.equal(Buffer.from_tensor(z.conj()).to_tensor(z.dtype, (4,)), z.conj_physical())
    n = torch._neg_view(torch.randn(4))
    assert torch.equal(Buffer.from_tensor(n).to_tensor(n.dtype, (4,)), n.clone())


def test_prefix_source_is_embedded():
    src = rt.prefix_source()
    assert "typedef struct wse_lib" in src and "wse_f32_to_f16" in src
    on_disk = REPO / "csrc" / "wse_prefix.h"
    if on_disk.exists():  # a mismatch means the installed extension is stale
        assert src == on_disk.read_text()


# ----------------------------------------------------------------- GEMM



def run_gemm(prog, dtype, batch, ta, tb, M, N, K, alpha=1.0, beta=0.0, pad=0, bcast_a=False,
             bf16=False):
    """`bf16`: float operands holding bfloat16 values, through lib->gemm_bf16_sliced."""
    a_store, a = padded_operand(1 if bcast_a else batch, K if ta else M, M if ta else K, pad, dtype)
    b_store, bm = padded_operand(batch, N if tb else K, K if tb else N, pad, dtype)
    c_store, c0 = padded_operand(batch, M, N, pad, dtype)
    if bf16:
        for x in (a_store, b_store):
            x.copy_(x.bfloat16())
    if beta == 0:
        c_store.fill_(float("nan"))  # beta == 0 must not read C (BLAS semantics)
    bufs = [Buffer.from_tensor(x) for x in (a_store, b_store, c_store)]
    sa = 0 if bcast_a else a_store[0].numel()
    code = 16 if bf16 else 32 if dtype == torch.float32 else 64
    prog.run(bufs, [code, batch, ta, tb, M, N, K, alpha,
                    a_store.shape[-1], sa, b_store.shape[-1], b_store[0].numel(), beta,
                    c_store.shape[-1], c_store[0].numel()])
    got = bufs[2].to_tensor(dtype, c_store.shape)[..., :N]
    opa = a.double().transpose(-1, -2) if ta else a.double()
    opb = bm.double().transpose(-1, -2) if tb else bm.double()
    want = alpha * (opa @ opb)
    if beta != 0:
        want = want + beta * c0.double()
    return got, want.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_transposes(gemm_prog, dtype, ta, tb):
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}
    # the last two are big single matrices, split into row / column tiles
    for batch, M, N, K, pad in [(3, 5, 7, 4, 0), (4, 17, 9, 33, 3), (2, 70, 80, 90, 1),
                                (1, 100, 61, 50, 0), (1, 37, 130, 64, 2)]:
        got, want = run_gemm(gemm_prog, dtype, batch, ta, tb, M, N, K, pad=pad)
        torch.testing.assert_close(got, want, **tol)


@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_of_bfloat16_values_is_their_float_product(gemm_prog, ta, tb):
    """Note [BF16 GEMM] in csrc/wse_gemm_bf16.c: float operands holding bfloat16 values,
    multiplied by the CPU's bfloat16 dot products where it has them (else by the float
    product), give the float64 product of the same values to float rounding: past every
    blocking edge (MC 120 rows, NC 1024 columns, KC 256 deep), at odd depths, 12-row and
    32-column remainders, batched and padded, and at the shapes too small for it."""
    from _lazydev_wse import lib
    print(f"bfloat16 dot products here: {bool(lib.wse_bf16_gemm_ready())}")
    for batch, M, N, K, pad in [(2, 37, 45, 67, 3), (1, 130, 1100, 301, 0), (3, 16, 16, 32, 1),
                                (1, 128, 1024, 784, 0), (2, 5, 7, 9, 0)]:
        got, want = run_gemm(gemm_prog, torch.float32, batch, ta, tb, M, N, K, pad=pad,
                             bf16=True)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gemm_alpha_beta_broadcast_and_degenerate(gemm_prog, dtype):
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}
    got, want = run_gemm(gemm_prog, dtype, 5, 1, 0, 6, 4, 8, alpha=0.5, beta=-2.0, pad=2)
    torch.testing.assert_close(got, want, **tol)
    got, want = run_gemm(gemm_prog, dtype, 64, 0, 1, 8, 8, 8, bcast_a=True)  # OpenMP path
    torch.testing.assert_close(got, want, **tol)
    got, want = run_gemm(gemm_prog, dtype, 3, 0, 0, 4, 5, 0, beta=0.0)  # K == 0 -> zeros
    torch.testing.assert_close(got, want)
    got, want = run_gemm(gemm_prog, dtype, 2, 0, 0, 1, 6, 3, alpha=2.0, beta=1.0)  # M == 1
    torch.testing.assert_close(got, want, **tol)


def test_gemm_library_follows_the_cpu_vendor_and_the_environment():
    """GEMMs go to torch's MKL on Intel CPUs when torch ships one (its threads are the kernels'
    OpenMP team), elsewhere to OpenBLAS split into tiles; LAZYDEV_BLAS=mkl|openblas picks one.
    The GEMM tests run in a child process with the library this process did not pick."""
    from lazydev.runtime import device
    mkl = torch.backends.mkl.is_available()
    asked = os.environ.get("LAZYDEV_BLAS", "")
    intel = device.cpu_fields().get("vendor_id") == "GenuineIntel"
    wants_mkl = asked == "mkl" or (asked != "openblas" and intel)
    torch_cpu = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    assert rt.gemm_library_path == (torch_cpu if wants_mkl and mkl else rt.blas_library_path)
    other = "openblas" if rt.gemm_library_path == torch_cpu else "mkl"
    if other == "mkl" and not mkl:
        pytest.skip("this torch build has no MKL: OpenBLAS is the only GEMM library")
    env = dict(os.environ, LAZYDEV_BLAS=other)
    want = "rt.blas_library_path" if other == "openblas" else repr(torch_cpu)
    check = f"import lazydev.runtime as rt; assert rt.gemm_library_path == {want}"
    res = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          f"{__file__}::test_gemm_transposes",
                          f"{__file__}::test_gemm_alpha_beta_broadcast_and_degenerate"],
                         env=env, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "10 passed" in res.stdout, res.stdout[-500:]


# ----------------------------------------------------------------- conv2d

CONV_C = r"""
int wse_entry(const wse_lib_t* lib, void* const* bufs, const double* s, int64_t* errinfo,
              int32_t* next, const volatile int32_t* stop) {
  int64_t p[WSE_CONV_NPARAMS];
  for (int i = 0; i < WSE_CONV_NPARAMS; i++) p[i] = (int64_t)s[i + 1];
  if (s[0] == 0) return lib->conv2d_f32(bufs[0], bufs[1], bufs[2], p, errinfo);
  if (s[0] == 1) return lib->conv2d_bwd_input_f32(bufs[0], bufs[1], bufs[2], p, errinfo);
  return lib->conv2d_bwd_weight_f32(bufs[0], bufs[1], bufs[2], p, errinfo);
}
"""

# (N, C, H, W, O, KH, KW, stride, padding, dilation, groups)
CONV_CONFIGS = [
    (2, 3, 9, 9, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1),
    (2, 4, 10, 8, 6, 3, 2, (2, 1), (0, 2), (1, 2), 2),
    (3, 6, 7, 7, 6, 3, 3, (1, 2), (2, 1), (2, 1), 6),     # depthwise: direct loops
    (1, 5, 9, 11, 5, 3, 2, (2, 2), (1, 0), (1, 3), 5),    # depthwise, one image
    (2, 3, 6, 6, 6, 2, 2, (1, 1), (1, 1), (1, 1), 3),     # channel multiplier 2: GEMM
    (2, 8, 6, 5, 4, 1, 1, (1, 1), (0, 0), (1, 1), 1),     # 1x1, few channels: direct loops
    (2, 300, 3, 2, 4, 1, 1, (1, 1), (0, 0), (1, 1), 1),   # 1x1, many: GEMM, no im2col
    (4, 2, 5, 5, 4, 1, 1, (2, 2), (1, 1), (1, 1), 2),     # 1x1 with stride/pad
    (1, 2, 4, 5, 3, 2, 2, (3, 2), (3, 3), (1, 1), 1),     # rows entirely in padding
    (16, 4, 8, 8, 8, 3, 3, (1, 1), (1, 1), (1, 1), 1),    # OpenMP over images
    (1, 16, 16, 16, 32, 3, 3, (1, 1), (1, 1), (1, 1), 1),  # one image: GEMM split in tiles
    (64, 16, 3, 3, 32, 3, 3, (1, 1), (1, 1), (1, 1), 2),   # many images, bwd-weight reduce
    # Direct loops (Note [Direct convolution]): two column tiles with a short last one, output
    # channel blocks of 8, 4 and 1, unequal kernel sides and padding.
    (4, 5, 9, 21, 13, 5, 3, (1, 1), (2, 0), (1, 1), 1),
    (3, 8, 7, 34, 6, 3, 3, (1, 1), (0, 1), (1, 1), 1),   # three tiles; 4 + 2 channels
    (2, 32, 5, 5, 16, 3, 3, (1, 1), (1, 1), (1, 1), 1),  # the largest direct reduction
    (3, 4, 6, 18, 5, 3, 2, (1, 1), (1, 1), (1, 1), 1),   # backward weight: a pair and a single
]


@pytest.fixture(scope="module")
def conv_prog(cdir):
    return build_program(cdir, "conv", CONV_C)


def _nan_buffer(shape):
    return Buffer.from_tensor(torch.full(shape, float("nan")))  # outputs must be overwritten


@pytest.mark.parametrize("cfg", CONV_CONFIGS, ids=lambda c: "x".join(map(str, c[:7])))
def test_conv2d_fwd_and_bwd(conv_prog, cfg):
    N, C, H, W, O, KH, KW, stride, pad, dil, groups = cfg
    x = torch.randn(N, C, H, W)
    w = torch.randn(O, C // groups, KH, KW)
    y = torch.nn.functional.conv2d(x, w, None, stride, pad, dil, groups)
    OH, OW = y.shape[2:]
    gy = torch.randn_like(y)
    p = [N, C, H, W, O, KH, KW, *stride, *pad, *dil, groups, OH, OW]
    tol = dict(rtol=1e-4, atol=1e-4)

    out = _nan_buffer(y.shape)
    conv_prog.run([Buffer.from_tensor(x), Buffer.from_tensor(w), out], [0, *p])
    torch.testing.assert_close(out.to_tensor(torch.float32, y.shape), y, **tol)

    gx_want = torch.nn.grad.conv2d_input(x.shape, w, gy, stride, pad, dil, groups)
    out = _nan_buffer(x.shape)
    conv_prog.run([Buffer.from_tensor(gy), Buffer.from_tensor(w), out], [1, *p])
    torch.testing.assert_close(out.to_tensor(torch.float32, x.shape), gx_want, **tol)

    gw_want = torch.nn.grad.conv2d_weight(x, w.shape, gy, stride, pad, dil, groups)
    out = _nan_buffer(w.shape)
    conv_prog.run([Buffer.from_tensor(gy), Buffer.from_tensor(x), out], [2, *p])
    torch.testing.assert_close(out.to_tensor(torch.float32, w.shape), gw_want, **tol)


# ----------------------------------------------------------------- errors

ERR_C = r"""
#include <time.h>
/* mode 0: gather out[i] = src[idx[i]] with a bounds check (negative wraps);
   mode 1: out[i] = src[i] // idx[i]; mode 2: unknown error code;
   mode 3: spin until Python sets *flag (proves the GIL is released). */
int wse_entry(const wse_lib_t* lib, void* const* bufs, const double* s, int64_t* errinfo,
              int32_t* next, const volatile int32_t* stop) {
  (void)lib;
  const int64_t* src = bufs[0];
  const int64_t* idx = bufs[1];
  int64_t* out = bufs[2];
  int64_t mode = s[0], n = s[1], size = s[2];
  if (mode == 2) return 7;
  if (mode == 3) {
    time_t t0 = time(NULL);
    while (!*(volatile int64_t*)bufs[0])
      if (time(NULL) - t0 > 5) return 9;
    return 0;
  }
  for (int64_t i = 0; i < n; i++) {
    if (mode == 0) {
      int64_t j = idx[i] < 0 ? idx[i] + size : idx[i];
      if (j < 0 || j >= size) { errinfo[0] = idx[i]; errinfo[1] = size; return WSE_ERR_INDEX; }
      out[i] = src[j];
    } else {
      if (idx[i] == 0) return WSE_ERR_ZERO_DIV;
      out[i] = wse_floordiv_i64(src[i], idx[i]);
    }
  }
  return WSE_OK;
}
"""


@pytest.fixture(scope="module")
def err_prog(cdir):
    return build_program(cdir, "errors", ERR_C)


def _err_bufs(src, idx):
    return [Buffer.from_tensor(torch.tensor(src)), Buffer.from_tensor(torch.tensor(idx)),
            Buffer(8 * len(idx))]


def test_program_index_error(err_prog):
    bufs = _err_bufs([10, 11, 12, 13, 14], [4, -1, 0])
    err_prog.run(bufs, [0, 3, 5])
    assert bufs[2].to_tensor(torch.int64, (3,)).tolist() == [14, 14, 10]
    with pytest.raises(IndexError, match=r"index 10 is out of bounds for dimension with size 5"):
        err_prog.run(_err_bufs([1, 2, 3, 4, 5], [0, 10]), [0, 2, 5])


def test_program_zero_division_and_unknown_code(err_prog):
    bufs = _err_bufs([7, -7], [2, 2])
    err_prog.run(bufs, [1, 2, 0])
    assert bufs[2].to_tensor(torch.int64, (2,)).tolist() == [3, -4]
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):      # the CPU's message
        err_prog.run(_err_bufs([1, 2], [1, 0]), [1, 2, 0])
    with pytest.raises(RuntimeError, match="error code 7"):
        err_prog.run(_err_bufs([1], [1]), [2, 1, 0])


def test_program_releases_gil(err_prog):
    flag = Buffer.from_tensor(torch.zeros(1, dtype=torch.int64))
    setter = threading.Timer(0.05, lambda: flag.numpy_view(np.int64, 1).__setitem__(0, 1))
    setter.start()
    t0 = time.perf_counter()
    err_prog.run([flag, flag, flag], [3, 0, 0])  # returns 9 (-> RuntimeError) if GIL held
    setter.join()
    assert time.perf_counter() - t0 < 5


def test_program_load_errors(cdir):
    with pytest.raises(RuntimeError, match="no_such_program.so"):
        Program(str(cdir / "no_such_program.so"))
    src = cdir / "no_entry.c"
    src.write_text("int not_the_entry(void) { return 0; }\n")
    so = cdir / "no_entry.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    with pytest.raises(RuntimeError, match="wse_entry"):
        Program(str(so))


# ----------------------------------------------------------------- prefix helpers

HELPERS_C = r"""
/* s[0] selects the helper, s[1] = n; bufs[0], bufs[1] inputs, bufs[2] output. */
int wse_entry(const wse_lib_t* lib, void* const* bufs, const double* s, int64_t* errinfo,
              int32_t* next, const volatile int32_t* stop) {
  (void)lib; (void)errinfo;
  int op = (int)s[0];
  int64_t n = s[1];
  const void* a = bufs[0];
  const void* b = bufs[1];
  void* o = bufs[2];
  for (int64_t i = 0; i < n; i++) {
    const float* fa = a; const float* fb = b; float* fo = o;
    const double* da = a; const double* db = b; double* dout = o;
    const int64_t* ia = a; const int64_t* ib = b; int64_t* io = o;
    const uint16_t* ha = a; uint16_t* ho = o;
    switch (op) {
      case 0: ho[i] = wse_f32_to_f16(fa[i]); break;
      case 1: fo[i] = wse_f16_to_f32(ha[i]); break;
      case 2: ho[i] = wse_f32_to_bf16(fa[i]); break;
      case 3: fo[i] = wse_bf16_to_f32(ha[i]); break;
      case 4: io[i] = wse_floordiv_i64(ia[i], ib[i]); break;
      case 5: io[i] = wse_mod_i64(ia[i], ib[i]); break;
      case 6: dout[i] = wse_remainder(da[i], db[i]); break;
      case 7: dout[i] = wse_floordiv(da[i], db[i]); break;
      case 8: dout[i] = wse_fmod(da[i], db[i]); break;
      case 9: fo[i] = wse_remainderf(fa[i], fb[i]); break;
      case 10: fo[i] = wse_floordivf(fa[i], fb[i]); break;
      case 11: dout[i] = wse_sigmoid(da[i]); break;
      case 12: dout[i] = wse_gelu(da[i]); break;
      case 13: dout[i] = wse_gelu_grad(da[i]); break;
      case 14: fo[i] = wse_sigmoidf(fa[i]); break;
      case 15: fo[i] = wse_geluf(fa[i]); break;
      case 16: fo[i] = wse_gelu_gradf(fa[i]); break;
    }
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def helpers(cdir):
    prog = build_program(cdir, "helpers", HELPERS_C)

    def call(op, a, b=None, out_dtype=None):
        a = a.contiguous()
        b = a if b is None else b
        out = Buffer(a.numel() * torch.empty(0, dtype=out_dtype).element_size())
        prog.run([Buffer.from_tensor(a), Buffer.from_tensor(b), out], [op, a.numel()])
        return out.to_tensor(out_dtype, a.shape)

    return call


def _float_sweep():
    g = torch.Generator().manual_seed(0)
    rand_bits = torch.randint(-(2**31), 2**31 - 1, (200_000,), generator=g, dtype=torch.int64)
    halves = torch.arange(0, 0x7C00, dtype=torch.int32).to(torch.int16).view(torch.float16)
    h = halves.double()
    mids = (h[:-1] + h[1:]) / 2  # exact ties: round-to-nearest-even territory
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 65504.0,
                            65519.99, 65520.0, 2.0**-24, 2.0**-25, 2.0**-25 * 1.0001, 2.0**-26,
                            2.0**-14, 2.0**-14 * (1 - 2**-11), 1e-45, 3.4e38, 1.0 / 3])
    parts = [rand_bits.to(torch.int32).view(torch.float32), mids.float(),
             torch.nextafter(mids.float(), torch.tensor(float("inf"))),
             torch.nextafter(mids.float(), torch.tensor(-float("inf"))), special.float()]
    x = torch.cat(parts)
    return torch.cat([x, -x])


def _assert_bits_equal(got_bits, want_float, half_dtype):
    want_bits = want_float.view(torch.int16)
    nan = torch.isnan(want_float)
    assert torch.equal(got_bits.view(torch.int16)[~nan], want_bits[~nan])
    assert torch.isnan(got_bits.view(half_dtype)[nan].float()).all()


@pytest.mark.parametrize("dtype,to_op,from_op", [(torch.float16, 0, 1), (torch.bfloat16, 2, 3)],
                         ids=["f16", "bf16"])
def test_half_conversions_match_torch(helpers, dtype, to_op, from_op):
    x = _float_sweep()
    _assert_bits_equal(helpers(to_op, x, out_dtype=torch.int16), x.to(dtype), dtype)
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)  # all 65536 values
    got = helpers(from_op, every, out_dtype=torch.float32)
    torch.testing.assert_close(got, every.view(dtype).float(), rtol=0, atol=0, equal_nan=True)


def test_integer_floordiv_mod_match_torch(helpers):
    a = torch.arange(-50, 51, dtype=torch.int64)
    b = torch.tensor([-7, -3, -2, -1, 1, 2, 3, 7, 2**40, -(2**40)], dtype=torch.int64)
    A, B = torch.cartesian_prod(a, b).unbind(1)
    big = torch.tensor([2**62, -(2**62), 2**63 - 1, -(2**63)], dtype=torch.int64)
    A = torch.cat([A, big, big])
    B = torch.cat([B, torch.tensor([3, 3, -5, 7, -1, -1, 2**33, 9], dtype=torch.int64)])
    keep = ~((A == -(2**63)) & (B == -1))  # overflow: torch result is implementation-defined
    A, B = A[keep], B[keep]
    got_div = helpers(4, A, B, out_dtype=torch.int64)
    got_mod = helpers(5, A, B, out_dtype=torch.int64)
    assert torch.equal(got_div, torch.div(A, B, rounding_mode="floor"))
    assert torch.equal(got_mod, torch.remainder(A, B))


def test_float_div_helpers_match_torch(helpers):
    g = torch.Generator().manual_seed(1)
    a = torch.cat([torch.randn(2000, generator=g, dtype=torch.float64) * 100,
                   torch.tensor([0.0, -0.0, 5.0, -5.0, 6.0, -6.0, float("inf"), 3.0])])
    b = torch.cat([torch.randn(2000, generator=g, dtype=torch.float64) * 10,
                   torch.tensor([3.0, 3.0, float("inf"), float("inf"), -3.0, 3.0, 2.0, 0.0])])
    exact = dict(rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(helpers(6, a, b, out_dtype=torch.float64), torch.remainder(a, b),
                               **exact)
    torch.testing.assert_close(helpers(7, a, b, out_dtype=torch.float64),
                               torch.div(a, b, rounding_mode="floor"), **exact)
    torch.testing.assert_close(helpers(8, a, b, out_dtype=torch.float64), torch.fmod(a, b), **exact)
    af, bf = a.float(), b.float()
    torch.testing.assert_close(helpers(9, af, bf, out_dtype=torch.float32), torch.remainder(af, bf),
                               equal_nan=True)
    torch.testing.assert_close(helpers(10, af, bf, out_dtype=torch.float32),
                               torch.div(af, bf, rounding_mode="floor"), equal_nan=True)


def test_activation_helpers_match_torch(helpers):
    x = torch.cat([torch.linspace(-12, 12, 4001, dtype=torch.float64),
                   torch.tensor([-800.0, 800.0, 0.0])])
    xg = x.clone().requires_grad_()
    gelu = torch.nn.functional.gelu(xg)
    (grad,) = torch.autograd.grad(gelu.sum(), xg)
    torch.testing.assert_close(helpers(11, x, out_dtype=torch.float64), torch.sigmoid(x))
    torch.testing.assert_close(helpers(12, x, out_dtype=torch.float64), gelu.detach())
    torch.testing.assert_close(helpers(13, x, out_dtype=torch.float64), grad)
    xf = x.float()
    torch.testing.assert_close(helpers(14, xf, out_dtype=torch.float32), torch.sigmoid(xf))
    torch.testing.assert_close(helpers(15, xf, out_dtype=torch.float32),
                               torch.nn.functional.gelu(xf))
    torch.testing.assert_close(helpers(16, xf, out_dtype=torch.float32), grad.float())


def test_repeated_loop_nests_are_compiled_once():
    """Note [Kernel deduplication]: the same layer over other buffers and scalars is one kernel
    function, called once per use; the values stay those of CPU eager."""
    from lazydev import compile as lzc
    torch.manual_seed(0)
    x = torch.randn(16, 8)
    ws = [torch.randn(8, 8) for _ in range(4)]
    y, h = x.to("wse"), x
    for i, w in enumerate(ws):
        y = torch.tanh(y @ w.to("wse")) * (0.5 + i) + 0.25 * i
        h = torch.tanh(h @ w) * (0.5 + i) + 0.25 * i
    assert_same(y.cpu(), h)
    units = lzc.last_compiled["units"]
    layout = lzc.last_compiled["layout"]
    defined = sum(u.count(") {\n  int err = 0;") for u in units)
    assert layout.kernels == 8
    assert defined == 2, units[-1]


def test_a_program_says_whether_it_may_fork_the_team():
    """Note [Team hold]: a program without a parallel loop or a library call cannot start the
    OpenMP team (Layout.forks false), so running it holds no worker; one with either may."""
    from lazydev import compile as lzc
    from lazydev.compile.codegen import PARALLEL_MIN
    torch.manual_seed(0)
    forks = []
    for x, w in ((torch.randn(8), None), (torch.randn(4 * PARALLEL_MIN), None),
                 (torch.randn(8, 8), torch.randn(8, 8))):
        y = torch.tanh(x.to("wse")) * 2 if w is None else x.to("wse") @ w.to("wse")
        assert_same(y.cpu(), torch.tanh(x) * 2 if w is None else x @ w)
        forks.append(lzc.last_compiled["layout"].forks)
    assert forks == [False, True, True]


@pytest.fixture
def scratch_limit():
    """Scratch requests of the library routines over the limit fail (Note [Scratch failures]
    in csrc/wse_runtime.c), as malloc would for huge inputs; 0 lifts it."""
    from _lazydev_wse import lib
    yield lib.wse_set_scratch_limit
    lib.wse_set_scratch_limit(0)


# (in, out, groups, stride): the direct loops, im2col + GEMM, depthwise (csrc/wse_conv.c)
@pytest.mark.parametrize("cin,cout,groups,stride", [(3, 8, 1, 1), (8, 16, 1, 2), (8, 8, 8, 1)])
def test_a_convolution_short_of_scratch_raises_and_changes_nothing(scratch_limit, cin, cout,
                                                                    groups, stride):
    torch.manual_seed(0)
    cpu = torch.nn.Conv2d(cin, cout, 3, stride=stride, padding=1, groups=groups)
    x = torch.randn(4, cin, 12, 12)
    dev = torch.nn.Conv2d(cin, cout, 3, stride=stride, padding=1, groups=groups)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("wse")
    xw = x.to("wse")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (cpu, dev)]

    def step(model, inp, opt):
        loss = model(inp).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    before = cpu.weight.detach().clone()
    lazydev.mark_step()
    scratch_limit(16)       # the depthwise backward weight's scratch is one output row
    step(dev, xw, opts[1])
    lazydev.mark_step()
    with pytest.raises(DeviceOutOfMemoryError, match="scratch"):
        dev.weight.cpu()
    scratch_limit(0)
    torch.testing.assert_close(dev.weight.cpu(), before, rtol=0, atol=0)
    loss = step(dev, xw, opts[1])
    lazydev.mark_step()
    torch.testing.assert_close(loss.item(), step(cpu, x, opts[0]).item(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dev.weight.cpu(), cpu.weight.detach(), rtol=1e-5, atol=1e-6)


def test_a_sort_short_of_scratch_raises_and_the_next_one_runs(scratch_limit):
    x = torch.randn(64, 300)
    xw = x.to("wse")
    lazydev.mark_step()
    scratch_limit(16)
    values, _ = torch.sort(xw, dim=1)
    with pytest.raises(DeviceOutOfMemoryError, match="scratch"):
        values.cpu()
    scratch_limit(0)
    values, indices = torch.sort(xw, dim=1)
    expected = torch.sort(x, dim=1)
    assert torch.equal(values.cpu(), expected.values)
    assert torch.equal(indices.cpu(), expected.indices)
