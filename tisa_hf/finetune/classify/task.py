"""`tisa-hf classify` / `accelerate launch -m tisa_hf.commands.classify`: fine-tune an encoder, with or without TISA, to
classify long documents (the Hyperpartisan folder with its fixed split or one cross-validation fold, or the user's
CSV/JSON files), cut to --max-seq-length tokens by --truncation.

Everything that can refuse the run is checked before the weights load: the run folder, the model source, the data
(read and split here), and whether the model reads --max-seq-length tokens (its config against the TISA the run
gives it; `replace` mode has no limit, and --position-interpolation stretches a plain model's table).

Writes to --output-dir what `tisa-hf glue` writes, with `metrics.json` holding the validation metrics of every
evaluation (the main metric ranks them for --load-best-model-at-end), the test metrics of the saved model, and a
`documents` record (where the documents came from, the classes, what truncation cut per split), and
`predictions.json` holding that model's validation and test logits, labels and document ids.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import AutoConfig, AutoModelForSequenceClassification, DataCollatorWithPadding, PreTrainedModel

from ...adapters import find_base_model
from ...common.checkpoints import check_sequence_length
from ...common.hub_access import loading_errors, model_remedy
from ...common.long_inputs import PositionInterpolation
from ...errors import UsageError
from ..arguments import ModelArguments, TisaArguments, TrainingArguments
from ..predictions import RunPredictions, SplitPredictions
from ..preflight import RunPlan, plan_run
from ..recipe import (
    command_main,
    finish_run,
    init_trackers,
    load_model_and_tokenizer,
    prepare_training,
    resolve_settings,
    run_record,
    started_run,
)
from ..run_folder import DOCUMENTS_KEY, PREDICTIONS_FILE
from ..trainer import fit, train_dataloader, unwrapped
from .data import DocumentData, load_documents
from .labels import LabelVocabulary
from .metrics import document_metrics, main_metric
from .options import CLASSIFY_ARGUMENTS, DocumentDataArguments
from .truncation import TruncationSummary, tokenize_documents

logger = logging.getLogger(__name__)

VALIDATION, TEST = "validation", "test"
# metrics.json's `task`: the SemEval-2019 Hyperpartisan set read from --data-dir, or the user's document files.
HYPERPARTISAN, DOCUMENTS = "hyperpartisan", "documents"


class DocumentEvaluator:
    """Validation metrics at every evaluation (what ranks checkpoints), and `test`, the test metrics of the model
    as it is, for the end of the run; both over all processes (padding duplicates dropped). Keeps the latest
    predictions of each split, with their document ids, for the run's predictions file."""

    def __init__(
        self,
        accelerator: Accelerator,
        model: torch.nn.Module,
        labels: LabelVocabulary,
        dataloaders: dict[str, DataLoader],
        ids: dict[str, list[str]],
    ) -> None:
        self.accelerator, self.model, self.labels, self.dataloaders, self.ids = (
            accelerator, model, labels, dataloaders, ids
        )  # fmt: skip
        self.outputs: dict[str, SplitPredictions] = {}

    def _score(self, split: str) -> dict[str, float]:
        logits, labels = [], []
        for batch in self.dataloaders[split]:
            outputs = self.model(**batch)
            gathered = self.accelerator.gather_for_metrics((outputs.logits, batch["labels"]))
            logits.append(gathered[0].float().cpu().numpy())
            labels.append(gathered[1].cpu().numpy())
        output = SplitPredictions(np.concatenate(logits), np.concatenate(labels), tuple(self.ids[split]))
        self.outputs[split] = output
        return document_metrics(output.logits, output.labels, self.labels)

    def __call__(self) -> dict[str, dict[str, float]]:
        return {VALIDATION: self._score(VALIDATION)}

    def test(self) -> dict[str, float] | None:
        """The test split's metrics (None without a test split), in eval mode without gradients."""
        if TEST not in self.dataloaders:
            return None
        self.model.eval()
        with torch.no_grad():
            return self._score(TEST)


def interpolate_positions(model: PreTrainedModel, length: int) -> None:
    """Stretches `model`'s position table to `length` positions (`PositionInterpolation`), trainable like the
    original table, and records its new size in the config, so that the saved model reloads with it."""
    PositionInterpolation(model).stretch_to(length)
    base, adapter = find_base_model(model)
    table = adapter.position_table(base)
    table.weight.requires_grad_(True)
    model.config.max_position_embeddings = table.num_embeddings


def log_truncation(summaries: dict[str, TruncationSummary], max_length: int) -> None:
    for split, summary in summaries.items():
        logger.info(
            "%s: %d of %d documents cut to %d tokens (the longest has %d).",
            split, summary.truncated, summary.documents, max_length, summary.longest,
        )  # fmt: skip


def check_length(
    plan: RunPlan, model_args: ModelArguments, tisa_args: TisaArguments, data_args: DocumentDataArguments
) -> None:
    """Whether the model reads --max-seq-length tokens, from its config alone (no weights)."""
    tisa = tisa_args.tisa_config()
    with loading_errors(f"the model {plan.model.path}", model_remedy()):
        config = AutoConfig.from_pretrained(plan.model.path, local_files_only=plan.model.local_files_only)
    if not data_args.position_interpolation:
        check_sequence_length(config, data_args.max_seq_length, tisa, model_args.model)
    elif tisa is not None or getattr(config, "tisa", None):
        raise UsageError(
            f"--position-interpolation stretches the position table of a plain model; {model_args.model} "
            f"{'is given TISA by --tisa.*' if tisa is not None else 'is a TISA checkpoint'}. Leave out one of them."
        )


def load_model(
    plan: RunPlan, tisa_args: TisaArguments, data_args: DocumentDataArguments, labels: LabelVocabulary
) -> tuple[PreTrainedModel, Any]:
    """The classifier with the label names in its config, its position table stretched for
    --position-interpolation; and the tokenizer."""
    model, tokenizer = load_model_and_tokenizer(
        AutoModelForSequenceClassification, plan, tisa_args, num_labels=labels.num_labels
    )
    model.config.id2label = labels.id2label()
    model.config.label2id = {name: index for index, name in labels.id2label().items()}
    if data_args.position_interpolation:
        interpolate_positions(model, data_args.max_seq_length)
    return model, tokenizer


def documents_record(data: DocumentData, truncation: dict[str, TruncationSummary]) -> dict[str, Any]:
    """metrics.json's `documents`: where they came from, the classes, what truncation cut per split."""
    return {
        "data": data.description,
        "labels": list(data.labels.names),
        "positive": data.labels.positive,
        "main_metric": main_metric(data.labels),
        "truncation": {split: dataclasses.asdict(summary) for split, summary in truncation.items()},
    }


def run(
    model_args: ModelArguments, tisa_args: TisaArguments, args: TrainingArguments, data_args: DocumentDataArguments
) -> dict[str, Any]:
    """One fine-tuning run; returns what it writes to metrics.json. Settings, run folder, model source, sequence
    length and data are all checked before the model is loaded. The validation split ranks evaluations, the test
    split scores the saved model."""
    started = time.perf_counter()
    name = HYPERPARTISAN if data_args.data_dir else DOCUMENTS
    plan = plan_run(model_args, tisa_args, args, data_args)
    check_length(plan, model_args, tisa_args, data_args)
    data = load_documents(data_args)
    metric = main_metric(data.labels)

    with started_run(args, plan) as (accelerator, batch_size):
        model, tokenizer = load_model(plan, tisa_args, data_args, data.labels)
        with accelerator.main_process_first():  # the other processes then read the cached tokenization
            encoded, truncation = tokenize_documents(data.splits, tokenizer, data_args.truncation_plan())
            log_truncation(truncation, data_args.max_seq_length)
            collate = DataCollatorWithPadding(tokenizer)
            train = train_dataloader(encoded["train"], batch_size, collate, args.seed)
            evaluation = {
                split: DataLoader(encoded[split], batch_size=args.eval_batch_size, collate_fn=collate)
                for split in (VALIDATION, TEST)
                if split in encoded
            }
        args, config, steps_per_epoch = resolve_settings(
            accelerator, plan, (model_args, tisa_args, args, data_args), len(train)
        )
        model, optimizer, scheduler, train, evaluation = prepare_training(
            accelerator, model, args, tisa_args.tisa_lr, train, evaluation
        )
        init_trackers(accelerator, name, config)
        ids = {split: list(data.splits[split]["id"]) for split in evaluation}
        evaluate = DocumentEvaluator(accelerator, model, data.labels, evaluation, ids)
        state = fit(
            accelerator, model, optimizer, scheduler, train, evaluate, args,
            lambda metrics: metrics[VALIDATION][metric],  # the validation split's main metric ranks evaluations
            resume_from=plan.resume_from, started=started,
        )  # fmt: skip

        trained = unwrapped(accelerator, model)
        record = run_record(name, trained, args, state, accelerator, config, steps_per_epoch)
        test = evaluate.test()
        if test is not None:  # a copy: `record["metrics"]` is the history's last evaluation when that is the model's
            record["metrics"] = {**record["metrics"], TEST: test}
        record[DOCUMENTS_KEY] = documents_record(data, truncation)
        predictions = RunPredictions(name, state.model_step, evaluate.outputs).to_json()
        finish_run(accelerator, trained, tokenizer, args, record, {PREDICTIONS_FILE: predictions})
    return record


def main(argv: list[str] | None = None) -> int:
    return command_main("tisa-hf classify", CLASSIFY_ARGUMENTS, run, argv)
