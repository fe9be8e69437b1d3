"""`tisa-hf squad` / `accelerate launch -m tisa_hf.squad`: fine-tune an encoder, with or without TISA, on SQuAD v1.1
or v2.0 (`--version_2_with_negative`) and score it with the official EM/F1 (v2: also HasAns/NoAns and the best
no-answer threshold).

Writes to --output-dir what `tisa-hf glue` writes: the model and tokenizer (`save_pretrained`, TISA included;
the final model, or with --load_best_model_at_end the one of the best dev F1), `metrics.json`, `run_config.yaml`
and TensorBoard logs; resumable checkpoints live in `checkpoints/` until the run finishes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader
from transformers import AutoModelForQuestionAnswering, default_data_collator

from ..arguments import ModelArguments, TisaArguments, TrainingArguments
from ..input_lengths import check_input_lengths
from ..preflight import RunPlan, plan_run
from ..recipe import Task, TaskData, command_main, load_model_and_tokenizer, run_task
from ..trainer import train_dataloader
from .data import build_squad_task, check_windows, load_squad_data
from .options import SQUAD_ARGUMENTS, SquadArguments

EVAL_SPLIT = "validation"
MAIN_METRIC = "f1"  # the official scripts' F1 (v2.0: over all questions, at no-answer threshold 0)


def main_score(metrics: dict[str, dict[str, float]]) -> float:
    return metrics[EVAL_SPLIT][MAIN_METRIC]


def task_name(squad_args: SquadArguments) -> str:
    return "squad_v2" if squad_args.version_2_with_negative else "squad"


class SquadEvaluator:
    """SQuAD scores of the dev set from the start/end logits of every feature, gathered from all processes in
    dataset order (padding duplicates dropped)."""

    def __init__(
        self,
        accelerator: Accelerator,
        model: nn.Module,
        dataloader: DataLoader,
        compute_metrics: Callable[[np.ndarray, np.ndarray], dict[str, float]],
    ) -> None:
        self.accelerator, self.model, self.dataloader, self.compute_metrics = (
            accelerator, model, dataloader, compute_metrics
        )  # fmt: skip

    def __call__(self) -> dict[str, dict[str, float]]:
        starts, ends = [], []
        for batch in self.dataloader:
            outputs = self.model(**batch)
            start_logits, end_logits = self.accelerator.gather_for_metrics((outputs.start_logits, outputs.end_logits))
            starts.append(start_logits.float().cpu().numpy())
            ends.append(end_logits.float().cpu().numpy())
        return {EVAL_SPLIT: self.compute_metrics(np.concatenate(starts), np.concatenate(ends))}


class SquadQuestionAnswering(Task):
    """SQuAD v1.1 or v2.0: extractive question answering scored with the official EM/F1."""

    score = staticmethod(main_score)

    def plan(self) -> RunPlan:
        self.name = self.project = task_name(self.task_args)
        plan = plan_run(*self.settings)
        self.raw = load_squad_data(self.task_args)
        check_windows(
            self.task_args, self.raw, check_input_lengths(plan, self.tisa_args, self.task_args.max_seq_length, 2)
        )
        return plan

    def load_model(self, plan: RunPlan, accelerator: Accelerator):
        return load_model_and_tokenizer(AutoModelForQuestionAnswering, plan, self.tisa_args)

    def prepare_data(self, tokenizer: Any, batch_size: int) -> TaskData:
        train_dataset, eval_dataset, _, self.compute_metrics = build_squad_task(self.task_args, self.raw, tokenizer)
        # Features are padded to max_seq_length already, so the default collator only stacks them.
        return TaskData(
            train_dataloader(train_dataset, batch_size, default_data_collator, self.args.seed),
            {
                EVAL_SPLIT: DataLoader(
                    eval_dataset, batch_size=self.args.eval_batch_size, collate_fn=default_data_collator
                )
            },
        )

    def evaluator(self, accelerator: Accelerator, model: nn.Module, loaders: dict[str, DataLoader]) -> SquadEvaluator:
        return SquadEvaluator(accelerator, model, loaders[EVAL_SPLIT], self.compute_metrics)


def run(
    model_args: ModelArguments, tisa_args: TisaArguments, args: TrainingArguments, squad_args: SquadArguments
) -> dict[str, Any]:
    """One fine-tuning run; returns what it writes to metrics.json. Settings, run folder, model source and data are
    all checked before the model is loaded."""
    return run_task(SquadQuestionAnswering(model_args, tisa_args, args, squad_args))


def main(argv: list[str] | None = None) -> int:
    return command_main("tisa-hf squad", SQUAD_ARGUMENTS, run, argv)
