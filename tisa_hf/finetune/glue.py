"""`tisa-hf glue` / `accelerate launch -m tisa_hf.glue`: fine-tune an encoder, with or without TISA, on a GLUE task.

Writes to --output-dir: the final model and tokenizer (`save_pretrained`, TISA included), `metrics.json`
(settings, seed, versions, every evaluation, wall time), `run_config.yaml` (the resolved settings) and
TensorBoard logs; resumable checkpoints live in `checkpoints/` until the run finishes.
"""

from __future__ import annotations

import json
import logging
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import accelerate
import datasets
import numpy as np
import torch
import transformers
import yaml
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

from .. import __version__
from .arguments import (
    GlueDataArguments,
    ModelArguments,
    TisaArguments,
    TrainingArguments,
    parse_arguments,
    resolve_model_path,
    resolved_config,
)
from .glue_data import GlueTask, get_task, load_glue
from .metrics import glue_metrics
from .trainer import CHECKPOINTS_DIR, build_accelerator, build_optimizer, fit, micro_batch_size, train_dataloader

logger = logging.getLogger(__name__)

ARGUMENT_TYPES = (ModelArguments, TisaArguments, TrainingArguments, GlueDataArguments)


def tokenize(
    raw: datasets.DatasetDict, task: GlueTask, tokenizer: Any, max_length: int, accelerator: Accelerator
) -> datasets.DatasetDict:
    """Truncated token ids without padding (batches are padded to their longest example by the collator)."""

    def encode(rows: dict[str, list]) -> dict[str, list]:
        encoded = tokenizer(*(rows[column] for column in task.text_columns), truncation=True, max_length=max_length)
        encoded["labels"] = rows["label"]
        return encoded

    with accelerator.main_process_first():
        return raw.map(encode, batched=True, remove_columns=raw["train"].column_names, desc="tokenizing")


def evaluation_callback(
    accelerator: Accelerator, model: torch.nn.Module, task: GlueTask, dataloaders: dict[str, DataLoader]
):
    """Metrics of every dev split, over all processes' predictions (padding duplicates dropped)."""

    def evaluate() -> dict[str, dict[str, float]]:
        results = {}
        for split, dataloader in dataloaders.items():
            logits, labels = [], []
            for batch in dataloader:
                outputs = model(**batch)
                gathered_logits, gathered_labels = accelerator.gather_for_metrics((outputs.logits, batch["labels"]))
                logits.append(gathered_logits.float().cpu().numpy())
                labels.append(gathered_labels.cpu().numpy())
            results[split] = glue_metrics(task.name, np.concatenate(logits), np.concatenate(labels))
        return results

    return evaluate


def load_model(model_args: ModelArguments, tisa_args: TisaArguments, task: GlueTask):
    path = resolve_model_path(model_args.model)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(model_args.tokenizer or model_args.model))
    extra = {"problem_type": "regression"} if task.is_regression else {}
    tisa = tisa_args.tisa_config()
    if tisa is not None:
        extra["tisa"] = tisa
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=task.num_labels, **extra)
    if task.label_names is not None:
        model.config.id2label = dict(enumerate(task.label_names))
        model.config.label2id = {name: index for index, name in enumerate(task.label_names)}
    return model, tokenizer


def versions() -> dict[str, str]:
    return {
        "tisa_hf": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
        "datasets": datasets.__version__,
    }


def run(
    model_args: ModelArguments, tisa_args: TisaArguments, args: TrainingArguments, data_args: GlueDataArguments
) -> dict[str, Any]:
    """One fine-tuning run; returns what it writes to metrics.json."""
    started = time.perf_counter()
    task = get_task(data_args.task)
    accelerator = build_accelerator(args)
    output_dir = Path(args.output_dir)
    config = resolved_config(model_args, tisa_args, args, data_args)
    batch_size = micro_batch_size(args, accelerator.num_processes)
    if args.eval_batch_size % accelerator.num_processes:
        raise ValueError(
            f"eval_batch_size {args.eval_batch_size} must be a multiple of the {accelerator.num_processes} processes."
        )
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "run_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    set_seed(args.seed)

    raw = load_glue(task, data_args.data_dir, data_args.train_file, data_args.validation_file, data_args.dataset_name)
    for split, limit in (
        ("train", data_args.max_train_samples),
        *((s, data_args.max_eval_samples) for s in task.eval_splits),
    ):
        if limit is not None:
            raw[split] = raw[split].select(range(min(limit, len(raw[split]))))
    model, tokenizer = load_model(model_args, tisa_args, task)
    encoded = tokenize(raw, task, tokenizer, data_args.max_seq_length, accelerator)
    collate = DataCollatorWithPadding(tokenizer)
    train_loader = train_dataloader(encoded["train"], batch_size, collate, args.seed)
    eval_loaders = [
        DataLoader(encoded[split], batch_size=args.eval_batch_size, collate_fn=collate) for split in task.eval_splits
    ]
    optimizer, scheduler = build_optimizer(model, args, tisa_args.tisa_lr)
    model, optimizer, scheduler, train_loader, *eval_loaders = accelerator.prepare(
        model, optimizer, scheduler, train_loader, *eval_loaders
    )
    accelerator.init_trackers(
        "glue", config={key: str(value) if value is None else value for key, value in config.items()}
    )
    evaluate = evaluation_callback(accelerator, model, task, dict(zip(task.eval_splits, eval_loaders, strict=True)))
    state = fit(accelerator, model, optimizer, scheduler, train_loader, evaluate, args)

    result = {
        "task": task.name,
        "model": model_args.model,
        "tisa": tisa_args.tisa_config().to_dict() if tisa_args.tisa_config() else None,
        "seed": args.seed,
        "metrics": state.history[-1]["metrics"],
        "history": state.history,
        "steps": state.step,
        "num_processes": accelerator.num_processes,
        "wall_time_s": time.perf_counter() - started,
        "versions": versions(),
        "config": config,
    }
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.save_pretrained(output_dir)
        tokenizer.save_pretrained(output_dir)
        (output_dir / "metrics.json").write_text(json.dumps(result, indent=2))
        shutil.rmtree(output_dir / CHECKPOINTS_DIR, ignore_errors=True)
        if args.push_to_hub:
            from ..hub import push_run

            push_run(output_dir, args.push_to_hub)
    accelerator.wait_for_everyone()
    accelerator.end_training()  # also ends the process group, so it comes last
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        model_args, tisa_args, args, data_args = parse_arguments(ARGUMENT_TYPES, argv, prog="tisa-hf glue")
        result = run(model_args, tisa_args, args, data_args)
    except ValueError as error:
        print(f"tisa-hf glue: {error}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "output_dir": args.output_dir,
                "metrics": result["metrics"],
                "wall_time_s": round(result["wall_time_s"], 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
