"""Loading an encoder and its tokenizer for analysis, and the model facts a report records."""

from __future__ import annotations

from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..adapters import base_model_type, find_base_model
from ..attaching import position_table_length, tisa_config_of
from ..common.head_loading import load_under_head
from ..common.hub_access import LOADING_ERRORS, describe_error, loading_errors, model_remedy, model_source
from ..errors import UsageError, usage_errors
from ..names import plain_implementation


def load_model(path_or_id: str) -> PreTrainedModel:
    """The base encoder of a local folder or Hub id (a TISA checkpoint comes back patched), with eager
    attention so that attention probabilities can be read. `minilm` names the packaged MiniLM. The head of a
    fine-tuned checkpoint, which the analyses do not use, is left out without a load-report table."""
    source = model_source(path_or_id, option="model")
    with loading_errors(f"a model from {path_or_id!r}", model_remedy("model")), usage_errors():
        model = load_under_head(
            AutoModel, source.path, attn_implementation="eager", local_files_only=source.local_files_only
        )
        _, adapter = find_base_model(model)
    if adapter.positions.analysis_refusal is not None:
        raise UsageError(f"{path_or_id!r} cannot be analysed: {adapter.positions.analysis_refusal}.")
    return model.eval()


def load_tokenizer(path_or_id: str) -> PreTrainedTokenizerBase:
    source = model_source(path_or_id, option="tokenizer", needs_config=False)
    try:
        return AutoTokenizer.from_pretrained(source.path, local_files_only=source.local_files_only)
    except (*LOADING_ERRORS, ValueError) as error:  # ValueError: a model folder without tokenizer files
        raise UsageError(
            f"Could not load a tokenizer from {path_or_id!r} ({describe_error(error)}). The probing and trace "
            "analyses need one: pass --tokenizer PATH_OR_ID."
        ) from error


def use_eager_attention(model: PreTrainedModel) -> None:
    """Switches a model to eager attention, the implementation that returns attention probabilities."""
    if plain_implementation(model.config._attn_implementation) != "eager":
        model.set_attn_implementation("eager")


def model_facts(model: PreTrainedModel, model_id: str) -> dict:
    """Model id, architecture sizes and TISA config, as recorded in metrics.json."""
    base, adapter = find_base_model(model)
    config = tisa_config_of(model)
    return {
        "id": model_id,
        "model_type": base_model_type(model.config.model_type),
        "num_layers": model.config.num_hidden_layers,
        "num_heads": model.config.num_attention_heads,
        "hidden_size": model.config.hidden_size,
        "position_table_length": position_table_length(base, adapter),
        "tisa": config.to_dict() if config is not None else None,
    }
