"""Fine-tunes the baseline on GLUE tasks with two sentence representations and compares their dev scores: BERT's
[CLS] pooler (a dense layer and tanh over the first token, as `BertForSequenceClassification` builds it) and the
mean of the final hidden states over the real tokens, the pooling a sentence-embedding checkpoint such as
all-MiniLM-L6-v2 was trained with (its pooler comes from the original pre-training and was never trained with
the sentence objective).

Both heads share everything else: transformers' `Trainer` with the settings of one tisa-hf task config plus
overrides (as `scripts/check_against_trainer.py` runs it), the same dropout and linear classifier with the same
initial weights, data order and metric. Only what feeds the classifier differs.

    python scripts/check_pooling.py                                   # RTE and MRPC, ../shared/glue, seeds 1-3
    python scripts/check_pooling.py --task stsb --seeds 1 -- --learning-rate 1e-4   # after --: overrides

Runs go to OUTPUT_DIR/{pooler,mean}/TASK/seed-N, the comparison to OUTPUT_DIR/comparison.json (and is printed).
Finished runs are reused when their settings match, and refused when they do not: the pooler runs of
`check_against_trainer.py` (its `trainer` folder) are the same runs and may be linked in.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from check_against_trainer import (
    check_finished,
    parse_settings,
    run_trainer,
    script_main,
    script_parser,
    tisa_hf_argv,
)
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput

from tisa_hf.finetune.glue.task import load_model, load_task_data
from tisa_hf.finetune.preflight import RunPlan, model_sources
from tisa_hf.finetune.task_tables import get_task
from tisa_hf.finetune.trainer import resolve_schedule

HEADS = ("pooler", "mean")


class MeanPooledClassifier(nn.Module):
    """A `*ForSequenceClassification` model's dropout and linear classifier over the mean of the encoder's final
    hidden states at the attended tokens, in place of its [CLS] pooler; the loss is the one the model's
    `problem_type` asks for (mean squared error for regression, cross-entropy otherwise)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        if not isinstance(getattr(model, "classifier", None), nn.Linear) or not hasattr(model, "dropout"):
            raise ValueError(
                f"{type(model).__name__} has no linear `classifier` after a `dropout` over a pooled vector (as BERT "
                "and ALBERT have); mean pooling is built for those."
            )
        self.config = model.config
        self.encoder = model.base_model
        self.dropout = model.dropout
        self.classifier = model.classifier

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> SequenceClassifierOutput:
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            if self.config.problem_type == "regression":
                loss = nn.functional.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))
            else:
                loss = nn.functional.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


def with_schedule(settings: tuple[Any, ...]) -> tuple[Any, ...]:
    """`settings` with the optimizer and warm-up steps `tisa-hf glue` would resolve for them on one process."""
    args, data_args = settings[2], settings[3]
    examples = len(load_task_data(get_task(data_args.task), data_args)["train"])
    micro_batches = math.ceil(examples / (args.train_batch_size // args.gradient_accumulation_steps))
    return (*settings[:2], resolve_schedule(args, micro_batches), *settings[3:])


def compare(options: argparse.Namespace, overrides: list[str]) -> list[dict[str, Any]]:
    """Every (task, seed): both heads, after checking settings, data and the model's head before any training."""
    plan = []
    for task in options.task:
        for seed in options.seeds:
            folders = {head: Path(options.output_dir, head, task, f"seed-{seed}") for head in HEADS}
            settings = parse_settings(tisa_hf_argv(options, task, seed, overrides), folders["pooler"])
            for folder in folders.values():
                if (folder / "metrics.json").is_file():
                    check_finished(folder, json.loads((folder / "metrics.json").read_text()), settings)
            plan.append((task, seed, settings, folders))
    plan = [(task, seed, with_schedule(settings), folders) for task, seed, settings, folders in plan]  # data parses
    first = plan[0][2]
    MeanPooledClassifier(load_model(RunPlan(None, *model_sources(first[0])), first[1], get_task(plan[0][0]))[0])

    results = []
    for task, seed, settings, folders in plan:
        runs = {}
        for head, folder in folders.items():
            finished = folder / "metrics.json"
            if finished.is_file():
                runs[head] = json.loads(finished.read_text())
                continue
            wrap = MeanPooledClassifier if head == "mean" else None
            args = settings[2]
            runs[head] = run_trainer(settings, args.max_steps, args.warmup_steps, folder, wrap_model=wrap)
            finished.parent.mkdir(parents=True, exist_ok=True)
            finished.write_text(json.dumps(runs[head], indent=2))
        results.append(
            {
                "task": task,
                "seed": seed,
                "main_metric": get_task(task).main_metric,
                "settings": runs["pooler"]["config"],
                **{
                    head: {key: runs[head][key] for key in ("metrics", "steps", "wall_time_s")}
                    | {"output_dir": str(folders[head])}
                    for head in HEADS
                },
            }
        )
    return results


def render(results: list[dict[str, Any]]) -> str:
    """Per task: each head's median [min, max] over seeds, and the median of the per-seed differences."""
    lines = [
        "| task | metric | seeds | [CLS] pooler | mean pooling | mean - pooler, per seed |",
        "|---|---|---|---|---|---|",
    ]
    for task in dict.fromkeys(result["task"] for result in results):
        rows = [result for result in results if result["task"] == task]
        split = get_task(task).eval_splits[0]
        scores = {head: [100 * row[head]["metrics"][split][row["main_metric"]] for row in rows] for head in HEADS}
        cells = [f"{statistics.median(score):.1f} [{min(score):.1f}, {max(score):.1f}]" for score in scores.values()]
        differences = ", ".join(f"{mean - pooler:+.1f}" for pooler, mean in zip(*scores.values(), strict=True))
        lines.append(f"| {task} | {rows[0]['main_metric']} | {len(rows)} | {cells[0]} | {cells[1]} | {differences} |")
    return "\n".join(lines) + "\n\nDev scores x 100 (the task's main metric; every metric is in comparison.json)."


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__.split("\n\n")[0], ["rte", "mrpc"], [1, 2, 3], "runs/check-pooling")
    return script_main("check_pooling", parser, compare, render, argv)


if __name__ == "__main__":
    sys.exit(main())
