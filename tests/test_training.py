"""Reference training loops on wse against CPU eager (issue: the wse device, end to end)."""
import contextlib
import re

import pytest
import torch

import lazydev
from lazydev.examples import MLP, train
from conftest import assert_same


def _rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


@pytest.mark.parametrize("kind,optimizer", [("mlp", "sgd"), ("cnn", "sgd"), ("lm", "adamw")])
def test_twenty_steps_match_cpu(kind, optimizer):
    cpu = train(kind, "cpu", steps=20, optimizer=optimizer)
    wse = train(kind, "wse", steps=20, optimizer=optimizer)
    worst = max(_rel(a, b) for a, b in zip(wse, cpu))
    assert worst <= 1e-4, (worst, wse, cpu)
    assert lazydev.metrics.counters()["fallbacks"] == {}


@pytest.mark.parametrize("every", [1, 2])
def test_switching_async_execution_between_steps_matches_cpu(monkeypatch, every):
    """lazydev.config(async_exec=...) may change between any two steps (a read early in a
    step leaves its rest queued when the next, synchronous, step starts)."""
    def switch(i, loss):
        lazydev.config(async_exec=(i // every) % 2 == 1)
    monkeypatch.setattr(lazydev.config, "async_exec", True)
    cpu = train("cnn", "cpu", steps=12)
    wse = train("cnn", "wse", steps=12, on_step=switch)
    worst = max(_rel(a, b) for a, b in zip(wse, cpu))
    assert worst <= 1e-4, (worst, wse, cpu)


def test_torch_compile_of_a_wse_model_runs_it_as_written():
    """torch.compile(model) on a wse model failed inside dynamo (InternalTorchDynamoError);
    dynamo now leaves wse frames alone, with one warning, and the steps match CPU eager (Note
    [torch.compile on wse] in lazydev/tensor/wse_tensor.py)."""
    torch._dynamo.reset()
    losses = {}
    for dev in ("cpu", "wse"):
        torch.manual_seed(0)
        model = MLP().to(dev)
        run = torch.compile(model) if dev == "wse" else model
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        losses[dev] = []
        for step in range(3):
            x = torch.randn(16, 64, generator=torch.Generator().manual_seed(step))
            with pytest.warns(UserWarning, match="torch.compile leaves") if (
                    dev, step) == ("wse", 0) else contextlib.nullcontext():
                loss = run(x.to(dev)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            lazydev.mark_step()
            losses[dev].append(loss.item())
    torch._dynamo.reset()
    assert max(_rel(a, b) for a, b in zip(losses["wse"], losses["cpu"])) <= 1e-4, losses
    assert lazydev.metrics.counters()["fallbacks"] == {}


def test_make_fx_of_wse_tensors_refuses_and_other_modes_still_see_the_ops():
    """make_fx traced lazydev's own meta tensors instead of the op and baked the first call's
    values in (linearize's jvp gave zeros, Note [make_fx on wse]); it now raises. A dispatch
    mode that handles ops itself (FlopCounterMode) sees the user's ops, as on the CPU."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils.flop_counter import FlopCounterMode
    x = torch.tensor([0.5, -1.0, 2.0], device="wse")
    with pytest.raises(RuntimeError, match="cannot be traced into an FX graph"):
        make_fx(lambda t: (t * x).sin())(torch.ones(3, device="wse"))
    with pytest.raises(RuntimeError, match="cannot be traced into an FX graph"):
        torch.func.linearize(lambda a: a.tanh() * a, x)
    flops = {}
    for dev in ("cpu", "wse"):
        with FlopCounterMode(display=False) as counter:
            torch.ones(4, 8, device=dev) @ torch.ones(8, 3, device=dev)
        flops[dev] = counter.get_total_flops()
    assert flops["wse"] == flops["cpu"] == 2 * 4 * 8 * 3


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("scheduler", [False, True])
def test_steady_state_steps_hit_the_cache(optimizer, scheduler, fresh_cache):
    seen = []
    train("mlp", "wse", steps=8, optimizer=optimizer, scheduler=scheduler,
          on_step=lambda i, loss: seen.append(dict(lazydev.metrics.counters())))
    # Step 1 creates the optimizer state (momentum / Adam moments), a different graph from the
    # update of every later step; step 2 compiles that update. From then on, nothing compiles
    # even though the learning rate (scheduler) and Adam's bias corrections change every step.
    assert seen[0]["compilations"] >= 1
    steady = [s["compilations"] for s in seen[1:]]
    assert steady == [steady[0]] * len(steady), steady
    hits = [s["cache_hits"] for s in seen[1:]]
    assert all(b == a + 1 for a, b in zip(hits[1:], hits[2:])), hits


def test_batch_size_change_recompiles_once_and_says_why(capsys, fresh_cache):
    torch.manual_seed(0)
    model = MLP().to("wse")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(batch):
        x = torch.randn(batch, 64).to("wse")
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        lazydev.mark_step()

    for _ in range(3):
        step(16)
    before = lazydev.metrics.counters()["compilations"]
    lazydev.config(log="cache")
    try:
        step(8)
        step(8)
    finally:
        lazydev.config(log="")
    assert lazydev.metrics.counters()["compilations"] == before + 1
    err = capsys.readouterr().err
    assert re.search(r"input \d+ \(float32, from .*test_training.py:\d+\) changed shape "
                     r"\[16, 64\] -> \[8, 64\]", err), err


def test_item_in_the_middle_of_a_step():
    def run(device):
        torch.manual_seed(0)
        model = MLP().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(16, 64).to(device)
        out = []
        for _ in range(3):
            loss = model(x).square().mean()
            out.append(loss.item())                # a sync before backward
            opt.zero_grad()
            loss.backward()
            opt.step()
            if device == "wse":
                lazydev.mark_step()
        out.append(model(x).square().mean().item())
        return out
    cpu, wse = run("cpu"), run("wse")
    torch.testing.assert_close(torch.tensor(wse), torch.tensor(cpu), rtol=1e-5, atol=1e-6)


def test_mixing_cpu_and_wse_raises_naming_both_devices():
    a = torch.randn(3, 4, device="wse")
    with pytest.raises(RuntimeError, match=r"wse:0 and cpu"):
        a + torch.randn(3, 4)
    with pytest.raises(RuntimeError, match=r"different devices. Got: wse:0 and cpu"):
        torch.equal(a, a.cpu())                 # CUDA's equal refuses; it returned True
    for export in (torch.from_dlpack, torch.utils.dlpack.to_dlpack, lambda t: t.__dlpack__()):
        with pytest.raises(BufferError, match="Use Tensor.cpu()"):
            export(a)                           # a capsule of a null pointer
    # 0-dim CPU tensors mix with device tensors, as with CUDA.
    b = a * torch.tensor(2.0)
    torch.testing.assert_close(b.cpu(), a.cpu() * 2)


def _square_loss_steps(model, opt, xs, device) -> list:
    """One training step per input in `xs` (CPU tensors) on the mean square of the model's
    output; the losses."""
    losses = []
    for x in xs:
        loss = model(x.to(device)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device == "wse":
            lazydev.mark_step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_dropout_draws_the_cpu_s_mask_for_one_seed(p):
    """nn.Dropout reaches native_dropout on a device, whose torch._decomp form drew another
    mask than the CPU's F.dropout (bernoulli_), so a model with dropout could not be compared
    with CPU eager; p = 0 and 1 draw nothing there, and the next draw must agree too."""
    runs = {}
    for dev in ("cpu", "wse"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Dropout(p), torch.nn.Linear(32, 4)).to(dev)
        xs = [torch.randn(8, 16, generator=torch.Generator().manual_seed(s)) for s in range(3)]
        losses = _square_loss_steps(model, torch.optim.SGD(model.parameters(), lr=0.1), xs, dev)
        runs[dev] = (torch.tensor(losses), model[0].weight.detach().cpu(), torch.randn(3))
    for a, b in zip(runs["wse"], runs["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_views_of_tensors_made_before_inference_mode_work_inside_it():
    """A mask or KV cache made before torch.inference_mode(), sliced or written through a
    view inside it, raised 'Cannot set version_counter for inference tensor' (Note [Views in
    inference mode]); as on the CPU, those views are normal tensors, and views of tensors made
    inside are inference tensors."""
    out = {}
    for dev in ("cpu", "wse"):
        mask = torch.arange(12.0).reshape(3, 4).to(dev)
        cache = torch.zeros(2, 8, 4, device=dev)
        with torch.inference_mode():
            inner = torch.ones(4, device=dev)
            cache[:, 3] = mask[1:].sum(0)
            part = mask.t().unsqueeze(-1).view(4, 3)
            assert not part.is_inference() and inner[1:].is_inference()
            out[dev] = (cache.clone(), part.clone(), mask.detach() * inner)
    assert_same(out["wse"], out["cpu"])


def test_views_of_inference_tensors_made_outside_inference_mode_are_inference_tensors():
    """As on the CPU: c[0], c.t(), c.detach() of a c made inside the block, taken after it,
    were normal tensors; writes through them were allowed, and c[0] saved for backward gave
    a gradient of c's values as changed later."""
    for dev in ("cpu", "wse"):
        with torch.inference_mode():
            c = torch.ones(2, 3, device=dev)
        for v in (c[0], c.t(), c.detach(), c.view(6), c.expand(2, 2, 3)):
            assert v.is_inference(), (dev, v.shape)
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside"):
            c[0].add_(1)
        with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
            (c[0] * torch.ones(3, device=dev, requires_grad=True)).sum()


def test_a_cpu_gradient_for_a_wse_output_raises_at_backward():
    """As the engine checks a CUDA output's gradient (it skips subclasses, Note [Root gradients
    on another device]): a CPU one left w.grad on the CPU, and opt.step() raised. A 0-dim one
    moves to wse."""
    w = torch.tensor([1.0, -2.0, 3.0]).to("wse").requires_grad_()
    with pytest.raises(RuntimeError, match="invalid gradient at index 0 - expected device wse"):
        (w * 2).backward(torch.ones(3))
    with pytest.raises(RuntimeError, match="invalid gradient at index 0 - expected device wse"):
        torch.autograd.grad(w * 3, w, torch.ones(3))
    (w * w).sum().backward(torch.tensor(2.0))
    (w * 2).backward(torch.ones(3, device="wse"))
    assert w.grad.device.type == "wse"
    torch.testing.assert_close(w.grad.cpu(), torch.tensor([6.0, -6.0, 14.0]))


def test_out_of_range_embedding_raises_index_error_not_a_crash():
    weight = torch.randn(4, 3)
    w = weight.to("wse")
    bad = torch.tensor([0, 5]).to("wse")
    out = torch.nn.functional.embedding(bad, w)
    with pytest.raises(IndexError, match="index out of range in self"):     # the CPU's
        out.cpu()
    # The process lives on, and no materialised data was lost.
    torch.testing.assert_close(w.cpu(), weight)
    good = torch.nn.functional.embedding(torch.tensor([3, 1]).to("wse"), w)
    torch.testing.assert_close(good.cpu(), weight[[3, 1]])


def _embedding_step(model, opt, idx):
    opt.zero_grad()
    model(idx).square().sum().backward()
    opt.step()


def test_a_first_step_that_fails_on_the_device_can_be_recovered_from():
    """The first step's device error (an index out of range) is found at mark_step, after Adam
    made its state in that step: the parameters go back to their values, and the state, which
    had none before, says how to recover. Overwriting it or deleting it then trains as the CPU
    does from the same start (Adam's step count is a CPU tensor: deleting restarts it)."""
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 2))
    wse = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 2))
    wse.load_state_dict(cpu.state_dict())
    wse.to("wse")
    opts = [torch.optim.Adam(m.parameters(), lr=0.1) for m in (cpu, wse)]
    _embedding_step(wse, opts[1], torch.tensor([1, 11], device="wse"))
    lazydev.mark_step()
    with pytest.raises(IndexError, match="index out of range in self"):
        lazydev.wait()
    for p, q in zip(wse.parameters(), cpu.parameters()):
        assert_same(p, q)                                   # rolled back
    state = opts[1].state[next(wse.parameters())]
    with pytest.raises(RuntimeError, match=r"del optimizer.state\[param\]"):
        state["exp_avg"].cpu()
    state["exp_avg"].zero_()                                # a full write brings it back
    state["exp_avg_sq"].fill_(0)
    assert_same(state["exp_avg"] + 1, torch.ones(10, 4))
    state["step"].zero_()
    for p in list(wse.parameters())[1:]:
        del opts[1].state[p]
    for step in range(2):
        for m, o, d in ((cpu, opts[0], "cpu"), (wse, opts[1], "wse")):
            _embedding_step(m, o, torch.tensor([1, 2 + step], device=d))
        lazydev.mark_step()
        for p, q in zip(wse.parameters(), cpu.parameters()):
            torch.testing.assert_close(p.cpu(), q)


def test_negative_embedding_index_of_two_dims_raises_as_on_the_cpu():
    """A 2-d index becomes weight[indices], which wraps -1 to the last row; the CPU raises."""
    w = torch.arange(6.0).view(3, 2)
    with pytest.raises(IndexError, match="index out of range in self"):
        torch.nn.functional.embedding(torch.tensor([[0, -1]]), w)
    with pytest.raises(IndexError, match="index out of range in self"):
        torch.nn.functional.embedding(torch.tensor([[0, -1]]).to("wse"), w.to("wse")).cpu()


def test_out_of_range_gather_raises_the_cpu_error():
    x = torch.randn(3, 4).to("wse")
    idx = torch.tensor([[0, 7]]).to("wse")
    with pytest.raises(RuntimeError, match="index 7 is out of bounds for dimension 1 with size 4"):
        torch.gather(x, 1, idx).cpu()


def test_device_memory_does_not_grow_step_to_step():
    import gc
    from lazydev.runtime import memory_stats

    def in_use(steps):
        train("mlp", "wse", steps=steps)
        lazydev.wait()
        gc.collect()
        return memory_stats()["bytes_in_use"], memory_stats()["num_buffers"]
    assert in_use(3) == in_use(25)


def test_batch_norm_running_statistics_match_cpu():
    from lazydev.examples import CNN

    def run(device):
        torch.manual_seed(0)
        model = CNN().to(device)
        xs = [torch.randn(8, 1, 28, 28) for _ in range(3)]
        _square_loss_steps(model, torch.optim.SGD(model.parameters(), lr=0.01), xs, device)
        model.eval()
        with torch.no_grad():
            out = model(torch.ones(2, 1, 28, 28).to(device))
        return {k: v.cpu() for k, v in model.state_dict().items()}, out.cpu()
    (cpu_state, cpu_out), (wse_state, wse_out) = run("cpu"), run("wse")
    for k in cpu_state:
        torch.testing.assert_close(wse_state[k], cpu_state[k], rtol=1e-4, atol=1e-5, msg=k)
    torch.testing.assert_close(wse_out, cpu_out, rtol=1e-4, atol=1e-5)


def test_detect_anomaly_checks_on_the_device_and_names_the_op():
    """detect_anomaly asks _is_any_true of every backward output; it ran on the CPU."""
    x = torch.randn(3).to("wse").requires_grad_()
    with torch.autograd.detect_anomaly():
        (x * 2).sum().backward()
    assert_same(x.grad, torch.full((3,), 2.0))
    assert lazydev.metrics.counters()["fallbacks"] == {}
    y = torch.tensor([1.0, -1.0]).to("wse").requires_grad_()
    with pytest.raises(RuntimeError, match="'SqrtBackward0' returned nan values"):
        with torch.autograd.detect_anomaly():
            y.sqrt().sum().backward()
