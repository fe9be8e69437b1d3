"""Giving an encoder TISA: the kernel module, the attention sites, the position-embedding modes and the kernels' start.

`attach_tisa` is structural (run by every TISA model class's `__init__`); `initialize_tisa` sets the kernels by
`TisaConfig.init`. Both read the settings from the encoder's config, their one home (`tisa_config_of`); turning a
model already in memory into its TISA class is `patching.patch`, on these steps.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import torch
from torch import nn
from transformers import AutoModel, PreTrainedConfig, PreTrainedModel

from .adapters import EncoderAdapter, PositionScheme, adapter_for, find_base_model
from .attention.sites import SiteConfig
from .config import TisaConfig
from .fitting import fit_kernels
from .kernels import TisaPositionBias
from .model_configs import TisaConfigMixin, plain_model_config
from .names import BIAS_ATTRIBUTE, SITE_ATTRIBUTE
from .profiles import extract_positional_profiles

logger = logging.getLogger(__name__)


def refuse_fixed_size_cache(base: PreTrainedModel, args: tuple, kwargs: dict) -> None:
    """Decoder forward pre-hook: TISA reads a cached step's query positions as the last of the keys' (its bias rows),
    which a cache of fixed size (`StaticCache`, whose keys are its whole length) does not give."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if cache is not None and cache.is_compileable:
        raise ValueError(
            f"TISA decoders read the query's positions from the keys of a DynamicCache; this {type(cache).__name__} "
            "holds keys of a fixed size. Generate with the default cache (a DynamicCache, no cache_implementation)."
        )


def tisa_bias_module(base: PreTrainedModel) -> TisaPositionBias | None:
    return getattr(base, BIAS_ATTRIBUTE, None)


class OffsetTablesPerForward:
    """Encoder forward hooks: its layers share one evaluation of the kernels per forward
    (`TisaPositionBias.begin_forward`).

    Not under activation checkpointing: a layer's recompute runs after the encoder's forward, and a table made
    inside the first layer's checkpointed forward would be missing from its recompute, so each layer then
    evaluates its own kernels, as outside any forward. Nor inside a compiled graph, where each layer evaluates its
    own row (`TisaPositionBias.offset_table`)."""

    def begin(self, base: PreTrainedModel, args: tuple) -> None:
        if torch.compiler.is_compiling():
            return
        kernels = tisa_bias_module(base)
        checkpointing = base.training and torch.is_grad_enabled() and activation_checkpointing(base)
        if kernels is not None and not checkpointing:
            kernels.begin_forward()

    def end(self, base: PreTrainedModel, args: tuple, output) -> None:
        if torch.compiler.is_compiling():
            return
        kernels = tisa_bias_module(base)
        if kernels is not None:
            kernels.end_forward()


def activation_checkpointing(model: nn.Module) -> bool:
    """Whether any layer of `model` recomputes its activations, read from the flag every transformers 5.x sets on
    its layers (the property that reads it changed name in 5.23: `is_gradient_checkpointing`, then
    `is_activation_checkpointing`)."""
    return any(getattr(module, "gradient_checkpointing", False) for module in model.modules())


def attach_tisa(base: PreTrainedModel, adapter: EncoderAdapter) -> None:
    """Structural patch of a base encoder by its config's TISA settings: the kernel module, the attention sites and
    the position mode.

    Initialises nothing: the kernels are zeros (on the meta device while transformers builds a model to load).
    """
    config = tisa_config_of(base)
    adapter.positions.apply_mode(base, adapter, config.mode)
    if config.has_scoring_function:
        num_layers = 1 if config.share_across_layers else adapter.num_tisa_layers(base)
        bias = TisaPositionBias(num_layers, base.config.num_attention_heads, config.num_kernels, config.far_field)
        words = base.get_input_embeddings().weight
        setattr(base, BIAS_ATTRIBUTE, bias.to(device=words.device, dtype=words.dtype))
        scope = OffsetTablesPerForward()
        base.register_forward_pre_hook(scope.begin)
        base.register_forward_hook(scope.end, always_call=True)
    if getattr(base.config, "is_decoder", False):
        base.register_forward_pre_hook(refuse_fixed_size_cache, with_kwargs=True)
    adapter.prepare(base)
    for site in adapter.attention_sites(base):
        # A plain attribute, not a submodule: the site points back at the encoder that owns the kernels.
        object.__setattr__(site.module, SITE_ATTRIBUTE, replace(site, encoder=base))
        site.module.config = SiteConfig(base.config)


def initialize_tisa(base: PreTrainedModel, adapter: EncoderAdapter) -> None:
    """Sets the kernels by the config's `init`: fitted to the model's own positional profiles, zeros or random."""
    bias = tisa_bias_module(base)
    if bias is None:
        return
    config = tisa_config_of(base)
    bias.reset_far_field()
    if config.num_kernels == 0:
        return
    if config.init == "fit":
        # Seconds to a minute on a CPU (README), with nothing else printed meanwhile: said when it starts.
        logger.info("TISA kernels: fitting S = %d to the model's positional profiles", config.num_kernels)
        started = time.perf_counter()
        profiles = extract_positional_profiles(base, length=config.profile_length)
        profile = profiles.toeplitz.profile
        if config.share_across_layers:
            profile = profile.mean(0, keepdim=True)
        fit = fit_kernels(profile, config.num_kernels, window=config.fit_window, restarts=config.fit_restarts)
        with torch.no_grad():
            for name in ("amplitude", "sharpness", "center"):
                getattr(bias, name).copy_(getattr(fit, name))
        check_finite_kernels(base, "fitted to the model's positional profiles (are its weights finite?)")
        logger.info(
            "TISA kernels fitted to the positional profiles in %.1f s: mean fit R² %.3f",
            time.perf_counter() - started,
            fit.r2.mean().item(),
        )
        return
    window = config.fit_window or position_table_length(base, adapter)
    if config.init == "zeros":
        bias.reset_zeros(window)
    else:
        bias.reset_random(window)


def check_finite_kernels(base: PreTrainedModel, where: str) -> None:
    """A ValueError naming every kernel parameter that holds NaN or inf values."""
    bias = tisa_bias_module(base)
    if bias is None:
        return
    bad = [name for name, parameter in bias.named_parameters() if not torch.isfinite(parameter).all()]
    if bad:
        raise ValueError(
            f"The TISA kernels {', '.join(f'{BIAS_ATTRIBUTE}.{name}' for name in bad)} {where} hold NaN or inf "
            "values, which would make every output NaN. Start them afresh with tisa_reinitialize=True, or use "
            "a checkpoint whose kernels are finite."
        )


def position_table_length(base: PreTrainedModel, adapter: EncoderAdapter) -> int:
    """Positions the pretrained encoder was built for: its table's rows for real tokens, or its rotary range."""
    return adapter.positions.trained_length(base, adapter)


def model_table_length(model: nn.Module) -> int:
    """`position_table_length` of `model` (any model with a supported encoder inside)."""
    return position_table_length(*find_base_model(model))


def reading_range(model: nn.Module) -> tuple[int, str]:
    """`model_table_length` of `model` and what holds those positions ("position table" or "rotary range"), for the
    tools' limits and their messages."""
    base, adapter = find_base_model(model)
    return position_table_length(base, adapter), adapter.positions.describes


def model_position_scheme(model: nn.Module) -> PositionScheme:
    """How the encoder inside `model` knows position (a table or rotary embeddings), for the tools' messages."""
    return find_base_model(model)[1].positions


def config_position_scheme(config: PreTrainedConfig) -> PositionScheme:
    """`model_position_scheme` of the architecture `config` describes; a ValueError for one TISA does not support."""
    return adapter_for(config.model_type).positions


def config_table_length(config: PreTrainedConfig) -> int:
    """`position_table_length` of the architecture `config` describes (RoBERTa's table starts after padding_idx),
    read from the architecture built on the meta device, where the adapter knows it: no weights load. A ValueError
    for an architecture TISA does not support."""
    with torch.device("meta"):
        return model_table_length(AutoModel.from_config(plain_model_config(config)))


def tisa_config_of(model: nn.Module) -> TisaConfig | None:
    """The TISA settings of a TISA model (or of its encoder), from its config; None for any other model (the `tisa`
    dict of a tisa-hf 0.1 config asks for a conversion, it does not describe the model)."""
    config = getattr(model, "config", None)
    return config.tisa if isinstance(config, TisaConfigMixin) else None
