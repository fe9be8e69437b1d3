"""What TISA needs to know about one encoder architecture: one `EncoderAdapter` subclass each.

Everything architecture-specific lives here and nowhere else: where the embeddings, the position table and the
self-attention modules are, which rows of the position table real tokens use (RoBERTa's and XLM-RoBERTa's offset),
which token type an ordinary token has, and what stands between the embeddings and the first layer (ALBERT's and
ELECTRA's projections). How the architecture knows position is its `positions` scheme (`positions.py`: a table, or
rotary embeddings, `rotary.py`). Patching, the positional profiles and the analyses all ask the adapter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import transformers

from ..names import BIAS_ATTRIBUTE, LAYER_INDEX_KWARG
from .positions import PositionScheme, PositionTable

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PreTrainedConfig, PreTrainedModel

    from ..kernels import TisaPositionBias

__all__ = ["LAYER_INDEX_KWARG", "AttentionSite", "EncoderAdapter"]


@dataclass(frozen=True)
class AttentionSite:
    """A self-attention module and the TISA layer it serves.

    `layer` is fixed for unshared modules; for modules shared across layers (ALBERT) it is None, and the encoder
    passes `tisa_layer_index` with each call, to which the site adds `offset`. Adapters list their sites without an
    encoder; `attach_tisa` stores each site on its module with `encoder` set, and TISA's attention functions read it
    there. The kernels are looked up on the encoder at every call (`encoder.tisa`), so a wrapper that replaces the
    kernel module (PEFT's `modules_to_save`) is used as such.
    """

    module: nn.Module
    layer: int | None
    offset: int = 0
    encoder: nn.Module | None = field(default=None, repr=False, compare=False)

    def kernels(self) -> TisaPositionBias | None:
        """The encoder's kernel module, or None where it has none (S = 0)."""
        return getattr(self.encoder, BIAS_ATTRIBUTE, None)

    def layer_index(self, kwargs: dict) -> int:
        """The TISA layer of this call (takes `tisa_layer_index` out of the call's keyword arguments)."""
        passed = kwargs.pop(LAYER_INDEX_KWARG, None)
        return self.layer if self.layer is not None else passed + self.offset


class EncoderAdapter:
    """Per-architecture glue. Subclasses name the model type and the base model class (by its name in
    `transformers`, so that naming it imports no model code) and where the model's parts live."""

    model_type: str
    base_model_class_name: str
    positions: PositionScheme = PositionTable()
    # The first transformers release with this architecture (None: every release tisa-hf supports).
    transformers_release: str | None = None

    @property
    def available(self) -> bool:
        """Whether the installed transformers has this architecture."""
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        return self.model_type in CONFIG_MAPPING

    def unavailable_reason(self) -> str:
        return (
            f"TISA on model type {self.model_type!r} needs transformers {self.transformers_release} or later, which "
            f"has the architecture; transformers {transformers.__version__} is installed: "
            f"pip install 'transformers>={self.transformers_release}'."
        )

    @property
    def base_model_class(self) -> type[PreTrainedModel]:
        return getattr(transformers, self.base_model_class_name)

    @property
    def config_class(self) -> type[PreTrainedConfig]:
        """transformers' config class of the model type, through its Auto mapping (imports that config only)."""
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        return CONFIG_MAPPING[self.model_type]

    def embeddings(self, model: PreTrainedModel) -> nn.Module:
        return model.embeddings

    def position_table(self, model: PreTrainedModel) -> nn.Embedding:
        return self.embeddings(model).position_embeddings

    def position_row_offset(self, model: PreTrainedModel) -> int:
        """First row of the position table that real tokens use (RoBERTa skips its padding rows)."""
        return 0

    def position_rows(self, model: PreTrainedModel) -> torch.Tensor:
        """E_P: the rows of the position table that real tokens use, in order of position."""
        return self.position_table(model).weight[self.position_row_offset(model) :]

    def embedding_output(self, model: PreTrainedModel, words: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The embedding layer's output (before dropout) for word vectors and position vectors that broadcast
        together, with token type 0 where the architecture has token types."""
        embeddings = self.embeddings(model)
        hidden = words + positions
        token_types = getattr(embeddings, "token_type_embeddings", None)
        if token_types is not None:
            hidden = hidden + token_types.weight[0]
        return embeddings.LayerNorm(hidden)

    def encoder_input(self, model: PreTrainedModel, embedding_output: torch.Tensor) -> torch.Tensor:
        """What the first layer's attention sees for an embedding output (ALBERT and ELECTRA project it)."""
        return embedding_output

    def run_encoder(self, model: PreTrainedModel, embedding_output: torch.Tensor) -> None:
        """Runs the layers on an embedding output, without a mask."""
        model.encoder(self.encoder_input(model, embedding_output))

    def num_tisa_layers(self, model: PreTrainedModel) -> int:
        return model.config.num_hidden_layers

    def attention_sites(self, model: PreTrainedModel) -> list[AttentionSite]:
        raise NotImplementedError

    def projections(self, attention: nn.Module) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
        """The query, key and value projections of a self-attention module."""
        return attention.query, attention.key, attention.value

    def prepare(self, model: PreTrainedModel) -> None:
        """Structural changes the attention sites rely on (ALBERT passes its layer index down)."""
