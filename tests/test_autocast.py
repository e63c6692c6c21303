"""torch.autocast("wse"): PyTorch's own autocast policies, CUDA's op lists (Note [Autocast on
wse] in lazydev/compile/hooks.py). References are CPU eager with the policy's casts written
out, since the CPU's autocast lists differ from CUDA's."""
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import lazydev
from lazydev.compile import hooks
from conftest import TOLERANCES, assert_same, needs_cpp_side, script_env

LOW = (torch.bfloat16, torch.float16)


@needs_cpp_side
@pytest.mark.parametrize("low", LOW)
def test_matmuls_run_in_the_lower_precision_and_the_rest_by_its_policy(low):
    torch.manual_seed(0)
    x, w, b = torch.randn(5, 8), torch.randn(3, 8), torch.randn(3)
    t = torch.randn(5, 3)
    with torch.autocast("wse", dtype=low):
        y = F.linear(x.to("wse"), w.to("wse"), b.to("wse"))       # lower_precision_fp
        s = torch.softmax(y, -1)                                   # fp32_set_opt_dtype
        m = torch.addcmul(t.to("wse"), y, y)                       # promote
        e = torch.exp(y)                                           # fp32
        r = torch.relu(y)                                          # no policy: as it comes
    z = F.linear(x.to("wse"), w.to("wse"))                         # outside: float32 again
    want = F.linear(x.to(low), w.to(low), b.to(low))
    assert (y.dtype, s.dtype, m.dtype, e.dtype, r.dtype, z.dtype) == \
        (low, torch.float32, torch.float32, torch.float32, low, torch.float32)
    assert_same(y, want)
    # From wse's own y: the policy is under test here, not y's rounding (just above).
    got = y.cpu().float()
    assert_same(s, torch.softmax(got, -1))
    assert_same(m, torch.addcmul(t, got, got))
    assert_same(e, torch.exp(got))
    assert_same(r, torch.relu(y.cpu()))
    assert_same(z, F.linear(x, w))
    assert lazydev.metrics.counters()["fallbacks"] == {}


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))


def _cast_by_hand(model, x, low):
    """The policy's casts written out: linears in `low`, the loss's log_softmax in float32."""
    h = F.relu(F.linear(x.to(low), model[0].weight.to(low), model[0].bias.to(low)))
    return F.linear(h, model[2].weight.to(low), model[2].bias.to(low)).float()


@needs_cpp_side
def test_an_autocast_training_loop_matches_the_casts_written_out():
    low = torch.bfloat16
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(16, 12, generator=g), torch.randint(0, 5, (16,), generator=g))
            for _ in range(3)]
    ref, model = _mlp(), _mlp().to("wse")
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in data:
        want = F.cross_entropy(_cast_by_hand(ref, x, low), y)
        ref_opt.zero_grad()
        want.backward()
        ref_opt.step()
        with torch.autocast("wse", dtype=low):
            out = model(x.to("wse"))
            loss = F.cross_entropy(out, y.to("wse"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        lazydev.mark_step()
        assert (out.dtype, loss.dtype) == (low, torch.float32)
        torch.testing.assert_close(loss.cpu(), want.detach(), **_tol(low))
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.dtype == torch.float32
        torch.testing.assert_close(p.cpu(), q.detach(), **_tol(low))
    assert lazydev.metrics.counters()["fallbacks"] == {}


def _tol(dtype):
    atol, rtol = TOLERANCES[dtype]
    return {"atol": atol, "rtol": rtol}


@needs_cpp_side
def test_binary_cross_entropy_is_refused_under_autocast_saying_what_to_use():
    p, t = torch.rand(4).to("wse"), torch.rand(4).to("wse")
    with torch.autocast("wse", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            F.binary_cross_entropy(p, t)
    assert_same(F.binary_cross_entropy(p, t), F.binary_cross_entropy(p.cpu(), t.cpu()))


def test_without_a_cxx_compiler_autocast_warns_and_stays_off(monkeypatch, tmp_path):
    """The device's hooks built, the policies not: autocast is off, and says why."""
    monkeypatch.setattr(hooks, "CXX", "no-such-c++")
    monkeypatch.setattr(hooks, "_autocast_loaded", [])
    monkeypatch.setattr(lazydev.config, "cache_dir", str(tmp_path))
    lin = torch.nn.Linear(8, 3)
    x = torch.randn(2, 8)
    with pytest.warns(RuntimeWarning, match="could not build torch.autocast's policies"):
        with pytest.warns(UserWarning, match="In wse autocast, but the target dtype is not"):
            with torch.autocast("wse", dtype=torch.bfloat16):
                y = lin.to("wse")(x.to("wse"))
    assert y.dtype == torch.float32
    assert_same(y, lin.cpu()(x))


_NO_CXX = """
import torch, lazydev
lin = torch.nn.Linear(8, 3).to("wse")
with torch.autocast("wse", enabled=False):
    pass
with torch.autocast("wse", dtype=torch.bfloat16):
    y = lin(torch.randn(2, 8).to("wse"))
print(y.dtype)
"""


def test_with_no_cxx_compiler_at_all_the_import_says_autocast_is_off(tmp_path):
    """No C++ side: the import's one warning names autocast, no build of the policies is tried
    (nor warned about) for a block, and PyTorch's own warning comes where autocast is on."""
    proc = subprocess.run([sys.executable, "-c", _NO_CXX],
                          env=script_env(tmp_path, CXX="no-such-c++"), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["torch.float32"]
    assert proc.stderr.count("could not build") == 1
    assert "torch.autocast('wse') stays off" in proc.stderr
    assert proc.stderr.count("In wse autocast, but the target dtype is not supported") == 1
