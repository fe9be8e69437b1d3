"""Patching an encoder with TISA: the kernel module, the attention hooks and the position-embedding modes."""

from __future__ import annotations

import logging

import torch
from torch import nn
from transformers import PreTrainedModel

from .adapters import LAYER_INDEX_KWARG, AttentionSite, EncoderAdapter, find_base_model
from .attention import (
    TOEPLITZ_BIAS_KWARG,
    ToeplitzBias,
    fused_bias_sdpa_installed,
    install_fused_bias_sdpa,
    merge_bias,
)
from .config import TisaConfig
from .fitting import fit_kernels
from .kernels import TisaPositionBias
from .profiles import extract_positional_profiles

logger = logging.getLogger(__name__)

BIAS_ATTRIBUTE = "tisa"
CONFIG_ATTRIBUTE = "tisa_config"
BIAS_FREE_IMPLEMENTATIONS = ("flash",)


class MeanPositionEmbedding(nn.Embedding):
    """A position table whose every lookup returns the mean of the rows real tokens use (`mode="replace"`).

    The table keeps its shape, so checkpoints load both ways, but only its mean reaches the model, so no
    position information does, whatever the position ids or the sequence length.
    """

    row_offset: int = 0

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        mean = self.weight[self.row_offset :].mean(0)
        return mean.expand(*position_ids.shape, mean.shape[-1])


class TisaAttentionHook:
    """Forward pre-hook of a self-attention module: adds its layer's TISA bias to the mask it receives."""

    def __init__(self, bias: TisaPositionBias, site: AttentionSite):
        self.bias = bias
        self.site = site

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        passed_index = kwargs.pop(LAYER_INDEX_KWARG, None)
        if not self.bias.enabled:
            return args, kwargs
        layer = self.site.layer if self.site.layer is not None else passed_index + self.site.offset
        hidden_states = args[0] if args else kwargs["hidden_states"]
        implementation = module.config._attn_implementation or "eager"
        if implementation.startswith(BIAS_FREE_IMPLEMENTATIONS):
            raise ValueError(
                f"TISA adds a bias to the attention logits, which attn_implementation={implementation!r} cannot "
                "take. Load the model with attn_implementation='sdpa' (or 'eager', 'flex_attention')."
            )
        length, dtype = hidden_states.shape[-2], attention_dtype(hidden_states)
        if implementation == "sdpa" and self.passes_offset_values(length, dtype):
            kwargs[TOEPLITZ_BIAS_KWARG] = ToeplitzBias(self.bias.offset_values(layer, length, dtype), length)
            return args, kwargs
        bias = self.bias(layer, length, dtype)
        if implementation == "flex_attention":
            kwargs["position_bias"] = bias.expand(hidden_states.shape[0], -1, -1, -1)
        elif len(args) > 1:
            args = (args[0], merge_bias(args[1], bias), *args[2:])
        else:
            kwargs["attention_mask"] = merge_bias(kwargs.get("attention_mask"), bias)
        return args, kwargs

    def passes_offset_values(self, length: int, dtype: torch.dtype) -> bool:
        """Long inputs without gradients: sdpa runs blockwise on the offset values, never storing (H, n, n)."""
        return not self.bias.needs_grad() and not self.bias.fits_cache(length, dtype) and fused_bias_sdpa_installed()


def attention_dtype(hidden_states: torch.Tensor) -> torch.dtype:
    """The dtype the attention logits will have: autocast's, where it is on."""
    device_type = hidden_states.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return hidden_states.dtype


class PositionIdsForReplaceMode:
    """Embeddings pre-hook in `replace` mode: position ids that fit any length (their values do not matter)."""

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if kwargs.get("position_ids") is None:
            batch_shape = _input_shape(args, kwargs)
            device = module.position_embeddings.weight.device
            kwargs["position_ids"] = torch.zeros(1, batch_shape[1], dtype=torch.long, device=device)
        return args, kwargs


class SequenceLengthCheck:
    """Embeddings pre-hook in `add` mode: a clear error for inputs longer than the position table."""

    def __init__(self, max_length: int):
        self.max_length = max_length

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        length = _input_shape(args, kwargs)[1] + kwargs.get("past_key_values_length", 0)
        if length > self.max_length:
            raise ValueError(
                f"The input has {length} tokens but the position table holds {self.max_length}, and TISA "
                "mode='add' keeps the position embeddings. Truncate the input, or use "
                "TisaConfig(mode='replace'), which accepts any length."
            )


def _input_shape(args: tuple, kwargs: dict) -> torch.Size:
    input_ids = args[0] if args else kwargs.get("input_ids")
    if input_ids is not None:
        return input_ids.shape
    return kwargs["inputs_embeds"].shape[:-1]


def is_patched(model: nn.Module) -> bool:
    return getattr(model, CONFIG_ATTRIBUTE, None) is not None


def tisa_bias_module(base: PreTrainedModel) -> TisaPositionBias | None:
    return getattr(base, BIAS_ATTRIBUTE, None)


def apply_tisa(base: PreTrainedModel, adapter: EncoderAdapter, config: TisaConfig) -> None:
    """Structural patch of a base encoder: adds the kernel module and hooks; initialises nothing."""
    if is_patched(base):
        raise ValueError(f"This {type(base).__name__} already has TISA ({getattr(base, CONFIG_ATTRIBUTE)}).")
    embeddings = adapter.embeddings(base)
    row_offset = adapter.position_row_offset(base)
    if config.mode == "replace":
        embeddings.position_embeddings.__class__ = MeanPositionEmbedding
        embeddings.position_embeddings.row_offset = row_offset
        embeddings.register_forward_pre_hook(PositionIdsForReplaceMode(), with_kwargs=True)
    else:
        max_length = embeddings.position_embeddings.num_embeddings - row_offset
        embeddings.register_forward_pre_hook(SequenceLengthCheck(max_length), with_kwargs=True)
    if config.num_kernels > 0:
        install_fused_bias_sdpa()
        num_layers = 1 if config.share_across_layers else adapter.num_tisa_layers(base)
        reference = embeddings.position_embeddings.weight
        bias = TisaPositionBias(num_layers, base.config.num_attention_heads, config.num_kernels)
        setattr(base, BIAS_ATTRIBUTE, bias.to(device=reference.device, dtype=reference.dtype))
        adapter.prepare(base)
        for site in adapter.attention_sites(base):
            site.module.register_forward_pre_hook(TisaAttentionHook(bias, site), with_kwargs=True)
    setattr(base, CONFIG_ATTRIBUTE, config)


def initialize_tisa(base: PreTrainedModel, adapter: EncoderAdapter, config: TisaConfig) -> None:
    """Sets the kernels by `config.init`: fitted to the model's own positional profiles, zeros or random."""
    bias = tisa_bias_module(base)
    if bias is None:
        return
    if config.init == "fit":
        profiles = extract_positional_profiles(base, length=config.profile_length)
        profile = profiles.toeplitz.profile
        if config.share_across_layers:
            profile = profile.mean(0, keepdim=True)
        fit = fit_kernels(profile, config.num_kernels, window=config.fit_window, restarts=config.fit_restarts)
        with torch.no_grad():
            for name, value in (
                ("amplitude", fit.amplitude),
                ("sharpness", fit.sharpness),
                ("center", fit.center),
            ):
                getattr(bias, name).copy_(value)
        logger.info("TISA kernels fitted to the positional profiles: mean fit R² %.3f", fit.r2.mean().item())
        return
    window = config.fit_window or embeddings_length(base, adapter)
    if config.init == "zeros":
        bias.reset_zeros(window)
    else:
        bias.reset_random(window)


def embeddings_length(base: PreTrainedModel, adapter: EncoderAdapter) -> int:
    table = adapter.embeddings(base).position_embeddings
    return table.num_embeddings - adapter.position_row_offset(base)


def patch(model: PreTrainedModel, tisa: TisaConfig | dict | bool = True) -> PreTrainedModel:
    """Gives a model already in memory TISA, initialised by `tisa.init`; records it in `model.config.tisa`.

    Returns the same model, patched in place.
    """
    config = TisaConfig.from_value(tisa)
    base, adapter = find_base_model(model)
    apply_tisa(base, adapter, config)
    initialize_tisa(base, adapter, config)
    model.config.tisa = config.to_dict()
    return model


def tisa_config_of(model: PreTrainedModel) -> TisaConfig | None:
    """The TISA config a model was patched with, or None."""
    base = model if is_patched(model) else getattr(model, "base_model", model)
    return getattr(base, CONFIG_ATTRIBUTE, None)
