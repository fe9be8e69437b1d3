"""`tisa-hf classify` / `accelerate launch -m tisa_hf.classify`: fine-tune an encoder, with or without TISA, to
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
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import AutoConfig, AutoModelForSequenceClassification, DataCollatorWithPadding, PreTrainedModel

from ...adapters import find_base_model
from ...common.checkpoints import check_sequence_length
from ...common.hub_access import loading_errors, model_remedy
from ...common.interpolation import PositionInterpolation
from ...errors import UsageError
from ..predictions import RunPredictions, SplitPredictions
from ..preflight import RunPlan, plan_run
from ..recipe import Task, TaskData, command_main, load_model_and_tokenizer, run_task
from ..run_folder import DOCUMENTS_KEY, PREDICTIONS_FILE
from ..trainer import TrainerState, train_dataloader
from .data import DocumentData, load_documents
from .labels import LabelVocabulary
from .metrics import document_metrics, main_metric
from .options import CLASSIFY_ARGUMENTS
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


class DocumentClassification(Task):
    """Long-document classification: one label per document, scored by accuracy, macro-F1 and (binary tasks)
    the positive class's F1; the validation split ranks evaluations, the test split scores the saved model."""

    def plan(self) -> RunPlan:
        data_args = self.task_args
        self.name = self.project = HYPERPARTISAN if data_args.data_dir else DOCUMENTS
        plan = plan_run(*self.settings)
        self.check_length(plan)
        self.data: DocumentData = load_documents(data_args)
        metric = main_metric(self.data.labels)
        self.score = lambda metrics: metrics[VALIDATION][metric]
        return plan

    def check_length(self, plan: RunPlan) -> None:
        """Whether the model reads --max-seq-length tokens, from its config alone (no weights)."""
        data_args, tisa = self.task_args, self.tisa_args.tisa_config()
        with loading_errors(f"the model {plan.model.path}", model_remedy()):
            config = AutoConfig.from_pretrained(plan.model.path, local_files_only=plan.model.local_files_only)
        if not data_args.position_interpolation:
            check_sequence_length(config, data_args.max_seq_length, tisa, self.model_args.model)
        elif tisa is not None or getattr(config, "tisa", None):
            raise UsageError(
                f"--position-interpolation stretches the position table of a plain model; {self.model_args.model} "
                f"{'is given TISA by --tisa.*' if tisa is not None else 'is a TISA checkpoint'}. Leave out one of them."
            )

    def load_model(self, plan: RunPlan, accelerator: Accelerator):
        labels = self.data.labels
        model, tokenizer = load_model_and_tokenizer(
            AutoModelForSequenceClassification, plan, self.tisa_args, num_labels=labels.num_labels
        )
        model.config.id2label = labels.id2label()
        model.config.label2id = {name: index for index, name in labels.id2label().items()}
        if self.task_args.position_interpolation:
            interpolate_positions(model, self.task_args.max_seq_length)
        return model, tokenizer

    def prepare_data(self, tokenizer: Any, batch_size: int) -> TaskData:
        encoded, self.truncation = tokenize_documents(self.data.splits, tokenizer, self.task_args.truncation_plan())
        log_truncation(self.truncation, self.task_args.max_seq_length)
        collate = DataCollatorWithPadding(tokenizer)
        return TaskData(
            train_dataloader(encoded["train"], batch_size, collate, self.args.seed),
            {
                split: DataLoader(encoded[split], batch_size=self.args.eval_batch_size, collate_fn=collate)
                for split in (VALIDATION, TEST)
                if split in encoded
            },
        )

    def evaluator(self, accelerator: Accelerator, model: torch.nn.Module, loaders: dict[str, DataLoader]):
        ids = {split: list(self.data.splits[split]["id"]) for split in loaders}
        return DocumentEvaluator(accelerator, model, self.data.labels, loaders, ids)

    def documents(self, record: dict[str, Any], model: Any, evaluator: Any, state: TrainerState) -> dict[str, Any]:
        test = evaluator.test()
        if test is not None:  # a copy: `record["metrics"]` is the history's last evaluation when that is the model's
            record["metrics"] = {**record["metrics"], TEST: test}
        labels = self.data.labels
        record[DOCUMENTS_KEY] = {
            "data": self.data.description,
            "labels": list(labels.names),
            "positive": labels.positive,
            "main_metric": main_metric(labels),
            "truncation": {split: dataclasses.asdict(summary) for split, summary in self.truncation.items()},
        }
        return {PREDICTIONS_FILE: RunPredictions(self.name, state.model_step, evaluator.outputs).to_json()}


def run(*settings: Any) -> dict[str, Any]:
    """One fine-tuning run; returns what it writes to metrics.json. Settings, run folder, model source, sequence
    length and data are all checked before the model is loaded."""
    return run_task(DocumentClassification(*settings))


def main(argv: list[str] | None = None) -> int:
    return command_main("tisa-hf classify", CLASSIFY_ARGUMENTS, run, argv)
