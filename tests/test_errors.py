"""Bad input on wse raises what the CPU raises: the same exception class and message, at the
call (these errors depend on shapes, dtypes and arguments, not on values)."""
import pytest
import torch

import lazydev

_CASES = {
    "max of nothing": lambda d: torch.ones(0, device=d).max(),
    "max over an empty dim": lambda d: torch.ones(0, 3, device=d).max(0),
    "min over an empty last dim": lambda d: torch.ones(2, 0, device=d).min(-1, keepdim=True),
    "amax of nothing": lambda d: torch.ones(0, device=d).amax(),
    "amax over an empty dim": lambda d: torch.ones(0, 3, device=d).amax(0),
    "amin, negative dim": lambda d: torch.ones(0, 3, device=d).amin(-2),
    "argmax of nothing": lambda d: torch.ones(0, device=d).argmax(),
    "argmin over an empty dim": lambda d: torch.ones(2, 0, device=d).argmin(-1),
    "aminmax of nothing": lambda d: torch.ones(0, device=d).aminmax(),
    "aminmax over an empty dim": lambda d: torch.ones(0, device=d).aminmax(dim=0),
    "integer mean": lambda d: torch.tensor([1, 2], device=d).mean(),
    "int ** -1": lambda d: torch.tensor([2, 3], device=d) ** -1,
    "int pow_ -2": lambda d: torch.tensor([2, 3], device=d).pow_(-2),
    "bool ** -1": lambda d: torch.tensor([True], device=d) ** -1,
    "mm of mismatched shapes": lambda d: torch.ones(2, 3, device=d) @ torch.ones(2, 3, device=d),
}


@pytest.mark.parametrize("name", _CASES)
def test_bad_input_raises_the_cpu_error(name):
    with pytest.raises(Exception) as cpu:
        _CASES[name]("cpu")
    with pytest.raises(Exception) as wse:
        _CASES[name]("wse")
    assert (type(wse.value), str(wse.value)) == (type(cpu.value), str(cpu.value))
    lazydev.mark_step()


@pytest.mark.parametrize("make", [
    lambda d: torch.tensor([2, 3, 1, -1], device=d) ** torch.tensor([-1, 2, -1, -3], device=d),
    lambda d: torch.pow(2, torch.tensor([-1, 2], device=d)),
    lambda d: torch.tensor([2, 4], device=d) ** -1.0,
    lambda d: torch.ones(0, 3, device=d).amax(1),
    lambda d: torch.ones(0, 2, device=d).logsumexp(0)], ids=range(5))
def test_the_same_calls_with_good_input_compute(make):
    """What the CPU allows (a negative exponent tensor: 2 ** -1 == 0) stays allowed."""
    want = make("cpu")
    got = make("wse").cpu()
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=0, rtol=0)
