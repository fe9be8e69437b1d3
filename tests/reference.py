"""Plain-PyTorch forward passes of every supported encoder with TISA, written from the equations."""

from __future__ import annotations

import torch
import torch.nn.functional as F

OFFSET_POSITIONS = ("roberta", "xlm-roberta")  # position rows start after padding_idx


def tisa_bias(tisa, layer: int, length: int) -> torch.Tensor:
    """F[h, i, j] = sum_s a exp(-|b| (j - i - c)^2) by broadcasting over (h, i, j, s), minus r log(1 + |j - i|)
    with a far-field term."""
    positions = torch.arange(length, dtype=torch.float32)
    offsets = positions[None, :] - positions[:, None]
    row = 0 if tisa.amplitude.shape[0] == 1 else layer
    a, b, c = (p[row][:, None, None, :] for p in (tisa.amplitude, tisa.sharpness, tisa.center))
    bias = (a * torch.exp(-b.abs() * (offsets[None, :, :, None] - c).square())).sum(-1)
    slope = getattr(tisa, "far_field_slope", None)
    if slope is not None:
        bias = bias - slope[row][:, None, None] * torch.log(1 + offsets.abs())
    return bias


def logit_scale(config, key_mask) -> torch.Tensor:
    """Per sequence, max(1, log n / log L) for n unpadded tokens where `length_scale_from` = L is set, else 1."""
    settings = getattr(config, "tisa", None)
    train_length = getattr(settings, "length_scale_from", None)
    lengths = key_mask.sum(-1).double()
    if train_length is None:
        return torch.ones(len(lengths))
    return (lengths.log() / torch.tensor(float(train_length)).log()).clamp(min=1).float()


def _attention_block(projections, hidden, key_mask, bias, heads, scale=None, causal=False, keys_from=None):
    """Multi-head attention of `hidden`'s tokens to `keys_from`'s (cross-attention; by default their own), with
    `bias` added to the logits and each query attending to no later key where `causal`. Masked logits are the dtype's
    minimum, not -inf, so that a query with no key to attend to (a left pad of a decoder) gives finite values, which
    the queries that do attend weight by exactly 0."""
    keys_from = hidden if keys_from is None else keys_from
    batch, length, width = hidden.shape
    size = width // heads

    def split(x):
        return x.view(batch, x.shape[1], heads, size).transpose(1, 2)

    query, key, value = projections
    q, k, v = split(query(hidden)), split(key(keys_from)), split(value(keys_from))
    scores = q @ k.transpose(-1, -2) / size**0.5
    if scale is not None:
        scores = scores * scale[:, None, None, None]
    if bias is not None:
        scores = scores + bias
    allowed = key_mask[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(length, length, dtype=torch.bool).tril()
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, width)


def _position_rows(model_type: str, base, input_ids, key_mask, mode: str):
    table = base.embeddings.position_embeddings.weight
    if model_type in OFFSET_POSITIONS:
        offset = base.embeddings.padding_idx + 1
        rows = torch.cumsum(key_mask.long(), 1) * key_mask.long() + base.embeddings.padding_idx
    else:
        offset = 0
        rows = torch.arange(input_ids.shape[1])[None].expand_as(input_ids)
    if mode == "replace":
        return table[offset:].mean(0).expand(*input_ids.shape, -1)
    return table[rows]


@torch.no_grad()
def reference_forward(
    model_type: str, base, input_ids, key_mask, mode: str = "add", encoder_states=None, encoder_mask=None
) -> torch.Tensor:
    """Last hidden state of a (possibly TISA-patched) base encoder, from its weights. A decoder (`is_decoder`, BERT's
    layout) attends causally, and, with `encoder_states` (and their `encoder_mask`), to them through its
    cross-attention layers, which have no positions and so no bias."""
    embeddings = base.embeddings
    hidden = embeddings.word_embeddings(input_ids) + _position_rows(model_type, base, input_ids, key_mask, mode)
    if model_type != "distilbert":
        hidden = hidden + embeddings.token_type_embeddings.weight[0]
    hidden = embeddings.LayerNorm(hidden)
    if model_type == "electra" and hasattr(base, "embeddings_project"):
        hidden = base.embeddings_project(hidden)
    tisa = getattr(base, "tisa", None)
    heads = base.config.num_attention_heads
    length = input_ids.shape[1]

    scale = logit_scale(base.config, key_mask)

    def bias(index):
        return tisa_bias(tisa, index, length) if tisa is not None else None

    if model_type == "albert":
        hidden = base.encoder.embedding_hidden_mapping_in(hidden)
        layer = base.encoder.albert_layer_groups[0].albert_layers[0]
        for index in range(base.config.num_hidden_layers):
            att = layer.attention
            context = _attention_block((att.query, att.key, att.value), hidden, key_mask, bias(index), heads, scale)
            attended = att.LayerNorm(hidden + att.dense(context))
            ffn = layer.ffn_output(F.gelu(layer.ffn(attended)))
            hidden = layer.full_layer_layer_norm(ffn + attended)
        return hidden

    if model_type == "distilbert":
        for index, layer in enumerate(base.transformer.layer):
            att = layer.attention
            context = _attention_block((att.q_lin, att.k_lin, att.v_lin), hidden, key_mask, bias(index), heads, scale)
            attended = layer.sa_layer_norm(att.out_lin(context) + hidden)
            hidden = layer.output_layer_norm(layer.ffn.lin2(F.gelu(layer.ffn.lin1(attended))) + attended)
        return hidden

    causal = base.config.is_decoder
    for index, layer in enumerate(base.encoder.layer):
        att = layer.attention.self
        projections = (att.query, att.key, att.value)
        context = _attention_block(projections, hidden, key_mask, bias(index), heads, scale, causal)
        out = layer.attention.output
        attended = out.LayerNorm(hidden + out.dense(context))
        if encoder_states is not None:
            cross = layer.crossattention
            projections = (cross.self.query, cross.self.key, cross.self.value)
            context = _attention_block(projections, attended, encoder_mask, None, heads, keys_from=encoder_states)
            attended = cross.output.LayerNorm(attended + cross.output.dense(context))
        ffn = layer.output.dense(F.gelu(layer.intermediate.dense(attended)))
        hidden = layer.output.LayerNorm(ffn + attended)
    return hidden


def toeplitz_attention(query, key, value, table, mask=None, scale=None, keep=None, dropout: float = 0.0):
    """softmax(q kᵀ · scale + F) v with F[h, i, j] = table[h, j - i + n - 1], masked where the boolean `mask` is
    False, the probabilities times `keep` / (1 - dropout) where a keep mask is given: (output, log-sum-exp)."""
    length = query.shape[-2]
    scale = scale if scale is not None else query.shape[-1] ** -0.5
    positions = torch.arange(length)
    bias = table[:, positions[None, :] - positions[:, None] + length - 1]
    logits = query @ key.transpose(-1, -2) * scale + bias
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    probabilities = logits.softmax(-1)
    if keep is not None:
        probabilities = probabilities * keep / (1 - dropout)
    return probabilities @ value, logits.logsumexp(-1)
