"""Recurrent networks: the fused GRU cell PyTorch uses on accelerators, and packing.

nn.GRU on any device but the CPU runs each step's cell as `_thnn_fused_gru_cell`, a CUDA kernel
with no CPU or meta kernel, so nn.GRU failed on wse (NotImplementedError from the CPU fallback).
Both the cell and its backward are written here as the CUDA kernels compute them
(aten/src/ATen/native/cuda/RNN.cu, gru_cell_forward / gru_cell_backward), in wse ops. The LSTM
cell, whose meta kernel PyTorch has, is lowered directly (trace/lower_nn.py).
"""
from __future__ import annotations

import torch

from .vjp import decomposition

aten = torch.ops.aten


@decomposition(aten._thnn_fused_gru_cell.default)
def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """(hy, workspace): the reset, update and new gates, the hidden n-gates (with their bias)
    and hx, side by side, which the backward reads."""
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    ir, ii, i_n = input_gates.chunk(3, 1)
    hr, hi, hn = hidden_gates.chunk(3, 1)
    r = torch.sigmoid(ir + hr)
    z = torch.sigmoid(ii + hi)
    n = torch.tanh(i_n + r * hn)
    return n + z * (hx - n), torch.cat([r, z, n, hn, hx], 1)


@decomposition(aten._thnn_fused_gru_cell_backward.default)
def _gru_cell_backward(grad_hy, workspace, has_bias):
    """(grad input gates, grad hidden gates, grad hx, grad input bias, grad hidden bias)."""
    r, z, n, hn, hx = workspace.chunk(5, 1)
    grad_z = grad_hy * (hx - n) * (1 - z) * z
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * hn * (1 - r) * r
    grad_input = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_n * r], 1)
    if not has_bias:
        return grad_input, grad_hidden, grad_hy * z, None, None
    return grad_input, grad_hidden, grad_hy * z, grad_input.sum(0), grad_hidden.sum(0)


@decomposition(aten._pack_padded_sequence.default)
def _pack_padded_sequence(input, lengths, batch_first):
    """(data, batch_sizes) of nn.utils.rnn.pack_padded_sequence: the lengths are a CPU tensor
    (PyTorch's contract), so the batch sizes are known while recording and the data is a
    concatenation of slices, with no sync. batch_sizes stays on the CPU, as PyTorch keeps it
    for every device (a PackedSequence refuses any other)."""
    lengths = [int(n) for n in lengths.tolist()]
    if not lengths or lengths[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element "
                           "in 'lengths' that is <= 0")
    if any(a < b for a, b in zip(lengths, lengths[1:])):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                           "`enforce_sorted` is True. You can pass `enforce_sorted=False` to "
                           "pack_padded_sequence and/or pack_sequence to sidestep this "
                           "requirement if you do not need ONNX exportability.")
    steps = input.transpose(0, 1) if batch_first else input
    if lengths[0] > steps.shape[0]:
        raise RuntimeError(f"the longest length ({lengths[0]}) exceeds the sequence's "
                           f"{steps.shape[0]} steps")
    batch_sizes = [sum(n > t for n in lengths) for t in range(lengths[0])]
    data = torch.cat([steps[t, :b] for t, b in enumerate(batch_sizes)])
    return data, torch.tensor(batch_sizes, dtype=torch.int64, device="cpu")
