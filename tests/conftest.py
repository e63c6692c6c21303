"""Shared test helpers: the per-dtype tolerance table and CPU/wse comparison."""
import os
import pathlib
import subprocess

import pytest
import torch

import lazydev
import lazydev.runtime as rt
from lazydev.runtime import Program

# Per-dtype tolerances (atol, rtol), one table for all tests and the coverage report;
# integers and bools are compared exactly.
from lazydev.coverage import TOLERANCES  # noqa: E402

# What the device's C++ side gives (Note [The device's C++ side] in lazydev/compile/hooks.py);
# without g++ lazydev runs without it, and a storage call would crash the test process.
needs_cpp_side = pytest.mark.skipif(
    not lazydev._cpp_side, reason="lazydev's C++ side could not be built here (no g++ or no "
    "torch headers): storage calls, pinning, wse generators, torch.accelerator and autocast "
    "need it")



def script_env(cache_dir, **extra) -> dict:
    """The environment of a child Python that imports lazydev from this tree, with its own
    cache directory and no logs."""
    env = dict(os.environ, LAZYDEV_CACHE_DIR=str(cache_dir), LAZYDEV_LOG="")
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env

def assert_same(actual, expected):
    """Compare a wse result (or a CPU copy of one) with the eager CPU result."""
    if isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected
        return
    if actual.device.type == "wse":
        assert actual.shape == expected.shape
        actual = actual.cpu()
    atol, rtol = TOLERANCES.get(expected.dtype, (0, 0))
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True)


@pytest.fixture(autouse=True)
def _fresh_metrics():
    lazydev.mark_step()
    lazydev.metrics.reset()
    yield
    # A lowering whose nodes disagree with the meta kernel is refused and the op computed
    # another way, which a test comparing values cannot see: every test checks for it.
    assert not lazydev.metrics.counters().get("lowering_disagreements"), \
        "a lowering gave other shapes or dtypes than the meta kernel (LAZYDEV_LOG=fallback)"


@pytest.fixture
def fresh_cache(tmp_path):
    """An empty compile cache, in memory and on disk, for tests that count compilations."""
    from lazydev import compile as lzc
    old = lazydev.config.cache_dir
    lzc.clear_memory_cache()
    lazydev.config(cache_dir=str(tmp_path / "cache"))
    yield
    lazydev.config(cache_dir=old)


# ---- hand-written C programs (tests/test_runtime.py, test_pausing.py, test_queue.py): they
# paste prefix_source() as the compiler does, and each is compiled once per module.

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


GEMM_C = r"""
int wse_entry(const wse_lib_t* lib, void* const* bufs, const double* s, int64_t* errinfo,
              int32_t* next, const volatile int32_t* stop) {
  (void)errinfo;
  int64_t b = s[1], ta = s[2], tb = s[3], M = s[4], N = s[5], K = s[6];
  int64_t lda = s[8], sa = s[9], ldb = s[10], sb = s[11], ldc = s[13], sc = s[14];
  if (s[0] == 32)
    lib->gemm_f32(b, ta, tb, M, N, K, (float)s[7], bufs[0], lda, sa, bufs[1], ldb, sb,
                  (float)s[12], bufs[2], ldc, sc);
  else if (s[0] == 16)      /* float operands holding bfloat16 values */
    lib->gemm_bf16_sliced(b, ta, tb, M, N, K, (float)s[7], bufs[0], lda, sa, bufs[1], ldb, sb,
                          (float)s[12], bufs[2], ldc, sc, 0, NULL);
  else
    lib->gemm_f64(b, ta, tb, M, N, K, s[7], bufs[0], lda, sa, bufs[1], ldb, sb,
                  s[12], bufs[2], ldc, sc);
  return 0;
}
"""


@pytest.fixture(scope="module")
def gemm_prog(cdir):
    return build_program(cdir, "gemm", GEMM_C)


def padded_operand(batch, rows, cols, pad, dtype):
    """A (batch, rows, cols) operand stored with leading dimension cols + pad."""
    store = torch.randn(batch, rows, cols + pad, dtype=dtype)
    return store, store[..., :cols]


def refuse_decompositions(monkeypatch, *ops):
    """torch's decompositions of `ops` raise for the rest of the test: one that ran fell back to
    the CPU, which the test's fallback check then sees (an op lowered, not decomposed)."""
    from torch._decomp import decomposition_table

    def refused(*args, **kwargs):
        raise AssertionError("decomposed")
    for op in ops:
        monkeypatch.setitem(decomposition_table, op, refused)
