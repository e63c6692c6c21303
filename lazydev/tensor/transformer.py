"""The fused inference kernels of nn.MultiheadAttention and nn.TransformerEncoderLayer.

In eval mode with gradients off, both modules call one fused kernel per layer
(`_native_multi_head_attention`, `_transformer_encoder_layer_fwd`, their "fast path"), which
PyTorch has for the CPU and CUDA only: on wse each call fell back to the CPU, a sync and two
transfers per layer. They are written here as the CPU kernels compute them
(aten/src/ATen/native/transformers/attention.cpp and transformer.cpp), in wse ops. Only the
forward: the fast path runs without autograd.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .vjp import decomposition

aten = torch.ops.aten


def _qkv(query, key, value, embed_dim, qkv_weight):
    """[B, T, 3D]: one projection for self-attention, else each input by its third."""
    if query is key and key is value:
        return F.linear(query, qkv_weight)
    if key is value:
        wq, wkv = qkv_weight.split([embed_dim, 2 * embed_dim])
        return torch.cat([F.linear(query, wq), F.linear(key, wkv)], 2)
    wq, wk, wv = qkv_weight.chunk(3)
    return torch.cat([F.linear(query, wq), F.linear(key, wk), F.linear(value, wv)], 2)


def _masked_softmax(scores, mask, mask_type):
    """Softmax over keys with `mask` (True or nonzero: left out) as _masked_softmax reads it:
    type 1 is a [B, S] key padding mask, type 0 an [L, S] mask, type 2 any shape that
    broadcasts. A row with every key left out is 0, not NaN."""
    if mask is None:
        return scores.softmax(-1)
    mask = mask.to(torch.bool)
    if mask_type == 1:
        mask = mask.view(mask.shape[0], 1, 1, mask.shape[1])
    probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
    return probs.masked_fill(mask, 0.0)


@decomposition(aten._native_multi_head_attention.default)
def _multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                          proj_weight, proj_bias, mask=None, need_weights=True,
                          average_attn_weights=True, mask_type=None):
    """(output [B, T, D], weights [B, T, T] averaged or [B, H, T, T], or None)."""
    B, T, D = query.shape
    head = D // num_head
    qkv = (_qkv(query, key, value, embed_dim, qkv_weight) + qkv_bias)
    q, k, v = qkv.view(B, T, 3, num_head, head).permute(2, 0, 3, 1, 4).unbind(0)
    q = q * (1.0 / math.sqrt(head))
    probs = _masked_softmax(q @ k.transpose(-1, -2), mask, mask_type)
    ctx = (probs @ v).transpose(1, 2).reshape(B, T, D)
    out = F.linear(ctx, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    return out, (probs.sum(1) / num_head if average_attn_weights else probs)


@decomposition(aten._transformer_encoder_layer_fwd.default)
def _encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                   use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                   norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                   mask_type=None):
    def norm(x, weight, bias):
        return F.layer_norm(x, (embed_dim,), weight, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = _multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                              proj_bias, mask, False, True, mask_type)[0] + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    h = norm(x, norm_weight_2, norm_bias_2) if norm_first else x
    h = F.linear(h, ffn_weight_1, ffn_bias_1)
    h = F.gelu(h) if use_gelu else F.relu(h)
    x = F.linear(h, ffn_weight_2, ffn_bias_2) + x
    return x if norm_first else norm(x, norm_weight_2, norm_bias_2)
