"""torch.optim's fused=True steps and torch.amp.GradScaler's ops, recorded on wse instead of
falling back to the CPU (lazydev/tensor/optim.py)."""
import pytest
import torch

import lazydev
from conftest import assert_same, refuse_decompositions

LOW = (torch.float16, torch.bfloat16)
DTYPES = [torch.float32, torch.float64, *LOW]


def _no_fallbacks():
    assert lazydev.metrics.counters()["fallbacks"] == {}


def _state(dtype, n=67, seed=0):
    """param, grad, exp_avg, exp_avg_sq (non-negative), max_exp_avg_sq, on the CPU."""
    g = torch.Generator().manual_seed(seed)
    ts = [torch.randn(n, generator=g).to(dtype) for _ in range(5)]
    ts[3], ts[4] = ts[3].abs(), ts[3].abs() * 1.5
    return ts


def _same_in_double(actual, expected):
    """float64 steps as the CPU kernel's to double's rounding: its bias corrections and decayed
    learning rate are doubles (computed in float32 they were off by 1e-7)."""
    for a, e in zip(actual, expected):
        if e.dtype is torch.float64:
            torch.testing.assert_close(a.cpu(), e, atol=1e-12, rtol=1e-12)


def _scaling(device, found):
    return {"grad_scale": torch.tensor([4.0], device=device),
            "found_inf": torch.tensor([found], device=device)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["_fused_adam_", "_fused_adamw_"])
@pytest.mark.parametrize("options", [
    {"amsgrad": True, "weight_decay": 0.1, "maximize": False},
    {"amsgrad": False, "weight_decay": 0.0, "maximize": True},
])
@pytest.mark.parametrize("found", [None, 0.0, 1.0])
def test_fused_adam_matches_the_cpu_kernel(dtype, op, options, found):
    """Every tensor the step writes (the parameter, the gradient it unscales, the moments),
    with and without GradScaler's scale; a found overflow leaves them all as they were."""
    outs = []
    for device in ("cpu", "wse"):
        p, g, m, v, vmax = [t.to(device) for t in _state(dtype)]
        step = torch.tensor(3.0, device=device)
        extra = _scaling(device, found) if found is not None else {}
        getattr(torch, op)([p], [g], [m], [v], [vmax] if options["amsgrad"] else [], [step],
                           lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, **options, **extra)
        outs.append([p, g, m, v, vmax])
    assert_same(outs[1], outs[0])
    _same_in_double(outs[1], outs[0])
    if found == 1.0:
        assert_same(outs[1], _state(dtype))
    _no_fallbacks()


def test_fused_adamw_steps_each_parameter_by_its_own_step_count():
    """Several parameters, of other shapes (a scalar too), each at its own step (one added to
    the optimizer later is behind): each gets its own bias corrections."""
    shapes, counts = [(4, 3), (), (5,)], [7.0, 1.0, 3.0]
    outs = []
    for device in ("cpu", "wse"):
        g = torch.Generator().manual_seed(3)
        ps, gs, ms = ([torch.randn(s, generator=g).to(device) for s in shapes] for _ in range(3))
        vs = [torch.rand(s, generator=g).to(device) for s in shapes]
        steps = [torch.tensor(c, device=device) for c in counts]
        torch._fused_adamw_(ps, gs, ms, vs, [], steps, lr=0.01, beta1=0.9, beta2=0.999,
                            weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False,
                            **_scaling(device, 0.0))
        outs.append(ps + gs + ms + vs)
    assert_same(outs[1], outs[0])
    _no_fallbacks()


def _fused_step(op, options, ts, steps, extra):
    """One call of fused optimizer `op` on the tensor lists `ts` (params, grads, and the state)."""
    ps, gs, a, b, c = ts
    if op == "_fused_sgd_":
        torch._fused_sgd_(ps, gs, a if options["momentum"] else [], lr=0.1, **options, **extra)
    else:
        getattr(torch, op)(ps, gs, a, b, c if options["amsgrad"] else [], steps, lr=0.01,
                           beta1=0.9, beta2=0.999, eps=1e-8, **options, **extra)


_PLANNED = [("_fused_adam_", {"amsgrad": True, "weight_decay": 0.1, "maximize": False}),
            ("_fused_adamw_", {"amsgrad": True, "weight_decay": 0.1, "maximize": False}),
            ("_fused_adamw_", {"amsgrad": False, "weight_decay": 0.01, "maximize": True}),
            ("_fused_sgd_", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01,
                             "dampening": 0.0, "maximize": True, "is_first_step": False}),
            ("_fused_sgd_", {"momentum": 0.9, "nesterov": False, "weight_decay": 0.0,
                             "dampening": 0.25, "maximize": False, "is_first_step": False}),
            ("_fused_sgd_", {"momentum": 0.9, "nesterov": False, "weight_decay": 0.0,
                             "dampening": 0.1, "maximize": False, "is_first_step": True}),
            ("_fused_sgd_", {"momentum": 0.0, "nesterov": False, "weight_decay": 0.0,
                             "dampening": 0.0, "maximize": False, "is_first_step": False})]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op, options", _PLANNED)
@pytest.mark.parametrize("found", [None, 1.0])
def test_fused_steps_replay_a_plan_per_parameter_with_the_foreach_bits(dtype, op, options, found,
                                                                       monkeypatch):
    """Note [Optimizer plans]: each parameter's update is replayed from one plan (a second step
    makes no new one), with the bits the foreach formulation gives, a scalar parameter and
    GradScaler's scale and overflow flag included."""
    from lazydev.tensor import optim
    by_plans, taken = optim._by_plans, []
    shapes, outs = [(4, 3), (), (67,)], []

    def spied(*args, **kwargs):
        taken.append(by_plans(*args, **kwargs))
        return taken[-1]
    for plans in (True, False):
        monkeypatch.setattr(optim, "_by_plans", spied if plans else lambda *a, **k: False)
        g = torch.Generator().manual_seed(5)
        ts = [[torch.randn(s, generator=g).to(dtype).to("wse") for s in shapes] for _ in range(5)]
        ts[3], ts[4] = [v.abs() for v in ts[3]], [v.abs() * 1.5 for v in ts[4]]
        steps = [torch.tensor(c, device="wse") for c in (7.0, 1.0, 3.0)]
        extra = _scaling("wse", found) if found is not None else {}
        for k in range(2):
            made = lazydev.metrics.counters().get("replay_plans", 0)
            _fused_step(op, options, ts, steps, extra)
            lazydev.mark_step()
        assert lazydev.metrics.counters().get("replay_plans", 0) == made
        outs.append([t.cpu() for t in sum(ts, [])])
    assert taken == [True, True]
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    _no_fallbacks()


def test_fused_adamw_takes_a_tensor_learning_rate():
    outs = []
    for device in ("cpu", "wse"):
        p, g, m, v, _ = [t.to(device) for t in _state(torch.float32)]
        steps = [torch.tensor(2.0, device=device)]
        torch._fused_adamw_([p], [g], [m], [v], [], steps, lr=torch.tensor(0.01, device=device),
                            beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False,
                            maximize=False)
        outs.append([p, m, v])
    assert_same(outs[1], outs[0])
    _no_fallbacks()


def _sgd_reference(dtype, **options):
    """The CPU kernel's result; for float16 and bfloat16 computed in float32 and rounded, as
    the kernel means to: PyTorch's vectorised CPU loop for them never stores the parameter
    (aten/src/ATen/native/cpu/FusedSGDKernel.cpp), so only a row's tail would move."""
    wide = dtype in LOW
    p, g, buf = [t.float() if wide else t for t in _state(dtype)[:3]]
    torch._fused_sgd_([p], [g], [buf] if options["momentum"] else [], **options)
    return [t.to(dtype) for t in (p, g, buf)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("options", [
    {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01, "dampening": 0.0},
    {"momentum": 0.9, "nesterov": False, "weight_decay": 0.0, "dampening": 0.1},
    {"momentum": 0.0, "nesterov": False, "weight_decay": 0.0, "dampening": 0.0},
])
@pytest.mark.parametrize("first", [True, False])
def test_fused_sgd_matches_the_cpu_kernel(dtype, options, first):
    options = dict(options, lr=0.1, maximize=False, is_first_step=first)
    p, g, buf = [t.to("wse") for t in _state(dtype)[:3]]
    torch._fused_sgd_([p], [g], [buf] if options["momentum"] else [], **options)
    got = [p, g, buf] if options["momentum"] else [p, g]
    assert_same(got, _sgd_reference(dtype, **options)[:len(got)])
    _no_fallbacks()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("options", [
    {"lr_decay": 0.1, "weight_decay": 0.01, "maximize": False},
    {"lr_decay": 0.0, "weight_decay": 0.0, "maximize": True},
])
@pytest.mark.parametrize("found", [None, 0.0, 1.0])
def test_fused_adagrad_matches_the_cpu_kernel(dtype, options, found):
    outs = []
    for device in ("cpu", "wse"):
        p, g, _, total, _ = [t.to(device) for t in _state(dtype)]     # total: non-negative
        extra = _scaling(device, found) if found is not None else {}
        torch._fused_adagrad_([p], [g], [total], [torch.tensor(3.0, device=device)], lr=0.1,
                              eps=1e-10, **options, **extra)
        outs.append([p, g, total])
    assert_same(outs[1], outs[0])
    _same_in_double(outs[1], outs[0])
    _no_fallbacks()


@pytest.mark.parametrize("bad", [None, float("inf"), float("nan")])
def test_unscale_finds_overflow_and_unscales_every_gradient(bad):
    outs = []
    half = torch.randn(3, 4, generator=torch.Generator().manual_seed(2)).to(torch.float16)
    for device in ("cpu", "wse"):
        grads = [t.to(device) for t in _state(torch.float32)[:2]] + [half.clone().to(device)]
        if bad is not None:
            grads[1][5] = bad
        found = torch.zeros(1, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found,
                                                         torch.tensor([0.25], device=device))
        outs.append(grads + [found])
    assert_same(outs[1], outs[0])
    assert outs[1][-1].item() == (bad is not None)
    _no_fallbacks()


def test_update_scale_grows_backs_off_and_counts_like_the_cpu():
    found_seq = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    results = []
    for device in ("cpu", "wse"):
        scale = torch.tensor([3.0e38], device=device)     # the first growth would overflow
        tracker = torch.zeros(1, dtype=torch.int32, device=device)
        seen = []
        for f in found_seq:
            torch._amp_update_scale_(scale, tracker, torch.tensor([f], device=device),
                                     2.0, 0.5, 3)
            seen += [scale.clone(), tracker.clone()]
        results.append(seen)
    assert_same(results[1], results[0])
    _no_fallbacks()


def _train(device, make_opt, steps=4):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4)).to(device)
    opt = make_opt(model.parameters())
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 16, growth_interval=2)
    g = torch.Generator().manual_seed(1)
    for i in range(steps):
        x = torch.randn(4, 8, generator=g)
        if i == 2:
            x[0, 0] = float("inf")      # an overflow: the step is skipped, the scale backs off
        loss = model(x.to(device)).pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if device == "wse":
            lazydev.mark_step()
    return list(model.parameters()), scaler.get_scale()


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, fused=True),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, fused=True),
], ids=["adamw", "sgd"])
def test_a_grad_scaler_loop_with_a_fused_optimizer_runs_without_a_sync(make_opt):
    """GradScaler hands a fused optimizer its scale and overflow flag as tensors, so the step
    needs no host read: none happens, and nothing falls back."""
    params, scale = _train("wse", make_opt)
    counters = lazydev.metrics.counters()
    want, want_scale = _train("cpu", make_opt)
    assert_same(params, want)
    assert scale == want_scale
    assert not any(k.startswith("sync_") for k in counters), counters
    assert counters["fallbacks"] == {}


def test_stack_and_rsub_are_lowered_not_decomposed(monkeypatch):
    """Fused AdamW's bias corrections, `1 - beta ** step` over the stacked step counts
    (tensor/optim.py): stack is one CAT of its inputs and rsub one subtraction, where their
    decompositions dispatched an op per input and three a call. Values as on the CPU."""
    aten = torch.ops.aten
    refuse_decompositions(monkeypatch, aten.stack.default, aten.rsub.Scalar, aten.rsub.Tensor)
    steps = [torch.tensor(float(i)) for i in range(1, 7)]
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    dev_steps = [s.to("wse") for s in steps]
    assert_same(1 - torch.pow(0.9, torch.stack(dev_steps)), 1 - torch.pow(0.9, torch.stack(steps)))
    assert_same(torch.stack([a.to("wse"), b.to("wse")], -1), torch.stack([a, b], -1))
    assert_same(torch.rsub(a.to("wse"), b.to("wse"), alpha=2), torch.rsub(a, b, alpha=2))
    assert_same(torch.rsub(torch.arange(5).to("wse"), 2), torch.rsub(torch.arange(5), 2))
    _no_fallbacks()


@pytest.mark.parametrize("call", [
    lambda p, d: torch._fused_adam_(
        p, [x.clone() for x in p], [torch.zeros(4, device=d)], [torch.zeros(4, device=d)], [],
        [torch.tensor(1.0, device=d)], lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0,
        eps=1e-8, amsgrad=False, maximize=False),
    lambda p, d: torch._fused_sgd_(
        p, [x.float() for x in p], [torch.zeros(4, device=d)], weight_decay=0.0, momentum=0.9,
        lr=0.1, dampening=0.0, nesterov=False, maximize=False, is_first_step=True),
    lambda p, d: torch._fused_adagrad_(
        p, [x.clone() for x in p], [torch.zeros(4, device=d, dtype=torch.float64)],
        [torch.tensor(1.0, device=d)], lr=0.1, lr_decay=0.0, weight_decay=0.0, eps=1e-10,
        maximize=False)], ids=["adam", "sgd", "adagrad"])
def test_fused_steps_refuse_state_of_another_dtype_as_the_cpu(call):
    """bfloat16 parameters with float32 state (a model made bfloat16 after its fused Adam's
    first step): the CPU's kernels raise, wse updated in mixed dtypes."""
    errors = []
    for d in ("cpu", "wse"):
        with pytest.raises(RuntimeError, match="expected scalar type") as e:
            call([torch.ones(4, dtype=torch.bfloat16, device=d)], d)
        errors.append(str(e.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.Adagrad([p], lr=0.1, fused=True),
    lambda p: torch.optim.Adam([p], lr=torch.tensor(0.1), fused=True),
    lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, fused=True)], ids=range(3))
def test_a_fused_step_leaves_version_counters_as_the_cpu(make):
    """The CPU's fused kernels do not bump versions, so a graph kept with retain_graph runs
    backward again after a step; fused Adagrad's (and a tensor lr's) copy bumped them, and the
    second backward raised 'modified by an inplace operation'."""
    for d in ("cpu", "wse"):
        p = torch.ones(3, device=d, requires_grad=True)
        loss = (p * p).sum()
        loss.backward(retain_graph=True)
        make(p).step()
        assert p._version == 0
        loss.backward()
