"""Ops whose output shape depends on values (nonzero, masked_select, unique, ...) and in-place
growth (resize_, set_): results and fallback counts against the CPU."""
import pytest
import torch

import lazydev
from conftest import assert_same


def _fallbacks() -> dict:
    return dict(lazydev.metrics.counters()["fallbacks"])


# ---- growing in place -------------------------------------------------------------------------

def test_resize_grows_and_aliases_share_the_grown_storage():
    cpu = torch.arange(6.).reshape(2, 3)
    w = cpu.to("wse")
    cv, wv = cpu.view(-1), w.view(-1)
    cpu.resize_(3, 4)
    w.resize_(3, 4)
    assert w.shape == cpu.shape and w.stride() == cpu.stride()
    for t in (cpu, w):
        t[2] = 7
    cv.add_(1)
    wv.add_(1)                      # a view made before the resize still writes the storage
    assert_same(w[:, :2], cpu[:, :2])
    assert_same(w[2], cpu[2])
    assert_same(wv, cv)
    assert not _fallbacks()


@pytest.mark.parametrize("start,size", [((0,), (2, 2)), ((4,), (2,)), ((2, 3), (1, 2, 3))])
def test_resize_shapes(start, size):
    cpu = torch.ones(start)
    w = cpu.to("wse")
    w.resize_(size)
    cpu.resize_(size)
    assert w.shape == cpu.shape and w.stride() == cpu.stride()
    n = min(cpu.numel(), torch.Size(start).numel())      # the elements both keep
    assert_same(w.reshape(-1)[:n], cpu.reshape(-1)[:n])


def test_set_to_a_larger_tensor():
    w = torch.zeros(1).to("wse")
    src = torch.arange(25.).reshape(5, 5)
    w.set_(src.to("wse"))
    assert_same(w, src)
    w.add_(1)
    assert_same(w, src + 1)


def test_addbmm_inplace_resizes_a_one_element_self():
    b1, b2 = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    for shape in ((1,), ()):
        c = torch.randn(shape)
        w = c.to("wse")
        w.addbmm_(b1.to("wse"), b2.to("wse"), beta=0.5)
        assert_same(w, c.clone().addbmm_(b1, b2, beta=0.5))
    assert not _fallbacks()
