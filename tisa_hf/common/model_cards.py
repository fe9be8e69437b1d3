"""Model cards: the sections a run's card (`finetune/push.py`) and a sentence-transformers folder's card share, the
whole card of such a folder (`sentence_model_card`), and the provenance an adapted checkpoint's card tells
(`mark_adapted`, `adaptation_of`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData, errors
from huggingface_hub.utils import validate_repo_id
from transformers import PreTrainedModel

from ..attaching import model_position_scheme, tisa_config_of
from ..config import TisaConfig
from ..packaged import MINILM_HUB_ID, is_packaged_minilm
from .checkpoints import reads_any_length
from .machine import describe_machine

# The config.json key of an adapted checkpoint's provenance: in the config, it travels with the weights (to the
# Hub and into every model fine-tuned from them), where a side file would be left behind.
ADAPTED_CONFIG_KEY = "tisa_adapted"


def mark_adapted(model: PreTrainedModel, source: str, objective: str, train: str) -> None:
    """Records in `model`'s config that `tisa-hf adapt` made it from `source` with `objective`, training `train`."""
    setattr(model.config, ADAPTED_CONFIG_KEY, {"from": source, "objective": objective, "train": train})


def adaptation_of(model: PreTrainedModel) -> dict[str, Any] | None:
    """How `tisa-hf adapt` made `model` (the model it started from, objective and what it trained), or None.
    Runs fine-tuned from it record this, so that a report compares them with runs of the model they started
    from."""
    return getattr(model.config, ADAPTED_CONFIG_KEY, None)


def _hub_id(name: str) -> str | None:
    """`name` if it is a Hub model id, else None."""
    try:
        validate_repo_id(name)
    except errors.HFValidationError:
        return None
    return name


def base_model_id(model: str) -> str | None:
    """The Hub id a run's `--model` stands for: the packaged MiniLM's, a Hub id itself, or for a local folder the
    `_name_or_path` of its config.json when that is a Hub id; None when there is none."""
    if is_packaged_minilm(model):
        return MINILM_HUB_ID
    config_file = Path(model, "config.json")
    if config_file.is_file():
        return _hub_id(str(json.loads(config_file.read_text(encoding="utf-8")).get("_name_or_path", "")))
    return None if Path(model).exists() else _hub_id(model)


TRAINED = {"kernels": "the TISA kernels only", "all": "the TISA kernels and all weights", "head": "an MLM head only"}


def adaptation_section(record: dict[str, Any]) -> str:
    """How `tisa-hf adapt` adapted the model (metrics.json's `adaptation`), with the held-out loss per length."""
    adaptation = record["adaptation"]
    if "distill_layers" in adaptation:
        layers = "the last layer's" if adaptation["distill_layers"] == "last" else "every layer's"
        distance = "1 - cosine" if adaptation["distill_loss"] == "cosine" else "the mean squared error"
        tokens = f"{layers} hidden states matched to the teacher's by {distance} per token"
    if adaptation["objective"] == "distill":
        windowed = ""
        if "teacher_table" in adaptation:  # blocks longer than the teacher's table (`adapt/windowed_teacher.py`)
            table, stride = adaptation["teacher_table"], adaptation["teacher_window_stride"]
            windowed = (
                f"; beyond {table} tokens, the teacher's states read in overlapping {table}-token windows {stride} "
                "tokens apart, each token's from the window centred nearest it ([CLS] and [SEP] not compared)"
            )
        objective = f"Distilled from the unpatched `{adaptation['teacher']}`: {tokens}{windowed}."
    elif adaptation["objective"] == "embed":
        table, weight = adaptation["teacher_table"], adaptation["embed_token_weight"]
        added = f", plus {weight} times {tokens} (blocks of at most {table} tokens)" if weight else ""
        if adaptation.get("embed_span_weight"):
            added += (
                f", plus {adaptation['embed_span_weight']} times span retrieval (one span of "
                f"{adaptation['embed_span_tokens']} tokens from each block finds its block among the micro-batch's "
                "by cosine, cross-entropy)"
            )
        objective = (
            f"Distilled from the unpatched `{adaptation['teacher']}`: the mean-pooled embedding of each block "
            f"matched to the teacher's by 1 - cosine (beyond {table} tokens, the mean of the teacher's embeddings "
            f"of {table}-token chunks){added}."
        )
    else:
        objective = f"Masked-LM training, {adaptation['mlm_probability']:.0%} of the tokens masked."
    articles = adaptation["articles"]
    held_out = record["metrics"].get("held_out_loss", {})
    rows = [
        [stage["length"], stage["steps"], stage["blocks"], f"{held_out[str(stage['length'])]:.4f}" if held_out else "-"]
        for stage in adaptation["curriculum"]
    ]
    return (
        f"## Adaptation\n\n{objective} Trained: {TRAINED[adaptation['train']]}, on `{adaptation['text']}` "
        f"({articles['train']} articles; {articles['held_out']} held out), {adaptation['batch_size']} blocks of "
        f"packed text per step, block lengths short to long (seed {record['seed']}, wall time "
        f"{wall_time(record)}).\n\n" + card_table(["block length", "steps", "training blocks", "held-out loss"], rows)
    )


def wall_time(record: dict[str, Any]) -> str:
    """The run's wall time over all its processes, and the machine where the record names it; unknown for a run
    resumed from a checkpoint written before checkpoints recorded it."""
    seconds = record["wall_time_s"]
    text = "unknown" if seconds is None else f"{float(seconds):.0f} s"
    return f"{text} {describe_machine(record['machine'])}" if record.get("machine") else text


def auto_class_name(architecture: str) -> str:
    """`TisaBertForSequenceClassification` -> `AutoModelForSequenceClassification`; a base model -> `AutoModel`."""
    head = architecture.partition("For")[2]
    return f"AutoModelFor{head}" if head else "AutoModel"


def _loading_class(model: PreTrainedModel) -> str:
    return auto_class_name(type(model).__name__)


def card_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


TISA_DESCRIPTION = (
    "translation-invariant self-attention (TISA, Wennberg & Henter 2021): each head of each layer adds `f(j - i)` "
    "to its attention logits, with `f(k) = sum_s a_s exp(-|b_s| (k - c_s)^2)`."
)


def title_section(name: str, what: str) -> str:
    return f"# {name}\n\n{what} {TISA_DESCRIPTION}"


def model_section(model: PreTrainedModel, base_model: str) -> str:
    return (
        f"## Model\n\n- Base model: `{base_model}`\n- Architecture: `{type(model).__name__}` "
        f"({model.config.num_hidden_layers} layers, {model.config.num_attention_heads} heads)"
    )


def tisa_section(tisa: TisaConfig | None, without: str) -> str:
    if tisa is None:
        return f"## TISA settings\n\n{without}"
    settings = card_table(["setting", "value"], [[key, f"`{value}`"] for key, value in tisa.to_dict().items()])
    return f"## TISA settings\n\n{settings}"


def sentence_section(limit: int, tisa: TisaConfig | None, describes: str) -> str:
    """How many tokens the sentence-transformers model reads, and what changes it; `describes` names what holds the
    encoder's positions ("position table" or "rotary range")."""
    if reads_any_length(tisa):
        beyond = "TISA mode `replace` reads inputs of any length: set `model.max_seq_length` to read more."
    else:
        beyond = f"The model keeps its position embeddings, so it reads at most its {describes}'s length."
    return (
        "## Sentence embeddings\n\nThis folder is a sentence-transformers model. It reads the first "
        f"**{limit} tokens** of each input (`max_seq_length` in `sentence_bert_config.json`) and cuts the rest. "
        f"{beyond}"
    )


def usage_section(model: PreTrainedModel, name: str, sentence_model: bool) -> str:
    """How to load the folder: `import tisa_hf` first, which registers the model type; without it transformers
    does not know the type and answers with its 'update Transformers' message."""
    model_type = model.config.model_type
    why = (
        "## Usage\n\nImport `tisa_hf` first (`pip install tisa-hf`): it registers this checkpoint's model type "
        f"(`{model_type}`) with transformers' Auto classes. Without it, transformers does not recognise "
        f"`{model_type}` and suggests updating Transformers; importing `tisa_hf` is the fix.\n\n"
    )
    if sentence_model:
        return why + (
            "```python\nimport tisa_hf  # noqa: F401\nfrom sentence_transformers import SentenceTransformer\n\n"
            f'model = SentenceTransformer("{name}")\nembeddings = model.encode(["A first text.", "A second one."])'
            "\n```"
        )
    return why + (
        f"```python\nimport tisa_hf  # noqa: F401\nfrom transformers import AutoTokenizer, "
        f'{_loading_class(model)}\n\ntokenizer = AutoTokenizer.from_pretrained("{name}")\n'
        f'model = {_loading_class(model)}.from_pretrained("{name}")\n```'
    )


def sentence_model_card(
    model: PreTrainedModel, folder: Path, base: str | None, limit: int, record: dict[str, Any] | None = None
) -> ModelCard:
    """The card of a sentence-transformers folder tisa-hf writes around `model` (its encoder): the base it was made
    from, the TISA settings, how many tokens it reads, how `tisa-hf adapt` made it (`record`, the run's
    metrics.json record, where there is one) and how to load it."""
    tisa, adapted, marked = tisa_config_of(model), (record or {}).get("adaptation"), adaptation_of(model)
    base = base or (marked or {}).get("from") or model.config.name_or_path
    base_id = base_model_id(base) if base else None
    base_name = base_id or base or "an encoder"
    if adapted or marked:
        how = (
            "adapted by `tisa-hf adapt` to"
            if adapted
            else (f"adapted by `tisa-hf adapt` (objective `{marked['objective']}`, trained: {marked['train']}) to")
        )
    else:
        how = f"converted (kernels started by `{tisa.init}`, not trained since) to" if tisa else "without"
    card_data = ModelCardData(
        model_name=str(folder),
        base_model=base_id,
        library_name="sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=["tisa", "tisa-hf", "translation-invariant-self-attention", "sentence-transformers"],
    )
    sections = [title_section(str(folder), f"`{base_name}` {how}"), model_section(model, base_name)]
    sections.append(tisa_section(tisa, "None: the encoder has no TISA."))
    sections.append(sentence_section(limit, tisa, model_position_scheme(model).describes))
    if adapted:
        sections.append(adaptation_section(record))
    sections.append(usage_section(model, str(folder), sentence_model=True))
    return ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")
