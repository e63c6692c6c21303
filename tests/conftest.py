"""Shared test helpers: the per-dtype tolerance table and CPU/wse comparison."""
import os

import pytest
import torch

import lazydev

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
