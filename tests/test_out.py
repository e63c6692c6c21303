"""out= arguments as on the CPU: written in place (through views, with ATen's resizing), or
refused with the CPU's errors."""
import warnings

import pytest
import torch

import lazydev
from conftest import assert_same


def test_ops_that_write_out_through_an_unsafe_view():
    """kron's out= kernel writes through at::_unsafe_view of the out= tensor, which made a new
    value on wse: o was left unwritten."""
    a, b = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    o, base = torch.zeros(4, 4), torch.zeros(4, 4).to("wse")
    torch.kron(a, b, out=o)
    torch.kron(a.to("wse"), b.to("wse"), out=base)
    lazydev.mark_step()
    assert_same(base, o)


def test_an_out_tensor_on_the_cpu_is_refused_as_by_a_device():
    """torch.add(wse, wse, out=cpu_tensor) ran on the CPU and wrote it; CUDA (and wse's own
    cpu_t.add_(wse_t)) raise that two devices are mixed."""
    a = torch.arange(6.0).to("wse")
    o = torch.zeros(6)
    for f in (lambda: torch.add(a, a, out=o), lambda: torch.exp(a, out=o),
              lambda: torch.sort(a, out=(torch.empty(6, device="wse"), torch.empty(6).long()))):
        with pytest.raises(RuntimeError, match="same device.*move the out= tensor"):
            f()
    assert_same(o, torch.zeros(6))


_RESIZED = {
    "add": lambda o, d: torch.add(torch.ones(4, device=d), 1, out=o),
    "exp of a bigger input": lambda o, d: torch.exp(torch.zeros(6, device=d), out=o),
    "sum": lambda o, d: torch.sum(torch.ones(2, 3, device=d), 0, out=o),
    "arange": lambda o, d: torch.arange(5.0, out=o),
    "arange start": lambda o, d: torch.arange(1.0, 6.0, out=o),
    "linspace": lambda o, d: torch.linspace(0, 1, 5, out=o),
    "full": lambda o, d: torch.full((4,), 3.0, out=o),
}


@pytest.mark.parametrize("name", _RESIZED)
def test_an_out_tensor_of_another_shape_is_resized_in_place(name):
    """ATen resizes an out= tensor of another shape over its own storage: a view stays a view of
    its base, and other views see the values. wse gave it a storage of its own (the CPU
    fallback's copy back, or set_ to the result), so the base never saw them."""
    got, warned = [], []
    for d in ("cpu", "wse"):
        base = torch.zeros(12, device=d)
        out, other = base[1:3], base[2:5]
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            _RESIZED[name](out, d)
        warned.append([str(w.message).split(" (Triggered")[0] for w in seen])
        got.append((base, out, other, out.storage_offset()))
    lazydev.mark_step()
    assert_same(got[1], got[0])
    assert warned[1] == warned[0]


def test_matrix_rank_writes_its_out_tensor():
    """Note [Composite out= by copy]: ATen's composite matrix_rank(out=) never wrote `out` of a
    tensor subclass."""
    torch.manual_seed(0)
    a = torch.randn(3, 5, 5)
    a[1, :, 0] = 0
    for kw in ({}, {"hermitian": False}, {"atol": 0.5}, {"rtol": torch.tensor(0.1)},
               {"tol": 0.5}):
        want = torch.linalg.matrix_rank(a, **kw)
        out = torch.full((3,), 7, dtype=torch.long, device="wse")
        kw_wse = {k: v.to("wse") if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        torch.linalg.matrix_rank(a.to("wse"), **kw_wse, out=out)
        assert_same(out, want)


def test_matmul_out_of_every_broadcasting_form():
    """Note [Composite out= by copy]: matmul(3-D, 2-D, out=o) raised an overlap error (ATen's
    composite copied a reshape of o into o with the reshape's shape)."""
    torch.manual_seed(0)
    shapes = [((2, 3, 4), (4, 5)), ((2, 3, 4), (4,)), ((4,), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
              ((3, 4), (4, 5)), ((4,), (4,)), ((3, 4), (4,))]
    for sa, sb in shapes:
        a, b = torch.randn(sa), torch.randn(sb)
        want = torch.matmul(a, b)
        base = torch.zeros(want.numel() + 3, device="wse")
        out = base[3:].view(want.shape)
        torch.matmul(a.to("wse"), b.to("wse"), out=out)
        assert_same(out, want)
        assert_same(base[3:], want.reshape(-1))


def test_a_meta_tensor_among_wse_ones_is_named():
    """wse_t + meta_t said the other tensor was on the CPU, and to move it."""
    x, m = torch.ones(3, device="wse"), torch.ones(3, device="meta")
    for f in (lambda: x + m, lambda: torch.cat([x, m]), lambda: x @ m):
        with pytest.raises(RuntimeError, match=r"devices, wse:0 and meta!$"):
            f()
