"""Outputs written over their inputs' buffers (Note [Donation] in compile/program.py): the
parameters and optimizer state of a training step are updated in place, and never where that
could be observed: a buffer something else holds, or a step that fails."""
import weakref

import pytest
import torch

import lazydev
from conftest import assert_same


def _train(device, steps, pipelined=False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g))
            for _ in range(steps)]
    buffers = []
    for x, y in data:
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device == "wse":
            lazydev.mark_step()
            if not pipelined:        # pipelined: the run is still queued when the next is cut
                loss.item()
            # Weakly: a reference held here would itself keep the buffer from being donated.
            buffers.append([weakref.ref(p._st.buf) for p in model.parameters()])
    return model, opt, buffers


@pytest.mark.parametrize("pipelined", [False, True])
def test_parameters_and_momentum_are_updated_in_place(pipelined):
    model, opt, buffers = _train("wse", 6, pipelined)
    cpu_model, cpu_opt, _ = _train("cpu", 6)
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        assert_same(p, q)
        assert_same(opt.state[p]["momentum_buffer"], cpu_opt.state[q]["momentum_buffer"])
    # Once steady, each parameter keeps its buffer: the update overwrote it.
    assert all(a() is b() is p._st.buf
               for a, b, p in zip(buffers[-2], buffers[-1], model.parameters()))
    assert lazydev.metrics.counters()["fallbacks"] == {}


def _compile_something_else():
    # The last compiled graph's inputs are kept for lazydev.debug.dump, and so never donated:
    # a test of what else protects a buffer must compile another graph first.
    (torch.ones(3).to("wse") * 3).sum().item()


def test_a_buffer_another_tensor_holds_is_not_overwritten():
    p = torch.arange(6.0).to("wse")
    lazydev.mark_step()
    keep = p.clone()                 # once computed, keep's storage shares p's buffer
    lazydev.mark_step()
    assert keep._st.buf is p._st.buf
    _compile_something_else()
    p.mul_(2).add_(1)
    lazydev.mark_step()
    lazydev.wait()
    assert keep.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert p.cpu().tolist() == [v * 2 + 1 for v in range(6)]


def test_a_failing_step_leaves_the_donor_as_it_was():
    p, other = torch.ones(4).to("wse"), torch.zeros(4).to("wse")
    for _ in range(2):               # a steady update, so its buffer is offered
        p.add_(1)
        lazydev.mark_step()
        lazydev.wait()
    _compile_something_else()
    p.add_(1)
    # An unrelated read in the same step, recorded after the update: index 9 is out of range,
    # so the step fails; the update must not have overwritten p by then.
    r = other[torch.tensor([0, 9]).to("wse")]
    with pytest.raises(IndexError):
        lazydev.mark_step()
        lazydev.wait()
    del r
    assert p.cpu().tolist() == [3.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    lambda ps: torch.optim.AdamW(ps, lr=0.01),
], ids=["sgd-nesterov", "adamw"])
def test_an_optimizer_step_updates_state_and_parameter_in_one_loop(make_opt):
    # Note [Kernel groups]: each parameter's state and value are written by one loop nest, which
    # reads what it has just stored; grouped or not, the values are the CPU's.
    from lazydev.compile import last_compiled
    results = []
    for device in ("cpu", "wse"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(),
                                    torch.nn.Linear(24, 3)).to(device)
        opt = make_opt(list(model.parameters()))
        g = torch.Generator().manual_seed(2)
        for _ in range(4):
            x = torch.randn(5, 12, generator=g).to(device)
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            if device == "wse":
                lazydev.mark_step()
                lazydev.wait()
        results.append((list(model.parameters()), opt))
    (cpu_ps, cpu_opt), (ps, opt) = results
    for p, q in zip(ps, cpu_ps):
        assert_same(p, q)
        for key, value in cpu_opt.state[q].items():
            assert_same(opt.state[p][key], value)
    code = "\n".join(last_compiled["units"])
    assert "(Note [Kernel groups])" in code
    assert lazydev.metrics.counters()["fallbacks"] == {}


def test_a_step_cut_while_the_last_one_is_queued_still_updates_in_place():
    """The previous step's program, queued behind a job that blocks the device, holds the
    parameter's buffer: those references do not count (ExecQueue.held), so the next step still
    writes its new value over that buffer, and the values are right once both have run."""
    import threading
    from lazydev.compile import EXEC
    x = torch.arange(64.0)
    p = x.to("wse")

    def step():
        p.mul_(0.5).add_(1)
        lazydev.mark_step()
    for _ in range(3):              # compiled and steady
        step()
        p.cpu()
    gate = threading.Event()
    blocker = EXEC.submit(lambda: gate.wait(10))
    step()                          # queued behind the blocker
    queued = weakref.ref(p._st.buf)
    assert not blocker.done.is_set()
    step()                          # cut while the step before it is still queued
    gate.set()
    lazydev.wait()
    assert p._st.buf is queued()
    for _ in range(5):
        x = x * 0.5 + 1
    assert_same(p, x)
