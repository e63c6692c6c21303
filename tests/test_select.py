"""In-place growth (resize_, set_), complex tensors aliasing their real views, and selections by a
mask (masked_select, masked_scatter, nonzero_static, unique_consecutive, allclose): results and
fallback counts against the CPU, on non-contiguous and empty inputs too."""
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


@pytest.mark.parametrize("fmt", [None, torch.contiguous_format, torch.channels_last,
                                 torch.preserve_format])
def test_resize_as_grows_as_resize_does(fmt):
    """x.resize_as_(bigger) had no handler: the storage did not grow, and the step failed
    reading past its buffer, losing its other updates (y.add_(1))."""
    template = torch.zeros(2, 3, 2, 2)
    kw = {} if fmt is None else {"memory_format": fmt}
    cpu, y = torch.arange(4.0), torch.arange(3.0)
    w, yw = cpu.to("wse"), y.to("wse")
    for t, other, tmpl in ((cpu, y, template), (w, yw, template.to("wse"))):
        t.resize_as_(tmpl, **kw)
        other.add_(1)
        t.fill_(7)
    lazydev.mark_step()
    assert w.shape == cpu.shape and w.stride() == cpu.stride()
    assert_same((w, yw), (cpu, y))


def test_set_to_a_larger_tensor():
    w = torch.zeros(1).to("wse")
    src = torch.arange(25.).reshape(5, 5)
    w.set_(src.to("wse"))
    assert_same(w, src)
    w.add_(1)
    assert_same(w, src + 1)


def test_set_to_a_tensor_with_a_geometry():
    """t.set_(source_tensor, offset, size, stride) raised 'a wse storage holds no values' (ATen's
    composite passes source's storage on): t is a strided view of source's storage."""
    got = []
    for d in ("cpu", "wse"):
        y, x = torch.arange(10.0).to(d), torch.empty(0, device=d)
        x.set_(y, 2, (2, 3), (1, 2))
        x.add_(100)
        z = torch.empty(0, device=d).set_(y, 4, (2, 2))
        got.append((x, y, z, x.stride(), x.storage_offset()))
    assert_same(got[1], got[0])


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


# ---- selections by a mask ---------------------------------------------------------------------

def _pair(*shape, dtype=torch.float32):
    cpu = torch.randn(shape).to(dtype) if shape else torch.randn(()).to(dtype)
    return cpu, cpu.to("wse")


@pytest.mark.parametrize("case", ["plain", "transposed", "broadcast mask", "empty", "none",
                                  "0-dim"])
def test_masked_select(case):
    x, w = _pair(4, 5)
    mask = x > 0
    if case == "transposed":
        x, w, mask = x.t(), w.t(), mask.t()
    elif case == "broadcast mask":
        mask = mask[0]
    elif case == "empty":
        x, w, mask = x[:0], w[:0], mask[:0]
    elif case == "none":
        mask = torch.zeros_like(mask)
    elif case == "0-dim":
        x, w, mask = x[0, 0], w[0, 0], torch.tensor(True)
    lazydev.mark_step()
    lazydev.metrics.reset()
    out = torch.masked_select(w, mask.to("wse"))
    assert_same(out, torch.masked_select(x, mask))
    assert not _fallbacks()
    assert lazydev.metrics.counters()["syncs"] <= 2    # the count, and the read of `out`


def test_masked_select_backward():
    x = torch.randn(3, 4)
    grads = []
    for dev in ("cpu", "wse"):
        t = x.to(dev).requires_grad_()
        out = torch.masked_select(t * 2, (t > 0) | (t < -1))
        grads.append(torch.autograd.grad((out * out).sum(), t)[0])
    assert_same(grads[1], grads[0])
    assert not _fallbacks()


@pytest.mark.parametrize("case", ["plain", "transposed", "broadcast", "empty"])
def test_masked_scatter(case):
    x, w = _pair(4, 5)
    mask, src = x > 0, torch.arange(30.).reshape(5, 6)
    if case == "transposed":
        x, w, mask = x.t(), w.t(), mask.t()
    elif case == "broadcast":
        x, w = x[0], w[0]                       # self broadcast against a 2-d mask
    elif case == "empty":
        x, w, mask = x[:0], w[:0], mask[:0]
    assert_same(w.masked_scatter(mask.to("wse"), src.to("wse")), x.masked_scatter(mask, src))
    assert not _fallbacks()


@pytest.mark.parametrize("n_source", [0, 2])
def test_masked_scatter_with_too_small_a_source_raises(n_source):
    """The CPU's RuntimeError and message (wse raised an IndexError of its gather)."""
    with pytest.raises(RuntimeError) as cpu:
        torch.zeros(3).masked_scatter(torch.ones(3, dtype=torch.bool), torch.ones(n_source))
    w = torch.zeros(3, device="wse")
    out = w.masked_scatter(torch.ones(3, dtype=torch.bool, device="wse"),
                           torch.ones(n_source, device="wse"))
    with pytest.raises(RuntimeError) as wse:
        out.cpu()
    assert (type(wse.value), str(wse.value)) == (type(cpu.value), str(cpu.value))
    w, empty = torch.zeros(3, device="wse"), torch.ones(0, device="wse")
    # An empty source is fine for an empty mask.
    assert_same(w.masked_scatter(torch.zeros(3, dtype=torch.bool, device="wse"), empty),
                torch.zeros(3))


@pytest.mark.parametrize("shape", [(), (7,), (3, 4), (2, 0, 3), (4, 1, 3)])
@pytest.mark.parametrize("size", [0, 2, 20])
def test_nonzero_static(shape, size):
    x = (torch.randn(shape) > 0).float() if shape else torch.tensor(1.)
    expected = torch.nonzero_static(x, size=size, fill_value=-5)
    assert_same(torch.nonzero_static(x.to("wse"), size=size, fill_value=-5), expected)
    if len(shape) == 2:
        assert_same(torch.nonzero_static(x.to("wse").t(), size=size),
                    torch.nonzero_static(x.t(), size=size))
    assert not _fallbacks()


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_unique_consecutive(dim):
    x = torch.tensor([[1., 1, 2], [1, 1, 2], [float("nan"), 3, 3], [float("nan"), 3, 3]])
    for cpu in (x, x.t(), x[:0] if dim != 1 else x[:, :0]):
        w = cpu.to("wse")
        expected = torch.unique_consecutive(cpu, return_inverse=True, return_counts=True,
                                            dim=dim)
        actual = torch.unique_consecutive(w, return_inverse=True, return_counts=True, dim=dim)
        assert_same(list(actual), list(expected))
    assert not _fallbacks()


@pytest.mark.parametrize("unique", [
    lambda x: torch.unique_consecutive(x), lambda x: torch.unique(x),
    lambda x: torch.unique(x.view(-1, 1), dim=0)])
def test_unique_values_are_each_runs_first_element(unique):
    """0.0 and -0.0 are one run; its value was the last element's (-0.0), the CPU's the
    first's."""
    x = torch.tensor([0.0, -0.0, 1.0, -0.0, 0.0, -0.0])
    assert (1 / unique(x.to("wse")).cpu()).tolist() == (1 / unique(x)).tolist()


def test_mask_dtype_and_device_errors_of_masked_select_and_where():
    """masked_select by a uint8 mask counted the mask's sum (a result padded with zeros), of a
    CPU x by a wse mask raised AttributeError; where by a uint8 condition, which the CPU takes
    with a warning, raised."""
    x = torch.arange(6.0)
    m = torch.tensor([0, 2, 0, 1, 0, 3], dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="expected BoolTensor for mask"):
        torch.masked_select(x.to("wse"), m.to("wse"))
    with pytest.raises(RuntimeError, match="same device"):
        torch.masked_select(x, m.bool().to("wse"))
    with pytest.warns(UserWarning, match="where received a uint8 condition tensor"):
        got = torch.where(m.to("wse"), x.to("wse"), -x.to("wse"))
    assert_same(got, torch.where(m.bool(), x, -x))


def test_unique_consecutive_zero_sized_dims_raise_as_on_cpu():
    with pytest.raises(RuntimeError, match="0 sized dimensions"):
        torch.unique_consecutive(torch.zeros(2, 0, 3, device="wse"), dim=0)


def test_allclose():
    a = torch.randn(3, 4)
    a[0, 0] = float("nan")
    b = a + 1e-7
    w = a.to("wse")
    for equal_nan in (False, True):
        assert torch.allclose(w, b.to("wse"), equal_nan=equal_nan) == \
            torch.allclose(a, b, equal_nan=equal_nan)
    assert torch.allclose(w[1], a[1:].to("wse"), rtol=10) == torch.allclose(a[1], a[1:], rtol=10)
    assert not _fallbacks()
    with pytest.raises(RuntimeError):
        torch.allclose(w, w.double())

