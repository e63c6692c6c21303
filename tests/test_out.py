"""out= arguments as on the CPU: written in place (through views, with ATen's resizing), or
refused with the CPU's errors."""
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
