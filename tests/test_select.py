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


# ---- complex tensors alias their real views (Note [Complex storage]) --------------------------

def _complex_pair():
    cpu = torch.tensor([1 + 2j, 3 - 1j, -2 + 0.5j])
    return cpu, cpu.to("wse")


def test_writes_through_real_views_reach_the_complex_tensor():
    cpu, w = _complex_pair()
    for t in (cpu, w):
        torch.view_as_real(t).mul_(2)
        t.real.add_(1)
        t.imag[1:].mul_(-1)
    assert_same(w, cpu)
    assert not _fallbacks()


def test_complex_views_alias_and_copy_casts():
    cpu, w = _complex_pair()
    for t in (cpu, w):
        t[1:].copy_(torch.tensor([5., 6.]).to(t.device))       # real into complex: imag = 0
        torch.view_as_complex(torch.view_as_real(t))[0] = 7j
    assert_same(w, cpu)
    real = torch.zeros(3, device="wse")
    with pytest.warns(UserWarning, match="imaginary part"):
        real.copy_(w)
    assert_same(real, cpu.real)
    assert_same(w.to(torch.complex128), cpu.to(torch.complex128))


def test_stft_gradient():
    x = torch.randn(20)
    grads = []
    for dev in ("cpu", "wse"):
        t = x.to(dev).requires_grad_()
        y = torch.stft(t, n_fft=10, window=torch.ones(10, device=dev), return_complex=True)
        grads.append(torch.autograd.grad(torch.view_as_real(y).sum(), t)[0])
    assert_same(grads[1], grads[0])


def test_resize_complex():
    cpu, w = _complex_pair()
    cpu.resize_(2, 2)
    w.resize_(2, 2)
    assert_same(w.reshape(-1)[:3], cpu.reshape(-1)[:3])
