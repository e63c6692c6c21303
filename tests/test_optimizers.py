"""Stock optimizers on wse take torch.optim's foreach (multi-tensor) path, as on CUDA; every one
must match the CPU's (single-tensor) updates, with no CPU fallback."""
import pytest
import torch

import lazydev
from lazydev.tensor import dispatch

from conftest import assert_same

OPTIMIZERS = [
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (torch.optim.Adam, dict(lr=1e-2, amsgrad=True)),
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    (torch.optim.RMSprop, dict(lr=1e-2, momentum=0.5, centered=True)),
    (torch.optim.Adagrad, dict(lr=0.1)),
    (torch.optim.NAdam, dict(lr=1e-2)),
    (torch.optim.RAdam, dict(lr=1e-2)),
    (torch.optim.Adamax, dict(lr=1e-2)),
    (torch.optim.Adadelta, dict(lr=0.5)),
]


def _model():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def _train_like_cpu(make_cpu_opt, make_wse_opt, steps: int) -> None:
    """One model on the CPU and its copy on wse, each trained `steps` steps on the same batches
    by its own optimizer; their parameters must then agree."""
    torch.manual_seed(0)
    cpu = _model()
    wse = _model()
    wse.load_state_dict(cpu.state_dict())
    wse = wse.to("wse")
    oc, ow = make_cpu_opt(cpu.parameters()), make_wse_opt(wse.parameters())
    for _ in range(steps):
        x = torch.randn(5, 8)
        for model, opt, xx in ((cpu, oc, x), (wse, ow, x.to("wse"))):
            opt.zero_grad()
            model(xx).square().mean().backward()
            opt.step()
        lazydev.mark_step()
    for a, b in zip(cpu.parameters(), wse.parameters()):
        assert_same(b, a)


@pytest.mark.parametrize("opt_cls,kw", OPTIMIZERS, ids=[o.__name__ for o, _ in OPTIMIZERS])
def test_optimizer_matches_cpu_through_foreach(opt_cls, kw, monkeypatch):
    calls = []
    original = dispatch.foreach_op
    monkeypatch.setattr(dispatch, "foreach_op", lambda f, a, k: calls.append(f) or original(f, a, k))
    dispatch._HANDLERS.clear()
    _train_like_cpu(lambda ps: opt_cls(ps, **kw), lambda ps: opt_cls(ps, **kw), steps=4)
    assert calls, "the optimizer did not take the foreach path"
    assert lazydev.metrics.counters()["fallbacks"] == {}
    dispatch._HANDLERS.clear()


def test_foreach_in_place_on_lists_writes_each_tensor():
    torch.manual_seed(0)
    a, b = [torch.randn(4), torch.randn(3)], [torch.rand(4), torch.rand(3)]
    wa, wb = [t.to("wse") for t in a], [t.to("wse") for t in b]
    torch._foreach_maximum_(a, b)
    torch._foreach_maximum_(wa, wb)
    torch._foreach_mul_(a, 0.5)
    torch._foreach_mul_(wa, 0.5)
    torch._foreach_add_(a, b, alpha=2.0)
    torch._foreach_add_(wa, wb, alpha=2.0)
    for x, y in zip(wa, a):
        assert_same(x, y)



_STEPS = {
    "SGD step": lambda w: torch.optim.SGD([w], lr=1.0, foreach=True).step(),
    "mul_ by a tensor (clip_grad_norm_)": lambda w: torch._foreach_mul_([w], torch.tensor(0.5)),
    "maximum_ (amsgrad)": lambda w: torch._foreach_maximum_([w], [torch.zeros_like(w)]),
    "addcdiv_ by a tensor": lambda w: torch._foreach_addcdiv_([w], [w], [w + 1],
                                                              torch.tensor([0.5])),
}


@pytest.mark.parametrize("device", ["cpu", "wse"])
@pytest.mark.parametrize("step", _STEPS)
def test_optimizer_step_between_backwards_is_seen_by_autograd(device, step):
    """opt.step() (foreach in-place ops, every overload) bumps the parameters' versions, so a
    second backward through a graph that saved them raises, as on the CPU, instead of using
    the new values."""
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]).to(device))
    x = torch.ones(3, device=device, requires_grad=True)
    loss = (x * w).sum()
    loss.backward(retain_graph=True)
    version = w._version
    with torch.no_grad():
        _STEPS[step](w)
    assert w._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()

@pytest.mark.parametrize("kw", [dict(momentum=0.9), dict(momentum=0.9, nesterov=True,
                                                          weight_decay=1e-4)], ids=str)
def test_sgd_gives_the_cpus_parameters_bit_for_bit(kw):
    """With the same gradients, SGD's updates are the CPU's to the last bit: ATen's add with
    alpha is one fused multiply-add, and so is wse's (Op.FMA)."""
    g = torch.Generator().manual_seed(0)
    cpu = [torch.randn(300, 7, generator=g).requires_grad_() for _ in range(3)]
    wse = [p.detach().to("wse").requires_grad_() for p in cpu]
    oc, ow = torch.optim.SGD(cpu, lr=0.01, **kw), torch.optim.SGD(wse, lr=0.01, **kw)
    for _ in range(4):
        grads = [torch.randn(300, 7, generator=g) for _ in cpu]
        for p, q, grad in zip(cpu, wse, grads):
            p.grad, q.grad = grad.clone(), grad.to("wse")
        oc.step()
        ow.step()
        lazydev.mark_step()
    assert all(torch.equal(p.detach(), q.detach().cpu()) for p, q in zip(cpu, wse))


_BY_NUMBERS = {
    "maximum_ by a number": lambda l: torch._foreach_maximum_(l, 0.25),
    "minimum by numbers": lambda l: torch._foreach_minimum(l, [0.5, float("nan")]),
    "maximum by an int": lambda l: torch._foreach_maximum(l, 2),
    "addcmul_ by a tensor of scalars": lambda l: torch._foreach_addcmul_(
        l, l, l, torch.tensor([0.1, 0.2])),
    "addcdiv by a tensor of ints": lambda l: torch._foreach_addcdiv(l, l, l, torch.tensor([1, 2])),
    "addcdiv by 3 scalars for 2 tensors": lambda l: torch._foreach_addcdiv(
        l, l, l, torch.tensor([1.0, 2.0, 3.0])),
    "addcdiv by a 2-d tensor": lambda l: torch._foreach_addcdiv(l, l, l, torch.ones(1, 2)),
}


@pytest.mark.parametrize("name", _BY_NUMBERS)
def test_foreach_ops_by_numbers_match_cpu(name):
    """_foreach_maximum/minimum by numbers (ATen's clamps) and addcmul/addcdiv by a tensor of
    scalars raised TypeError (torch.maximum refused the number; addcmul got four arguments)."""
    got = []
    for d in ("cpu", "wse"):
        tensors = [torch.tensor([0.5, 3.0, -1.0], device=d), torch.tensor([2.0, -0.5], device=d)]
        try:
            out = _BY_NUMBERS[name](tensors)
            got.append([t.cpu() for t in (tensors if out is None else out)])
        except RuntimeError as e:
            got.append(str(e))
    if isinstance(got[0], str):
        assert got[1] == got[0]
    else:
        torch.testing.assert_close(got[1], got[0], atol=0, rtol=0, equal_nan=True)
    assert lazydev.metrics.counters()["fallbacks"] == {}


def test_asgd_capturable_foreach_matches_cpu():
    """ASGD(capturable=True, foreach=True) clamps with _foreach_maximum_ by a number."""
    _train_like_cpu(lambda ps: torch.optim.ASGD(ps, lr=0.01),
                    lambda ps: torch.optim.ASGD(ps, lr=0.01, capturable=True, foreach=True),
                    steps=3)
