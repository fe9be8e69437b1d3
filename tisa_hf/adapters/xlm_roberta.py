"""XLM-RoBERTa: RoBERTa's layout and position offset under its own classes."""

from __future__ import annotations

from .roberta import RobertaAdapter


class XLMRobertaAdapter(RobertaAdapter):
    model_type = "xlm-roberta"
    base_model_class_name = "XLMRobertaModel"
