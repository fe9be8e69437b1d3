"""Loading a pretrained encoder under a task head, with transformers' load report narrowed to what needs a look.

Fine-tuning puts a new head on an encoder (a classifier, QA outputs, an MLM head to adapt), and the checkpoint
often carries a head of its own (BERT's pre-training heads, or a pooler that a masked-LM model drops).
transformers prints both as a warning table on every run; they are what was asked for, so they are logged at
INFO. Weights of the encoder that the checkpoint lacks (they start from random values) or that the model does
not use (they are lost) remain a warning: they usually mean the wrong checkpoint or class.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from transformers import PreTrainedModel

from .log_filters import dropping_records

logger = logging.getLogger(__name__)


def split_head_and_encoder(model: PreTrainedModel, keys: Iterable[str]) -> tuple[list[str], list[str]]:
    """Weight names (the model's, or the checkpoint's) outside and inside the encoder `model.base_model`: inside
    when the first component after the base-model prefix names one of its modules (embeddings, encoder, ...)."""
    prefix, modules = f"{model.base_model_prefix}.", {name for name, _ in model.base_model.named_children()}
    head, encoder = [], []
    for key in sorted(keys):
        (encoder if key.removeprefix(prefix).split(".")[0] in modules else head).append(key)
    return head, encoder


def load_under_head(auto_class: type, path: str, **kwargs: Any) -> PreTrainedModel:
    """`auto_class.from_pretrained(path, **kwargs)`; the new head and the checkpoint's unused heads are logged at
    INFO, missing or unused encoder weights as one warning each."""
    # transformers' `log_state_dict_report` writes its table to this logger, titled "... LOAD REPORT".
    with dropping_records("transformers.modeling_utils", "LOAD REPORT"):
        model, info = auto_class.from_pretrained(path, output_loading_info=True, **kwargs)
    name = type(model).__name__
    new_head, new_encoder = split_head_and_encoder(model, info["missing_keys"])
    unused_head, unused_encoder = split_head_and_encoder(model, info["unexpected_keys"])
    if new_head:
        logger.info("%s: a new head, trained from scratch (%s).", name, ", ".join(new_head))
    if unused_head:
        logger.info("%s: head weights that %s does not use (%s).", path, name, ", ".join(unused_head))
    if new_encoder:
        logger.warning(
            "%s lacks these weights of %s's encoder, which start from random values: %s. Check that it is the "
            "checkpoint meant for this model.",
            path,
            name,
            ", ".join(new_encoder),
        )
    if unused_encoder:
        logger.warning(
            "%s holds encoder weights that %s does not use: %s. Check that it is the checkpoint meant for this model.",
            path,
            name,
            ", ".join(unused_encoder),
        )
    return model
