"""How an encoder knows position, and what each TISA mode does to it: one `PositionScheme` an architecture, which its
adapter returns (`EncoderAdapter.positions`), the one home of every position fact the core and the tools ask about.

- `PositionTable` (the BERT era): a learned absolute table, added to the word embeddings. `add` keeps it and refuses
  inputs longer than it; `replace` makes every lookup its rows' mean, so any length reads. The positional profile is
  the logits of the mean word at each position (the TISA paper's F̂_P).
- `RotaryPositions` (ModernBERT, NomicBERT, GTE, EuroBERT): the query and key are rotated by their positions (RoPE)
  before the attention function; no table, no parameters. `add` keeps the rotation; the model runs past
  `max_position_embeddings` as the stock one does (RoPE extrapolates without error), but the tools read at most
  that range, the one it was trained on, as they read at most a table's rows. `replace` makes the rotary
  module return cos = 1, sin = 0 (times its magnitude scaling): q and k reach attention unrotated, bit for bit, at
  any length. The positional profile is each head's rotary part of the logit, (q_i·R(j-i)k_j - q_i·k_j)/sqrt(d), from
  the model's own queries and keys on text: for fixed content it is a function of the offset j - i, which TISA's
  f(j - i) is fitted to.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# The architecture's `EncoderAdapter` (base.py), which holds its scheme: typed loosely, since base.py imports this.
EncoderAdapter = Any

# The seed and number of sequences of the token ids a rotary profile reads when no text is given: on a random
# 4-layer NomicBERT, 16 sequences of 128 tokens give a profile within 8% (median over heads) of 64 sequences' (4: 14%,
# 1: 28%; docs/using.md).
PROFILE_TEXT_SEED = 0
PROFILE_TEXT_SEQUENCES = 16


class PositionScheme:
    """What TISA asks of an encoder's position scheme. `describes` names its limit in messages; `replace_note` says
    what `replace` mode leaves of its parameters, for model cards."""

    describes: str
    replace_note: str
    # Why `tisa-hf analyze` and `compare`, whose analyses read a position table, cannot analyse this scheme (None:
    # they can).
    analysis_refusal: str | None = None

    def apply_mode(self, base: PreTrainedModel, adapter: EncoderAdapter, mode: str) -> None:
        """Gives the encoder the position behaviour of TISA `mode` (`add` or `replace`)."""
        raise NotImplementedError

    def trained_length(self, base: PreTrainedModel, adapter: EncoderAdapter) -> int:
        """Positions the pretrained model was built for: the table's rows for real tokens, or the rotary range."""
        raise NotImplementedError

    def positional_logits(
        self, base: PreTrainedModel, adapter: EncoderAdapter, length: int, input_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """(layers, heads, length, length): the positional part of every layer's and head's query-key logits, with
        TISA switched off by the caller (`profiles.extract_positional_profiles`)."""
        raise NotImplementedError

    def positional_parameters(self, base: PreTrainedModel, adapter: EncoderAdapter) -> int:
        """Parameters of the scheme that reach the model (a `replace` table counts as its mean, one vector)."""
        raise NotImplementedError


class MeanPositionEmbedding(nn.Embedding):
    """A position table whose every lookup returns the mean of the rows real tokens use (`mode="replace"`).

    The table keeps its shape, so checkpoints load both ways, but only its mean reaches the model, so no
    position information does, whatever the position ids or the sequence length.
    """

    row_offset: int = 0

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        mean = self.weight[self.row_offset :].mean(0)
        return mean.expand(*position_ids.shape, mean.shape[-1])


class EmbeddingsCall:
    """The arguments of one embeddings call by name, whether they came positionally or as keywords."""

    def __init__(self, module: nn.Module, args: tuple, kwargs: dict):
        self.bound = inspect.signature(module.forward).bind(*args, **kwargs)

    def get(self, name: str):
        return self.bound.arguments.get(name)

    def tokens(self) -> torch.Tensor:
        """The call's token ids, or its input embeddings where it gives no ids."""
        input_ids = self.get("input_ids")
        return input_ids if input_ids is not None else self.get("inputs_embeds")

    def length(self) -> int:
        return self.tokens().shape[1]


class PositionIdsForReplaceMode:
    """Embeddings pre-hook in `replace` mode: position ids of any length (their values do not matter, and zeros
    also index the token-type buffer that BERT-style embeddings gather with them)."""

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        call = EmbeddingsCall(module, args, kwargs)
        if call.get("position_ids") is None:
            device = module.position_embeddings.weight.device
            call.bound.arguments["position_ids"] = torch.zeros(1, call.length(), dtype=torch.long, device=device)
        return call.bound.args, call.bound.kwargs


class TokenTypesForReplaceMode:
    """Embeddings pre-hook in `replace` mode for embeddings that gather the token type ids a call does not give from
    a buffer of zeros, one row a position of the rotary range (NomicBERT before transformers 5.17), so that an input
    past the range fails there: the zeros that buffer holds, for any length."""

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        call = EmbeddingsCall(module, args, kwargs)
        if call.get("token_type_ids") is None:
            tokens = call.tokens()
            shape = tokens.shape[:2]
            call.bound.arguments["token_type_ids"] = torch.zeros(shape, dtype=torch.long, device=tokens.device)
        return call.bound.args, call.bound.kwargs


class SequenceLengthCheck:
    """Embeddings pre-hook in `add` mode: a clear error for inputs longer than the position table, or, where the call
    gives position ids, for ids outside it (`max_length` positions for real tokens, `table_rows` rows in all)."""

    def __init__(self, max_length: int, table_rows: int):
        self.max_length = max_length
        self.table_rows = table_rows

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        call = EmbeddingsCall(module, args, kwargs)
        position_ids = call.get("position_ids")
        if position_ids is not None:
            # Given ids pick the rows themselves (a row of packed sequences restarts them): the largest must exist.
            if int(position_ids.max()) >= self.table_rows:
                raise ValueError(
                    f"The position ids reach {int(position_ids.max())} but the position table has rows 0 to "
                    f"{self.table_rows - 1}, and TISA mode='add' keeps the position embeddings. Keep the ids inside "
                    "the table, or use TisaConfig(mode='replace'), which accepts any position."
                )
            return
        length = call.length() + (call.get("cache_length") or call.get("past_key_values_length") or 0)
        if length > self.max_length:
            raise ValueError(
                f"The input has {length} tokens but the position table holds {self.max_length}, and TISA "
                "mode='add' keeps the position embeddings. Truncate the input, or use "
                "TisaConfig(mode='replace'), which accepts any length."
            )


class PositionTable(PositionScheme):
    """A learned absolute position table (`EncoderAdapter.position_table`)."""

    describes = "position table"
    replace_note = (
        "In `replace` mode the position table is kept on disk but only its mean reaches the model, so it counts as "
        "one vector."
    )

    def apply_mode(self, base: PreTrainedModel, adapter: EncoderAdapter, mode: str) -> None:
        embeddings = adapter.embeddings(base)
        table = adapter.position_table(base)
        row_offset = adapter.position_row_offset(base)
        if mode == "replace":
            table.__class__ = MeanPositionEmbedding
            table.row_offset = row_offset
            embeddings.register_forward_pre_hook(PositionIdsForReplaceMode(), with_kwargs=True)
        else:
            check = SequenceLengthCheck(table.num_embeddings - row_offset, table.num_embeddings)
            embeddings.register_forward_pre_hook(check, with_kwargs=True)

    def trained_length(self, base: PreTrainedModel, adapter: EncoderAdapter) -> int:
        return adapter.position_rows(base).shape[0]

    def positional_logits(
        self, base: PreTrainedModel, adapter: EncoderAdapter, length: int, input_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """Every word embedding is the mean word embedding over the vocabulary; the position embeddings (of the rows
        real tokens use) and token type 0 are added, the result passes the model's own embedding LayerNorm, and the
        encoder runs on it (after the model's own projection, where it has one). Each layer's `q_i·k_j/sqrt(d_k)`
        is read from its query and key projections, biases included."""
        if input_ids is not None:
            raise ValueError(
                "A position table's profiles read the mean word at every position, not text: call "
                "extract_positional_profiles without input_ids."
            )
        rows = adapter.position_rows(base)
        if length > rows.shape[0]:
            raise ValueError(
                f"Profiles of {length} positions were asked for, but the position table holds {rows.shape[0]}."
            )
        mean_word = adapter.embeddings(base).word_embeddings.weight.mean(0)
        hidden = adapter.embedding_output(base, mean_word, rows[:length])[None]
        queries: list[torch.Tensor] = []
        keys: list[torch.Tensor] = []
        handles = []
        for module in _attention_modules(base, adapter):
            query, key, _ = adapter.projections(module)
            handles.append(query.register_forward_hook(lambda _m, _i, out: queries.append(out[0].float())))
            handles.append(key.register_forward_hook(lambda _m, _i, out: keys.append(out[0].float())))
        try:
            adapter.run_encoder(base, hidden)
        finally:
            for handle in handles:
                handle.remove()
        heads = base.config.num_attention_heads
        query = torch.stack(queries).unflatten(-1, (heads, -1)).transpose(1, 2)
        key = torch.stack(keys).unflatten(-1, (heads, -1)).transpose(1, 2)
        return query @ key.transpose(-1, -2) / query.shape[-1] ** 0.5

    def positional_parameters(self, base: PreTrainedModel, adapter: EncoderAdapter) -> int:
        table = adapter.position_table(base)
        return table.embedding_dim if isinstance(table, MeanPositionEmbedding) else table.weight.numel()


class UnrotatedPositions:
    """Forward hook of the rotary module in `replace` mode: cos = s and sin = 0 for every position, where s is the
    module's magnitude scaling (1 for default RoPE, YaRN's attention factor otherwise). `q·cos + rotate(q)·sin`
    is then q·s: the rotation is gone and any scaling the model was trained with stays."""

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict, output: tuple) -> tuple:
        cos, sin = output
        layer_type = kwargs.get("layer_type", args[2] if len(args) > 2 else None)  # ModernBERT's two bases
        scaling = getattr(module, f"{layer_type}_attention_scaling" if layer_type else "attention_scaling", 1.0)
        return torch.full_like(cos, scaling), torch.zeros_like(sin)


def pretrained_rotation(module: nn.Module, args: tuple, kwargs: dict, output: tuple) -> tuple:
    """Forward hook, registered after any other: the rotary module's own output, past the hooks before it (a
    `replace` model's profile reads the rotation its weights were pretrained with)."""
    return module.forward(*args, **kwargs)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """The rotary embedding's pairing of dimensions, as every RoPE encoder in transformers writes it."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rotated(states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """(batch, heads, n, d) states rotated by their positions' (batch, n, d) cos and sin."""
    return states * cos[:, None] + rotate_half(states) * sin[:, None]


class RotaryPositions(PositionScheme):
    """Rotary position embeddings, applied to the query and key by each attention module (`base.rotary_emb`)."""

    describes = "rotary range"
    replace_note = "Rotary position embeddings have no parameters; `replace` mode switches their rotation off."
    analysis_refusal = (
        "rotary position embeddings have no position table, which the analyses of tisa-hf analyze and compare read "
        "(its Toeplitzness, spectrum, attention indicators and variance); each head's rotary profile and its Toeplitz "
        "fit are tisa_hf.extract_positional_profiles(model, input_ids=...)"
    )

    def apply_mode(self, base: PreTrainedModel, adapter: EncoderAdapter, mode: str) -> None:
        if mode == "replace":
            adapter.rotary_module(base).register_forward_hook(UnrotatedPositions(), with_kwargs=True)

    def trained_length(self, base: PreTrainedModel, adapter: EncoderAdapter) -> int:
        return base.config.max_position_embeddings

    def positional_logits(
        self, base: PreTrainedModel, adapter: EncoderAdapter, length: int, input_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """The encoder reads `input_ids` (default: `profile_text`); each attention module's input gives its query
        and key before the rotation (`adapter.query_key`), and the rotary module its positions' cos and sin. The
        encoder runs with its pretrained rotation, also in `replace` mode (`pretrained_rotation`). The rotary
        part of each logit, averaged over the sequences, is the profile."""
        if input_ids is None:
            input_ids = profile_text(base.config.vocab_size, length)
        input_ids = input_ids[:, :length].to(base.device)
        length = input_ids.shape[1]
        inputs: list[torch.Tensor] = []

        def keep_input(module: nn.Module, args: tuple, kwargs: dict) -> None:
            inputs.append(args[0] if args else kwargs["hidden_states"])

        modules = _attention_modules(base, adapter)
        handles = [module.register_forward_pre_hook(keep_input, with_kwargs=True) for module in modules]
        handles.append(adapter.rotary_module(base).register_forward_hook(pretrained_rotation, with_kwargs=True))
        try:
            base(input_ids=input_ids)
        finally:
            for handle in handles:
                handle.remove()
        positions = torch.arange(length, device=input_ids.device)[None]
        layers = []
        for module, hidden in zip(modules, inputs, strict=True):
            query, key = (states.float() for states in adapter.query_key(module, hidden))
            key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)  # grouped keys serve several heads
            cos, sin = (part.float() for part in adapter.rotation(base, module, hidden, positions))
            rotary_query, rotary_key = rotated(query, cos, sin), rotated(key, cos, sin)
            total = torch.zeros(query.shape[1], length, length, device=query.device)
            for index in range(query.shape[0]):  # one sequence at a time: (heads, n, n) each
                total += rotary_query[index] @ rotary_key[index].mT - query[index] @ key[index].mT
            layers.append(total / query.shape[0] / query.shape[-1] ** 0.5)
        return torch.stack(layers)

    def positional_parameters(self, base: PreTrainedModel, adapter: EncoderAdapter) -> int:
        return 0


def profile_text(vocab_size: int, length: int) -> torch.Tensor:
    """The token ids a rotary profile reads when given no text: `PROFILE_TEXT_SEQUENCES` sequences of `length` ids
    drawn uniformly from the vocabulary with a fixed seed (deterministic, offline; `from_pretrained` has no
    tokenizer). The rotary part of a logit depends on the content only through q and k, so random words give each
    head's typical rotary profile; a profile of the user's own text is `extract_positional_profiles(model,
    input_ids=...)`."""
    generator = torch.Generator().manual_seed(PROFILE_TEXT_SEED)
    return torch.randint(vocab_size, (PROFILE_TEXT_SEQUENCES, length), generator=generator)


def _attention_modules(base: PreTrainedModel, adapter: EncoderAdapter) -> list[nn.Module]:
    """The distinct self-attention modules, in layer order (ALBERT's shared ones once)."""
    return list({id(site.module): site.module for site in adapter.attention_sites(base)}.values())
