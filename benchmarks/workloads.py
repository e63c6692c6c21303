"""The benchmark workloads, each a `step(i) -> tensor` closure built for one device.

A step is exactly what a user's loop body does, minus the backend's sync: training workloads
upload a batch, run forward + backward + optimizer step and return the loss; forward-only
workloads run on an input that already lives on the device (like a parameter would) and return
the result. The caller then syncs (mark_step) and reads one value, the same for every backend.

Data are generated on the CPU before timing, from a fixed seed, so every backend sees the same
numbers and data generation is never timed.
"""
from __future__ import annotations

import contextlib
import importlib.util
import pathlib

import torch
from torch import nn
import torch.nn.functional as F


def _load_examples():
    # Load lazydev/examples.py by path: `import lazydev.examples` would run lazydev/__init__,
    # which registers the wse device and loads its runtime in every backend's process, and the
    # eager/compile/lazy_ts numbers (memory above all) must not include lazydev.
    path = pathlib.Path(__file__).resolve().parents[1] / "lazydev" / "examples.py"
    spec = importlib.util.spec_from_file_location("_lazydev_examples", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_examples = _load_examples()
CNN, MLP, Transformer = _examples.CNN, _examples.MLP, _examples.Transformer

# A small pool of batches, cycled: enough that no backend can cache a result by input identity,
# small enough that the pool's memory does not dominate peak RSS.
POOL = 4


def _train_step(model, opt, loss_fn, batches, device, autocast=None):
    """`autocast`: a dtype to run forward and loss in under torch.autocast (mixed precision)."""
    device_type = torch.device(device).type

    def step(i):
        x, y = (t.to(device) for t in batches[i % len(batches)])
        # No autocast context at all without a dtype: even a disabled torch.autocast asks the
        # device for its autocast dtypes, which raised for torch._lazy ("unsupported
        # scalarType") and, on wse, built the autocast policies inside the timed first step.
        with torch.autocast(device_type, dtype=autocast) if autocast else contextlib.nullcontext():
            loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step


def _forward_step(fn, x):
    def step(i):
        with torch.no_grad():
            return fn(x)
    return step


def mlp(device, wrap):
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(128, 784, generator=g), torch.randint(0, 10, (128,), generator=g))
               for _ in range(POOL)]
    model = MLP(d_in=784, hidden=1024, d_out=10).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return _train_step(wrap(model), opt, F.cross_entropy, batches, device)


def mlp_amp(device, wrap):
    """mlp as a GPU user writes mixed precision: bfloat16 autocast, fused AdamW."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(128, 784, generator=g), torch.randint(0, 10, (128,), generator=g))
               for _ in range(POOL)]
    model = MLP(d_in=784, hidden=1024, d_out=10).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    return _train_step(wrap(model), opt, F.cross_entropy, batches, device,
                       autocast=torch.bfloat16)


def cnn(device, wrap):
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(64, 1, 28, 28, generator=g), torch.randint(0, 10, (64,), generator=g))
               for _ in range(POOL)]
    model = CNN(channels=8, classes=10, size=28).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return _train_step(wrap(model), opt, F.cross_entropy, batches, device)


def _lm_loss(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def transformer(device, wrap):
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 256, (8, 129), generator=g) for _ in range(POOL)]
    batches = [(s[:, :-1].contiguous(), s[:, 1:].contiguous()) for s in seqs]
    model = Transformer(vocab=256, d=256, heads=4, layers=4, context=128).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    return _train_step(wrap(model), opt, _lm_loss, batches, device)


def _chain(x):
    # 20 elementwise ops. The mix keeps values bounded forever: sin and tanh map into [-1, 1],
    # so exp never sees more than ~1.1 and nothing overflows however many steps run.
    for _ in range(4):
        x = torch.tanh(torch.exp(torch.sin(x * 0.9 + 0.1)))
    return x


def ew_chain(device, wrap):
    x = torch.randn(4 * 1024 * 1024, generator=torch.Generator().manual_seed(0))
    return _forward_step(wrap(_chain), x.to(device))


class LnGeluSoftmax(nn.Module):
    def __init__(self, d=512):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return F.gelu(self.ln(x)).softmax(dim=-1)


def ln_gelu_softmax(device, wrap):
    x = torch.randn(64, 128, 512, generator=torch.Generator().manual_seed(0))
    model = LnGeluSoftmax(512).to(device)
    return _forward_step(wrap(model), x.to(device))


WORKLOADS = {"mlp": mlp, "cnn": cnn, "transformer": transformer, "ew_chain": ew_chain,
             "ln_gelu_softmax": ln_gelu_softmax, "mlp_amp": mlp_amp}
