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

logger = logging.getLogger(__name__)

# The logger transformers' `log_state_dict_report` writes its table to, and the table's title.
REPORT_LOGGER = "transformers.modeling_utils"
REPORT_TITLE = "LOAD REPORT"


class LoadReportFilter(logging.Filter):
    """Drops transformers' load-report table; `load_under_head` logs what it says instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return REPORT_TITLE not in record.getMessage()


def in_encoder(model: PreTrainedModel, key: str) -> bool:
    """Whether a weight name (the model's, or the checkpoint's) belongs to the encoder `model.base_model`: its
    first component after the base-model prefix names one of the encoder's modules (embeddings, encoder, ...)."""
    first = key.removeprefix(f"{model.base_model_prefix}.").split(".")[0]
    return first in {name for name, _ in model.base_model.named_children()}


def _split(model: PreTrainedModel, keys: Iterable[str]) -> tuple[list[str], list[str]]:
    keys = sorted(keys)
    return [key for key in keys if not in_encoder(model, key)], [key for key in keys if in_encoder(model, key)]


def load_under_head(auto_class: type, path: str, **kwargs: Any) -> PreTrainedModel:
    """`auto_class.from_pretrained(path, **kwargs)`; the new head and the checkpoint's unused heads are logged at
    INFO, missing or unused encoder weights as one warning each."""
    report_logger, report_filter = logging.getLogger(REPORT_LOGGER), LoadReportFilter()
    report_logger.addFilter(report_filter)
    try:
        model, info = auto_class.from_pretrained(path, output_loading_info=True, **kwargs)
    finally:
        report_logger.removeFilter(report_filter)
    name = type(model).__name__
    new_head, new_encoder = _split(model, info["missing_keys"])
    unused_head, unused_encoder = _split(model, info["unexpected_keys"])
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
