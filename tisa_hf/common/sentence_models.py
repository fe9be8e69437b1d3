"""TISA encoders as sentence-transformers models, and sentence-transformers models given TISA.

A sentence-transformers folder is a transformers checkpoint at its root plus `modules.json` (the pipeline:
Transformer, then Pooling, Normalize, ...), one folder per later module and `sentence_bert_config.json` (the
Transformer's settings). `import tisa_hf` registers the TISA model types, so `SentenceTransformer(folder)` loads a
TISA checkpoint like any other.

The one thing to get right is how many tokens the model reads. sentence-transformers truncates every input to
`max_seq_length`: the folder's `sentence_bert_config.json` value when it has one, otherwise the tokenizer's
`model_max_length` capped at the config's `max_position_embeddings`. A TISA `replace` model keeps a position
table of that size (its rows' mean is all it reads), so without a recorded `max_seq_length` it would be cut at
the table (512 for BERT) without a word. The functions here therefore always record `max_seq_length` in
`sentence_bert_config.json` and as the tokenizer's `model_max_length`; a `replace` model must be told the
length (it has no limit of its own), and an `add` or plain model may not be given more than its table.
`SentenceTransformer.save` does not write `max_seq_length` (sentence-transformers 6), so re-save a `replace`
model with `save_sentence_transformer`, which does.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..attaching import reading_range, tisa_config_of
from ..config import TisaConfig
from ..errors import UsageError
from ..packaged import resolve_model
from ..patching import patch
from .checkpoints import reads_any_length

try:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
except ImportError:  # an optional extra: the error comes when it is used
    SentenceTransformer = Pooling = Transformer = None

MODULES_FILE = "modules.json"
TRANSFORMER_CONFIG_FILE = "sentence_bert_config.json"
MODEL_CONFIG_FILE = "config_sentence_transformers.json"
INSTALL_HINT = 'install it with `pip install "tisa-hf[st]"` (or `pip install sentence-transformers`)'


def require_sentence_transformers() -> None:
    if SentenceTransformer is None:
        raise UsageError(f"This needs sentence-transformers, which is not installed; {INSTALL_HINT}.")


def check_reading_limit(
    table: int, describes: str, tisa: TisaConfig | None, requested: int | None, default: int | None
) -> int:
    """The `max_seq_length` of a model built for `table` positions (its position table or rotary range, as
    `describes` names it) with TISA `tisa` (None: plain): `requested`, checked against what the model reads, or when
    None the `default` capped at `table` (a `replace` model has no default: it reads any length)."""
    if requested is not None and requested < 1:
        raise UsageError(f"max_seq_length must be at least 1 token; got {requested}.")
    if reads_any_length(tisa):
        if requested is None:
            raise UsageError(
                "A TISA replace-mode model reads inputs of any length, so give max_seq_length, the number of tokens "
                f"to read (e.g. max_seq_length=4096); sentence-transformers would otherwise cut every input at the "
                f"{table} positions of its {describes}, which replace mode does not use."
            )
        return requested
    limit = requested if requested is not None else min(default or table, table)
    if limit > table:
        reads = "TISA mode='add' keeps its position embeddings" if tisa else "the model has no TISA"
        raise UsageError(
            f"max_seq_length {limit} is longer than the {describes} ({table} positions) and {reads}; ask for "
            f"at most {table}, or convert with TisaConfig(mode='replace'), which reads any length."
        )
    return limit


def transformer_module(model: SentenceTransformer) -> Transformer:
    """A sentence-transformers model's first module, the Transformer holding its encoder."""
    first = model[0]
    if not isinstance(first, Transformer):
        raise UsageError(
            f"The sentence-transformers model starts with {type(first).__name__}, not a Transformer module, so "
            "there is no encoder to give TISA."
        )
    return first


def _transformer_of(model: SentenceTransformer) -> PreTrainedModel:
    """The transformers model inside a sentence-transformers model's first module."""
    return transformer_module(model).auto_model


def to_tisa_sentence_transformer(
    model_or_path: SentenceTransformer | str,
    tisa: TisaConfig | dict,
    max_seq_length: int | None = None,
    device: str | None = None,
) -> SentenceTransformer:
    """A sentence-transformers model with TISA in its encoder, its pooling and normalisation unchanged.

    `model_or_path` is a SentenceTransformer (patched in place and returned) or a folder, Hub id or `minilm`.
    `max_seq_length` is how many tokens it reads: required in `replace` mode, at most the position table in
    `add` mode (default: the model's own limit). Save it with `save_sentence_transformer`, which records it.
    """
    require_sentence_transformers()
    tisa = TisaConfig.from_value(tisa)
    model = model_or_path
    if not isinstance(model, SentenceTransformer):
        model = SentenceTransformer(resolve_model(model_or_path), device=device)
    encoder = _transformer_of(model)
    if tisa_config_of(encoder) is not None:
        raise UsageError(f"The model already has TISA ({tisa_config_of(encoder)}); give the model it was made from.")
    limit = check_reading_limit(*reading_range(encoder), tisa, max_seq_length, model.max_seq_length)  # before the fit
    patch(encoder, tisa)
    model.max_seq_length = limit
    return model


def save_sentence_transformer(model: SentenceTransformer, folder: str | Path) -> Path:
    """`model.save(folder)`, plus its `max_seq_length` in `sentence_bert_config.json`, which sentence-transformers
    does not write (a `replace` model would reload cut at its position table), and a card of its own in place of
    the base's (`write_card`)."""
    require_sentence_transformers()
    encoder = _transformer_of(model)
    limit = check_reading_limit(*reading_range(encoder), tisa_config_of(encoder), model.max_seq_length, None)
    folder = Path(folder)
    model.save(str(folder))
    record_reading_limit(folder, limit)
    write_card(encoder, folder, None, limit)
    return folder


def write_sentence_transformer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    folder: str | Path,
    base: str | None = None,
    max_seq_length: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Writes `folder` as a sentence-transformers model of `model` (TISA or not) and `tokenizer`.

    `base` is the sentence-transformers model `model` was made from (a folder, Hub-cache path or `minilm`): its
    modules after the Transformer (pooling, normalisation, dense layers) and its settings are copied, so the new
    model embeds as the base does. Without a base (or with a plain transformers folder), mean pooling, as
    sentence-transformers gives any plain model. `max_seq_length`: as in `to_tisa_sentence_transformer`, with
    the base's own limit as the default of an `add` or plain model. A folder that already holds a
    sentence-transformers model is not written over unless `overwrite`.
    """
    require_sentence_transformers()
    folder = Path(folder)
    if (folder / MODULES_FILE).is_file() and not overwrite:
        raise UsageError(f"{folder} already holds a sentence-transformers model; choose another folder or overwrite.")
    base_folder, base_modules = _base_of(base)
    default = _transformer_settings(base_folder, base_modules).get("max_seq_length", tokenizer.model_max_length)
    limit = check_reading_limit(*reading_range(model), tisa_config_of(model), max_seq_length, default)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    reading_tokenizer(tokenizer, limit).save_pretrained(folder)
    write_sentence_transformer_modules(folder, model.config.hidden_size, limit, base)
    write_card(model, folder, base, limit)
    return folder


def reading_tokenizer(tokenizer: PreTrainedTokenizerBase, limit: int) -> PreTrainedTokenizerBase:
    """A copy of `tokenizer` whose `model_max_length` is `limit`, the length the model is saved to read (the
    caller's tokenizer keeps its own)."""
    reading = copy.deepcopy(tokenizer)
    reading.model_max_length = limit
    return reading


def write_sentence_transformer_modules(folder: Path, hidden_size: int, limit: int, base: str | None = None) -> None:
    """The sentence-transformers files beside the transformers checkpoint in `folder`: `modules.json`, the
    modules after the Transformer (the `base`'s, or mean pooling without one) and `sentence_bert_config.json` with
    `max_seq_length` `limit`, which the caller has checked (`check_reading_limit`). A base's own Transformer entry
    is kept (only its path moves to the root), so copying a base's modules needs no sentence-transformers."""
    base_folder, base_modules = _base_of(base)
    settings = _transformer_settings(base_folder, base_modules)
    if base_modules:
        modules = [{**base_modules[0], "path": ""}]
        for entry in base_modules[1:]:
            if (base_folder / entry["path"]).is_dir():
                shutil.copytree(base_folder / entry["path"], folder / entry["path"], dirs_exist_ok=True)
            modules.append(entry)
        if (base_folder / MODEL_CONFIG_FILE).is_file():
            shutil.copyfile(base_folder / MODEL_CONFIG_FILE, folder / MODEL_CONFIG_FILE)
    else:
        require_sentence_transformers()
        (folder / "1_Pooling").mkdir(exist_ok=True)
        Pooling(hidden_size, pooling_mode="mean").save(str(folder / "1_Pooling"))
        modules = [_module_entry(0, "", Transformer), _module_entry(1, "1_Pooling", Pooling)]
    (folder / MODULES_FILE).write_text(json.dumps(modules, indent=2))
    (folder / TRANSFORMER_CONFIG_FILE).write_text(json.dumps({**settings, "max_seq_length": limit}, indent=2))


def write_card(model: PreTrainedModel, folder: Path, base: str | None, limit: int, record: dict | None = None) -> None:
    """`README.md`: the folder's own card (`model_cards.sentence_model_card`), never the base's."""
    from .model_cards import sentence_model_card

    sentence_model_card(model, folder, base, limit, record).save(folder / "README.md")


def sentence_reading_length(folder: Path) -> int | None:
    """The `max_seq_length` of the sentence-transformers model in `folder`; None where it holds none."""
    settings = folder / TRANSFORMER_CONFIG_FILE
    if not (folder / MODULES_FILE).is_file() or not settings.is_file():
        return None
    return json.loads(settings.read_text(encoding="utf-8")).get("max_seq_length")


def is_sentence_transformer(path: str | Path) -> bool:
    """Whether the folder `path` (or `minilm`) holds a sentence-transformers model (its `modules.json`)."""
    return (Path(resolve_model(str(path))) / MODULES_FILE).is_file()


def check_mean_pooling(
    path: str | Path,
    because: str = "--objective embed trains the mean-pooled embedding; adapt it with --objective distill",
) -> None:
    """A UsageError unless the sentence-transformers model at `path` embeds by mean pooling over every token,
    optionally normalised: the embedding `tisa-hf adapt --objective embed` trains (`because`: why it must)."""
    folder = Path(resolve_model(str(path)))
    for entry in (_read_json(folder / MODULES_FILE) or [])[1:]:
        kind = entry["type"].rsplit(".", 1)[-1]
        pooling = (_read_json(folder / entry["path"] / "config.json") or {}) if kind == "Pooling" else {}
        modes = {key for key, value in pooling.items() if key.startswith("pooling_mode_") and value is True}
        mean = pooling.get("pooling_mode", "mean") == "mean" and modes <= {"pooling_mode_mean_tokens"}
        if kind not in ("Pooling", "Normalize") or not mean:
            raise UsageError(
                f"{path} embeds with a {kind} module {entry['path']!r} that is not mean pooling or normalisation, "
                f"and {because}."
            )


def _base_of(base: str | None) -> tuple[Path | None, list | None]:
    """The base's folder and its `modules.json` (None for a plain transformers folder)."""
    if base is None:
        return None, None
    base_folder = Path(resolve_model(base))
    base_modules = _read_json(base_folder / MODULES_FILE)
    if base_modules is None and not (base_folder / "config.json").is_file():
        raise UsageError(f"The base {base} is not a model folder (no modules.json, no config.json).")
    return base_folder, base_modules


def _transformer_settings(base_folder: Path | None, base_modules: list | None) -> dict:
    """The base's Transformer settings (`sentence_bert_config.json`), {} without them."""
    if not base_modules:
        return {}
    return _read_json(base_folder / base_modules[0]["path"] / TRANSFORMER_CONFIG_FILE) or {}


def _module_entry(index: int, path: str, module_class: type) -> dict[str, str | int]:
    return {
        "idx": index,
        "name": str(index),
        "path": path,
        "type": f"{module_class.__module__}.{module_class.__qualname__}",
    }


def _read_json(path: Path) -> dict | list | None:
    return json.loads(path.read_text()) if path.is_file() else None


def record_reading_limit(folder: Path, limit: int) -> None:
    """`limit` as the `max_seq_length` of `sentence_bert_config.json` in `folder`, which sentence-transformers 6
    does not write."""
    settings = _read_json(folder / TRANSFORMER_CONFIG_FILE) or {}
    (folder / TRANSFORMER_CONFIG_FILE).write_text(json.dumps({**settings, "max_seq_length": limit}, indent=2))
