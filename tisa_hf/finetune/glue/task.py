"""`tisa-hf glue` / `accelerate launch -m tisa_hf.glue`: fine-tune an encoder, with or without TISA, on a GLUE task.

Writes to --output-dir: the model and tokenizer (`save_pretrained`, TISA included; the final model, or with
--load_best_model_at_end the best evaluation's), `metrics.json` (settings, seed, versions, every evaluation,
wall time), `predictions.json` (that model's dev logits and labels), `run_config.yaml` (the resolved settings)
and TensorBoard logs; resumable checkpoints live in `checkpoints/` until the run finishes.
"""

from __future__ import annotations

import logging
from typing import Any

import datasets
import numpy as np
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding

from ..arguments import ModelArguments, TisaArguments, TrainingArguments
from ..input_lengths import check_input_lengths
from ..predictions import RunPredictions, SplitPredictions
from ..preflight import RunPlan, plan_run
from ..recipe import Task, TaskData, command_main, load_model_and_tokenizer, run_task
from ..run_folder import PREDICTIONS_FILE
from ..splits import first_examples
from ..trainer import TrainerState, train_dataloader
from .data import GlueTask, check_scorable, get_task, load_glue
from .metrics import glue_metrics
from .options import GLUE_ARGUMENTS, GlueDataArguments

logger = logging.getLogger(__name__)


def load_task_data(task: GlueTask, data_args: GlueDataArguments) -> datasets.DatasetDict:
    """The task's train and dev splits from the configured source, cut to --max_train/eval_samples."""
    raw = load_glue(task, data_args.data_dir, data_args.train_file, data_args.validation_file, data_args.dataset_name)
    raw["train"] = first_examples(raw["train"], data_args.max_train_samples, "--max-train-samples")
    for split in task.eval_splits:
        raw[split] = first_examples(raw[split], data_args.max_eval_samples, "--max-eval-samples")
        check_scorable(task, raw[split], f"The {split} split")
    return raw


def tokenize(raw: datasets.DatasetDict, task: GlueTask, tokenizer: Any, max_length: int) -> datasets.DatasetDict:
    """Truncated token ids without padding (batches are padded to their longest example by the collator)."""

    def encode(rows: dict[str, list]) -> dict[str, list]:
        encoded = tokenizer(*(rows[column] for column in task.text_columns), truncation=True, max_length=max_length)
        encoded["labels"] = rows["label"]
        return encoded

    return raw.map(encode, batched=True, remove_columns=raw["train"].column_names, desc="tokenizing")


class GlueEvaluator:
    """Metrics of every dev split over all processes' predictions (padding duplicates dropped); keeps the latest
    call's logits and labels, which become the run's predictions file."""

    def __init__(
        self, accelerator: Accelerator, model: torch.nn.Module, task: GlueTask, dataloaders: dict[str, DataLoader]
    ) -> None:
        self.accelerator, self.model, self.task, self.dataloaders = accelerator, model, task, dataloaders
        self.outputs: dict[str, SplitPredictions] = {}

    def __call__(self) -> dict[str, dict[str, float]]:
        for split, dataloader in self.dataloaders.items():
            logits, labels = [], []
            for batch in dataloader:
                outputs = self.model(**batch)
                gathered = self.accelerator.gather_for_metrics((outputs.logits, batch["labels"]))
                logits.append(gathered[0].float().cpu().numpy())
                labels.append(gathered[1].cpu().numpy())
            self.outputs[split] = SplitPredictions(np.concatenate(logits), np.concatenate(labels))
        return {
            split: glue_metrics(self.task.name, output.logits, output.labels) for split, output in self.outputs.items()
        }


def load_model(plan: RunPlan, tisa_args: TisaArguments, task: GlueTask):
    extra = {"problem_type": "regression"} if task.is_regression else {}
    model, tokenizer = load_model_and_tokenizer(
        AutoModelForSequenceClassification, plan, tisa_args, num_labels=task.num_labels, **extra
    )
    if task.label_names is not None:
        model.config.id2label = dict(enumerate(task.label_names))
        model.config.label2id = {name: index for index, name in enumerate(task.label_names)}
    return model, tokenizer


class GlueClassification(Task):
    """A GLUE task: sentence (pair) classification or, for STS-B, regression; its dev predictions are saved."""

    project = "glue"

    def plan(self) -> RunPlan:
        self.task = get_task(self.task_args.task)
        self.name, self.score = self.task.name, self.task.main_score
        plan = plan_run(*self.settings)
        self.raw = load_task_data(self.task, self.task_args)
        check_input_lengths(plan, self.tisa_args, self.task_args.max_seq_length, len(self.task.text_columns))
        return plan

    def load_model(self, plan: RunPlan, accelerator: Accelerator):
        return load_model(plan, self.tisa_args, self.task)

    def prepare_data(self, tokenizer: Any, batch_size: int) -> TaskData:
        encoded = tokenize(self.raw, self.task, tokenizer, self.task_args.max_seq_length)
        collate = DataCollatorWithPadding(tokenizer)
        return TaskData(
            train_dataloader(encoded["train"], batch_size, collate, self.args.seed),
            {
                split: DataLoader(encoded[split], batch_size=self.args.eval_batch_size, collate_fn=collate)
                for split in self.task.eval_splits
            },
        )

    def evaluator(self, accelerator: Accelerator, model: torch.nn.Module, loaders: dict[str, DataLoader]):
        return GlueEvaluator(accelerator, model, self.task, loaders)

    def documents(self, record: dict[str, Any], model: Any, evaluator: Any, state: TrainerState) -> dict[str, Any]:
        return {PREDICTIONS_FILE: RunPredictions(self.task.name, state.model_step, evaluator.outputs).to_json()}


def run(
    model_args: ModelArguments, tisa_args: TisaArguments, args: TrainingArguments, data_args: GlueDataArguments
) -> dict[str, Any]:
    """One fine-tuning run; returns what it writes to metrics.json. Settings, run folder, model source and data are
    all checked before the model is loaded."""
    return run_task(GlueClassification(model_args, tisa_args, args, data_args))


def main(argv: list[str] | None = None) -> int:
    return command_main("tisa-hf glue", GLUE_ARGUMENTS, run, argv)
