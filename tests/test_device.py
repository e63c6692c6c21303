"""The wse device from a user's side: creation, transfers, printing, laziness, value semantics."""
import gc
import os
import time
import warnings

import pytest
import torch

import lazydev
from conftest import assert_same, needs_cpp_side


def counters():
    return lazydev.metrics.counters()


def test_device_identity_and_module():
    assert torch.device("wse").type == "wse"
    assert torch.wse.is_available() and torch.wse.device_count() == 1
    x = torch.randn(2, 3).wse()
    assert x.device == torch.device("wse", 0)
    assert x.to("cpu").device.type == "cpu"


def test_factories():
    torch.manual_seed(0)
    a = torch.randn(3, 4, device="wse")
    torch.manual_seed(0)
    assert_same(a, torch.randn(3, 4))          # RNG comes from the CPU generator
    assert_same(torch.zeros(2, 3, device="wse"), torch.zeros(2, 3))
    assert_same(torch.ones(5, dtype=torch.int32, device="wse"), torch.ones(5, dtype=torch.int32))
    assert_same(torch.arange(7, device="wse"), torch.arange(7))
    assert_same(torch.arange(0.5, 3.0, 0.25, device="wse"), torch.arange(0.5, 3.0, 0.25))
    assert_same(torch.full((2, 2), 3.5, device="wse"), torch.full((2, 2), 3.5))


@needs_cpp_side
def test_a_wse_generator_draws_what_the_cpu_generator_draws():
    """torch.Generator(device="wse") raised NotImplementedError (the Python hooks have no
    generator); wse's random ops draw from CPU generators, so it is one (Note [The device's C++
    side] in lazydev/compile/hooks.py), and fork_rng(device_type="wse") restores the stream."""
    torch.wse.manual_seed(5)
    drawn = torch.randn(4, device="wse")
    assert_same(drawn, torch.randn(4, generator=torch.Generator().manual_seed(5)))
    g = torch.Generator(device="wse").manual_seed(7)
    assert_same(torch.randn(3, 4, device="wse", generator=g),
                torch.randn(3, 4, generator=torch.Generator().manual_seed(7)))
    torch.manual_seed(3)
    with torch.random.fork_rng(device_type="wse"):
        inside = torch.rand(5, device="wse").cpu()
    assert_same(torch.rand(5, device="wse"), inside)
    # torch.cuda's other generator functions (they raised AttributeError)
    states = torch.wse.get_rng_state_all()
    again = torch.rand(5, device="wse").cpu()
    torch.wse.set_rng_state_all(states)
    assert_same(torch.rand(5, device="wse"), again)
    assert torch.wse.initial_seed() == 3
    torch.wse.seed_all()
    assert torch.wse.initial_seed() == torch.initial_seed()


@needs_cpp_side
def test_pinning_host_memory_works_with_wse_the_current_accelerator():
    """torch pins for the current accelerator, wse once lazydev is imported, and the Python
    hooks raised NotImplementedError: DataLoader(pin_memory=True) and t.pin_memory() failed
    even for CPU tensors. All host memory counts as pinned for wse (the device is host memory),
    so pinning returns the tensor itself."""
    from torch.utils.data import DataLoader, TensorDataset
    x, y = torch.randn(8, 3), torch.arange(8)
    seen = []
    for xb, yb in DataLoader(TensorDataset(x, y), batch_size=4, pin_memory=True):
        assert xb.is_pinned() and yb.is_pinned()
        seen.append((xb.to("wse", non_blocking=True) * 2, yb.to("wse", non_blocking=True)))
    assert_same([s[0] for s in seen], [x[:4] * 2, x[4:] * 2])
    assert_same([s[1] for s in seen], [y[:4], y[4:]])
    t = torch.randn(3)
    assert t.pin_memory() is t
    assert torch.empty(2, pin_memory=True).is_pinned()


class _WseItems(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.full((3,), float(i)).to("wse")


@needs_cpp_side
def test_a_dataloader_worker_returning_wse_tensors_says_what_to_do():
    """A worker process collates a batch into a storage it shares with the main process, which
    a wse tensor cannot be: the error said only that wse storages are not made directly. In
    the main process (num_workers=0) the same Dataset works."""
    from torch.utils.data import DataLoader
    batches = list(DataLoader(_WseItems(), batch_size=2))
    assert_same(batches[1], torch.tensor([[2.0] * 3, [3.0] * 3]))
    with pytest.raises(RuntimeError, match="return CPU tensors from the Dataset"):
        list(DataLoader(_WseItems(), batch_size=2, num_workers=1))


@needs_cpp_side
def test_torch_accelerator_synchronizes_and_reports_the_runtime_memory():
    """torch.accelerator.synchronize() raised (the Python device guard cannot synchronize) and
    the memory functions failed an internal assert (no DeviceAllocator). They wait for the
    queue, raising a failed program's error, and report the runtime's accounting (Note [The
    device's C++ side] in lazydev/compile/hooks.py)."""
    import lazydev.runtime as rt
    from lazydev.runtime import queue
    x = torch.randn(128, 128).to("wse")
    y = (x @ x).relu().sum(0)
    lazydev.mark_step()
    torch.accelerator.synchronize()
    assert all(t.done.is_set() for t in queue.EXEC._inflight)
    # The figures are read one after another: an earlier test's buffer that the cyclic
    # collector freed between two reads made them differ by its 48 bytes (seen once).
    gc.collect()
    gc.disable()
    try:
        stats = rt.memory_stats()
        assert torch.accelerator.memory_allocated() == stats["bytes_in_use"] > 0
        assert torch.accelerator.max_memory_allocated() == stats["peak_bytes"]
        assert torch.accelerator.memory_reserved() == (stats["bytes_in_use"]
                                                       + stats["cached_bytes"])
        free, total = torch.accelerator.get_memory_info()
        assert total == stats["capacity"] and free == total - stats["bytes_in_use"]
        assert torch.wse.memory_allocated() == stats["bytes_in_use"]      # CUDA's names too
        assert torch.wse.max_memory_allocated() == stats["peak_bytes"]
        assert torch.wse.mem_get_info() == (free, total)
    finally:
        gc.enable()
    del y
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()
    torch.accelerator.empty_cache()
    assert rt.memory_stats()["cached_bytes"] == 0
    weight = torch.randn(4, 3)
    out = torch.nn.functional.embedding(torch.tensor([0, 5]).to("wse"), weight.to("wse"))
    lazydev.mark_step()
    with pytest.raises(RuntimeError, match="IndexError: index out of range in self"):
        torch.accelerator.synchronize()
    del out
    torch.accelerator.synchronize()       # reported once, as lazydev.wait() does


def test_print_shows_values_and_device():
    x = torch.tensor([[1.5, 2.0], [3.0, 4.0]]).to("wse")
    text = repr(x + 1)
    assert text.startswith("tensor([[2.5000, 3.0000],")
    assert "device='wse:0'" in text
    assert counters()["sync_print"] == 1


def test_recording_is_lazy_and_nothing_is_computed_twice():
    x = torch.randn(64, 64).to("wse")
    y = (x @ x).relu().sum(0)
    z = y * 2
    assert counters()["executions"] == 0
    z_cpu = z.cpu()
    assert counters()["executions"] == 1
    y.cpu(), z.cpu(), z.tolist()                # both were computed by that one run
    assert counters()["executions"] == 1
    assert_same(z_cpu, ((x.cpu() @ x.cpu()).relu().sum(0)) * 2)


@pytest.mark.parametrize("case", ["select_add_", "t_", "mul_", "slice_copy_", "view_chain"])
def test_inplace_through_views_matches_cpu(case):
    def run(device):
        x = torch.arange(12.0).reshape(3, 4).to(device)
        alias = x.view(4, 3)
        if case == "select_add_":
            x[:, 0].add_(1)
        elif case == "t_":
            x.t_()
        elif case == "mul_":
            x.mul_(0.9)
        elif case == "slice_copy_":
            x[1:, 2:].copy_(torch.full((2, 2), -1.0).to(device))
        else:
            x.view(12)[::5].sub_(100)
        return x, alias
    for a, b in zip(run("wse"), run("cpu")):
        assert a.shape == b.shape and a.stride() == b.stride()
        assert_same(a, b)


def test_sync_points_materialise():
    x = torch.tensor([1.0, -2.0, 3.0]).to("wse")
    assert (x.abs().sum()).item() == 6.0
    assert x.tolist() == [1.0, -2.0, 3.0]
    assert bool((x > 0).any())
    if (x < -5).any():
        pytest.fail("bool() of a wse tensor read the wrong value")
    assert x.cpu().numpy().tolist() == [1.0, -2.0, 3.0]
    c = counters()
    assert c["sync_item"] == 1 and c["sync_bool"] == 2 and c["syncs"] == 3


def test_reading_a_view_copies_only_the_span_it_covers():
    """One element of a large result is one element's bytes to the host, not the whole buffer
    (a training loop reading out[:1] of a 4M-element result paid 2 ms for it)."""
    x = torch.randn(1 << 20)
    y = (x.to("wse") * 2).view(1024, 1024)
    lazydev.mark_step()
    before = counters().get("bytes_to_host", 0)
    assert y.reshape(-1)[5:8].cpu().tolist() == (x * 2)[5:8].tolist()
    assert counters()["bytes_to_host"] - before == 12
    assert_same(y[:, 3].cpu(), (x * 2).view(1024, 1024)[:, 3])        # strided: the span
    assert_same(y[2:4, 1:3].cpu(), (x * 2).view(1024, 1024)[2:4, 1:3])
    assert y[:0].cpu().shape == (0, 1024)



ITEM_DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
               torch.uint8, torch.bool, torch.float16, torch.bfloat16, torch.complex64)


def _zero(t):
    """t's zero of its own dtype (bool * 0 would be int64)."""
    return t & False if t.dtype is torch.bool else t * 0


@pytest.mark.parametrize("dtype", ITEM_DTYPES, ids=str)
def test_item_reads_the_element_as_the_cpu_does(dtype, monkeypatch):
    """.item() (and bool()) of one element of a computed result: the CPU's number, of the CPU's
    Python type.
    Real dtypes with a C type are read in place (Buffer.element): one element's bytes reach
    the host, through no CPU tensor (whose allocation, cold after the step's program, cost a
    loss read 80 us); half precision and complex are copied."""
    cpu = (torch.randn(2, 5, generator=torch.Generator().manual_seed(0)) * 10).to(dtype)
    on = cpu.to("wse")
    out = (on ^ True if dtype is torch.bool else on * 1)[1, 2:]     # a view at an offset
    want = (cpu ^ True if dtype is torch.bool else cpu * 1)[1, 2:]
    lazydev.mark_step()
    if not (dtype.is_complex or dtype in (torch.float16, torch.bfloat16)):    # no copy at all
        monkeypatch.setattr(lazydev.runtime.device.Buffer, "to_tensor", None)
    before = counters().get("bytes_to_host", 0)
    for k in range(3):
        got = out[k].item()
        assert got == want[k].item() and type(got) is type(want[k].item()), (k, got)
        assert bool(out[k]) is bool(want[k]) and bool(_zero(out[k])) is bool(_zero(want[k]))
    if not dtype.is_complex:    # (complex reads copy the whole storage of real pairs)
        assert counters()["bytes_to_host"] - before == 9 * out.element_size()
    assert torch.tensor(7, dtype=dtype if dtype is not torch.bool else torch.int8,
                        device="wse").item() == 7        # a 0-dim upload, never computed


def test_numpy_of_a_wse_tensor_says_what_to_do():
    with pytest.raises(TypeError, match=r"Tensor.cpu\(\)"):
        torch.ones(2, device="wse").numpy()


def test_wse_indices_into_a_cpu_tensor_raise_as_cuda_ones_do():
    """x_cpu[wse_index] returned a wse tensor; CUDA refuses indices on another device than the
    indexed tensor, unless they are on the CPU (which wse allows too)."""
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu or on the same "
                       r"device as the indexed tensor \(cpu\)"):
        torch.ones(3)[torch.tensor([0, 2], device="wse")]
    assert torch.arange(3.0, device="wse")[torch.tensor([0, 2])].cpu().tolist() == [0.0, 2.0]


@pytest.mark.parametrize("make", [
    lambda d: torch.arange(24.0, device=d).mul(1).as_strided((100000,), (1,)),
    lambda d: torch.arange(24.0, device=d).reshape(4, 6).as_strided((10, 10), (10, 1)),
    lambda d: torch.arange(24.0, device=d).as_strided((2, 2), (1, 1), 23),
    lambda d: torch.ones(6, device=d)[2:].as_strided_((5,), (1,)),
])
def test_a_view_past_its_storage_raises_the_cpu_error(make):
    """as_strided past the storage's end was accepted: it read past the device buffer, and a
    write through it corrupted the heap (the process aborted)."""
    with pytest.raises(RuntimeError) as cpu:
        make("cpu")
    with pytest.raises(RuntimeError) as wse:
        make("wse")
    assert str(wse.value) == str(cpu.value)


@needs_cpp_side
def test_a_parameter_prints_a_layout_goes_to_the_cpu_and_a_storage_move_says_why():
    """print(model.weight) gave 'Parameter(tensor(...))' (nn.Parameter's repr is 'Parameter
    containing:'); .to('cpu', memory_format=channels_last) gave a row-major tensor; moving a
    storage to wse (a torch.load map_location idiom) raised AttributeError on torch.wse."""
    assert repr(torch.nn.Linear(2, 1).to("wse").weight).startswith("Parameter containing:\ntensor(")
    x = torch.randn(2, 3, 4, 2)
    got = x.to("wse").to("cpu", memory_format=torch.channels_last)
    assert got.stride() == x.to(memory_format=torch.channels_last).stride()
    assert_same(got, x)
    with pytest.raises(RuntimeError, match="wse storages are not made directly"):
        torch.ones(3).untyped_storage().to(device="wse")


def test_empty_strided_with_gaps_holds_the_layout_it_was_asked_for():
    """empty_strided((64, 64), (4096, 1)) made a row-major storage of 64 * 64 elements, and
    as_strided with the strides asked for (valid on the CPU) then wrote past it."""
    x = torch.empty_strided((64, 64), (4096, 1), device="wse")
    y = x.as_strided(x.shape, (4096, 1))
    y.fill_(1.0)
    assert y.cpu().eq(1.0).all() and x.sum().item() == 64     # x's row 0 is y's row 0


@pytest.mark.parametrize("write", [
    lambda y, i, v: y.__setitem__(i, v),
    lambda y, i, v: y.index_put_((i,), v, accumulate=True),
    lambda y, i, v: y.index_copy_(0, i, v),
])
def test_cpu_values_written_by_index_into_a_wse_tensor_raise_as_cuda_ones_do(write):
    """Values on the CPU (but a 0-dim one) were written into a wse tensor, and, when they
    required grad, backward failed at an autograd INTERNAL ASSERT; CUDA refuses them. A slice
    assignment (a copy_) still takes CPU values, with their gradient."""
    v = torch.ones(2, 5, requires_grad=True)
    y = torch.zeros(4, 5, device="wse")
    with pytest.raises(RuntimeError, match=r"same device"):
        write(y, torch.tensor([0, 2], device="wse"), v)
    y[torch.tensor([0, 2], device="wse")] = torch.tensor(3.0)
    assert y.cpu()[[0, 2]].eq(3.0).all() and y.cpu()[[1, 3]].eq(0.0).all()
    y = torch.zeros(4, 5, device="wse", requires_grad=True).clone()
    y[:2] = v
    (y * 2).sum().backward()
    assert v.grad.eq(2.0).all()


def test_numpy_force_copies_as_it_does_from_cuda():
    """numpy(force=True) is .detach().cpu()...numpy(); wse raised TypeError for it."""
    x = torch.arange(3.0, requires_grad=True)
    assert ((x.to("wse") * 2).numpy(force=True) == (x * 2).numpy(force=True)).all()


def test_unlowered_op_falls_back_counted_and_logged(capsys):
    x = torch.randn(50)
    lazydev.config(log="fallback")
    try:
        hist, edges = torch.histogram(x.to("wse"), bins=5)     # no lowering
    finally:
        lazydev.config(log="")
    want = torch.histogram(x, bins=5)
    assert_same(hist, want.hist)
    assert_same(edges, want.bin_edges)
    assert counters()["fallbacks"].get("aten.histogram.bin_ct") == 1
    assert "test_device.py" in capsys.readouterr().err


def test_metrics_counters_have_the_documented_keys():
    c = counters()
    for key in ("compilations", "cache_hits", "cache_misses", "fallbacks", "syncs", "executions"):
        assert key in c
    assert isinstance(c["fallbacks"], dict)


def test_autograd_through_wse():
    w = torch.randn(4, 3, requires_grad=True)
    ww = w.detach().to("wse").requires_grad_()
    x = torch.randn(5, 4)
    (x @ w).tanh().sum().backward()
    (x.to("wse") @ ww).tanh().sum().backward()
    assert_same(ww.grad, w.grad)


@needs_cpp_side
def test_an_error_inside_backward_leaves_backward_as_on_the_cpu(monkeypatch):
    """With lazydev's own device guard (Note [Errors inside backward]) an op that fails while
    the autograd engine runs raises out of backward() itself, as on the CPU, instead of
    returning zeros and raising at the next op; the process and the tensors live on."""
    from lazydev.tensor import dispatch

    def fails(func, args, kwargs):
        raise ValueError("threshold_backward failed")
    monkeypatch.setitem(dispatch._HANDLERS, id(torch.ops.aten.threshold_backward.default), fails)
    x = torch.tensor([1.0, -2.0, 3.0]).to("wse").requires_grad_()
    with pytest.raises(ValueError, match="threshold_backward failed"):
        x.relu().sum().backward()
    monkeypatch.undo()
    assert_same((x * 2).detach(), torch.tensor([2.0, -4.0, 6.0]))
    x.relu().sum().backward()
    assert_same(x.grad, torch.tensor([1.0, 0.0, 1.0]))


def test_a_long_elementwise_chain_compiles():
    # Fusion depth is bounded: a 500-op chain once overflowed the code generator's recursion.
    x = torch.linspace(-1, 1, 50)
    y, yw = x, x.to("wse")
    for i in range(500):
        y = y * 0.999 + 0.001
        yw = yw * 0.999 + 0.001
    assert_same(yw, y)


def test_sparse_tensors_are_host_resident_and_run_through_the_fallback():
    # A sparse wse tensor holds a CPU sparse tensor; its ops run on the CPU (more in
    # test_sparse.py).
    dense = torch.randn(3, 3)
    coo = dense.to_sparse()
    torch.testing.assert_close(coo.to("wse").cpu(), coo)
    torch.testing.assert_close(dense.to("wse").to_sparse().cpu(), coo)
    torch.testing.assert_close((coo.to("wse") @ dense.to("wse")).cpu(), coo @ dense)
    assert counters()["fallbacks"] == {"aten._to_sparse.default": 1, "aten.mm.default": 1}


def test_a_fallback_that_reads_no_device_value_does_not_cut_the_trace():
    # randperm's out= variant runs on the CPU, from the CPU generator, into a wse out= tensor
    # it only writes (randperm itself is made there and uploaded, no fallback); a sparse
    # tensor's values are on the host. Neither needs a sync.
    x = torch.randn(4).to("wse")
    lazydev.mark_step()
    lazydev.metrics.reset()
    y = x * 2                                       # pending: a sync would compute it
    torch.manual_seed(3)
    perm = torch.randperm(10, device="wse")
    out = torch.arange(6, device="wse")[1:4]
    torch.randperm(3, out=out, dtype=torch.int64)
    coo = torch.randn(3, 3).to_sparse().to("wse") * 2
    assert counters()["syncs"] == 0
    assert counters()["fallbacks"] == {"aten.randperm.out": 1, "aten.mul.Tensor": 1}
    torch.manual_seed(3)
    assert_same(perm, torch.randperm(10))
    assert_same(out, torch.randperm(3))
    assert_same(y, x.cpu() * 2)
    assert coo.layout == torch.sparse_coo


@pytest.mark.parametrize("make", [
    lambda d: torch.tril_indices(4, 3, 1, device=d),
    lambda d: torch.triu_indices(4, 5, -1, device=d, dtype=torch.int32),
    lambda d: torch.kaiser_window(7, device=d),
    lambda d: torch.kaiser_window(6, False, device=d, dtype=torch.float64),
    lambda d: torch.kaiser_window(6, True, 4.0, device=d),
    lambda d: torch.linspace(-3, 7.5, 13, device=d),
    lambda d: torch.linspace(0, 10, 7, device=d, dtype=torch.int32),
    lambda d: torch.logspace(0, 4, 5, base=2, device=d, dtype=torch.float64),
    lambda d: torch.randperm(9, generator=torch.Generator().manual_seed(2), device=d),
    lambda d: torch.randperm(5, generator=torch.Generator().manual_seed(3), device=d,
                             dtype=torch.float32)], ids=range(10))
def test_factories_without_a_device_kernel(make):
    # PyTorch has no PrivateUse1 kernel for these: tril_indices raised NotImplementedError and
    # kaiser_window failed an internal assert; linspace/logspace and randperm ran as counted
    # fallbacks. Made on the CPU and uploaded, no sync.
    out = make("wse")
    assert out.device.type == "wse" and counters()["syncs"] == 0
    assert counters()["fallbacks"] == {}
    assert_same(out, make("cpu"))


def test_forward_mode_ad_runs_on_the_device():
    import torch.autograd.forward_ad as fwad
    x = torch.linspace(-1, 1, 5)
    tangents = []
    for dev in ("cpu", "wse"):
        with fwad.dual_level():
            dual = fwad.make_dual(x.to(dev), torch.ones(5, device=dev))
            tangents.append(fwad.unpack_dual((dual.sin() * dual).exp()).tangent)
    assert_same(tangents[1], tangents[0])
    assert not counters()["fallbacks"]


def test_forward_mode_ad_through_views_of_a_strided_primal():
    """A primal that is a view with strides of its own (x.t(), a slice) and a view of the dual:
    autograd's internal assert (tangent and primal of another layout) failed, since the zero
    tangent _new_zeros_with_same_feature_meta made came back row-major from the CPU."""
    x = torch.randn(3, 4, dtype=torch.float64)
    for view in (lambda a: a.t(), lambda a: a[:, 1:4], lambda a: a[:, ::2]):
        got = torch.func.jvp(lambda a: a[0].sin(), (view(x.to("wse")),),
                             (torch.ones_like(view(x)).to("wse"),))[1]
        assert_same(got, torch.func.jvp(lambda a: a[0].sin(), (view(x),),
                                        (torch.ones_like(view(x)),))[1])
    w = torch.randn(2, 1, 2, 2, dtype=torch.float64)
    img = torch.randn(1, 1, 3, 3, dtype=torch.float64)

    def energy(i):
        return lambda ww: torch.nn.functional.conv2d(i, ww).pow(2).sum()
    assert_same(torch.func.hessian(energy(img.to("wse")))(w.to("wse")),
                torch.func.hessian(energy(img))(w))
    assert not counters()["fallbacks"]


def test_jacfwd_with_python_numbers_in_the_function():
    """torch.func.jacfwd(lambda v: v * 2) raised DeviceMismatch: the number's zero tangent
    takes its shape from `.to("meta")` of the wse operand, which returned a wse tensor."""
    x = torch.linspace(-1, 1, 6).view(2, 3)
    fns = [lambda v: v * 2, lambda v: (v * 2 + 1).sin().sum(0) / 3, lambda v: 3 - v.exp()]
    for f in fns:
        assert_same(torch.func.jacfwd(f)(x.to("wse")), torch.func.jacfwd(f)(x))
    assert not counters()["fallbacks"]


def test_to_another_device_type_goes_there_or_raises_its_error():
    x = torch.ones(3, 4, device="wse").t()
    m = x.to("meta", torch.float16)
    assert type(m) is torch.Tensor and m.is_meta and m.dtype == torch.float16
    assert m.shape == (4, 3) and m.stride() == (1, 4)
    if not torch.cuda.is_available():
        with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
            x.to("cuda")


def test_detach_and_alias_share_the_storage_and_keep_the_view():
    x = torch.randn(6, 8)
    w = x.to("wse")
    for make in (lambda t: t.detach(), lambda t: torch.ops.aten.alias(t)):
        view = make(w.t()[1:5])                      # a strided view of a view
        assert view.shape == (4, 6) and view.stride() == (1, 8) and view.storage_offset() == 1
        view.mul_(2)                                 # writes through to w
        x.t()[1:5].mul_(2)
        assert_same(w.cpu(), x)
        assert_same(view.cpu(), x.t()[1:5])
    p = torch.nn.Parameter(torch.randn(3).to("wse"))
    d = p.detach()
    assert not d.requires_grad and p.requires_grad


def _tensor_facts(t):
    return (type(t), t.shape, t.stride(), t.storage_offset(), t.dtype, t.device, t.layout,
            t.requires_grad, t.is_leaf, t._is_view(), str(torch._C._dispatch_keys(t)),
            t.untyped_storage().nbytes(), t.untyped_storage().device)


@needs_cpp_side
@pytest.mark.parametrize("size,stride,offset,dtype", [
    ((3, 4), (4, 1), 0, torch.float32), ((4, 3), (1, 4), 2, torch.int64),
    ((), (), 0, torch.bool), ((0, 5), (5, 1), 0, torch.float16),
    ((2, 3, 4), (0, 4, 1), 7, torch.bfloat16), ((2, 2), (2, 1), 0, torch.complex64),
    ([3], [1], 0, torch.float32)], ids=range(7))
def test_native_tensor_objects_are_the_wrappers(size, stride, offset, dtype):
    """Results are made by the C++ side's wse_make_tensor, not _make_wrapper_subclass (Note
    [Native tensor objects] in csrc/wse_hooks.cpp): the same tensor to its dispatch keys and
    storage, counted; and by the wrapper once no maker is set. Lists are the wrapper's."""
    from lazydev.tensor import wse_tensor as W
    maker = lazydev._hooks.tensor_maker()
    assert maker
    args = (W.WseTensor, size, stride, offset, None, dtype, torch.strided, W.WSE)
    expected = _tensor_facts(torch.Tensor._make_wrapper_subclass(*args))
    native = type(size) is tuple
    for which in (maker, 0):
        W.set_tensor_maker(which)
        try:
            before = W.tensors_made()
            assert _tensor_facts(W._make(*args)) == expected
            made = [a - b for a, b in zip(W.tensors_made(), before)]
        finally:
            W.set_tensor_maker(maker)
        assert made == ([1, 0] if which and native else [0, 1])


@needs_cpp_side
def test_recorded_results_and_views_are_made_natively():
    from lazydev.tensor import wse_tensor as W
    x, w = torch.randn(4, 6, device="wse"), torch.randn(6, 3, device="wse")
    before = W.tensors_made()
    out = [x + 1, torch.relu(x), x @ w, x.sum(1), x.view(6, 4), x.t(), x[1:3], x.detach()]
    native, wrapped = [a - b for a, b in zip(W.tensors_made(), before)]
    assert (native, wrapped) == (len(out), 0)
    assert_same(out[2].cpu(), x.cpu() @ w.cpu())


@needs_cpp_side
def test_a_tensor_the_native_maker_refuses_gets_the_wrappers_error():
    from lazydev.tensor import wse_tensor as W
    for size, stride in (((-1, 2), (2, 1)), ((2, 2), (1, 2, 3))):
        args = (W.WseTensor, size, stride, 0, None, torch.float32, torch.strided, W.WSE)
        with pytest.raises(RuntimeError) as expected:
            torch.Tensor._make_wrapper_subclass(*args)
        with pytest.raises(RuntimeError) as got:
            W._make(*args)
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("make", [
    lambda: torch.ones(3).to("wse:1"), lambda: torch.ones(3, device="wse:1"),
    lambda: torch.arange(3, device="wse:2"), lambda: torch.eye(2, device="wse:1"),
    lambda: torch.randn(2, device=torch.device("wse", 1)),
    lambda: torch.arange(4.0).to("wse").to("wse:1"),
    lambda: torch.nn.Linear(2, 2).to("wse:1"),
    lambda: torch.zeros_like(torch.ones(2).to("wse"), device="wse:1"),
    lambda: torch.ones(2).to("wse").new_empty(3, device="wse:1"),
    lambda: torch.ones(2).to("wse").new_full((3,), 1.0, device="wse:1")], ids=range(10))
def test_a_wse_device_index_other_than_0_is_refused(make):
    """torch.wse.device_count() is 1: "wse:1" must not quietly mean wse:0."""
    with pytest.raises(RuntimeError, match="there is no wse:[12]: lazydev has one wse device"):
        make()
    assert_same(torch.ones(3).to("wse:0"), torch.ones(3))


_ELSEWHERE = {
    "zeros_like": lambda x, s, d: torch.zeros_like(x, device=d),
    "full_like": lambda x, s, d: torch.full_like(x, 3.0, device=d),
    "empty_like, channels_last": lambda x, s, d: torch.empty_like(
        x.reshape(1, 2, 3, 1), device=d, memory_format=torch.channels_last).fill_(1),
    "rand_like": lambda x, s, d: torch.rand_like(x, device=d),
    "new_full": lambda x, s, d: x.new_full((2,), 1.0, device=d),
    "new_empty": lambda x, s, d: x.new_empty(2, device=d).fill_(2),
    "linspace of 0-dim tensors": lambda x, s, d: torch.linspace(s, s * 2, 4, device=d),
    "logspace of a 0-dim tensor": lambda x, s, d: torch.logspace(s, 3.0, 4, device=d),
}


@pytest.mark.parametrize("case,device", [(c, "cpu") for c in _ELSEWHERE]
                         + [(c, None) for c in _ELSEWHERE if "space" in c], ids=str)
def test_a_result_asked_for_on_another_device_is_made_there(case, device):
    """zeros_like(x, device="cpu") of a wse x gave a wse tensor; linspace of 0-dim wse
    tensors raised DeviceMismatch (ATen reads their values and makes the result on the device
    asked for, the default device when none is, as with CUDA tensors). The *_like ops read no
    values, so they do not sync."""
    x, s = torch.arange(6.0), torch.tensor(2.0)
    torch.manual_seed(0)
    expected = _ELSEWHERE[case](x, s, device)
    xw, sw = x.to("wse"), s.to("wse")
    syncs = lazydev.metrics.counters()["syncs"]
    torch.manual_seed(0)
    actual = _ELSEWHERE[case](xw, sw, device)
    assert type(actual) is torch.Tensor and actual.device.type == "cpu"
    assert actual.stride() == expected.stride()
    assert_same(actual, expected)
    if "space" not in case:
        assert lazydev.metrics.counters()["syncs"] == syncs
    assert torch.zeros_like(xw, device="meta").device.type == "meta"


def test_assigning_data_replaces_the_values_as_on_the_cpu():
    """`p.data = t` on a wse parameter kept p's old values: torch's set_data copies only the
    C++ metadata, and a wse tensor's state is on the Python object."""
    results = {}
    for dev in ("cpu", "wse"):
        torch.manual_seed(0)
        m = torch.nn.Linear(3, 2).to(dev)
        m.weight.data = torch.arange(6.0).view(2, 3).to(dev)     # new values, same shape
        m.bias.data = torch.ones(5, device=dev)[1:3]             # a view of another storage
        shared = m.bias.data
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        m(torch.ones(4, 3, device=dev)).pow(2).sum().backward()
        opt.step()                                # updates through p reach what p.data shares
        grown = torch.nn.Parameter(torch.zeros(2, device=dev))
        grown.data = torch.arange(4, device=dev).to(torch.float64)    # new shape and dtype
        results[dev] = [m.weight.detach(), m.bias.detach(), shared, grown.detach() * 2,
                        m(torch.ones(1, 3, device=dev)).detach()]
        assert grown.shape == (4,) and grown.dtype == torch.float64 and grown.requires_grad
    assert_same(results["wse"], results["cpu"])
    with pytest.raises(RuntimeError, match=r"\.data of a wse tensor to a cpu tensor: move it"):
        torch.ones(2, device="wse").data = torch.zeros(2)


def test_format_of_a_scalar_tensor_formats_its_number():
    """f"{loss:.4f}" raised TypeError for a wse loss (torch formats only its own class)."""
    for dev in ("cpu", "wse"):
        x = torch.tensor(1.23456, device=dev, requires_grad=True) * 2
        assert f"{x:.3f} {x} {x:>8.1e}" == "2.469 2.4691200256347656  2.5e+00"
        with pytest.raises(TypeError, match="unsupported format string"):
            f"{torch.ones(2, device=dev):.3f}"


_OVERLAP_WRITES = {
    "add_": lambda x: x.add_(1), "copy_": lambda x: x.copy_(torch.ones(2, 3)),
    "copy_ of itself": lambda x: x.copy_(x),        # ATen returns at once
    "uniform_": lambda x: x.uniform_(), "relu_": lambda x: x.relu_(),
    "out=": lambda x: torch.add(torch.ones(2, 3, device=x.device), 1, out=x),
    "setitem all": lambda x: x.__setitem__(slice(None), 5.0),
    "scatter_add_": lambda x: x.scatter_add_(
        1, torch.zeros(2, 1, dtype=torch.long, device=x.device), torch.ones(2, 1, device=x.device)),
    "fill_": lambda x: x.fill_(2.0), "zero_": lambda x: x.zero_(),
    "masked_fill_": lambda x: x.masked_fill_(torch.ones(2, 3, dtype=torch.bool, device=x.device),
                                             1.0),
    "setitem one": lambda x: x.__setitem__(0, 5.0), "tril_": lambda x: x.tril_(),
    # allowed, with writes that differ between the elements over one location: each location
    # keeps what the CPU's element loop left there (wse kept one element's result: a[0] = v was
    # undone by row 1's old value)
    "index_put_": lambda x: x.index_put_((torch.tensor([0], device=x.device),),
                                         torch.tensor([1.0, 2.0, 3.0], device=x.device)),
    "index_put_ accumulate": lambda x: x.index_put_(
        (torch.tensor([0, 1], device=x.device),), torch.arange(6.0, device=x.device).view(2, 3),
        accumulate=True),
    "setitem by mask": lambda x: x.__setitem__(
        torch.tensor([[True, False, False], [False, True, False]], device=x.device), 4.0),
    "masked_fill_ by rows": lambda x: x.masked_fill_(
        torch.tensor([[True, False, False], [False, True, False]], device=x.device), 7.0),
    "masked_fill_ tensor": lambda x: x.masked_fill_(
        torch.tensor([[False, False, True], [True, False, False]], device=x.device),
        torch.tensor(5.0, device=x.device)),
    "index_fill_": lambda x: x.index_fill_(1, torch.tensor([2], device=x.device), -1.0)}


@pytest.mark.parametrize("name", _OVERLAP_WRITES)
def test_writing_an_expanded_tensor_raises_or_not_as_on_the_cpu(name):
    """x.expand(...).add_(1) wrote on wse where the CPU refuses (each element of the storage
    would get one of several results); fill_, zero_, masked_fill_, index_put_, ... are allowed."""
    outcome = {}
    for dev in ("cpu", "wse"):
        x = torch.tensor([[10.0, 20.0, 30.0]], device=dev).expand(2, 3)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")     # the CPU's deprecation of index_put_ here
                _OVERLAP_WRITES[name](x)
            outcome[dev] = x.cpu()
        except RuntimeError as e:
            outcome[dev] = str(e)
    if isinstance(outcome["cpu"], str):
        assert outcome["cpu"].startswith("unsupported operation: more than one element")
        assert outcome["wse"] == outcome["cpu"]
    else:
        assert_same(outcome["wse"], outcome["cpu"])


_SELF_OVERLAPPING_WRITES = {
    "unfold add_": lambda x: x.reshape(6, 1).unfold(0, 2, 1).add_(1),
    "unfold div_": lambda x: x.unfold(0, 2, 1).div_(2),
    "unfold index_add_": lambda x: x.unfold(0, 2, 1).index_add_(
        1, torch.tensor([1, 1], device=x.device), torch.ones(5, 2, device=x.device)),
    "unfold masked_fill_": lambda x: x.unfold(0, 3, 1).masked_fill_(
        torch.tensor([True, False, True], device=x.device), -1.0),
    "as_strided copy_": lambda x: x.as_strided((2, 2), (1, 1)).copy_(
        torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=x.device)),
    "empty expanded add_": lambda x: x[:0, None].expand(0, 2).add_(1),
    "shift in a transposed view": lambda x: (lambda v: v[1:].copy_(v[:-1]))(
        x.reshape(2, 3).t().unsqueeze(2)),
    "mul_ by a shifted transposed view": lambda x: (lambda v: v[1:].mul_(v[:-1]))(
        x.reshape(2, 3).t()),
    "disjoint interleaved halves": lambda x: x[::2].add_(x[1::2]),
}


@pytest.mark.parametrize("name", _SELF_OVERLAPPING_WRITES)
def test_writing_a_self_overlapping_view_leaves_the_cpus_memory(name):
    """A view whose elements share memory with non-zero strides (unfold with a step under its
    size), or a pointwise write reading another view of the memory it writes that ATen finds
    'too hard' to check (not dense), is written element by element on the CPU, each location
    keeping its last write; the device's functional form kept one element's result per
    location, and read the other view before any write. One without elements is written as
    the CPU does, not refused."""
    got = torch.arange(6.0, device="wse")
    want = torch.arange(6.0)
    _SELF_OVERLAPPING_WRITES[name](got)
    _SELF_OVERLAPPING_WRITES[name](want)
    assert_same(got.cpu(), want)
    if name.startswith("disjoint"):         # no element in common: computed on the device
        assert counters()["fallbacks"] == {}


def test_a_list_of_wse_scalars_makes_a_tensor():
    """torch.tensor([losses...]) reads each 0-d wse tensor as .item() does (it raised
    NotImplementedError: torch.tensor reaches _local_scalar_dense below the Python key)."""
    for make in (torch.tensor, torch.as_tensor):
        losses = [torch.tensor(0.5, device="wse") * 3, torch.tensor(2, device="wse")]
        got = make(losses)
        assert_same(got, make([torch.tensor(1.5), torch.tensor(2)]))
    nested = torch.tensor([[torch.tensor(1.0, device="wse")], [torch.tensor(-2.0, device="wse")]],
                          device="wse")
    assert nested.device.type == "wse"
    assert_same(nested.cpu(), torch.tensor([[1.0], [-2.0]]))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available on this platform")
def test_a_forked_child_reads_computed_values_and_refuses_to_run_programs():
    """Note [Forked children] (runtime/queue.py): the first program a child forked from a
    process that used wse ran hung for ever (its OpenMP team's threads stayed in the parent).
    The child reads values computed before the fork, and running a program raises saying
    what to do."""
    w = torch.randn(64, 64)
    x = w.to("wse")
    y = x @ x
    lazydev.mark_step()
    lazydev.wait()
    want = w @ w        # not in the child: torch's own threads stayed in the parent too
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:                        # the child: report through the pipe, never return
        try:
            os.close(r)
            got = y.cpu()
            out = ["read " + ("right" if torch.equal(got, y.cpu()) else "wrong"),
                   f"{(got - want).abs().max().item():.6f}"]
            try:
                (x + 1).cpu()
                out.append("ran")
            except RuntimeError as e:
                out.append(str(e))
            os.write(wfd, "\n".join(out).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    deadline = time.monotonic() + 60
    while os.waitpid(pid, os.WNOHANG)[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    with os.fdopen(r) as f:
        lines = f.read().split("\n")
    assert lines[0] == "read right" and float(lines[1]) < 1e-3
    assert "forked from the one that used the wse device" in lines[2]
    assert "'spawn'" in lines[2]
