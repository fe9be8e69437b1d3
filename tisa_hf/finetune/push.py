"""`tisa-hf push` and `--push-to-hub`: a run folder's model card, and the upload of its model to the Hugging Face
Hub. The card's sections are those of a sentence-transformers folder's card (`common/model_cards.py`).

What can be checked without a network is checked before a run trains (`hub_access.check_push_target`); a failed
upload says that the run is saved and how to retry it, in one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import transformers
from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, errors
from matplotlib.figure import Figure
from transformers import AutoConfig, AutoModel, PreTrainedModel

from ..attaching import model_position_scheme, tisa_config_of
from ..common.checkpoints import reads_any_length
from ..common.hub_access import LOADING_ERRORS, check_push_target, describe_error
from ..common.model_cards import (
    adaptation_section,
    auto_class_name,
    base_model_id,
    card_table,
    model_section,
    sentence_section,
    tisa_section,
    title_section,
    usage_section,
    wall_time,
)
from ..common.saved_files import check_model_folder
from ..common.sentence_models import sentence_reading_length
from ..counting import PositionalParameterCount, count_positional_parameters
from ..errors import UsageError
from ..model_configs import plain_model_config
from .push_options import push_parser
from .run_folder import DOCUMENTS_KEY, METRICS_FILE, RunFolder
from .task_tables import GLUE_HUB_DATASET, SQUAD_DATASETS, TASKS

KERNEL_PLOT = "tisa_scoring_functions.png"
METRICS_KEYS = ("config", "seed", "metrics", "versions", "wall_time_s")

# What a run directory uploads: weights, configs, tokenizer files, the card and its plot; never training state.
UPLOAD_PATTERNS = [
    "*.safetensors",
    "*.json",
    "tokenizer*",
    "vocab.*",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "README.md",
    KERNEL_PLOT,
]
IGNORE_PATTERNS = [
    "checkpoint*",
    "*/checkpoint*",
    "runs/*",
    "*/runs/*",
    "*tfevents*",
    "*optimizer*",
    "*scheduler*",
    "*random_states*",
]

NOT_SCORES = ("total", "thresh")  # SQuAD v2 question counts and null-score thresholds


class UploadError(UsageError):
    """An upload that failed after the run was saved; the message says how to retry."""


def read_run_metrics(run_dir: Path) -> dict[str, Any]:
    """The run's `metrics.json` (`RunFolder.read_record`), checked for the keys a card needs."""
    folder = RunFolder(run_dir)
    record = folder.read_record(required=METRICS_KEYS)
    path = folder.metrics_file
    if "model" not in record["config"]:
        raise UsageError(f'{path}: "config" lacks "model".')
    if "task" not in record and "task" not in record["config"]:
        raise UsageError(f'{path} names no task: it needs "task" at the top or in "config".')
    return record


def check_run_folder(run_dir: Path) -> None:
    """The run folder holds an intact model (`check_model_folder`) and a metrics.json a card can use; checked
    before the upload target, so that a wrong folder is the first thing said."""
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a folder; give a run directory (saved model, tokenizer, {METRICS_FILE}).")
    check_model_folder(run_dir)
    read_run_metrics(run_dir)


def load_run_model(run_dir: Path) -> PreTrainedModel:
    """The saved model, by the architecture its config names (the base encoder if it names none)."""
    config = AutoConfig.from_pretrained(run_dir)
    architecture = (config.architectures or [""])[0]
    return getattr(transformers, auto_class_name(architecture)).from_pretrained(run_dir).eval()


def unpatched_positional_parameters(run_dir: Path) -> PositionalParameterCount:
    """Positional parameters of the same architecture without TISA (built on the meta device: no weights)."""
    config = plain_model_config(AutoConfig.from_pretrained(run_dir))
    with torch.device("meta"):
        return count_positional_parameters(AutoModel.from_config(config))


def plot_scoring_functions(model: PreTrainedModel, path: Path, max_offset: int) -> bool:
    """Plots f(k), k = -max_offset..max_offset, one panel per layer and one line per head; False without kernels."""
    bias = getattr(model.base_model, "tisa", None)
    if bias is None:
        return False
    offsets = torch.arange(-max_offset, max_offset + 1)
    with torch.no_grad():
        values = bias.scoring_function(offsets).float().cpu().numpy()
    layers = values.shape[0]
    columns = min(layers, 4)
    rows = -(-layers // columns)
    figure = Figure(figsize=(3.2 * columns, 2.4 * rows))  # drawn by the Agg canvas, no pyplot state
    axes = figure.subplots(rows, columns, squeeze=False, sharex=True)
    for layer, axis in enumerate(axes.flat):
        if layer >= layers:
            axis.set_visible(False)
            continue
        for head in range(values.shape[1]):
            axis.plot(offsets.numpy(), values[layer, head], linewidth=0.9)
        axis.set_title("all layers (shared)" if bias.num_layers == 1 else f"layer {layer}", fontsize=9)
        axis.axvline(0, color="0.8", linewidth=0.5, zorder=0)
    for axis in axes[-1]:
        axis.set_xlabel("offset k = j - i")
    for axis in axes[:, 0]:
        axis.set_ylabel("f(k)")
    figure.suptitle("TISA scoring functions, one line per head")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return True


def eval_results(task: str, metrics: dict[str, Any]) -> tuple[str, list[EvalResult]]:
    """The dataset id and the `model-index` entries of a task's dev metrics (numbers only)."""
    name = task.lower().replace("-", "")
    if name in SQUAD_DATASETS:
        dataset, config, task_type, label = SQUAD_DATASETS[name], None, "question-answering", task
    elif name in TASKS:
        dataset, config, task_type, label = GLUE_HUB_DATASET, name, "text-classification", f"GLUE {task.upper()}"
    else:
        raise UsageError(f"Unknown task {task!r}: a card covers the GLUE tasks ({', '.join(TASKS)}) and squad.")
    results = [
        EvalResult(
            task_type=task_type,
            dataset_type=dataset,
            dataset_name=label,
            dataset_config=config,
            dataset_split=split,
            metric_type=metric,
            metric_value=float(value),
        )
        for split, metric, value in split_scores(metrics)
        if not metric.endswith(NOT_SCORES)
    ]
    return dataset, results


def split_scores(metrics: dict[str, Any]) -> list[tuple[str, str, float]]:
    """(split, metric, value) of every number in a record's metrics: runs record them per split
    (`{"validation": {"accuracy": ...}}`, MNLI's two dev splits); a flat number counts as the validation split's."""
    scores = []
    for name, value in metrics.items():
        if isinstance(value, dict):
            scores += [(name, metric, score) for _, metric, score in split_scores(value)]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            scores.append(("validation", name, value))
    return scores


def document_eval_results(task: str, metrics: dict[str, dict[str, float]]) -> list[EvalResult]:
    """The `model-index` entries of a document-classification run: every metric of every split it scored
    (validation, test); the data is the user's (or Hyperpartisan's own files), so no Hub dataset is named."""
    return [
        EvalResult(
            task_type="text-classification",
            dataset_type=task,
            dataset_name=task,
            dataset_split=split,
            metric_type=metric,
            metric_value=float(value),
        )
        for split, scores in metrics.items()
        for metric, value in scores.items()
    ]


def build_model_card(run_dir: str | Path, repo_id: str | None = None) -> ModelCard:
    """The card of a run directory (saved model and tokenizer plus `metrics.json`); writes the kernel plot there.

    `repo_id` names the model in the card and in its loading example (default: the run directory).
    """
    run_dir = Path(run_dir)
    record = read_run_metrics(run_dir)
    run_config, metrics = record["config"], record["metrics"]
    task = str(record.get("task") or run_config["task"])
    base_id = base_model_id(str(run_config["model"]))
    base_model = base_id or str(run_config["model"])
    adaptation = record.get("adaptation")
    model = load_run_model(run_dir)
    name = repo_id or str(run_dir)
    documents = record.get(DOCUMENTS_KEY)
    if adaptation or documents:
        dataset, results = None, document_eval_results(task, metrics) if documents else []
    else:
        dataset, results = eval_results(task, metrics)
    tisa = tisa_config_of(model)

    card_data = ModelCardData(
        model_name=name,
        base_model=base_id,
        library_name="transformers",
        datasets=[dataset] if dataset else None,
        tags=["tisa", "tisa-hf", "translation-invariant-self-attention", task.lower()],
        eval_results=results or None,
    )

    counts = count_positional_parameters(model)
    unpatched = unpatched_positional_parameters(run_dir)
    purpose = "adapted to" if adaptation else f"fine-tuned on {task} with"
    sections = [title_section(name, f"`{base_model}` {purpose}"), model_section(model, base_model)]
    sections.append(tisa_section(tisa, "None: this run is the unpatched baseline."))
    count_rows = [
        ["this model", counts.tisa, counts.position_embeddings, counts.total],
        ["unpatched base model", unpatched.tisa, unpatched.position_embeddings, unpatched.total],
    ]
    count_note = f"\n\n{model_position_scheme(model).replace_note}" if reads_any_length(tisa) else ""
    sections.append(
        "## Positional parameters\n\n"
        + card_table(["", "TISA kernels", "position embeddings", "total"], count_rows)
        + count_note
    )
    max_offset = (tisa.fit_window if tisa else None) or 64
    if plot_scoring_functions(model, run_dir / KERNEL_PLOT, max_offset):
        sections.append(
            f"## Scoring functions\n\nThe learned f(k) for |k| <= {max_offset}, one panel per layer, one line per "
            f"head:\n\n![TISA scoring functions]({KERNEL_PLOT})"
        )
    if adaptation:
        sections.append(adaptation_section(record))
    elif documents:
        metric_rows = [[result.dataset_split, result.metric_type, f"{result.metric_value:.4f}"] for result in results]
        sections.append(
            f"## Evaluation\n\nTask: {task}, classes {', '.join(documents['labels'])} (F1 of {documents['positive']}); "
            f"data: {documents['data']} (seed {record['seed']}, wall time of training and evaluation "
            f"{wall_time(record)}).\n\n" + card_table(["split", "metric", "value"], metric_rows)
        )
    else:
        metric_rows = [[result.dataset_split, result.metric_type, f"{result.metric_value:.4f}"] for result in results]
        sections.append(
            f"## Evaluation\n\nTask: {task}, dev set (seed {record['seed']}, wall time of training and evaluation "
            f"{wall_time(record)}).\n\n" + card_table(["split", "metric", "value"], metric_rows)
        )
    limit = sentence_reading_length(run_dir)
    if limit is not None:
        sections.append(sentence_section(limit, tisa, model_position_scheme(model).describes))
    sections.append(usage_section(model, name, sentence_model=limit is not None))
    sections.append(
        "## Training configuration\n\n```json\n"
        + json.dumps({"config": run_config, "versions": record["versions"]}, indent=2, sort_keys=True)
        + "\n```"
    )
    return ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")


def _failure_reason(error: BaseException) -> str:
    if isinstance(error, errors.HfHubHTTPError) and error.response.status_code in (401, 403):
        return f"the Hub refused the token ({describe_error(error)}); log in with `hf auth login` or set HF_TOKEN"
    return describe_error(error)


def push_run(run_dir: str | Path, repo_id: str, private: bool = False, token: str | None = None) -> str:
    """Writes the card as `README.md` into the run directory and uploads the model files (no checkpoints or
    logs) to `repo_id`, creating the repository if needed. Returns the commit URL; raises UploadError."""
    run_dir = Path(run_dir)
    build_model_card(run_dir, repo_id=repo_id).save(run_dir / "README.md")
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=run_dir,
            allow_patterns=UPLOAD_PATTERNS,
            ignore_patterns=IGNORE_PATTERNS,
            commit_message="Upload TISA fine-tuned model",
        )
    except LOADING_ERRORS as error:
        raise UploadError(
            f"Uploading {run_dir} to {repo_id} failed: {_failure_reason(error)}. The run is saved in {run_dir}; "
            f"retry with `tisa-hf push {run_dir} {repo_id}`."
        ) from error
    return str(getattr(commit, "commit_url", commit))


def main(argv: list[str]) -> int:
    args = push_parser().parse_args(argv)
    check_run_folder(Path(args.run_dir))
    check_push_target(args.repo_id)
    try:
        url = push_run(Path(args.run_dir), args.repo_id, private=args.private)
    except OSError as error:  # the card's model load: a run folder without a loadable model
        raise UsageError(str(error)) from error
    print(url)
    return 0
