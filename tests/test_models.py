"""More models on wse against CPU: an LSTM language model, dropout with weight tying and gradient
clipping, nn.TransformerEncoder, and state_dict / torch.save round trips."""

import copy

import pytest
import torch
from torch import nn

import lazydev
from conftest import assert_same, needs_cpp_side


class LSTMLM(nn.Module):
    def __init__(self, vocab=40, d=24):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, d, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        out, _ = self.lstm(self.emb(idx))
        return self.head(out)


class TiedDropout(nn.Module):
    """Weight tying (head shares the embedding) and dropout."""

    def __init__(self, vocab=40, d=24, p=0.2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.mid = nn.Linear(d, d)
        self.drop = nn.Dropout(p)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        return self.head(self.drop(torch.tanh(self.mid(self.emb(idx)))))


class Encoder(nn.Module):
    def __init__(self, vocab=40, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=64, dropout=0.0,
                                           batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        return self.head(self.enc(self.emb(idx)))


def _train(make, device, steps=6, clip=None, seed=0):
    torch.manual_seed(seed)
    model = make().to(device)
    # SGD, not Adam: Adam's first update is g / (|g| + eps), which turns rounding-level
    # differences in near-zero gradients into lr-sized ones.
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        seq = torch.randint(0, 40, (4, 9), generator=g)
        x, y = seq[:, :-1].to(device), seq[:, 1:].to(device)
        loss = nn.functional.cross_entropy(model(x).reshape(-1, 40), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if device == "wse":
            lazydev.mark_step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("make", [LSTMLM, Encoder], ids=["lstm_lm", "transformer_encoder"])
def test_model_trains_like_cpu(make):
    cpu, _ = _train(make, "cpu")
    wse, _ = _train(make, "wse")
    torch.testing.assert_close(torch.tensor(wse), torch.tensor(cpu), rtol=1e-4, atol=1e-5)


def test_dropout_weight_tying_and_clipping():
    # Dropout masks come from the CPU generator but are drawn in a different order than
    # PyTorch's CPU kernel, so the curves are compared statistically; with p=0 exactly.
    cpu, _ = _train(lambda: TiedDropout(p=0.0), "cpu", clip=0.5)
    wse, model = _train(lambda: TiedDropout(p=0.0), "wse", clip=0.5)
    torch.testing.assert_close(torch.tensor(wse), torch.tensor(cpu), rtol=1e-4, atol=1e-5)
    assert model.head.weight is model.emb.weight
    cpu_d, _ = _train(lambda: TiedDropout(p=0.3), "cpu", steps=12, clip=0.5)
    wse_d, _ = _train(lambda: TiedDropout(p=0.3), "wse", steps=12, clip=0.5)
    assert abs(sum(wse_d) / 12 - sum(cpu_d) / 12) < 0.15, (wse_d, cpu_d)
    assert wse_d[-1] < wse_d[0]


def test_dropout_is_reproducible_and_has_the_right_rate():
    x = torch.ones(20000).to("wse")
    torch.manual_seed(3)
    a = nn.functional.dropout(x, 0.25).cpu()
    torch.manual_seed(3)
    b = nn.functional.dropout(x, 0.25).cpu()
    assert torch.equal(a, b)
    kept = (a != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.02
    torch.testing.assert_close(a[a != 0], torch.full_like(a[a != 0], 1 / 0.75))


def test_state_dict_save_load_round_trip(tmp_path):
    _, model = _train(LSTMLM, "wse", steps=2)
    state = model.state_dict()
    path = tmp_path / "m.pt"
    torch.save(state, path)
    loaded = torch.load(path, map_location="cpu")
    assert all(v.device.type == "cpu" for v in loaded.values())
    fresh = LSTMLM()
    fresh.load_state_dict(loaded)
    back = LSTMLM().to("wse")
    back.load_state_dict(loaded)
    idx = torch.randint(0, 40, (2, 5))
    torch.testing.assert_close(back(idx.to("wse")).cpu(), fresh(idx), rtol=1e-5, atol=1e-6)
    for k, v in state.items():
        torch.testing.assert_close(v.cpu(), loaded[k])


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
@pytest.mark.parametrize("where", ["wse", "wse:0", torch.device("wse", 0), {"cpu": "wse"}],
                         ids=str)
def test_a_checkpoint_loads_straight_onto_wse(tmp_path, where, zipped):
    """torch.load(f, map_location="wse") gives wse tensors with the saved values (it raised an
    AttributeError, and a PrivateUse1 storage from Python crashes), and tensors saved as views
    of one storage, a tied weight and its transpose here, share one wse storage again (Note
    [Loading onto wse] in tensor/device.py). A file in the legacy format (saved with
    _use_new_zipfile_serialization=False, as old checkpoints are) reads its bytes after the
    tensors are rebuilt: its load raised AttributeError ('Tensor' has no '_st')."""
    w = torch.randn(6, 4)
    saved = {"w": w, "wt": w.t(), "step": torch.tensor(3), "half": torch.randn(5).half()}
    torch.save(saved, tmp_path / "c.pt", _use_new_zipfile_serialization=zipped)
    loaded = torch.load(tmp_path / "c.pt", map_location=where)
    for k, v in saved.items():
        assert loaded[k].device.type == "wse" and loaded[k].dtype == v.dtype
        assert_same(loaded[k], v)
    loaded["w"].mul_(2)
    assert_same(loaded["wt"], 2 * w.t())
    model = nn.Linear(4, 6).to("wse")
    model.load_state_dict({"weight": loaded["w"], "bias": torch.zeros(6).to("wse")})
    assert_same(model.weight, 2 * w)


@pytest.mark.parametrize("where", ["cpu", "wse"])
def test_a_checkpoint_saved_from_wse_keeps_views_and_parameters(tmp_path, where):
    """Saving from wse as from the CPU: views of one storage (a tied weight and its
    transpose, a slice) alias again when loaded, with their strides and offsets, and a
    pickled module's parameters load as Parameters. Each view was saved as a copy of its own
    values, and a Parameter as a plain tensor."""
    model = nn.Linear(4, 6)
    w = torch.randn(6, 4)
    model.to("wse")
    ww = w.to("wse")
    torch.save({"w": ww, "wt": ww.t(), "row": ww[2:4], "model": model}, tmp_path / "c.pt")
    loaded = torch.load(tmp_path / "c.pt", map_location=where, weights_only=False)
    assert loaded["row"].storage_offset() == 8 and loaded["wt"].stride() == (1, 4)
    loaded["w"].mul_(2)
    assert_same(loaded["wt"], 2 * w.t())
    assert_same(loaded["row"], 2 * w[2:4])
    weight = loaded["model"].weight
    assert isinstance(weight, nn.Parameter) and weight.requires_grad
    assert weight.device.type == where
    assert_same(weight, model.weight.cpu())


def test_set_with_a_storage_torch_load_did_not_make_says_what_to_do():
    a = torch.arange(8.0).to("wse")
    with pytest.raises(RuntimeError, match="t.set_\\(other\\).*map_location='wse'"):
        torch.empty((0,), device="wse").set_(a.untyped_storage(), 2, (3,), (1,))
    for read in (lambda s: s.tolist(), repr):
        with pytest.raises(RuntimeError, match="t.cpu\\(\\).untyped_storage\\(\\)"):
            read(a.untyped_storage())
    assert_same(a, torch.arange(8.0))


@needs_cpp_side
@pytest.mark.parametrize("make", [
    lambda a: torch.UntypedStorage(8, device="wse"),
    lambda a: a.untyped_storage().clone(),
    lambda a: a.untyped_storage().cpu(),
    lambda a: a.untyped_storage().resize_(64),
], ids=["new", "clone", "cpu", "resize_"])
def test_storage_level_calls_raise_instead_of_crashing(make):
    """PyTorch allocates a storage it makes itself through the device's registered allocator;
    with none (a device registered from Python) torch.UntypedStorage(8, device="wse") and a wse
    storage's clone() crashed the process with SIGSEGV (Note [The device's C++ side] in
    lazydev/compile/hooks.py). They raise now, and the tensor keeps its values."""
    a = torch.arange(8.0).to("wse")
    with pytest.raises(RuntimeError, match="wse storage|invalid python storage"):
        make(a)
    assert torch.UntypedStorage(0, device="wse").nbytes() == 0
    assert_same(a * 2, torch.arange(8.0) * 2)


@pytest.mark.parametrize("convert", [lambda m: m.to("wse"), lambda m: m.to("wse").cpu(),
                                     lambda m: m.to("wse").double()], ids=range(3))
def test_parameter_hooks_survive_moving_the_model(convert):
    """Hooks registered on parameters (register_hook, register_post_accumulate_grad_hook)
    stayed with the tensors swapped out by a conversion, and stopped firing."""
    m = nn.Linear(3, 2)
    calls = []
    m.weight.register_hook(lambda g: g * 0)
    m.bias.register_post_accumulate_grad_hook(lambda p: calls.append(1))
    convert(m)
    m(torch.ones(1, 3, device=m.weight.device, dtype=m.weight.dtype)).sum().backward()
    assert m.weight.grad.abs().sum().item() == 0 and calls == [1]


def test_lazy_modules_move_to_wse_after_a_dry_run_and_say_so_before():
    """LazyLinear(3).to('wse') raised that an uninitialised parameter has no shape (its copy
    read .shape); as_subclass of a wse tensor an internal message (README: no tensor
    subclasses of wse tensors)."""
    with pytest.raises(RuntimeError, match="dry run on the CPU"):
        nn.LazyLinear(3).to("wse")
    with pytest.raises(RuntimeError, match="tensor subclasses of wse tensors"):
        torch.ones(2, device="wse").as_subclass(nn.Parameter)
    m = nn.LazyLinear(3)
    x = torch.randn(2, 4)
    want = m(x)
    assert_same(m.to("wse")(x.to("wse")), want)


def test_tied_weights_stay_tied_when_a_held_graph_stops_the_swap():
    """A forward not run backward holds the weights, so .to('wse') makes new Parameters (with
    a warning): an embedding and the LM head tied to it got one each, and trained apart."""
    emb = nn.Embedding(5, 4)
    head = nn.Linear(4, 5, bias=False)
    head.weight = emb.weight
    model = nn.Sequential(emb, head)
    kept = model(torch.tensor([1, 2]))          # a sanity check's forward, never run backward
    with pytest.warns(UserWarning, match="could not change device in place"):
        model.to("wse")
    assert model[0].weight is model[1].weight and len(list(model.parameters())) == 1
    del kept


def test_copies_and_pickles_keep_device_aliasing_and_attributes(tmp_path):
    """As on the CPU: copy.copy of a wse tensor or Parameter aliases it on wse (it gave a CPU
    copy); torch.save keeps Python attributes (dropped) and views of a complex storage as views
    (saved as separate copies); deepcopy of a sparse wse tensor (AttributeError); is_set_to
    (always False); set_ to a CPU tensor raises, as CUDA's (it uploaded a copy)."""
    w = torch.arange(4.0).to("wse")
    w.tag = "kept"
    s = copy.copy(w)
    s.add_(1)
    assert s.device.type == "wse" and s.tag == "kept" and w.is_set_to(s) and w[0:].is_set_to(w)
    assert_same(w, torch.arange(4.0) + 1)
    p = nn.Linear(2, 2).to("wse").weight
    assert isinstance(copy.copy(p), nn.Parameter) and copy.copy(p).is_set_to(p)
    z = torch.arange(12.0).reshape(3, 4).to(torch.complex64).to("wse")
    torch.save([w, z, z.t()[1:]], tmp_path / "c.pt")
    w2, z2, v2 = torch.load(tmp_path / "c.pt", weights_only=False)
    assert w2.tag == "kept" and (v2.stride(), v2.storage_offset()) == ((1, 4), 1)
    z2[1, 1] = 100
    assert v2[0, 1].item() == 100
    sparse = copy.deepcopy(torch.eye(3).to_sparse().to("wse"))
    assert sparse.layout == torch.sparse_coo and sparse.device.type == "wse"
    assert_same(sparse.to_dense(), torch.eye(3))
    with pytest.raises(RuntimeError, match="set_: the source is on cpu"):
        torch.empty(0, device="wse").set_(torch.ones(3))


def _child_reads(tensors, queue):
    queue.put([t.to_dense().tolist() if t.is_sparse else t.tolist() for t in tensors])


def test_wse_tensors_reach_a_spawned_process_as_values():
    """A wse tensor given to a spawned Process (a DataLoader's dataset with spawned workers)
    is pickled as a CPU copy shared by file descriptor, passed to the child at its start: the
    copy had been freed by then and the child failed ('unable to resize file')."""
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    dense = torch.arange(6.0).to("wse").reshape(2, 3) + 7
    sent = (dense, dense.t()[1:], torch.eye(2).to_sparse().to("wse"))
    child = ctx.Process(target=_child_reads, args=(sent, queue))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    got = queue.get(timeout=10)
    assert got == [dense.cpu().tolist(), dense.cpu().t()[1:].tolist(), torch.eye(2).tolist()]


def test_deepcopy_of_a_trained_model_and_its_optimizer():
    """copy.deepcopy of a wse model (an EMA copy, the best weights so far) raised TypeError:
    torch's deepcopy also copies a subclass's __dict__, lazydev's device buffer included. The
    copy holds the values at the time of the copy, its parameters are Parameters (without
    grads, as on the CPU), other tensors keep grads and attributes, and views of one storage
    alias in it as on the CPU."""
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    made = {}
    for dev in ("cpu", "wse"):
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(x.to(dev)).square().sum().backward()
        opt.step()
        made[dev] = model, copy.deepcopy(model), copy.deepcopy(opt)
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
    (_, model_c, opt_c), (_, model_w, opt_w) = made["cpu"], made["wse"]
    for pw, pc in zip(model_w.parameters(), model_c.parameters()):
        assert isinstance(pw, nn.Parameter) and pw.requires_grad and pw.device.type == "wse"
        assert_same(pw, pc)
        assert pw.grad is None and pc.grad is None
    assert_same(model_w(x.to("wse")), model_c(x))
    for pw, pc in zip(opt_w.param_groups[0]["params"], opt_c.param_groups[0]["params"]):
        assert_same(opt_w.state[pw]["momentum_buffer"], opt_c.state[pc]["momentum_buffer"])
    a = torch.arange(6.0).to("wse")
    c, d = copy.deepcopy((a, a[2:]))
    c.add_(10)
    assert_same(d, torch.arange(2.0, 6.0) + 10)
    assert_same(a, torch.arange(6.0))
    copies = []
    for dev in ("cpu", "wse"):
        t = torch.arange(3.0).to(dev).requires_grad_()
        t.square().sum().backward()
        t.note = "kept"
        copies.append(copy.deepcopy(t))
        with pytest.raises(RuntimeError, match="graph leaves"):
            copy.deepcopy(t * 2)
    assert copies[1].requires_grad and copies[1].note == copies[0].note
    assert_same(copies[1].grad, copies[0].grad)


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("cell", [nn.GRU, nn.LSTM, nn.RNN], ids=lambda c: c.__name__)
def test_recurrent_layers_padded_and_packed_match_cpu(cell, packed):
    """nn.GRU failed on wse (its fused cell is a CUDA kernel: no CPU or meta kernel), and a
    packed sequence's batch_sizes came back on wse, which PackedSequence refuses (tensor/rnn.py).
    Outputs, lengths and gradients of weights and input match the CPU, with no fallback."""
    results = []
    for dev in ("cpu", "wse"):
        torch.manual_seed(0)
        rnn = cell(4, 6, num_layers=2, batch_first=True).to(dev)
        x = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(1)).to(dev)
        x.requires_grad_()
        if packed:
            seq = nn.utils.rnn.pack_padded_sequence(x, torch.tensor([5, 3, 2]), batch_first=True)
            out, _ = rnn(seq)
            assert out.batch_sizes.device.type == "cpu"
            out, lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        else:
            (out, _), lengths = rnn(x), None
        out.square().sum().backward()
        results.append((out, lengths, rnn.weight_hh_l0.grad, rnn.weight_ih_l1.grad, x.grad))
    for got, want in zip(*reversed(results)):
        assert_same(got, want)
    assert lazydev.metrics.counters()["fallbacks"] == {}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_lstm_cells_in_half_precision_and_without_bias_match_cpu(dtype, bias):
    """nn.LSTMCell in half precision, or without biases (whose fused cell's meta kernel reads
    the biases' devices), fell back to the CPU for its fused cell, which the CPU has no kernel
    for (NotImplementedError). It is lowered as CUDA's kernel computes it, half precision in
    float and rounded once."""
    results = []
    for dev in ("cpu", "wse"):
        torch.manual_seed(0)
        cell = nn.LSTMCell(4, 5, bias=bias).to(dtype).to(dev)
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1)).to(dtype).to(dev)
        h, c = cell(x)
        (h.float().sum() + c.float().square().sum()).backward()
        results.append((h, c, cell.weight_ih.grad, cell.weight_hh.grad))
    for got, want in zip(*reversed(results)):
        assert_same(got, want)
    assert lazydev.metrics.counters()["fallbacks"] == {}


def test_transformer_encoder_inference_with_a_padding_mask():
    """nn.TransformerEncoder in eval mode under no_grad with a padding mask turned the batch
    into a nested tensor, which failed on wse (NestedTensorImpl doesn't support sizes). It now
    takes the dense path (Note [No nested tensors] in tensor/special.py): the CPU's values at
    the real positions, and at every position those of the CPU's dense path."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 32)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    out = {}
    for dev, nested in (("cpu", True), ("cpu", False), ("wse", True)):
        enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=nested).to(dev).eval()
        with torch.no_grad():
            out[dev, nested] = enc(x.to(dev), src_key_padding_mask=pad.to(dev))
    assert_same(out["wse", True][~pad], out["cpu", True][~pad])
    assert_same(out["wse", True], out["cpu", False])
    with pytest.raises(NotImplementedError, match="enable_nested_tensor=False"):
        torch._nested_tensor_from_mask(x.to("wse"), (~pad).to("wse"))


@pytest.mark.parametrize("masks", ["none", "padding", "causal", "both"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_attention_inference_kernels_run_on_wse(norm_first, masks):
    """In eval mode without gradients nn.TransformerEncoderLayer and nn.MultiheadAttention
    call fused kernels PyTorch has for the CPU and CUDA only; each call fell back to the CPU (a
    sync per layer). tensor/transformer.py writes them in wse ops: the CPU's values, with the
    attention weights (averaged or per head) and no fallback."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    layer_masks = {"src_key_padding_mask": pad, "src_mask": causal}
    keep = {"none": (), "padding": ("src_key_padding_mask",), "causal": ("src_mask",),
            "both": tuple(layer_masks)}[masks]
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                       norm_first=norm_first, activation="gelu").eval()
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    mha_masks = {"key_padding_mask": pad} if "src_key_padding_mask" in keep else {}
    out = {}
    for dev in ("cpu", "wse"):
        on = {k: layer_masks[k].to(dev) for k in keep}
        xd = x.to(dev)
        with torch.inference_mode():
            out[dev] = [layer.to(dev)(xd, **on)]
            for avg in (True, False):
                out[dev] += mha.to(dev)(xd, xd, xd, average_attn_weights=avg,
                                        **{k: v.to(dev) for k, v in mha_masks.items()})
    assert_same(out["wse"], out["cpu"])
    assert lazydev.metrics.counters()["fallbacks"] == {}


def test_gradient_accumulation_no_grad_and_retain_grad():
    w = torch.randn(5, 3)
    ww = w.to("wse").requires_grad_()
    wc = w.clone().requires_grad_()
    for t in (ww, wc):
        dev = t.device
        for i in range(3):                          # accumulate over several backward calls
            x = torch.full((2, 5), float(i + 1)).to(dev)
            h = x @ t
            h.retain_grad()
            h.sum().backward()
        with torch.no_grad():
            t.mul_(0.5)
    torch.testing.assert_close(ww.grad.cpu(), wc.grad)
    torch.testing.assert_close(ww.detach().cpu(), wc.detach())
    assert h.grad is not None


def test_moving_a_model_off_wse_keeps_its_parameters_and_ties():
    """model.cpu() changes the device of the same Parameter objects, as CUDA -> CPU does (Note
    [Parameters leaving wse]): the optimizer made on wse goes on training the model, and the
    head tied to the embedding stays tied. They were new Parameter objects."""
    torch.manual_seed(0)
    model = TiedDropout(p=0.0).to("wse")
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    params = list(model.parameters())
    idx = torch.randint(0, 40, (2, 5))
    model(idx.to("wse")).sum().backward()
    opt.step()
    lazydev.mark_step()
    want = copy.deepcopy(model).cpu()       # from a copy: the reference path
    model.cpu()
    assert [p is q for p, q in zip(model.parameters(), params)] == [True] * len(params)
    assert model.head.weight is model.emb.weight
    assert all(p.device.type == "cpu" and p.grad.device.type == "cpu" for p in params)
    assert_same(model.emb.weight, want.emb.weight)
    before = model.emb.weight.detach().clone()
    model.zero_grad()
    model(idx).sum().backward()
    opt.step()
    assert not torch.equal(before, model.emb.weight.detach())   # the optimizer reaches it
    model.to("wse")
    assert [p is q for p, q in zip(model.parameters(), params)] == [True] * len(params)


def test_a_model_made_on_meta_moves_to_wse_as_to_cuda():
    """to_empty gives each module its own Parameter, as on the CPU and CUDA (ties are made again
    after it, as PyTorch documents): swapped, a tied model kept one Parameter on wse only. And
    .to("wse") of a meta model raises the CPU's error ('use to_empty()'), not the upload's
    'expected a CPU tensor, got one on meta'."""
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.out = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False)
            self.out.weight = self.emb.weight
    counts = {}
    for dev in ("cpu", "wse"):
        with torch.device("meta"):
            model = Tied()
        with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor.*to_empty"):
            model.to(dev)
        model = model.to_empty(device=dev)
        counts[dev] = (len(list(model.parameters())), model.out.weight is model.emb.weight)
    assert counts["wse"] == counts["cpu"] == (2, False)


@pytest.mark.parametrize("convert", [lambda m: m.to("wse"), lambda m: m.float(),
                                     lambda m: m.to(torch.float32), lambda m: m.to("wse:0")])
def test_a_conversion_that_changes_nothing_between_forward_and_backward(convert):
    """model.to("wse") of a model already there is nothing on the CPU or CUDA; here it swapped
    each Parameter for itself, which poisoned the AccumulateGrad nodes of the graph not yet run
    backward: loss.backward() raised "Trying to execute AccumulateGrad node that was poisoned
    by swap_tensors"."""
    def run(device):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        params = list(m.parameters())
        loss = m(torch.randn(3, 4).to(device)).pow(2).sum()
        if device == "wse":
            convert(m)
        loss.backward()
        opt.step()
        assert [p is q for p, q in zip(m.parameters(), params)] == [True] * len(params)
        return [p.detach().cpu() for p in m.parameters()]

    for got, want in zip(run("wse"), run("cpu")):
        assert_same(got, want)


def test_a_model_with_old_style_weight_norm_moves_to_wse_and_trains():
    """torch.nn.utils.weight_norm keeps `weight` computed from weight_g, so swapping weight_g
    into a wse tensor is refused: .to("wse") raised "Couldn't swap Linear.weight_g". It moves
    with new Parameter objects instead, and says so (Note [Parameters leaving wse])."""
    def build():
        torch.manual_seed(0)
        with pytest.warns(FutureWarning):
            return nn.Sequential(nn.utils.weight_norm(nn.Linear(5, 3)), nn.Tanh())
    cpu, wse = build(), build()
    with pytest.warns(UserWarning, match=r"Linear.weight_g could not change device in place.*"
                      "make it after moving the model"):
        wse.to("wse")
    assert wse[0].weight_g.device.type == "wse"
    x = torch.randn(4, 5)
    for model, xx in ((cpu, x), (wse, x.to("wse"))):
        model(xx).square().sum().backward()
    for a, b in zip(cpu.parameters(), wse.parameters()):
        assert_same(b.grad, a.grad)
    assert lazydev.metrics.counters()["fallbacks"] == {}


def test_reads_and_host_work_under_a_default_device_of_wse(tmp_path):
    """Under torch.set_default_device('wse') or `with torch.device('wse')`, lazydev's own CPU
    tensors (the host copy a read fills, a fallback's blank outputs, random draws) were made on
    wse: print, tolist and torch.save of a wse tensor copied into a null pointer (SIGSEGV)."""
    x = torch.arange(6.0).reshape(2, 3)
    with torch.device("wse"):
        t = torch.arange(6.0).reshape(2, 3)
        assert t.device.type == "wse" and t.tolist() == x.tolist()
        assert str(t) == str(x)[:-1] + ", device='wse:0')"
        torch.save(t, tmp_path / "t.pt")
        drawn = torch.bernoulli(torch.full((64,), 0.5))
        assert drawn.device.type == "wse" and set(drawn.unique().tolist()) <= {0.0, 1.0}
        assert_same(torch.sort(t, dim=1, descending=True), torch.sort(x, dim=1, descending=True))
        lin = nn.Linear(3, 2)
        lin(t).sum().backward()
        assert lin.weight.grad.device.type == "wse"
    assert torch.load(tmp_path / "t.pt").tolist() == x.tolist()
