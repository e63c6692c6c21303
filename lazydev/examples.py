"""Small reference models and an ordinary training loop, shared by the demo, tests and benchmarks.

The loop is what a user writes; the only wse-specific line is `lazydev.mark_step()`.
"""
from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in=64, hidden=128, d_out=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, d_out))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self, channels=8, classes=10, size=28):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.BatchNorm2d(2 * channels),
            nn.ReLU(), nn.MaxPool2d(2))
        self.fc = nn.Linear(2 * channels * (size // 4) ** 2, classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    """A small decoder-only language model."""

    def __init__(self, vocab=64, d=32, heads=4, layers=2, context=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        return self.head(self.ln(self.blocks(x)))


def batches(kind: str, steps: int, batch: int, seed: int = 0, **shape):
    """Synthetic data, the same on every run for a seed."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if kind == "mlp":
            d_in, classes = shape.get("d_in", 64), shape.get("classes", 10)
            x = torch.randn(batch, d_in, generator=g)
            yield x, (x[:, :classes] * 3).argmax(1)
        elif kind == "cnn":
            size = shape.get("size", 28)
            x = torch.randn(batch, 1, size, size, generator=g)
            yield x, torch.randint(0, 10, (batch,), generator=g)
        else:
            vocab, context = shape.get("vocab", 64), shape.get("context", 16)
            seq = torch.randint(0, vocab, (batch, context + 1), generator=g)
            yield seq[:, :-1], seq[:, 1:]


def loss_fn(kind: str, out, y):
    if kind == "lm":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return F.cross_entropy(out, y)


def train(kind: str, device: str, steps: int = 20, batch: int = 16, seed: int = 0,
          optimizer: str = "sgd", scheduler: bool = False, on_step=None, **shape):
    """An ordinary training loop; returns the losses. `on_step(i, loss)` is called per step."""
    import lazydev
    torch.manual_seed(seed)
    model = {"mlp": MLP, "cnn": CNN, "lm": Transformer}[kind](**shape).to(device)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7) if scheduler else None
    losses = []
    for i, (x, y) in enumerate(batches(kind, steps, batch, seed, **shape)):
        x, y = x.to(device), y.to(device)
        loss = loss_fn(kind, model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        if device == "wse":
            lazydev.mark_step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(i, losses[-1])
    return losses
