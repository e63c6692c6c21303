"""Replay plans (tensor/replay.py): an op recorded through its plan must build the same values as
the general path, float arguments must stay runtime values, and signatures a plan cannot
represent must fall back to the general path."""
import pytest
import torch

import lazydev
from lazydev.tensor import dispatch, dtypes, replay
from lazydev.trace.lower import LOWERINGS

from conftest import assert_same

aten = torch.ops.aten


def _counts():
    c = lazydev.metrics.counters()
    return c.get("replay_plans", 0), c.get("replay_refused", 0)


def test_float_arguments_are_runtime_values_not_plan_constants():
    x, y = torch.randn(64, 32), torch.randn(64, 32)
    wx, wy = x.to("wse"), y.to("wse")
    lazydev.mark_step()
    compiles = []
    for alpha in (0.5, 0.25, -3.0, 7.125):
        got = torch.add(wx, wy, alpha=alpha) * alpha
        got = got.cpu()
        compiles.append(lazydev.metrics.counters()["compilations"])
        assert_same(got, torch.add(x, y, alpha=alpha) * alpha)
    # One program for every non-special alpha: the values are scalar slots of one graph.
    assert compiles[1:] == compiles[:1] * 3


def test_special_floats_get_their_own_plans():
    x, y = torch.randn(40), torch.randn(40)
    wx, wy = x.to("wse"), y.to("wse")
    for alpha in (1.0, 0.0, -1.0, 0.3, float("inf"), float("nan")):
        assert_same(torch.add(wx, wy, alpha=alpha).cpu(), torch.add(x, y, alpha=alpha))
        assert_same(torch.sub(wx, 0.0 if alpha != alpha else alpha).cpu(),
                    torch.sub(x, 0.0 if alpha != alpha else alpha))


def test_equal_numbers_of_other_types_or_signs_get_their_own_plans():
    """1 == 1.0 == True and 0.0 == -0.0 as Python keys, but the results differ: an int scalar
    keeps an integer tensor integral, True keeps a bool tensor bool, -0.0 flips zeros' signs.
    Each call here follows one whose arguments were equal as keys."""
    i, b, f = torch.arange(4), torch.tensor([True, False]), torch.tensor([1.0, -2.0])
    cases = [(aten.mul.Scalar, i, 1.0), (aten.mul.Scalar, i, 1),
             (aten.add.Scalar, b, True), (aten.add.Scalar, b, 1),
             (aten.mul.Scalar, f, 0.0), (aten.mul.Scalar, f, -0.0)]
    for op, x, v in cases:
        got, want = op(x.to("wse"), v), op(x, v)
        assert got.dtype == want.dtype, (op, x.dtype, v)
        assert_same(got, want)
        assert torch.equal(torch.signbit(got.cpu()), torch.signbit(want)) or not \
            want.is_floating_point()
    assert torch.arange(5.0, device="wse").dtype == torch.float32
    assert torch.arange(5, device="wse").dtype == torch.int64


def test_in_place_through_a_plan_writes_through_views():
    base = torch.randn(6, 8)
    wbase = base.to("wse")
    g = torch.randn(8, 3)
    for lr in (0.1, 0.2):
        base.t()[:, 2:5].mul_(lr).add_(g, alpha=-lr)
        wbase.t()[:, 2:5].mul_(lr).add_(g.to("wse"), alpha=-lr)
    assert_same(wbase.cpu(), base)


def test_wrapped_python_numbers_replay():
    x = torch.randn(300)
    w = x.to("wse")
    for c in (0.9, 0.1, 2.0):
        assert_same(torch.tanh(w * c + c).cpu(), torch.tanh(x * c + c))
    h = torch.randn(50).half()
    assert_same((h.to("wse") * 0.3).cpu(), h * 0.3)


def test_a_plan_is_built_once_per_signature_and_reused():
    replay.clear()
    x = torch.randn(16, 16).to("wse")
    before = _counts()
    for s in (0.5, 1.5, 2.5):
        torch.mul(x, s).relu_()
    after = _counts()
    assert after[0] - before[0] == 2          # mul.Tensor (wrapped number) and relu_
    lazydev.mark_step()


def test_a_lowering_that_depends_on_a_float_value_is_refused():
    # A made-up lowering that branches on its float argument: the two probe runs build
    # different graphs, so no plan may be made from it.
    def branching(spec, x, other, alpha=1):
        from lazydev.trace.build import as_node, ew
        from lazydev.trace.ir import Op
        op = Op.ADD if alpha > 1.0 else Op.SUB
        return ew(op, spec.dtype, spec.shape, x, as_node(alpha, spec.dtype))
    x, y = torch.randn(8), torch.randn(8)
    wx, wy = x.to("wse"), y.to("wse")
    try:
        replay.build(aten.add.Tensor, branching, (wx, wy), {"alpha": 0.7}, 2)
    except replay._NotReplayable:
        pass
    else:
        raise AssertionError("a value-dependent lowering was turned into a plan")
    plan = replay.build(aten.add.Tensor, LOWERINGS[aten.add.Tensor], (wx, wy), {"alpha": 0.7}, 2)
    assert plan.macro.recipes


def test_cpu_tensor_arguments_take_the_general_path():
    x = torch.randn(5, 3)
    idx = torch.tensor([4, 0, 2])
    got = x.to("wse")[idx]                   # a CPU index tensor: not replayable
    assert_same(got.cpu(), x[idx])
    assert lazydev.metrics.counters()["fallbacks"] == {}


def test_a_lowering_that_syncs_is_refused_and_runs_the_general_way():
    # A lowering that reads data (here: uploads a CPU tensor) is not a function of metadata.
    from lazydev.trace.build import ew
    from lazydev.trace.ir import Op

    def uploading(spec, x, other, alpha=1):
        from lazydev.tensor.wse_tensor import from_cpu, value
        extra = value(from_cpu(torch.ones(spec.shape)))
        return ew(Op.ADD, spec.dtype, spec.shape, x, extra)
    wx, wy = torch.randn(8).to("wse"), torch.randn(8).to("wse")
    try:
        replay.build(aten.add.Tensor, uploading, (wx, wy), {}, 2)
    except Exception as e:                              # noqa: BLE001
        assert type(e).__name__ == "NotPure", e
    else:
        raise AssertionError("an uploading lowering was turned into a plan")
    assert not lazydev.trace.state.building_plan


def test_batch_norm_replays_with_its_momentum_as_a_runtime_value():
    """Training-mode batch norm through a plan (its handler also writes the running statistics):
    values and running statistics match the CPU for changing momentum, with one plan and one
    program for all of them."""
    replay.clear()
    torch.manual_seed(0)
    cpu, wse = torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4).to("wse")
    before, compiles = _counts(), []
    for momentum in (0.1, 0.3, 0.05):
        cpu.momentum = wse.momentum = momentum
        x = torch.randn(8, 4, 5, 5)
        assert_same(wse(x.to("wse")), cpu(x))
        lazydev.mark_step()
        compiles.append(lazydev.metrics.counters()["compilations"])
    assert_same(wse.running_mean, cpu.running_mean)
    assert_same(wse.running_var, cpu.running_var)
    assert _counts()[0] - before[0] == 2          # native_batch_norm and num_batches_tracked += 1
    assert compiles[1:] == compiles[:1] * 2


def _trace_scalars():
    from lazydev.trace import state
    return len(state.current().scalars)


def test_a_foreach_scalar_argument_is_one_runtime_scalar_for_all_elements():
    ps = [torch.randn(s) for s in (5, 7, 11)]
    wps = [p.to("wse") for p in ps]
    lazydev.mark_step()
    for factor in (0.9, 0.5):
        torch._foreach_mul_(ps, factor)
        torch._foreach_mul_(wps, factor)
        # Note [Shared scalars]: one slot for the argument, not one per parameter.
        assert _trace_scalars() == 1
        lazydev.mark_step()
        for w, p in zip(wps, ps):
            assert_same(w.cpu(), p)
    # A ScalarList keeps a slot per element, even for equal values: sharing never follows values.
    torch._foreach_mul_(wps, [0.5 + 0.25 for _ in wps])
    assert _trace_scalars() == len(wps)
    lazydev.mark_step()



def test_a_large_lowering_is_recorded_as_calls_and_expanded_on_a_miss():
    """Note [Macro nodes]: layer norm's plan records one CALL node per output (not its dozen and
    more nodes), the graph expands them when it compiles, and the values match the CPU."""
    from lazydev.trace import macro
    from lazydev.trace.ir import Op, toposort
    from lazydev.tensor.wse_tensor import value
    x, w, b = torch.randn(6, 40), torch.randn(40), torch.randn(40)
    wx, ww, wb = (t.to("wse") for t in (x, w, b))
    lazydev.mark_step()
    for eps in (1e-5, 1e-3):        # eps is a runtime scalar: one program for both
        out, mean, rstd = aten.native_layer_norm(wx, [40], ww, wb, eps)
        nodes = [value(t) for t in (out, mean, rstd)]
        assert [n.op for n in nodes] == [Op.CALL] * 3
        assert len({n.src for n in nodes}) == 1           # one call, three outputs
        expanded = macro.expand_calls(nodes)
        assert all(e.op is not Op.CALL for e in expanded)
        # one shared expansion: the normalised output reads the very mean and rstd nodes
        reached = {id(m) for m in toposort([expanded[0]])}
        assert id(expanded[1]) in reached and id(expanded[2]) in reached
        want = aten.native_layer_norm(x, [40], w, b, eps)
        for got, ref in zip((out, mean, rstd), want):
            assert_same(got.cpu(), ref)
    progs = lazydev.metrics.counters()["compilations"]
    out, mean, rstd = aten.native_layer_norm(wx, [40], ww, wb, 1e-4)
    assert_same(out.cpu(), aten.native_layer_norm(x, [40], w, b, 1e-4)[0])
    assert lazydev.metrics.counters()["compilations"] == progs


def test_expanding_calls_gives_the_nodes_a_replay_would_make():
    """The expansion of a CALL is structurally the graph the plan's replay builds (equal keys)."""
    from lazydev.trace import macro
    from lazydev.trace.ir import Node, Op
    x = Node(Op.DATA, torch.float32, (4, 8), (), 0)
    y = Node(Op.DATA, torch.float32, (4, 8), (), 1)
    s = Node(Op.SCALAR, torch.float32, (), (), 0)
    recipes = [(Op.MUL, torch.float32, (4, 8), (0, 1), None),
               (Op.SCALAR, torch.float32, (), None, ("arg", 0)),
               (Op.ADD, torch.float32, (4, 8), (2, 3), None),
               (Op.EXP, torch.float32, (4, 8), (4,), None)]
    m = macro.Macro([], recipes, (4, 2), 2)
    direct = m.apply([x, y], [s])
    calls = m.call([x, y], [s])
    assert [c.op for c in calls] == [Op.CALL, Op.CALL]
    expanded = macro.expand_calls([Node(Op.NEG, torch.float32, (4, 8), (calls[0],)), calls[1]])
    assert expanded[0].src[0].key == direct[0].key and expanded[1].key == direct[1].key


def test_foreach_calls_replay_one_plan_per_call_and_match_cpu():
    """Note [Foreach plans]: in-place and functional foreach ops, a keyword argument, a list of
    floats and a call whose two lists are the same list, each recorded through one plan per
    call signature (the second step makes no new plan) with the CPU's values."""
    from lazydev.tensor import foreach
    g = torch.Generator().manual_seed(0)
    ps = [torch.randn(s, generator=g) for s in ((4, 5), (7,), (3, 2, 2))]
    gs = [torch.randn(p.shape, generator=g) for p in ps]
    wps, wgs = [p.to("wse") for p in ps], [x.to("wse") for x in gs]

    def step(ps, gs):
        torch._foreach_mul_(ps, 0.9)
        torch._foreach_add_(ps, gs, alpha=-0.1)
        torch._foreach_addcdiv_(ps, gs, torch._foreach_sqrt(torch._foreach_abs(gs)),
                                [0.5, -1.5, 2.0])
        torch._foreach_add_(gs, gs)
        return torch._foreach_mul(ps, gs)

    step(wps, wgs)
    step(ps, gs)
    lazydev.mark_step()
    foreach._LIST_PLANS.clear()
    plans = _counts()[0]
    for _ in range(2):
        outs = step(wps, wgs)
        want = step(ps, gs)
        lazydev.mark_step()
        for got, exp in zip([*wps, *wgs, *outs], [*ps, *gs, *want]):
            assert_same(got, exp)
    assert _counts()[0] == plans                  # element plans were made by the first step
    assert len(foreach._LIST_PLANS) == 7 and None not in foreach._LIST_PLANS.values()


def test_a_replayed_call_is_not_checked_again_and_other_dtypes_are(monkeypatch):
    """Note [Checked plans]: mm's dtype rule runs for the call that builds its plan, and the
    calls after replay that plan unchecked; a call with other dtypes is checked and refused
    with the CPU's error, before and after."""
    checks = []
    make_check = dtypes._make_check

    def counted(func):
        check = make_check(func)

        def run(args, kwargs):
            checks.append(tuple(a.dtype for a in args))
            return check(args, kwargs)
        return run
    # mm's handler and check are made again, counting, and put back afterwards; its plans are
    # built again.
    mm = torch.ops.aten.mm.default
    monkeypatch.setattr(dtypes, "_make_check", counted)
    monkeypatch.setitem(dispatch._HANDLERS, id(mm), None)
    monkeypatch.setitem(dtypes._checks, mm, None)
    replay.clear()
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    wa, wb, wb64 = a.to("wse"), b.to("wse"), b.double().to("wse")
    with pytest.raises(RuntimeError, match="same dtype") as cpu:
        a @ b.double()
    for _ in range(3):
        assert_same(wa @ wb, a @ b)
        with pytest.raises(RuntimeError, match="same dtype") as wse:
            wa @ wb64
        assert str(wse.value) == str(cpu.value)
    lazydev.mark_step()
    f32, f64 = torch.float32, torch.float64
    # The first call: checked by its handler, then by the build of its plan; later calls replay.
    assert checks == [(f32, f32), (f32, f32), (f32, f64), (f32, f64), (f32, f64)]


def test_a_convolution_with_a_plan_is_replayed_without_its_checks(monkeypatch):
    """Note [Replayed convolutions]: the first call of a signature runs the handler's checks and
    builds the plan; the calls after replay it unchecked, forward and backward, with the CPU's
    values; a call of another signature that the CPU refuses still raises the CPU's error."""
    from lazydev.tensor import conv
    checked, refused = [], conv._refused
    monkeypatch.setattr(conv, "_refused", lambda *a: checked.append(a[5]) or refused(*a))
    replay.clear()
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 3, 8, 8, generator=g), torch.randn(4, 3, 3, 3, generator=g)
    xs, ws = (t.clone().requires_grad_() for t in (x, w))
    wx, ww = (t.to("wse").requires_grad_() for t in (x, w))
    for _ in range(3):
        want = torch.nn.functional.conv2d(xs, ws, padding=1)
        got = torch.nn.functional.conv2d(wx, ww, padding=1)
        want.sum().backward()
        got.sum().backward()
        assert_same(got.detach().cpu(), want.detach())
    assert_same(wx.grad.cpu(), xs.grad)
    assert_same(ww.grad.cpu(), ws.grad)
    assert checked == [[1, 1]]
    bad = torch.randn(4, 1, 3, 3)
    with pytest.raises(RuntimeError) as cpu:
        torch.nn.functional.conv2d(x, bad, groups=3)
    with pytest.raises(RuntimeError) as wse:
        torch.nn.functional.conv2d(wx.detach(), bad.to("wse"), groups=3)
    assert str(wse.value) == str(cpu.value)
    lazydev.mark_step()


def _signature(*args, **kwargs):
    tensors, floats = [], []
    key = replay.signature(aten.add.Tensor, args, kwargs, tensors, floats)
    return key, tensors, floats


def test_signatures_collect_tensors_and_floats_in_order_and_tell_kinds_apart():
    """Note [Native recording]: the C signature's own cases and the ones it leaves to `_part`."""
    x, y = torch.randn(2, 3).to("wse"), torch.randn(3).to("wse")
    key, tensors, floats = _signature(x, 2.5, [1, 2], None, [x, y], alpha=0.75)
    assert [id(t) for t in tensors] == [id(x), id(x), id(y)]   # == on wse tensors records
    assert floats == [2.5, 0.75]
    # Ordinary floats are runtime values: other values, the same key.
    assert _signature(x, 3.5, [1, 2], None, [x, y], alpha=0.25)[0] == key
    kinds = [1.0, 1, True, 0.0, -0.0, float("nan"), [1, 2], (1, 2), [1, True], torch.float32,
             torch.float64, None, y]
    keys = [_signature(x, k)[0] for k in kinds]
    assert len(set(keys)) == len(kinds)
    assert _signature(x, torch.tensor(0.5, dtype=torch.float64))[2] == [0.5]   # a wrapped number
    with pytest.raises(replay._NotReplayable):
        _signature(x, torch.ones(3))            # any other CPU tensor


def test_replayed_ops_are_counted_as_the_general_path_counts_them():
    x = torch.randn(8).to("wse")
    lazydev.mark_step()
    before = lazydev.trace.state.current().nodes
    for _ in range(3):      # the first round builds the plans, the others replay them in C
        x = (x + 1.5).relu().view(2, 4).view(8).detach()
    assert lazydev.trace.state.current().nodes - before == 15
    lazydev.mark_step()


def test_an_error_in_a_replayed_call_is_raised_once_as_any_op_s(monkeypatch):
    """A call replayed in C that raises goes to dispatch.failed, as every op's error does (the
    CPU's words for it, or deferred inside backward), without being recorded a second time."""
    from lazydev.trace.state import Storage
    a = torch.randn(4)
    x = a.to("wse")
    x + 1.0                         # the plan, built
    made = []

    def failing(cls, numel, node):
        made.append(numel)
        raise ValueError("no storage today")
    monkeypatch.setattr(Storage, "pending", classmethod(failing))
    with pytest.raises(ValueError, match="no storage today"):
        x + 2.0
    assert made == [4]
    monkeypatch.undo()
    assert_same(x + 2.0, a + 2.0)
