"""`tisa-hf glue` / `accelerate launch -m tisa_hf.commands.glue`: fine-tune an encoder, with or without TISA, on a
GLUE task.

Writes to --output-dir: the model and tokenizer (`save_pretrained`, TISA included; the final model, or with
--load_best_model_at_end the best evaluation's), `metrics.json` (settings, seed, versions, every evaluation,
wall time), `predictions.json` (that model's dev logits and labels), `run_config.yaml` (the resolved settings)
and TensorBoard logs; resumable checkpoints live in `checkpoints/` until the run finishes.
"""

from __future__ import annotations

import logging
import time
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
from ..run_folder import PREDICTIONS_FILE
from ..splits import first_examples
from ..task_tables import GlueTask, get_task
from ..trainer import fit, train_dataloader, unwrapped
from .data import check_scorable, load_glue
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


def run(
    model_args: ModelArguments, tisa_args: TisaArguments, args: TrainingArguments, data_args: GlueDataArguments
) -> dict[str, Any]:
    """One fine-tuning run; returns what it writes to metrics.json. Settings, run folder, model source and data are
    all checked before the model is loaded."""
    started = time.perf_counter()
    task = get_task(data_args.task)
    plan = plan_run(model_args, tisa_args, args, data_args)
    raw = load_task_data(task, data_args)
    check_input_lengths(plan, tisa_args, data_args.max_seq_length, len(task.text_columns))

    with started_run(args, plan) as (accelerator, batch_size):
        model, tokenizer = load_model(plan, tisa_args, task)
        with accelerator.main_process_first():  # the other processes then read the cached tokenization
            encoded = tokenize(raw, task, tokenizer, data_args.max_seq_length)
            collate = DataCollatorWithPadding(tokenizer)
            train = train_dataloader(encoded["train"], batch_size, collate, args.seed)
            evaluation = {
                split: DataLoader(encoded[split], batch_size=args.eval_batch_size, collate_fn=collate)
                for split in task.eval_splits
            }
        args, config, steps_per_epoch = resolve_settings(
            accelerator, plan, (model_args, tisa_args, args, data_args), len(train)
        )
        model, optimizer, scheduler, train, evaluation = prepare_training(
            accelerator, model, args, tisa_args.tisa_lr, train, evaluation
        )
        init_trackers(accelerator, "glue", config)
        evaluate = GlueEvaluator(accelerator, model, task, evaluation)
        state = fit(
            accelerator, model, optimizer, scheduler, train, evaluate, args, task.main_score,
            resume_from=plan.resume_from, started=started,
        )  # fmt: skip

        trained = unwrapped(accelerator, model)
        record = run_record(task.name, trained, args, state, accelerator, config, steps_per_epoch)
        predictions = RunPredictions(task.name, state.model_step, evaluate.outputs).to_json()
        finish_run(accelerator, trained, tokenizer, args, record, {PREDICTIONS_FILE: predictions})
    return record


def main(argv: list[str] | None = None) -> int:
    return command_main("tisa-hf glue", GLUE_ARGUMENTS, run, argv)
