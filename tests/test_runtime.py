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
import weakref

import numpy as np
import pytest
import torch

import lazydev
import lazydev.runtime as rt
from conftest import assert_same
from lazydev.runtime import Buffer, DeviceOutOfMemoryError, Program

REPO = pathlib.Path(__file__).resolve().parents[1]
CFLAGS = ["-O2", "-march=native", "-fopenmp", "-shared", "-fPIC", "-Wall", "-Werror"]


def build_program(directory, name, body) -> Program:
    src = pathlib.Path(directory) / f"{name}.c"
    so = pathlib.Path(directory) / f"{name}.so"
    src.write_text(rt.prefix_source() + "\n" + body)
    res = subprocess.run(["gcc", *CFLAGS, "-o", str(so), str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return Program(str(so))


@pytest.fixture(scope="module")
def cdir(tmp_path_factory):
    return tmp_path_factory.mktemp("wse_programs")


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

GEMM_C = r"""
int wse_entry(const wse_lib_t* lib, void* const* bufs, const double* s, int64_t* errinfo,
              int32_t* next, const volatile int32_t* stop) {
  (void)errinfo;
  int64_t b = s[1], ta = s[2], tb = s[3], M = s[4], N = s[5], K = s[6];
  int64_t lda = s[8], sa = s[9], ldb = s[10], sb = s[11], ldc = s[13], sc = s[14];
  if (s[0] == 32)
    lib->gemm_f32(b, ta, tb, M, N, K, (float)s[7], bufs[0], lda, sa, bufs[1], ldb, sb,
                  (float)s[12], bufs[2], ldc, sc);
  else
    lib->gemm_f64(b, ta, tb, M, N, K, s[7], bufs[0], lda, sa, bufs[1], ldb, sb,
                  s[12], bufs[2], ldc, sc);
  return 0;
}
"""


@pytest.fixture(scope="module")
def gemm_prog(cdir):
    return build_program(cdir, "gemm", GEMM_C)


def _padded(batch, rows, cols, pad, dtype):
    """A (batch, rows, cols) operand stored with leading dimension cols + pad."""
    store = torch.randn(batch, rows, cols + pad, dtype=dtype)
    return store, store[..., :cols]


def run_gemm(prog, dtype, batch, ta, tb, M, N, K, alpha=1.0, beta=0.0, pad=0, bcast_a=False):
    a_store, a = _padded(1 if bcast_a else batch, K if ta else M, M if ta else K, pad, dtype)
    b_store, bm = _padded(batch, N if tb else K, K if tb else N, pad, dtype)
    c_store, c0 = _padded(batch, M, N, pad, dtype)
    if beta == 0:
        c_store.fill_(float("nan"))  # beta == 0 must not read C (BLAS semantics)
    bufs = [Buffer.from_tensor(x) for x in (a_store, b_store, c_store)]
    sa = 0 if bcast_a else a_store[0].numel()
    prog.run(bufs, [32 if dtype == torch.float32 else 64, batch, ta, tb, M, N, K, alpha,
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
    torch.testing.assert_close(helpers(6, a, b, out_dtype=torch.float64), torch.remainder(a, b), **exact)
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


# ----------------------------------------------------------------- execution queue

def test_a_host_that_waits_runs_the_queued_jobs_itself_in_order(monkeypatch):
    """Note [Who runs a program]: jobs the worker has not started run on the waiting thread,
    in submission order and only up to the one waited for; the rest run on the worker."""
    from lazydev.runtime import queue as Q
    q, ran = Q.ExecQueue(), []

    def job(k):
        return lambda: ran.append((k, threading.current_thread().name))
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)       # the worker never gets there first
    tickets = [q.submit(job(k)) for k in range(3)]
    assert q.wait(tickets[1]) == []
    assert ran == [(0, "MainThread"), (1, "MainThread")]
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    later = q.submit(job(3))                          # wakes the worker, nobody waits
    assert later.done.wait(10)
    assert ran[2:] == [(2, "lazydev-exec"), (3, "lazydev-exec")]
    q.shutdown()


def test_a_generated_program_pauses_between_kernel_calls_and_resumes_there(cdir):
    """The entry compile/program.py generates stops before the next call once asked, and a
    later resume (from any thread) runs on from there, not from the start."""
    from lazydev.compile.kernels import KERNEL_ARGS
    from lazydev.compile.program import _entry
    kernel = ("WSE_KERNEL int k0(" + KERNEL_ARGS + ") {\n  float* x = (float*)P[0];\n"
              "  x[0] = x[0] * 2.0f + 1.0f;\n  return 0;\n}\n")
    calls = [(0, [0], []), (0, [0], []), (0, [0], [])]           # x -> ((2x+1)*2+1)*2+1
    # Generated programs build with -w; gcc -Wall doubts the entry's argument table P.
    body = ('#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"\n'
            '#define WSE_KERNEL __attribute__((visibility("hidden")))\n' + kernel
            + _entry(1, calls, 1))
    prog = build_program(cdir, "pausable", body)
    x = Buffer.from_tensor(torch.tensor([1.0]))
    run = prog.start([x, Buffer(64)], [])
    run.pause()
    assert run.resume() is False and x.to_tensor(torch.float32, (1,)).item() == 1.0
    assert run.resume() is False                       # still paused: nothing ran
    assert run.resume(unpause=True) is True
    assert x.to_tensor(torch.float32, (1,)).item() == 15.0
    assert run.resume() is True                        # finished: nothing runs twice
    assert x.to_tensor(torch.float32, (1,)).item() == 15.0


def _long_call_program(cdir, name, sliced=()):
    """x -> (x + 1) * 10 + 1 in three calls, the middle one 3 ms long; `sliced`: the kernels
    flagged as able to pause inside themselves (program._entry)."""
    from lazydev.compile.kernels import KERNEL_ARGS
    from lazydev.compile.program import _entry
    kernels = ("WSE_KERNEL int k0(" + KERNEL_ARGS + ") {\n  float* x = (float*)P[0];\n"
               "  x[0] += 1.0f;\n  return 0;\n}\n"
               "WSE_KERNEL int k1(" + KERNEL_ARGS + ") {\n  float* x = (float*)P[0];\n"
               "  const int64_t t0 = wse_clock_ns();\n"
               "  while (wse_clock_ns() - t0 < 3000000) {}\n  x[0] *= 10.0f;\n  return 0;\n}\n")
    calls = [(0, [0], []), (1, [0], []), (0, [0], [])]
    body = ('#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"\n'
            '#define WSE_KERNEL __attribute__((visibility("hidden")))\n' + kernels
            + _entry(1, calls, 2, sliced))
    return build_program(cdir, name, body)


def test_a_run_stops_before_the_call_it_is_told_to_and_goes_on_from_there(cdir):
    """stop[3] (csrc/wse_prefix.h): `until` pauses before that call; the position says how
    many calls ran; a later resume runs the rest."""
    prog = _long_call_program(cdir, "until")
    x = Buffer.from_tensor(torch.tensor([0.0]))
    run = prog.start([x, Buffer(64)], [])
    assert run.resume(until=2) is False and run.position() == (2, 0)
    assert x.to_tensor(torch.float32, (1,)).item() == 10.0
    assert run.resume() is True and run.position() == (3, 0)
    assert x.to_tensor(torch.float32, (1,)).item() == 11.0


def test_a_worker_limit_stops_before_a_call_whose_last_run_was_long(cdir):
    """stop[1] (csrc/wse_prefix.h): a run with a limit pauses before any call whose last run
    took longer, and one without runs on from there."""
    prog = _long_call_program(cdir, "limited")
    x = Buffer.from_tensor(torch.tensor([0.0]))
    assert prog.start([x, Buffer(64)], []).resume(limit_us=500) is True   # no times yet: 11
    run = prog.start([x, Buffer(64)], [])
    assert run.resume(limit_us=500) is False                          # stops before the 3 ms
    assert x.to_tensor(torch.float32, (1,)).item() == 12.0
    assert run.resume(limit_us=10**6) is True                         # under this limit
    assert x.to_tensor(torch.float32, (1,)).item() == 121.0


def test_a_long_call_that_fits_in_the_budget_starts_under_the_limit(cdir):
    """stop[4] (WSE_IN_BUDGET, csrc/wse_prefix.h): a run with a limit starts a long call if
    twice its last run ends within the budget (Note [Worker's budget]), and stops before it
    if not."""
    prog = _long_call_program(cdir, "budget")
    x = Buffer.from_tensor(torch.tensor([0.0]))
    assert prog.start([x, Buffer(64)], []).resume(limit_us=500) is True   # 3 ms: 11
    run = prog.start([x, Buffer(64)], [])
    assert run.resume(limit_us=500, budget_us=5000) is False          # 2 x 3 ms > 5 ms
    assert x.to_tensor(torch.float32, (1,)).item() == 12.0
    assert run.resume(limit_us=500, budget_us=10**6) is True          # 6 ms fit in 1 s
    assert x.to_tensor(torch.float32, (1,)).item() == 121.0


def test_a_sliced_kernel_starts_under_the_limit_however_long_its_last_run(cdir):
    """Note [Sliced GEMM]: a kernel that can pause inside itself is started by a run with a
    limit even after a long run, where any other kernel would be left for the host."""
    prog = _long_call_program(cdir, "sliced_limit", sliced={1})
    x = Buffer.from_tensor(torch.tensor([0.0]))
    assert prog.start([x, Buffer(64)], []).resume(limit_us=500) is True   # 11
    assert prog.start([x, Buffer(64)], []).resume(limit_us=500) is True   # the 3 ms call too
    assert x.to_tensor(torch.float32, (1,)).item() == 121.0


SLICED_GEMM_C = r"""
int wse_entry(const wse_lib_t* lib, void* const* bufs, const double* s, int64_t* errinfo,
              int32_t* next, const volatile int32_t* stop) {
  (void)errinfo; (void)stop;
  if (*next) return 0;
  int64_t b = s[1], ta = s[2], tb = s[3], M = s[4], N = s[5], K = s[6];
  int64_t lda = s[8], sa = s[9], ldb = s[10], sb = s[11], ldc = s[13], sc = s[14];
  int rc = s[0] == 32
      ? lib->gemm_f32_sliced(b, ta, tb, M, N, K, (float)s[7], bufs[0], lda, sa, bufs[1], ldb,
                             sb, (float)s[12], bufs[2], ldc, sc, (int64_t)s[15], NULL)
      : lib->gemm_f64_sliced(b, ta, tb, M, N, K, s[7], bufs[0], lda, sa, bufs[1], ldb, sb,
                             s[12], bufs[2], ldc, sc, (int64_t)s[15], NULL);
  if (rc) return rc;
  *next = 1;
  return 0;
}
"""


@pytest.mark.parametrize("dtype,batch,ta,tb,M,N,K,pad", [
    (torch.float32, 1, 0, 0, 512, 256, 512, 0),     # taller than wide: tiles of rows
    (torch.float32, 1, 1, 1, 128, 1024, 512, 3),    # wider than tall: tiles of columns
    (torch.float64, 1, 1, 0, 96, 4096, 256, 1),
    (torch.float32, 6, 0, 1, 256, 256, 256, 2),     # a batch: whole products
])
def test_a_sliced_gemm_pauses_between_tiles_and_its_bits_follow_no_thread(
        cdir, dtype, batch, ta, tb, M, N, K, pad):
    """Note [Sliced GEMM], Note [Fixed tiles]: under a long-call limit a paused run computes
    whole tiles and stops with the tiles done in its position; a run without a limit computes
    the rest at once. The product is bit-identical whoever runs it: the host's team unpaused,
    one thread (the queue's worker) unpaused, or the worker paused and the host finishing."""
    prog = build_program(cdir, "sliced_gemm", SLICED_GEMM_C)
    a_store, a = _padded(batch, K if ta else M, M if ta else K, pad, dtype)
    b_store, bm = _padded(batch, N if tb else K, K if tb else N, pad, dtype)
    c_store, _ = _padded(batch, M, N, pad, dtype)
    c_store.fill_(float("nan"))
    args = [32 if dtype == torch.float32 else 64, batch, ta, tb, M, N, K, 1.0,
            a_store.shape[-1], a_store[0].numel(), b_store.shape[-1], b_store[0].numel(), 0.0,
            c_store.shape[-1], c_store[0].numel(), 0]

    def start():
        bufs = [Buffer.from_tensor(x) for x in (a_store, b_store, c_store)]
        return prog.start(bufs, args), bufs[2]

    def on_thread(fn):
        out = []
        t = threading.Thread(target=lambda: out.append(fn()))
        t.start()
        t.join()
        return out[0]

    def product(c):
        return c.to_tensor(dtype, c_store.shape)[..., :N]
    host, c_host = start()
    assert host.resume() is True
    serial, c_serial = start()
    assert on_thread(serial.resume) is True
    paused, c_paused = start()
    paused.pause()
    assert on_thread(lambda: paused.resume(limit_us=10**6)) is False
    calls, tiles = paused.position()
    assert calls == 0 and tiles > 0
    assert paused.resume(unpause=True) is True and paused.position() == (1, 0)
    want = product(c_host)
    assert torch.equal(product(c_serial), want) and torch.equal(product(c_paused), want)
    opa = a.double().transpose(-1, -2) if ta else a.double()
    opb = bm.double().transpose(-1, -2) if tb else bm.double()
    torch.testing.assert_close(want.double(), opa @ opb, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("share,per_thread", [(None, 4), (2, 2), (1, 1), (1000, 4)])
def test_a_paused_worker_stops_after_one_tile_of_as_many_as_the_program_allows(
        cdir, share, per_thread):
    """Note [Tiles for the worker] (csrc/wse_kernels.c): a large product is cut into four
    tiles per thread of the host's team, so a host asking the worker to pause waits for an
    eighth of it on two threads, not half: the paused run has written one tile of columns.
    Note [Program-sized tiles]: a program that lets a tile hold 1/`share` of a thread's part
    of the product gets `share` tiles per thread, never more than four."""
    prog = build_program(cdir, "sliced_gemm_quarters", SLICED_GEMM_C)
    M, N, K = 128, 1024, 2048
    team = torch.get_num_threads()
    max_tile = 0 if share is None else M * N * K // (team * share)
    a, b = torch.randn(M, K), torch.randn(K, N)
    c = torch.full((M, N), float("nan"))
    bufs = [Buffer.from_tensor(x) for x in (a, b, c)]
    run = prog.start(bufs, [32, 1, 0, 0, M, N, K, 1.0, K, 0, N, 0, 0.0, N, 0, max_tile])
    run.pause()
    done = []
    t = threading.Thread(target=lambda: done.append(run.resume(limit_us=10**6)))
    t.start()
    t.join()
    tiles = per_thread * team if team > 1 else 1
    written = ~bufs[2].to_tensor(torch.float32, (M, N)).isnan()
    assert done == [tiles == 1] and run.position() == ((1, 0) if tiles == 1 else (0, 1))
    assert written.sum().item() == M * N // tiles and written[:, :N // tiles].all()
    assert run.resume(unpause=True) is True
    torch.testing.assert_close(bufs[2].to_tensor(torch.float32, (M, N)), a @ b,
                               rtol=1e-4, atol=1e-3)


def _bits_whoever_runs(monkeypatch, step, inputs):
    """`step(*inputs)` on wse twice, the host taking the step's program, then the queue's
    one-thread worker running it before anyone asks; both results, on the CPU."""
    from lazydev.runtime import queue as Q
    dev = [x.detach().to("wse").requires_grad_(x.requires_grad) for x in inputs]
    lazydev.mark_step()
    got = []
    for grace in (60.0, 0.0):                   # the host takes the step; the worker runs it
        monkeypatch.setattr(Q, "HOST_GRACE", grace)
        out = step(*dev)
        lazydev.mark_step()
        if grace == 0.0:
            assert Q.EXEC._last.done.wait(30)   # finished before anyone asked for it
        got.append([o.cpu() for o in out])
    return got


def _sum_step(x):
    return [(x * 1.0001).sum()]


def _conv_step(x, w):
    w.grad = None
    y = torch.nn.functional.conv2d(x, w, padding=1)
    y.square().sum().backward()
    return [y, w.grad]


def _gemm_step(a, b):
    return [a @ b]


@pytest.mark.parametrize("step,shapes,dtype", [
    (_sum_step, [(1 << 20,)], torch.float64),           # float32 sums accumulate in double
    (_conv_step, [(8, 64, 14, 14), (32, 64, 3, 3)], torch.float32),   # im2col + GEMM path
    (_gemm_step, [(128, 784), (784, 1024)], torch.float32),    # two tiles on two threads
])
def test_a_step_has_the_same_bits_whoever_runs_it(monkeypatch, step, shapes, dtype):
    """Note [Fixed sums] (compile/kernels.py), Note [Fixed tiles] (csrc/wse_kernels.c): how a
    sum, a conv's weight gradient and a GEMM split their work follows the host's team, not
    the thread running the step, so the host and the queue's worker agree to the bit."""
    g = torch.Generator().manual_seed(3)
    # Scaled so that sums of hundreds of products stay near 1, where the CPU's own rounding
    # is well inside the tolerance table.
    inputs = [torch.randn(s, generator=g, dtype=dtype) / 16 for s in shapes]
    if step is _conv_step:
        inputs[1].requires_grad_()
    host, worker = _bits_whoever_runs(monkeypatch, step, inputs)
    for h, w in zip(host, worker):
        assert torch.equal(h, w)
    cpu = step(*[x.detach().requires_grad_(x.requires_grad) for x in inputs])
    for h, c in zip(host, cpu):
        assert_same(h, c.detach())


def test_the_worker_runs_a_long_gemm_in_slices_and_the_host_finishes_it(monkeypatch):
    """Note [Who runs a program]: the worker starts a queued step's GEMM, however long, and a
    host that then reads its result takes the run over between two slices: its first resume
    starts inside the GEMM, past the blocks the worker computed. The values are right."""
    from lazydev.runtime import device as D, queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    resumes, worker_in = [], threading.Event()
    orig = D.Run.resume

    def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
        on_worker = threading.current_thread().name == "lazydev-exec"
        if on_worker:
            worker_in.set()
        before = self.position()
        done = orig(self, unpause, limit_us, until, budget_us)
        resumes.append((on_worker, before, self.position(), done))
        return done
    monkeypatch.setattr(D.Run, "resume", resume)
    a = torch.randn(1024, 1024)
    x = a.to("wse")
    lazydev.mark_step()
    y = (x @ x) * 0.5                       # ~40 ms of GEMM on one core
    lazydev.mark_step()
    assert worker_in.wait(30)
    time.sleep(0.005)
    got = y.cpu()
    torch.testing.assert_close(got, (a @ a) * 0.5, rtol=1e-4, atol=1e-3)
    paused = [r for r in resumes if r[0] and not r[3]]
    assert paused and paused[-1][2][1] > 0, resumes       # stopped inside the GEMM
    host = [r for r in resumes if not r[0]]
    assert host and host[0][1] == paused[-1][2], resumes  # and the host went on from there


def test_a_loss_read_after_mark_step_waits_for_the_calls_that_write_it_only(monkeypatch):
    """Note [Early reads]: a scalar's calls come first in the program, whatever order the
    step made its outputs in, and reading it runs the program only that far on the host; the
    worker runs the rest (here a big GEMM cut before the loss). Both values are right."""
    from lazydev.runtime import device as D, queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)       # the worker starts nothing by itself
    resumes = []
    orig = D.Run.resume

    def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
        before = self.position()[0]
        done = orig(self, unpause, limit_us, until, budget_us)
        resumes.append((threading.current_thread().name, until, before, done))
        return done
    monkeypatch.setattr(D.Run, "resume", resume)
    a, b = torch.randn(512, 512), torch.randn(64, 512)
    w, x = a.to("wse"), b.to("wse")
    lazydev.mark_step()
    lazydev.wait()
    resumes.clear()
    y = w @ w                                       # cut first
    loss = torch.tanh(x @ w).mean()
    lazydev.mark_step()
    torch.testing.assert_close(loss.item(), torch.tanh(b @ a).mean().item(), rtol=1e-5,
                               atol=1e-5)
    host = resumes[0]
    assert host[0] == "MainThread" and 0 < host[1] and host[3] is False, resumes
    deadline = time.time() + 10
    while len(resumes) < 2 and time.time() < deadline:   # the worker takes it at once
        time.sleep(0.001)
    assert resumes[1][0] == "lazydev-exec" and resumes[1][2] == host[1], resumes
    torch.testing.assert_close(y.cpu(), a @ a, rtol=1e-4, atol=1e-3)


def test_a_synchronous_step_runs_after_the_steps_queued_before_it(monkeypatch):
    """config.async_exec=False: mark_step's program runs before mark_step returns, but after
    the programs queued before it, here the rest of a step whose loss was read early, which
    writes what it reads (it used to run at once, beside them, and read garbage)."""
    from lazydev.runtime import device as D
    orig = D.Run.resume

    def slow_worker(self, unpause=False, limit_us=0, until=0, budget_us=0):
        if threading.current_thread().name == "lazydev-exec":
            time.sleep(0.2)         # the rest of the first step is still queued below
        return orig(self, unpause, limit_us, until, budget_us)
    monkeypatch.setattr(D.Run, "resume", slow_worker)
    a = torch.randn(256, 256)
    w, p = a.to("wse"), torch.zeros(256, 256).to("wse")
    lazydev.mark_step()
    lazydev.wait()
    loss = w.sum()
    p.add_(w @ w)                   # after the loss in the program: left to the worker
    lazydev.mark_step()
    torch.testing.assert_close(loss.item(), a.sum().item(), rtol=1e-5, atol=1e-3)
    monkeypatch.setattr(lazydev.config, "async_exec", False)
    q = p * 2
    lazydev.mark_step()
    assert q._st.buf.ticket is None or q._st.buf.ticket.done.is_set()   # ran in mark_step
    torch.testing.assert_close(q.cpu(), (a @ a) * 2, rtol=1e-4, atol=1e-3)


def test_an_op_recorded_on_another_thread_is_never_cut_in_half(monkeypatch):
    """Note [One recorder at a time]: a thread in the middle of recording an op (held there a
    moment, after its node is made and before its result is registered) keeps the trace to
    itself, so a mark_step on another thread cannot cut between the two; unguarded, the op's
    node read an input slot of the trace the cut had closed."""
    from lazydev.trace import state as S
    inside, cut = threading.Event(), threading.Event()
    pending = S.Storage.pending.__func__

    def held(cls, numel, node):
        if threading.current_thread().name == "loader" and not inside.is_set():
            inside.set()
            cut.wait(0.5)           # the main thread's mark_step comes here, or waits
        return pending(cls, numel, node)
    monkeypatch.setattr(S.Storage, "pending", classmethod(held))
    a = torch.randn(1000)
    x = a.to("wse")
    lazydev.mark_step()
    lazydev.wait()
    out = {}
    loader = threading.Thread(target=lambda: out.update(y=x * 2 - 1), name="loader")
    loader.start()
    assert inside.wait(10)
    z = x + 1
    lazydev.mark_step()
    cut.set()
    loader.join(10)
    lazydev.mark_step()
    assert_same(out["y"], a * 2 - 1)
    assert_same(z, a + 1)


@pytest.mark.parametrize("worker_fails_first", [False, True])
def test_a_value_read_before_its_step_failed_keeps_it_and_the_step_s_updates_are_undone(
        monkeypatch, worker_fails_first):
    """Note [Early reads]: a loss read after its own calls stays readable, with the same value,
    when a later call of its step fails, also when the worker, given the rest, fails before the
    reading host is back; the failure is raised at the next read and the step's update to an
    existing tensor is undone."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)       # the host runs the step up to the loss
    if worker_fails_first:
        release = Q.ExecQueue._release

        def late_host(self, paused=None, handed=False):
            release(self, paused, handed)
            if handed:                  # the worker runs the rest, into the failure, first
                assert paused[1].done.wait(10)
        monkeypatch.setattr(Q.ExecQueue, "_release", late_host)
    x = torch.randn(1000)
    xw, idx, p = x.to("wse"), torch.tensor([5, 2000]).to("wse"), torch.zeros(3).to("wse")
    lazydev.mark_step()
    lazydev.wait()
    bad = xw[idx]                                     # index 2000 of 1000: fails on the device
    loss = xw.sum()
    p.add_(1)
    lazydev.mark_step()
    first = loss.item()
    torch.testing.assert_close(first, x.sum().item(), rtol=1e-5, atol=1e-4)
    with pytest.raises(IndexError, match="2000 is out of bounds"):
        bad.cpu()
    assert loss.item() == first
    assert p.cpu().tolist() == [0.0, 0.0, 0.0]


def _on_worker(q, fn):
    """Run fn as a job nobody waits for, so the worker runs it; the thread that ran it."""
    where = []
    ticket = q.submit(lambda: where.append((fn(), threading.current_thread().name)))
    assert ticket.done.wait(10) and ticket.error is None     # the worker runs it: none waits
    return where[0][1]


def test_the_worker_forks_no_openmp_team_of_its_own(gemm_prog, monkeypatch):
    """Note [One OpenMP team] (csrc/wse_runtime.c): a team forked by the worker would make
    libgomp throttle every team in the process. A GEMM big enough to fork, run by the worker,
    starts no thread, and is right."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    q = Q.ExecQueue()
    assert _on_worker(q, lambda: None) == "lazydev-exec"           # the worker thread exists
    run, check = _big_gemm(gemm_prog)
    threads = set(os.listdir("/proc/self/task"))
    assert _on_worker(q, run) == "lazydev-exec"
    assert set(os.listdir("/proc/self/task")) == threads
    check()
    q.shutdown()


def _big_gemm(gemm_prog):
    """(run, check): a 256^3 GEMM, enough work to fork a team, and the check of its result."""
    n = 256
    a, b = torch.randn(n, n), torch.randn(n, n)
    bufs = [Buffer.from_tensor(a), Buffer.from_tensor(b), Buffer(n * n * 4)]
    scalars = [32, 1, 0, 0, n, n, n, 1.0, n, 0, n, 0, 0.0, n, 0]
    return (lambda: gemm_prog.run(bufs, scalars),
            lambda: torch.testing.assert_close(bufs[2].to_tensor(torch.float32, (n, n)), a @ b,
                                               rtol=1e-4, atol=1e-4))


def test_a_program_run_off_the_team_thread_forks_no_team(gemm_prog):
    """Note [One OpenMP team]: a thread other than the one that started the device's team (a
    backward hook on autograd's device thread that reads a value) runs programs on one thread."""
    run, check = _big_gemm(gemm_prog)
    ready, go, threads = threading.Event(), threading.Event(), []

    def other():
        ready.set()
        go.wait(10)
        run()
    t = threading.Thread(target=other)
    t.start()
    assert ready.wait(10)
    threads.append(set(os.listdir("/proc/self/task")))      # the new thread included
    go.set()
    t.join(10)
    threads.append(set(os.listdir("/proc/self/task")))
    assert threads[1] <= threads[0]
    check()


class _Limited:
    """A job that stops at its first call as if it were long, whenever it runs with a limit."""

    def __init__(self):
        self.runs, self.ran = [], threading.Event()

    def pause(self):
        pass

    def reached(self, calls):
        return False

    def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
        self.runs.append((limit_us, threading.current_thread().name))
        self.ran.set()
        return limit_us == 0


def test_the_worker_leaves_a_long_call_to_the_host_and_runs_it_whole_if_none_comes(
        monkeypatch):
    """Note [Who runs a program]: a fresh job runs on the worker under WORKER_LIMIT_US; stopped
    at a long call it waits for a host, which runs it without a limit; if no host comes within
    ORPHAN_GRACE the worker runs it without one."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    monkeypatch.setattr(Q, "ORPHAN_GRACE", 0.01)
    q, job = Q.ExecQueue(), _Limited()
    ticket = q.submit(job)
    assert ticket.done.wait(10)
    assert job.runs == [(Q.WORKER_LIMIT_US, "lazydev-exec"), (0, "lazydev-exec")]
    monkeypatch.setattr(Q, "ORPHAN_GRACE", 60.0)
    job = _Limited()
    ticket = q.submit(job)
    assert job.ran.wait(10)
    assert q.wait(ticket) == [] and job.runs == [(Q.WORKER_LIMIT_US, "lazydev-exec"),
                                                 (0, "MainThread")]
    q.shutdown()


class _Steps:
    """A resumable job of `n` steps that records which thread ran each step."""

    def __init__(self, n, ran, started):
        self.n, self.ran, self.started, self.next, self.stop = n, ran, started, 0, False

    def pause(self):
        self.stop = True

    def reached(self, calls):
        return self.next >= calls

    def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
        if unpause:
            self.stop = False
        while self.next < self.n:
            if self.stop or (until and self.next >= until):
                return False
            self.ran.append((self.next, threading.current_thread().name))
            self.next += 1
            self.started.set()
            time.sleep(0.002)
        return True


def test_a_host_that_waits_takes_over_the_job_the_worker_is_running(monkeypatch):
    """Note [Who runs a program]: the worker pauses between two steps of a running job and the
    waiting host runs the rest, each step once and in order; a job is not split otherwise."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    ticket = q.submit(_Steps(200, ran, started))
    assert started.wait(10)
    assert q.wait(ticket) == [] and ticket.error is None
    assert [k for k, _ in ran] == list(range(200))
    threads = [name for _, name in ran]
    first_host = threads.index("MainThread")
    assert 0 < first_host < 200
    assert set(threads[:first_host]) == {"lazydev-exec"} and set(threads[first_host:]) == {
        "MainThread"}
    alone, done = [], threading.Event()
    whole = q.submit(_Steps(3, alone, done))           # nobody waits: the worker runs it all
    assert whole.done.wait(10)
    assert [name for _, name in alone] == ["lazydev-exec"] * 3
    q.shutdown()


def test_a_host_that_needs_a_job_s_first_calls_runs_those_and_leaves_the_rest(monkeypatch):
    """Note [Early reads]: waiting for a job's first calls runs only those on the host; the
    worker takes the rest without a paused job's grace period (ORPHAN_GRACE) while the host
    goes on."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)       # the worker never starts a job first
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    ticket = q.submit(_Steps(20, ran, started))
    assert q.wait(ticket, calls=5) == [] and not ticket.done.is_set()
    assert ticket.done.wait(10) and ticket.error is None
    assert ran == [(k, "MainThread") for k in range(5)] + [(k, "lazydev-exec")
                                                           for k in range(5, 20)]
    q.shutdown()


def test_a_wait_that_leaves_work_for_the_worker_releases_the_team_when_the_host_traces(
        monkeypatch):
    """Note [Release when tracing] (runtime/queue.py): a wait that returns with a job left for
    the worker marks the release of the host's idle OpenMP team due, and the host releases it
    once, when it turns to tracing; a burst of reads releases nothing, and a wait that leaves
    nothing makes no release due (the next region would pay to restart the team)."""
    from lazydev.runtime import queue as Q
    released = []
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)
    monkeypatch.setattr(Q, "release_team", lambda: released.append(1))
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    ticket = q.submit(_Steps(200, ran, started))
    assert q.wait(ticket, calls=5) == [] and q.release_due() and released == []
    assert q.wait(ticket, calls=10) == [] and q.release_due() and released == []
    q.leave_to_worker()
    assert released == [1] and not q.release_due()
    q.leave_to_worker()
    assert released == [1]                                          # once per wait
    assert q.wait(ticket) == [] and not q.release_due()             # nothing left
    q.leave_to_worker()
    assert released == [1]
    assert [k for k, _ in ran] == list(range(200))
    q.shutdown()


def test_after_the_host_ran_on_its_team_the_worker_waits_for_the_team_s_release(monkeypatch):
    """Note [Team hold] (runtime/queue.py): a job the host ran on its OpenMP team and handed
    back waits for the worker until the host releases the team, whose thread spins on the
    worker's core meanwhile; with no release, until TEAM_SPIN_S has passed."""
    from lazydev.runtime import queue as Q
    released = []
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)
    monkeypatch.setattr(Q, "TEAM_SPIN_S", 60.0)
    monkeypatch.setattr(Q, "owns_team", lambda: True)
    monkeypatch.setattr(Q, "release_team", lambda: released.append(1))
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    ticket = q.submit(_Steps(20, ran, started))
    assert q.wait(ticket, calls=5) == [] and q.release_due()
    time.sleep(0.2)
    assert ran == [(k, "MainThread") for k in range(5)]              # held
    q.leave_to_worker()
    assert released == [1] and ticket.done.wait(10)
    assert ran[5:] == [(k, "lazydev-exec") for k in range(5, 20)]
    monkeypatch.setattr(Q, "TEAM_SPIN_S", 0.3)
    ran.clear()
    ticket = q.submit(_Steps(10, ran, started))
    assert q.wait(ticket, calls=2) == []
    t0 = time.perf_counter()
    assert ticket.done.wait(10) and time.perf_counter() - t0 > 0.2   # no release: the hold ends
    assert ran[2:] == [(k, "lazydev-exec") for k in range(2, 10)] and released == [1]
    q.shutdown()


def test_a_job_that_cannot_fork_the_team_does_not_hold_the_worker(monkeypatch):
    """Note [Team hold]: a job without a forking call (`forks` false: a program too small for
    a parallel loop or a library call) leaves no team spinning, so the worker takes the rest
    of it at once; the same job that may fork waits for the release."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)
    monkeypatch.setattr(Q, "TEAM_SPIN_S", 60.0)
    monkeypatch.setattr(Q, "owns_team", lambda: True)
    monkeypatch.setattr(Q, "release_team", lambda: None)

    class Job(_Steps):
        def __init__(self, forks, *args):
            super().__init__(*args)
            self.forks = forks
    q, started = Q.ExecQueue(), threading.Event()
    for forks in (False, True):
        ran = []
        ticket = q.submit(Job(forks, 10, ran, started))
        assert q.wait(ticket, calls=2) == []
        assert ticket.done.wait(2) is not forks
        q.leave_to_worker()
        assert ticket.done.wait(10)
        assert ran == [(k, "MainThread" if k < 2 else "lazydev-exec") for k in range(10)]
    q.shutdown()


def test_the_worker_plans_on_three_quarters_of_the_host_s_last_tracing(monkeypatch):
    """Note [Worker's budget]: the host's time from turning to tracing to its next wait is
    how long the worker may plan on next time, in WORKER_BUDGET parts; before any tracing,
    nothing."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)
    monkeypatch.setattr(Q, "release_team", lambda: None)
    budgets = []

    class Job(_Steps):
        def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
            if threading.current_thread().name == "lazydev-exec":
                budgets.append(budget_us)
            return super().resume(unpause, limit_us, until, budget_us)
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    ticket = q.submit(Job(200, ran, started))
    assert q.wait(ticket, calls=5) == [] and q.release_due()
    t0 = time.perf_counter()
    q.leave_to_worker()                         # the host traces for 0.2 s
    time.sleep(0.2)
    assert q.wait(ticket, calls=150) == [] and not ticket.done.is_set()
    traced = time.perf_counter() - t0
    time.sleep(0.02)                            # the worker takes the job back
    assert q.wait(ticket) == [] and [k for k, _ in ran] == list(range(200))
    assert budgets[0] == 0 and len(budgets) >= 2
    assert 0.75 * 0.2e6 <= budgets[-1] <= 0.75e6 * traced
    q.shutdown()


def test_the_release_comes_at_the_first_op_recorded_after_a_wait(monkeypatch):
    """Note [Release when tracing]: after a wait that left work (mark_step's, or a read's), the
    next op that records a value releases the team, once; reads and views record none."""
    import lazydev.compile as C
    left = []
    monkeypatch.setattr(C, "release_due", lambda: True)
    monkeypatch.setattr(C, "leave_to_worker", lambda: left.append(1))
    x = torch.arange(6.0, device="wse")
    y = x + 1
    lazydev.mark_step()
    assert y.cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert y.view(2, 3)[1].sum().item() == 15.0 and left == [1]     # sum records
    assert y[1:].cpu().tolist() == [2.0, 3.0, 4.0, 5.0, 6.0] and left == [1]
    z = y * 2
    assert left == [1, 1]
    w = z + 1
    assert left == [1, 1] and w.cpu().tolist() == [3.0, 5.0, 7.0, 9.0, 11.0, 13.0]


def test_a_released_team_ends_its_threads_and_the_next_gemm_starts_one(gemm_prog):
    """Note [Releasing the team]: releasing ends the host's team threads (they exit), and the
    next GEMM big enough to fork starts a team again and is right. Thread ids, not counts:
    another test's thread may end meanwhile."""
    from lazydev.runtime import device as D
    run, check = _big_gemm(gemm_prog)
    run()
    check()

    def threads():
        return set(os.listdir("/proc/self/task"))
    extra = torch.get_num_threads() - 1     # the host's team: it and `extra` threads
    with_team = threads()
    assert D.lib.wse_release_team() == 0
    deadline = time.monotonic() + 10
    while len(with_team - threads()) < extra and time.monotonic() < deadline:
        time.sleep(0.001)
    released = threads()
    assert len(with_team - released) >= extra
    run()
    check()
    assert len(threads() - released) >= extra


def test_a_host_needing_calls_the_worker_has_run_does_not_stop_it(monkeypatch):
    """Note [Early reads]: if the worker is past the calls a host needs, the host returns at
    once and the worker runs on: every step on the worker, none paused."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    job = _Steps(100, ran, started)
    ticket = q.submit(job)
    assert started.wait(10)
    while job.next < 3:
        time.sleep(0.001)
    assert q.wait(ticket, calls=2) == [] and not job.stop
    assert ticket.done.wait(10)
    assert [name for _, name in ran] == ["lazydev-exec"] * 100
    q.shutdown()


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="only Linux lowers one thread's priority (setpriority per thread)")
def test_the_worker_thread_runs_at_the_lowest_priority_and_the_host_does_not():
    """Note [Who runs a program]: the worker yields a shared core to the tracing host."""
    from lazydev.runtime import queue as Q
    host = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    q = Q.ExecQueue()
    ids = []
    assert q.submit(lambda: ids.append(threading.get_native_id())).done.wait(10)
    assert ids[0] != threading.get_native_id()
    assert os.getpriority(os.PRIO_PROCESS, ids[0]) == Q.WORKER_NICE == 19
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == host
    q.shutdown()


def test_a_job_paused_for_a_host_that_never_takes_it_goes_back_to_the_worker(monkeypatch):
    """A paused job nobody waits for (an interrupted wait) must not stall the queue."""
    from lazydev.runtime import queue as Q
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    monkeypatch.setattr(Q, "ORPHAN_GRACE", 0.01)
    q, ran, started = Q.ExecQueue(), [], threading.Event()
    job = _Steps(50, ran, started)
    ticket = q.submit(job)
    after = q.submit(lambda: ran.append(("after", threading.current_thread().name)))
    assert started.wait(10)
    job.pause()                                        # as a host would, then never waits
    after.done.wait(10)
    assert ticket.done.is_set() and after.done.is_set() and ticket.error is None
    assert [k for k, _ in ran] == list(range(50)) + ["after"]
    assert {name for _, name in ran} == {"lazydev-exec"}
    q.shutdown()


class _Job:
    """A resumable job that runs whole and can be weakly referenced."""

    def pause(self):
        pass

    def reached(self, calls):
        return False

    def resume(self, unpause=False, limit_us=0, until=0, budget_us=0):
        return True


class _DoneChecksJobIsGone(threading.Event):
    """A ticket's `done` that records, when set, whether its job still lives."""

    def __init__(self, ref):
        super().__init__()
        self.ref, self.job_alive = ref, None

    def set(self):
        gc.collect()
        self.job_alive = self.ref() is not None
        super().set()


def test_a_job_is_dropped_before_its_ticket_is_done(monkeypatch):
    """A host woken by `done` counts references (donation, device memory), so by then no
    frame of the queue may hold the job, whose closure holds the run's buffers; whoever ran it,
    the host that waited or the worker."""
    from lazydev.runtime import queue as Q
    q = Q.ExecQueue()
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)       # the worker leaves the first to the host
    tickets = []
    for _ in range(2):
        job = _Job()
        ticket = q.submit(job)
        ticket.done = _DoneChecksJobIsGone(weakref.ref(job))
        tickets.append(ticket)
        del job
    q.wait(tickets[0])
    monkeypatch.setattr(Q, "HOST_GRACE", 0.0)
    with q._cv:
        q._cv.notify_all()                            # the worker takes the second
    # Long: the worker runs niced, and done's gc.collect() walks the whole suite's heap.
    assert tickets[1].done.wait(60)
    assert [t.done.job_alive for t in tickets] == [False, False]
    q.shutdown()


def test_a_failed_job_cancels_the_rest_whoever_runs_them():
    from lazydev.runtime.queue import Cancelled, ExecQueue
    q = ExecQueue()

    def boom():
        raise ValueError("boom")
    tickets = [q.submit(lambda: None), q.submit(boom), q.submit(lambda: None)]
    failed = q.wait(tickets[-1])
    assert [type(t.error) for t in failed] == [ValueError, Cancelled]
    assert q.wait(q.submit(lambda: None)) == []          # the queue accepts work again
    q.shutdown()


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


@pytest.mark.parametrize("keep", [2, 0])
def test_a_loop_that_never_reads_leaves_at_most_max_queued_steps_unfinished(monkeypatch, keep):
    """Note [Bounded queue]: past config.max_queued_steps unfinished programs, mark_step runs
    the oldest itself, so a loop that never reads cannot trace ahead without bound. The worker
    is kept from starting any job here, so without the bound every step would stay queued."""
    from lazydev.runtime import queue as Q
    lazydev.wait()
    monkeypatch.setattr(Q, "HOST_GRACE", 60.0)
    monkeypatch.setattr(lazydev.config, "max_queued_steps", keep)
    x0 = torch.randn(1 << 14, generator=torch.Generator().manual_seed(0))
    x, want = x0.to("wse"), x0
    unfinished = []
    for _ in range(8):
        x, want = torch.sin(x) * 0.5 + 1.0, torch.sin(want) * 0.5 + 1.0
        lazydev.mark_step()
        unfinished.append(sum(not t.done.is_set() for t in Q.EXEC._inflight))
    assert max(unfinished) == keep and unfinished[-1] == keep
    assert_same(x, want)


def test_a_failed_step_is_reported_within_the_queue_bound(monkeypatch):
    """A step failing on the device raises at a mark_step at most max_queued_steps later, with
    a note saying how many queued programs were cancelled; the loop then goes on as usual. The
    failure waited for the backlog to grow, which the worker, running the cancelled programs at
    once, kept empty: steps 5 to 11 were dropped and the error came at step 11 or the last
    read, depending on timing."""
    monkeypatch.setattr(lazydev.config, "max_queued_steps", 2)
    p = torch.zeros(1, device="wse")
    table = torch.arange(10.0, device="wse")
    lazydev.mark_step()
    raised = []
    for i in range(12):
        try:
            p.add_(1)
            p.add_(table[torch.tensor([11 if i == 4 else 3], device="wse")] * 0)
            lazydev.mark_step()
        except IndexError as e:
            raised.append((i, e))
    (at, error), = raised
    assert 4 <= at <= 4 + 2
    lost = at - 4          # the steps queued behind the failed one, cancelled
    if lost:
        assert f"{'the program' if lost == 1 else f'the {lost} programs'} queued after it" \
            in " ".join(error.__notes__)
    assert p.item() == 12 - 1 - lost


def test_only_the_programs_run_last_keep_their_arenas():
    """Each shape's program kept its arena for the life of the process: device memory grew
    with the number of shapes a loop met (Note [Arenas of idle programs])."""
    from lazydev import compile as lzc
    w = torch.randn(64, 64, device="wse")
    for n in range(1, 3 * lzc.ARENAS_KEPT):
        x = torch.randn(n * 4, 64, device="wse")
        ((x @ w).relu() @ w).sum().item()
    lazydev.wait()
    with_arena = [c for c in lzc._programs.values() if c.arena is not None]
    assert 0 < len(with_arena) <= lzc.ARENAS_KEPT
    again = torch.randn(4, 64, device="wse")            # the first shape: its arena again
    torch.testing.assert_close(((again @ w).relu() @ w).sum().cpu(),
                               ((again.cpu() @ w.cpu()).relu() @ w.cpu()).sum())


def test_results_kept_after_their_step_do_not_hold_its_graph():
    """Note [Value caches]: a tensor's cached node reached its whole step's IR. An evaluation
    loop appending each batch's result (and a view of it) to a list, read at the end, held 73
    nodes a batch; losses.append(loss) after loss.item() held 50 KB a step for 320 ops."""
    import _lazydev_node
    w = torch.randn(8, 8, device="wse")
    kept, losses, expected = [], [], []

    def step(i):
        y = torch.tanh(w @ w * (1.0 + i / 64))
        kept.extend([y.sum(1), y[2:, 1:]])
        loss = y.sum()
        lazydev.mark_step()
        losses.append(loss)
        loss.item()
        y_cpu = torch.tanh(w.cpu() @ w.cpu() * (1.0 + i / 64))
        expected.extend([y_cpu.sum(1), y_cpu[2:, 1:]])

    for i in range(3):
        step(i)
    gc.collect()
    lazydev.wait()
    before = _lazydev_node.live()
    for i in range(3, 23):
        step(i)
    gc.collect()
    lazydev.wait()
    assert _lazydev_node.live() - before < 20       # 20 steps' graphs held 400 more
    for got, want in zip(kept, expected):
        assert_same(got, want)
