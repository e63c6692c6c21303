"""CTC loss as the CPU kernel computes it (aten/src/ATen/native/LossCTC.cpp), over the batch.

The forward is the alpha recursion of Graves et al., one step per time step over all batch
elements and extended-target positions at once (the trace unrolls the T steps); a batch
element's own input and target lengths mask its steps and positions. The backward is the
kernel's own formula, not the vjp of the forward: it runs the beta recursion and returns
exp(lp) - exp(log(sum alpha*beta) + nll - lp), the gradient the kernel defines for log_probs
(it assumes they come from a log_softmax).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .vjp import decomposition
from .wse_tensor import WseTensor, to_cpu

aten = torch.ops.aten
NEG = float("-inf")


def _lengths(v, device) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v.to(device=device, dtype=torch.int64)
    return torch.tensor(list(v), dtype=torch.int64, device="cpu").to(device)


def _padded_targets(targets, target_lengths, n: int):
    """Targets as [N, S] (S the longest target): concatenated 1-d targets are cut per element."""
    if targets.dim() == 2:
        return targets.to(torch.int64)
    tl = target_lengths
    if isinstance(tl, WseTensor):
        tl = to_cpu(tl, reason="ctc target lengths")
    tl = [int(v) for v in tl]
    smax = max(tl, default=0)
    starts = torch.tensor([sum(tl[:i]) for i in range(n)], dtype=torch.int64, device="cpu")
    idx = (starts.unsqueeze(1) + torch.arange(smax, device="cpu")).clamp(
        max=max(targets.numel() - 1, 0))
    return targets.to(torch.int64)[idx.to(targets.device)] if smax else \
        torch.zeros(n, 0, dtype=torch.int64, device="cpu").to(targets.device)


class _Layout:
    """The extended targets l' (blank, t1, blank, t2, ..., blank) and the masks both
    recursions share."""

    def __init__(self, log_probs, targets, input_lengths, target_lengths, blank):
        t, n, _ = log_probs.shape
        dev = log_probs.device
        tgt = _padded_targets(targets, target_lengths, n)
        blanks = torch.full_like(tgt, blank)
        end = torch.full((n, 1), blank, dtype=torch.int64, device="cpu").to(dev)
        self.prime = torch.cat([torch.stack([blanks, tgt], -1).reshape(n, -1), end], 1)
        width = self.prime.shape[1]
        self.il = _lengths(input_lengths, dev)
        self.tl = _lengths(target_lengths, dev)
        self.s = torch.arange(width, device=dev).unsqueeze(0)
        self.time = torch.arange(t, device=dev).unsqueeze(0)
        self.valid = self.s < (2 * self.tl + 1).unsqueeze(1)
        # a skip from s-2 to s is allowed between different labels (never onto a blank)
        skip = self.prime[:, 2:] != self.prime[:, :-2]
        self.skip_in = F.pad(skip, (2, 0), value=False)       # alpha: s-2 -> s
        self.skip_out = F.pad(skip, (0, 2), value=False)      # beta: s+2 -> s
        self.lpp = torch.gather(log_probs, 2, self.prime.unsqueeze(0).expand(t, n, width))


def _logadd3(a, b, c, extra):
    """log(exp(a-m) + exp(b-m) + exp(c-m)) + m + extra, m the max (0 when all are -inf)."""
    m = torch.maximum(torch.maximum(a, b), c)
    m = torch.where(m == NEG, 0.0, m)
    return torch.log(torch.exp(a - m) + torch.exp(b - m) + torch.exp(c - m)) + m + extra


def _per_step(mask, like):
    """A [N, T] mask broadcast once to [N, T, ...like]: each step then reads a slice of it (a
    slice of one broadcast, not a broadcast per step: each of those would be a kernel)."""
    return mask.view(list(mask.shape) + [1] * (like.dim() - 1)) \
        .expand(list(mask.shape) + list(like.shape[1:]))


def register(lib) -> None:
    # Before autograd: F.ctc_loss's lengths as tensors (aten::ctc_loss.Tensor) for wse.
    lib.impl("ctc_loss.Tensor", _ctc_loss_tensor_lengths, "AutogradPrivateUse1")


def _ctc_loss_tensor_lengths(log_probs, targets, input_lengths, target_lengths, blank=0,
                             reduction=1, zero_infinity=False):
    """F.ctc_loss with lengths as tensors. PyTorch's composite takes another path for a tensor
    subclass, which divides the wse loss by the CPU target lengths for reduction="mean" and
    raised DeviceMismatch; on CUDA the lengths are read into lists first (PyTorch's own
    example keeps them on the CPU). A CPU length tensor is read here the same way; wse
    lengths keep the composite's path, which needs no read. Unbatched (log_probs [T, C], 0-dim
    lengths) is a batch of one, as ATen makes it (the lengths were iterated over and failed)."""
    if log_probs.numel() == 0:      # the CPU's check (wse failed reshaping the empty batch)
        raise RuntimeError("log_probs tensor must not be empty")
    if log_probs.dim() == 2:
        loss = _ctc_loss_tensor_lengths(
            log_probs.unsqueeze(1), targets.unsqueeze(0), input_lengths.reshape(1),
            target_lengths.reshape(1), blank, reduction, zero_infinity)
        return loss.squeeze(0) if reduction == 0 else loss
    if "cpu" in (input_lengths.device.type, target_lengths.device.type):
        return aten.ctc_loss.IntList(log_probs, targets, input_lengths.tolist(),
                                     target_lengths.tolist(), blank, reduction, zero_infinity)
    return aten.ctc_loss.Tensor.decompose(log_probs, targets, input_lengths, target_lengths,
                                          blank, reduction, zero_infinity)


def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    lay = _Layout(log_probs, targets, input_lengths, target_lengths, blank)
    steps = log_probs.shape[0]
    first = (lay.s == 0) | ((lay.s == 1) & (lay.tl > 0).unsqueeze(1))
    alphas = [torch.where(first & lay.valid, lay.lpp[0], NEG)]
    live = _per_step(lay.time < lay.il.unsqueeze(1), lay.valid) & lay.valid.unsqueeze(1)
    for t in range(1, steps):
        prev = alphas[-1]
        one = F.pad(prev[:, :-1], (1, 0), value=NEG)
        two = torch.where(lay.skip_in, F.pad(prev[:, :-2], (2, 0), value=NEG), NEG)
        alphas.append(torch.where(live[:, t], _logadd3(prev, one, two, lay.lpp[t]), NEG))
    log_alpha = torch.stack(alphas, 1)                                  # [N, T, S']
    last = log_alpha.gather(1, (lay.il - 1).clamp(min=0).view(-1, 1, 1)
                            .expand(-1, 1, log_alpha.shape[2])).squeeze(1)
    l1 = last.gather(1, (2 * lay.tl).unsqueeze(1)).squeeze(1)
    l2 = last.gather(1, (2 * lay.tl - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    m = torch.where(torch.maximum(l1, l2) == NEG, 0.0, torch.maximum(l1, l2))
    pair = torch.log(torch.exp(l1 - m) + torch.exp(l2 - m)) + m
    nll = -torch.where(lay.tl == 0, l1, pair)
    return nll, log_alpha


def _betas(lay, steps: int):
    """The beta recursion, [N, T, S']: initialised at each element's last input step."""
    ends = (lay.s == 2 * lay.tl.unsqueeze(1)) | \
        ((lay.s == 2 * lay.tl.unsqueeze(1) - 1) & (lay.tl > 0).unsqueeze(1))
    last = lay.il.unsqueeze(1) - 1
    here = _per_step(lay.time == last, lay.valid) & (ends & lay.valid).unsqueeze(1)
    before = _per_step(lay.time < last, lay.valid) & lay.valid.unsqueeze(1)
    nxt = torch.full_like(lay.lpp[0], NEG)
    betas = [None] * steps
    for t in reversed(range(steps)):
        one = F.pad(nxt[:, 1:], (0, 1), value=NEG)
        two = torch.where(lay.skip_out, F.pad(nxt[:, 2:], (0, 2), value=NEG), NEG)
        rec = torch.where(before[:, t], _logadd3(nxt, one, two, lay.lpp[t]), NEG)
        betas[t] = nxt = torch.where(here[:, t], lay.lpp[t], rec)
    return torch.stack(betas, 1)


def _label_sums(ab, prime, classes: int):
    """log of the sum of alpha*beta over the positions s of each label, [N, T, C], added up as
    the kernel does: position by position from the last, each a two-term log-add (a fused
    logsumexp rounds differently, and exp(lcab + nll - lp) magnifies that by |nll|)."""
    n, steps, width = ab.shape
    full = [n, steps, width, classes]
    labels = torch.arange(classes, device=ab.device)
    # ab is read below only through views, which the scheduler does not count as uses: without
    # this gather (whose source is always materialised) every step would recompute ab inline.
    ab = ab.index_select(2, torch.arange(width, device=ab.device))
    hits = (prime.unsqueeze(2) == labels).unsqueeze(1).expand(full)
    values = ab.unsqueeze(3).expand(full)
    lcab = torch.full((n, steps, classes), NEG, dtype=ab.dtype, device=ab.device)
    for s in reversed(range(width)):
        v = values[:, :, s]
        m = torch.maximum(lcab, v)      # never 0-ed: lcab == -inf takes v instead
        added = torch.where(lcab == NEG, v, torch.log(torch.exp(lcab - m) + torch.exp(v - m)) + m)
        lcab = torch.where(hits[:, :, s], added, lcab)
    return lcab


def _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha,
                       blank, zero_infinity=False):
    lay = _Layout(log_probs, targets, input_lengths, target_lengths, blank)
    steps, _, classes = log_probs.shape
    lcab = _label_sums(log_alpha + _betas(lay, steps), lay.prime, classes)
    lp = log_probs.permute(1, 0, 2)
    res = (torch.exp(lp) - torch.exp(lcab + nll.view(-1, 1, 1) - lp)) * grad.view(-1, 1, 1)
    keep = (torch.arange(steps, device=lp.device) < lay.il.unsqueeze(1)).unsqueeze(2)
    if zero_infinity:
        keep = keep & (nll != float("inf")).view(-1, 1, 1)
    return torch.where(keep, res, 0.0).permute(1, 0, 2)


decomposition(aten._ctc_loss.default, aten._ctc_loss.Tensor)(_ctc_loss)
decomposition(aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor)(_ctc_loss_backward)
