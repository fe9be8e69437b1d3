"""Plain-PyTorch forward passes of BERT, RoBERTa and ALBERT with TISA, written from the equations."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def tisa_bias(tisa, layer: int, length: int) -> torch.Tensor:
    """F[h, i, j] = sum_s a exp(-|b| (j - i - c)^2) by broadcasting over (h, i, j, s)."""
    positions = torch.arange(length, dtype=torch.float32)
    offsets = positions[None, :] - positions[:, None]
    row = 0 if tisa.amplitude.shape[0] == 1 else layer
    a, b, c = (p[row][:, None, None, :] for p in (tisa.amplitude, tisa.sharpness, tisa.center))
    return (a * torch.exp(-b.abs() * (offsets[None, :, :, None] - c).square())).sum(-1)


def _attention_block(attention, hidden, key_mask, bias, heads):
    batch, length, width = hidden.shape
    size = width // heads

    def split(x):
        return x.view(batch, length, heads, size).transpose(1, 2)

    q, k, v = split(attention.query(hidden)), split(attention.key(hidden)), split(attention.value(hidden))
    scores = q @ k.transpose(-1, -2) / size**0.5
    if bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, width)


def _position_rows(model_type: str, base, input_ids, key_mask, mode: str):
    table = base.embeddings.position_embeddings.weight
    if model_type == "roberta":
        offset = base.embeddings.padding_idx + 1
        rows = torch.cumsum(key_mask.long(), 1) * key_mask.long() + base.embeddings.padding_idx
    else:
        offset = 0
        rows = torch.arange(input_ids.shape[1])[None].expand_as(input_ids)
    if mode == "replace":
        return table[offset:].mean(0).expand(*input_ids.shape, -1)
    return table[rows]


@torch.no_grad()
def reference_forward(model_type: str, base, input_ids, key_mask, mode: str = "add") -> torch.Tensor:
    """Last hidden state of a (possibly TISA-patched) base encoder, from its weights."""
    embeddings = base.embeddings
    hidden = embeddings.word_embeddings(input_ids) + embeddings.token_type_embeddings.weight[0]
    hidden = embeddings.LayerNorm(hidden + _position_rows(model_type, base, input_ids, key_mask, mode))
    tisa = getattr(base, "tisa", None)
    heads = base.config.num_attention_heads
    length = input_ids.shape[1]

    if model_type == "albert":
        hidden = base.encoder.embedding_hidden_mapping_in(hidden)
        layer = base.encoder.albert_layer_groups[0].albert_layers[0]
        for index in range(base.config.num_hidden_layers):
            bias = tisa_bias(tisa, index, length) if tisa is not None else None
            att = layer.attention
            context = _attention_block(att, hidden, key_mask, bias, heads)
            attended = att.LayerNorm(hidden + att.dense(context))
            ffn = layer.ffn_output(F.gelu(layer.ffn(attended)))
            hidden = layer.full_layer_layer_norm(ffn + attended)
        return hidden

    for index, layer in enumerate(base.encoder.layer):
        bias = tisa_bias(tisa, index, length) if tisa is not None else None
        context = _attention_block(layer.attention.self, hidden, key_mask, bias, heads)
        out = layer.attention.output
        attended = out.LayerNorm(hidden + out.dense(context))
        ffn = layer.output.dense(F.gelu(layer.intermediate.dense(attended)))
        hidden = layer.output.LayerNorm(ffn + attended)
    return hidden
