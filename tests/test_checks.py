"""Device-side checks (Note [Device-side checks] in lazydev/trace/checks.py): arguments the CPU
checks by value (indices, targets, probabilities) raise the CPU's error on wse, at the sync
that runs them, without a read."""
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import lazydev
from conftest import assert_same, script_env
from lazydev.trace.checks import checked as _real_checked


def _w(dev):
    return torch.arange(12.).reshape(3, 4).to(dev)


def _i(dev, *v):
    return torch.tensor(v, device=dev)


def _row(dev, v, dim=0):
    return torch.full((1, 4) if dim == 0 else (3, 1), v, device=dev)


def _ones(dev):
    return torch.ones(1, 4, device=dev)


# name -> f(device): each raises on the CPU (an index, target or probability out of range)
BAD = {
    "gather_negative": lambda d: _w(d).gather(0, _row(d, -1)),
    "gather_past_end": lambda d: _w(d).gather(1, _row(d, 4, dim=1)),
    "scatter": lambda d: _w(d).scatter(0, _row(d, -1), _ones(d)),
    "scatter_value": lambda d: _w(d).scatter(0, _row(d, 3), 5.0),
    "scatter_add_": lambda d: _w(d).scatter_add_(0, _row(d, -1), _ones(d)),
    "scatter_reduce": lambda d: _w(d).scatter_reduce(0, _row(d, -2), _ones(d), "amax"),
    "index_add": lambda d: _w(d).index_add(0, _i(d, -1), _ones(d)),
    "index_add_": lambda d: _w(d).index_add_(0, _i(d, 3), _ones(d)),
    "index_copy": lambda d: _w(d).index_copy(0, _i(d, -1), _ones(d)),
    "index_select": lambda d: _w(d).index_select(0, _i(d, -1)),
    # along dim 1 the CPU's kernel has its own error (wse raised dim 0's IndexError)
    "index_select_dim1": lambda d: _w(d).index_select(1, _i(d, 5)),
    "index_select_dim1_negative": lambda d: _w(d).index_select(-1, _i(d, -1)),
    "index_reduce": lambda d: _w(d).index_reduce(0, _i(d, -1), _ones(d), "prod"),
    "index_fill": lambda d: _w(d).index_fill(0, _i(d, -4), 2.0),
    "take": lambda d: _w(d).take(_i(d, 12)),
    "put_": lambda d: _w(d).put_(_i(d, -13), _i(d, 1.0)),
    "embedding": lambda d: F.embedding(_i(d, 0, -1), _w(d)),
    "embedding_past_end": lambda d: F.embedding(_i(d, 3), _w(d)),
    "embedding_bag": lambda d: F.embedding_bag(_i(d, 1, -1), _w(d), _i(d, 0)),
    "embedding_bag_first_offset": lambda d: F.embedding_bag(_i(d, 0, 1, 2), _w(d), _i(d, 1)),
    "embedding_bag_last_offset": lambda d: F.embedding_bag(_i(d, 0, 1, 2), _w(d), _i(d, 0, 4),
                                                           include_last_offset=True),
    "multilabel_margin_loss": lambda d: F.multilabel_margin_loss(torch.zeros(1, 4, device=d),
                                                                 _i(d, 0, -1, 7, 1).view(1, 4)),
    "max_unpool1d": lambda d: F.max_unpool1d(torch.ones(1, 1, 2, device=d),
                                             _i(d, 0, -1).view(1, 1, 2), 2),
    "max_unpool2d": lambda d: F.max_unpool2d(torch.ones(1, 1, 1, 2, device=d),
                                             _i(d, 0, 8).view(1, 1, 1, 2), 2),
    "nll_loss_negative": lambda d: F.nll_loss(torch.zeros(2, 3, device=d), _i(d, 0, -2)),
    "nll_loss_past_end": lambda d: F.nll_loss(torch.zeros(2, 3, device=d), _i(d, 0, 3)),
    "nll_loss_weighted": lambda d: F.nll_loss(torch.zeros(2, 3, device=d), _i(d, -2, 0),
                                              weight=torch.ones(3, device=d)),
    "nll_loss2d": lambda d: F.nll_loss(torch.zeros(1, 3, 2, 2, device=d),
                                       torch.full((1, 2, 2), -3, device=d)),
    "cross_entropy_smoothed": lambda d: F.cross_entropy(torch.zeros(2, 3, device=d),
                                                        _i(d, 0, 4), label_smoothing=0.1),
    "multi_margin_loss": lambda d: F.multi_margin_loss(torch.zeros(2, 3, device=d), _i(d, 0, -1)),
    "binary_cross_entropy": lambda d: F.binary_cross_entropy(_i(d, 0.5, 1.5), _i(d, 0.0, 1.0)),
    "binary_cross_entropy_nan": lambda d: F.binary_cross_entropy(_i(d, float("nan"), 0.5),
                                                                 _i(d, 0.0, 1.0)),
    "binary_cross_entropy_target": lambda d: F.binary_cross_entropy(_i(d, 0.2, 0.7),
                                                                    _i(d, 0.0, 2.0)),
    "bernoulli": lambda d: torch.bernoulli(_i(d, 0.5, -0.5)),
    "bernoulli_": lambda d: torch.zeros(2, device=d).bernoulli_(_i(d, 0.5, 1.5)),
    "one_hot_negative": lambda d: F.one_hot(_i(d, 0, -1), 3),
    "one_hot_past_end": lambda d: F.one_hot(_i(d, 0, 3), 3),
}


def _assert_recorded():
    """Nothing ran on the CPU and nothing was read before mark_step."""
    counters = lazydev.metrics.counters()
    assert not counters["fallbacks"]
    assert not [k for k in counters if k.startswith("sync_")]


def _cpu_error(fn) -> Exception:
    try:
        fn("cpu")
    except Exception as e:          # noqa: BLE001 - the CPU's error is the expectation
        return e
    raise AssertionError("the case does not raise on the CPU")


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_index_raises_the_cpu_error_at_the_sync(name):
    expected = _cpu_error(BAD[name])
    syncs = lazydev.metrics.counters()["syncs"]
    out = BAD[name]("wse")                      # recorded: nothing read, nothing raised yet
    assert lazydev.metrics.counters()["syncs"] == syncs
    with pytest.raises(type(expected), match=re.escape(str(expected))):
        lazydev.mark_step()
        out.cpu()
    _assert_recorded()


def test_embedding_bag_offsets_that_decrease_raise_at_the_sync():
    """Offsets [0, 2, 1]: the CPU's kernel fails an internal check ('Expected i < index_size');
    wse summed an empty bag and went on. It raises a message of its own, at the sync."""
    with pytest.raises(RuntimeError, match="Expected i < index_size"):
        F.embedding_bag(_i("cpu", 1, 2, 0), _w("cpu"), _i("cpu", 0, 2, 1))
    out = F.embedding_bag(_i("wse", 1, 2, 0), _w("wse"), _i("wse", 0, 2, 1))
    with pytest.raises(RuntimeError, match="offsets of embedding_bag must not decrease, but an "
                       "offset of 1 follows a larger one"):
        lazydev.mark_step()
        out.cpu()
    _assert_recorded()


# the same ops on arguments in range, negative ones where the op wraps them
GOOD = {
    "gather": lambda d: _w(d).gather(1, torch.tensor([[3], [0], [2]], device=d)),
    "scatter_add_": lambda d: _w(d).scatter_add_(0, _row(d, 2), _ones(d)),
    "index_add_": lambda d: _w(d).index_add_(0, _i(d, 2, 0), torch.ones(2, 4, device=d)),
    "index_copy": lambda d: _w(d).index_copy(0, _i(d, 1), _ones(d)),
    "index_fill": lambda d: _w(d).index_fill(0, _i(d, -1, -3), 2.0),
    "take": lambda d: _w(d).take(_i(d, -12, 11)),
    "put_": lambda d: _w(d).put_(_i(d, -1), _i(d, 7.0)),
    "embedding": lambda d: F.embedding(_i(d, 0, 2), _w(d)),
    "nll_loss_ignored": lambda d: F.nll_loss(torch.arange(6.).view(2, 3).to(d), _i(d, 1, -100)),
    "nll_loss_ignore_index": lambda d: F.nll_loss(torch.arange(6.).view(2, 3).to(d),
                                                  _i(d, 2, -7), ignore_index=-7),
    "binary_cross_entropy": lambda d: F.binary_cross_entropy(_i(d, 0.0, 0.3, 1.0),
                                                             _i(d, 0.0, 1.0, 1.0)),
    "bernoulli": lambda d: torch.bernoulli(_i(d, 0.0, 1.0, 1.0, 0.0)),
    "embedding_bag": lambda d: F.embedding_bag(_i(d, 2, 0, 1), _w(d), _i(d, 0, 1, 3),
                                               include_last_offset=True),
    "multilabel_margin_loss": lambda d: F.multilabel_margin_loss(
        torch.arange(8.).view(2, 4).to(d), _i(d, 3, 0, -1, 2, 1, 2, 0, -1).view(2, 4)),
    "one_hot": lambda d: F.one_hot(_i(d, 2, 0, 1), 4),
    "one_hot_classes_from_max": lambda d: F.one_hot(_i(d, 2, 0, 1)),
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_indices_in_range_give_the_cpu_values(name):
    out = GOOD[name]("wse")
    lazydev.mark_step()
    assert_same(out, GOOD[name]("cpu"))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_margin_loss_with_rows_that_end_early(reduction):
    # A -1 ends a row's targets. torch._decomp's formula counted the slots after it as
    # targets input[0] (loss 3.75 for the first case, 1.25 on the CPU); lazydev's is fixed.
    cases = [(torch.arange(4.0), torch.tensor([3, 0, -1, 2])),
             (torch.randn(3, 5), torch.tensor([[1, 2, 3, 4, 0], [-1, 1, 1, 1, 1],
                                               [4, 4, -1, 0, 0]]))]
    for x, target in cases:
        grads, losses = [], []
        for dev in ("cpu", "wse"):
            leaf = x.detach().to(dev).requires_grad_()
            loss = F.multilabel_margin_loss(leaf, target.to(dev), reduction=reduction)
            loss.sum().backward()
            losses.append(loss)
            grads.append(leaf.grad)
        lazydev.mark_step()
        assert_same(losses[1], losses[0])
        assert_same(grads[1], grads[0])
    _assert_recorded()


@pytest.mark.parametrize("shape", [(3,), (2, 3), (1, 3, 2, 2), (1, 3, 2)])
def test_a_class_weight_of_the_wrong_size_raises_the_cpu_error_at_once(shape):
    # A static check: torch._decomp's nll_loss asserted it (AssertionError, not RuntimeError).
    target = torch.zeros(shape[:1] + shape[2:] if len(shape) > 1 else (), dtype=torch.int64)

    def loss(d):
        return F.nll_loss(torch.zeros(shape, device=d), target.to(d),
                          weight=torch.ones(2, device=d))
    expected = _cpu_error(loss)
    with pytest.raises(type(expected), match=re.escape(str(expected))):
        loss("wse")


def test_a_failed_check_loses_no_data_and_the_next_step_runs():
    w = _w("wse")
    lazydev.mark_step()
    w.index_add_(0, _i("wse", -1), _ones("wse"))
    with pytest.raises(RuntimeError, match="index -1 is out of bounds"):
        lazydev.mark_step()
        w.cpu()
    assert_same(w, _w("cpu"))
    w.index_add_(0, _i("wse", 2), _ones("wse"))
    lazydev.mark_step()
    assert_same(w, _w("cpu").index_add(0, torch.tensor([2]), torch.ones(1, 4)))


def test_a_loss_checks_its_targets_once(monkeypatch):
    """A loss's target check is built once, into a replay plan (guards.py), and replayed by the
    steps after; the backward's check is the forward's own once the compiler has merged equal
    nodes; values and the out-of-range error are the CPU's."""
    from lazydev.compile.passes import canonicalise
    from lazydev.trace import checks, state
    from lazydev.trace.ir import Op, toposort
    from lazydev.trace.macro import expand_calls
    made = []
    monkeypatch.setattr(checks, "checked", lambda *a: made.append(a) or _real_checked(*a))

    def step(dev, target):
        x = torch.linspace(-2, 2, 20).reshape(4, 5).to(dev).requires_grad_()
        loss = F.cross_entropy(x, torch.tensor(target, device=dev))
        loss.backward()
        return loss, x.grad

    def checks_in_graph():
        outs = canonicalise(expand_calls([st.node for st in state.pending_storages()]))
        return sum(n.op is Op.CHECK for n in toposort(outs))
    got = step("wse", [0, 4, 2, 1])
    assert checks_in_graph() == 1
    assert_same(got, step("cpu", [0, 4, 2, 1]))
    built = len(made)
    assert built >= 1
    lazydev.mark_step()
    bad = step("wse", [0, 5, 2, 1])
    assert len(made) == built           # replayed: no check built again
    with pytest.raises(IndexError, match="Target 5 is out of bounds"):
        lazydev.mark_step()
        bad[1].cpu()


# op(device, index) for an index op whose check and lowering replay from one plan
CHECKED_PLANS = {
    "embedding": lambda d, i: F.embedding(i, _w(d)),
    "gather": lambda d, i: _w(d).gather(1, i.view(2, 1).expand(2, 4)),
    "nll_loss": lambda d, i: F.nll_loss(torch.arange(6.).view(2, 3).to(d), i),
    "take": lambda d, i: _w(d)[0].take(i),
}


@pytest.mark.parametrize("name", sorted(CHECKED_PLANS))
def test_an_index_op_replays_its_check_with_it(name, monkeypatch):
    """Note [Checked plans of index ops] in tensor/guards.py: after the first call, a call
    of the same signature makes no plan, builds no check and runs no Python (it is replayed in
    C), and its replayed check still fails an index out of range at the sync, with the CPU's
    error."""
    from lazydev.tensor import guards, replay
    from lazydev.trace import checks
    op = CHECKED_PLANS[name]
    first = op("wse", _i("wse", 0, 2))
    assert_same(first, op("cpu", _i("cpu", 0, 2)))
    made = []
    monkeypatch.setattr(checks, "checked", lambda *a: made.append(a) or _real_checked(*a))
    monkeypatch.setattr(guards, "_checked", lambda *a: made.append(a))
    monkeypatch.setattr(replay, "run_checked", lambda *a, **k: made.append(a))
    plans = lazydev.metrics.counters().get("replay_plans", 0)
    again = op("wse", _i("wse", 2, 1))
    assert (made, lazydev.metrics.counters().get("replay_plans", 0)) == ([], plans)
    assert_same(again, op("cpu", _i("cpu", 2, 1)))
    expected = _cpu_error(lambda d: op(d, _i(d, 0, 5)))
    bad = op("wse", _i("wse", 0, 5))
    assert made == []
    with pytest.raises(type(expected), match=re.escape(str(expected))):
        lazydev.mark_step()
        bad.cpu()


def test_an_op_that_fails_while_recording_leaves_no_check_behind():
    w = _w("wse")
    with pytest.raises(RuntimeError):
        w.gather(0, torch.full((1, 4, 1), -1, device="wse"))   # wrong rank: raised at once
    out = w + 1
    lazydev.mark_step()
    assert_same(out, _w("cpu") + 1)


def test_the_first_failure_is_reported_whole_from_parallel_loops():
    # Every element fails, on both threads: the message names one value and its own bounds.
    x = torch.randn(64, 4096)
    index = torch.full((64, 4096), -5, dtype=torch.int64)
    index[7, 9] = 70
    out = x.to("wse").gather(1, index.to("wse"))
    with pytest.raises(RuntimeError, match=r"index (-5|70) is out of bounds for dimension 1 "
                                           r"with size 4096"):
        lazydev.mark_step()
        out.cpu()


def test_assert_async():
    x = torch.tensor([1.0, 2.0], device="wse")
    lazydev.mark_step()
    torch._assert_async((x > 0).all())
    torch._assert_async((x > 0).all(), "never")
    lazydev.mark_step()
    lazydev.wait()
    torch._assert_async((x > 5).all(), "values {too} small")     # checked at the next sync
    lazydev.mark_step()
    with pytest.raises(RuntimeError, match=re.escape("values {too} small")):
        lazydev.wait()
    torch._assert_async(x[0] - 1)
    lazydev.mark_step()
    with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value"):
        lazydev.wait()
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        torch._assert_async(x)
    _assert_recorded()


def test_a_failure_no_read_raised_is_reported_at_exit(tmp_path):
    script = ("import torch, lazydev\n"
              "x = torch.tensor([1.0, 2.0], device='wse')\n"
              "torch._assert_async((x > 5).all(), 'x is too small')\n"
              "lazydev.mark_step()\n")
    done = subprocess.run([sys.executable, "-c", script], env=script_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "a wse program failed and no read raised its error: RuntimeError: x is too small" \
        in done.stderr


# ---- multinomial ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape", [(6,), (3, 7)])
@pytest.mark.parametrize("n,replacement", [(1, False), (1, True), (3, False), (5, True)])
def test_multinomial_draws_what_the_cpu_draws(dtype, shape, n, replacement):
    p = torch.rand(shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    p[..., 2] = 0           # a zero-probability category is never drawn
    pw = p.to("wse")
    lazydev.mark_step()
    lazydev.metrics.reset()
    torch.manual_seed(5)
    expected = [torch.multinomial(p, n, replacement) for _ in range(3)]
    after = torch.rand(2)
    torch.manual_seed(5)
    drawn = [torch.multinomial(pw, n, replacement) for _ in range(3)]
    assert_same(torch.rand(2), after)           # the CPU generator moved as far
    g = torch.Generator().manual_seed(9)
    mine = torch.multinomial(pw, n, replacement, generator=g)
    lazydev.mark_step()
    for d, e in zip(drawn, expected):
        assert_same(d, e)
    assert_same(mine, torch.multinomial(p, n, replacement,
                                        generator=torch.Generator().manual_seed(9)))
    _assert_recorded()


@pytest.mark.parametrize("p,n,replacement", [
    ([0.5, -0.1], 1, False), ([0.5, float("nan")], 2, False), ([[0.5, float("inf")]], 2, True),
    ([[0.0, 0.0], [1.0, 1.0]], 1, False), ([[0.0, 0.0], [1.0, 1.0]], 3, True),
    ([0.5, -0.1], 3, True), ([0.5, 0.1], 3, False), ([1, 2], 1, False)])
def test_multinomial_refuses_what_the_cpu_refuses(p, n, replacement):
    p = torch.tensor(p)
    expected = _cpu_error(lambda d: torch.multinomial(p.to(d), n, replacement))
    with pytest.raises(type(expected), match=re.escape(str(expected))):
        out = torch.multinomial(p.to("wse"), n, replacement)
        lazydev.mark_step()
        out.cpu()


def _sample(model, window, steps: int, sync) -> list:
    tokens = []
    for _ in range(steps):
        probs = model(window).softmax(-1)[:, -1]
        token = torch.multinomial(probs, 1)
        window = torch.cat([window[:, 1:], token], 1)
        tokens.append(token)
        sync()
    return tokens


def test_a_sampling_loop_runs_one_cached_program_per_token(fresh_cache):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
    window = torch.tensor([[3, 1, 4]])
    with torch.no_grad():
        torch.manual_seed(1)
        expected = _sample(model, window, 6, lambda: None)
        torch.manual_seed(1)
        drawn = _sample(model.to("wse"), window.to("wse"), 6, lazydev.mark_step)
    assert_same(drawn, expected)
    _assert_recorded()
    counters = lazydev.metrics.counters()
    assert counters["compilations"] <= 2 and counters["cache_hits"] >= 4
