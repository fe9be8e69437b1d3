"""The names TISA gives its pieces inside transformers' objects (light: importing this module imports nothing)."""

from __future__ import annotations

TISA_MODEL_TYPE_PREFIX = "tisa_hf_"  # model types of TISA checkpoints: tisa_hf_bert, ...
ATTENTION_PREFIX = "tisa_"  # TISA's attention functions: tisa_sdpa, ...
BIAS_ATTRIBUTE = "tisa"  # the kernel module on the encoder (state-dict keys `<encoder>.tisa.*`)
SITE_ATTRIBUTE = "tisa_site"  # on each self-attention module: the TISA layer it serves
LAYER_INDEX_KWARG = "tisa_layer_index"  # passed down by encoders whose attention modules serve several layers


def tisa_model_type(model_type: str) -> str:
    """`bert` -> `tisa_hf_bert`: the model type a TISA checkpoint of that architecture saves."""
    return TISA_MODEL_TYPE_PREFIX + model_type


def base_model_type(model_type: str) -> str:
    """`tisa_hf_bert` -> `bert`; a plain type is returned as it is."""
    return model_type.removeprefix(TISA_MODEL_TYPE_PREFIX)


def tisa_implementation(name: str | None) -> str | None:
    """`sdpa` -> `tisa_sdpa`; TISA's names and None are returned as they are."""
    return name if name is None or name.startswith(ATTENTION_PREFIX) else ATTENTION_PREFIX + name


def plain_implementation(name: str | None) -> str | None:
    """`tisa_sdpa` -> `sdpa`."""
    return name.removeprefix(ATTENTION_PREFIX) if name is not None else None
