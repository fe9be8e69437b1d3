"""`tisa-hf squad` / `accelerate launch -m tisa_hf.commands.squad`: fine-tune an encoder, with or without TISA, on
SQuAD v1.1 or v2.0 (`--version_2_with_negative`) and score it with the official EM/F1 (v2: also HasAns/NoAns and
the best no-answer threshold).

Writes to --output-dir what `tisa-hf glue` writes: the model and tokenizer (`save_pretrained`, TISA included;
the final model, or with --load_best_model_at_end the one of the best dev F1), `metrics.json`, `run_config.yaml`
and TensorBoard logs; resumable checkpoints live in `checkpoints/` until the run finishes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader
from transformers import AutoModelForQuestionAnswering, default_data_collator

from ..arguments import ModelArguments, TisaArguments, TrainingArguments
from ..input_lengths import check_input_lengths
from ..preflight import plan_run
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
from ..task_tables import squad_task_name
from ..trainer import fit, train_dataloader, unwrapped
from .data import build_squad_task, check_windows, load_squad_data
from .options import SQUAD_ARGUMENTS, SquadArguments

EVAL_SPLIT = "validation"
MAIN_METRIC = "f1"  # the official scripts' F1 (v2.0: over all questions, at no-answer threshold 0)


def main_score(metrics: dict[str, dict[str, float]]) -> float:
    return metrics[EVAL_SPLIT][MAIN_METRIC]


def task_name(squad_args: SquadArguments) -> str:
    return squad_task_name(squad_args.version_2_with_negative)


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


def run(
    model_args: ModelArguments, tisa_args: TisaArguments, args: TrainingArguments, squad_args: SquadArguments
) -> dict[str, Any]:
    """One fine-tuning run; returns what it writes to metrics.json. Settings, run folder, model source and data are
    all checked before the model is loaded."""
    started = time.perf_counter()
    name = task_name(squad_args)
    plan = plan_run(model_args, tisa_args, args, squad_args)
    raw = load_squad_data(squad_args)
    check_windows(squad_args, raw, check_input_lengths(plan, tisa_args, squad_args.max_seq_length, 2))

    with started_run(args, plan) as (accelerator, batch_size):
        model, tokenizer = load_model_and_tokenizer(AutoModelForQuestionAnswering, plan, tisa_args)
        with accelerator.main_process_first():  # the other processes then read the cached tokenization
            train_dataset, eval_dataset, _, compute_metrics = build_squad_task(squad_args, raw, tokenizer)
            # Features are padded to max_seq_length already, so the default collator only stacks them.
            train = train_dataloader(train_dataset, batch_size, default_data_collator, args.seed)
            evaluation = {
                EVAL_SPLIT: DataLoader(eval_dataset, batch_size=args.eval_batch_size, collate_fn=default_data_collator)
            }
        args, config, steps_per_epoch = resolve_settings(
            accelerator, plan, (model_args, tisa_args, args, squad_args), len(train)
        )
        model, optimizer, scheduler, train, evaluation = prepare_training(
            accelerator, model, args, tisa_args.tisa_lr, train, evaluation
        )
        init_trackers(accelerator, name, config)
        evaluate = SquadEvaluator(accelerator, model, evaluation[EVAL_SPLIT], compute_metrics)
        state = fit(
            accelerator, model, optimizer, scheduler, train, evaluate, args, main_score,
            resume_from=plan.resume_from, started=started,
        )  # fmt: skip

        trained = unwrapped(accelerator, model)
        record = run_record(name, trained, args, state, accelerator, config, steps_per_epoch)
        finish_run(accelerator, trained, tokenizer, args, record)
    return record


def main(argv: list[str] | None = None) -> int:
    return command_main("tisa-hf squad", SQUAD_ARGUMENTS, run, argv)
