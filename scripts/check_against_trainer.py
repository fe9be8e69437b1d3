"""Fine-tunes the same baseline on a GLUE task twice, with transformers' `Trainer` and with `tisa-hf glue`, and
compares their dev scores and wall times: a check that tisa-hf's training loop trains as well as the reference.

Both sides take the settings of one tisa-hf task config plus overrides (learning rate, batch, steps, warm-up,
weight decay, AdamW epsilon, clipping, seed, max_seq_length), read the data with tisa-hf's GLUE loader and
tokenisation, start from the same head (seeded the same way) and score with tisa-hf's metric function; the
Trainer gets the step and warm-up counts tisa-hf resolved. Both draw the same data order (accelerate's seedable
sampler), so a model without dropout trains to the same weights on both sides; with dropout their random draws
differ, and single seeds differ by seed noise.

    python scripts/check_against_trainer.py                          # MRPC and STS-B, ../shared/glue, seed 1
    python scripts/check_against_trainer.py --task rte --seeds 1 2 3 -- --max-steps 50   # after --: overrides

Runs go to OUTPUT_DIR/{tisa-hf,trainer}/TASK/seed-N, the comparison to OUTPUT_DIR/comparison.json (and is
printed). Finished runs are reused when their settings match, and refused when they do not.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn
from transformers import DataCollatorWithPadding, Trainer, set_seed

import tisa_hf
from tisa_hf.common.machine import versions
from tisa_hf.finetune.arguments import parse_arguments, resolved_config
from tisa_hf.finetune.glue.metrics import glue_metrics
from tisa_hf.finetune.glue.options import GLUE_ARGUMENTS
from tisa_hf.finetune.glue.task import load_model, load_task_data, tokenize
from tisa_hf.finetune.preflight import RunPlan, model_sources
from tisa_hf.finetune.run_folder import RESUME_SAFE_SETTINGS, RunFolder
from tisa_hf.finetune.task_tables import get_task

ROOT = Path(__file__).resolve().parents[1]


def tisa_hf_argv(options: argparse.Namespace, task: str, seed: int, overrides: list[str]) -> list[str]:
    config = Path(options.config_dir, f"{task}.yaml")
    if not config.is_file():
        raise ValueError(f"No task config {config}; --config-dir takes a folder of tisa-hf TASK.yaml files.")
    return [
        "--config", str(config), "--model", options.model, "--data_dir", str(options.data_dir),
        "--seed", str(seed), "--no_tracking", *overrides,
    ]  # fmt: skip


def parse_settings(argv: list[str], output_dir: Path) -> tuple[Any, ...]:
    """tisa-hf's settings for one run, refusing what the Trainer side would train differently."""
    settings = parse_arguments(GLUE_ARGUMENTS, [*argv, "--output_dir", str(output_dir)], prog="check_against_trainer")
    if settings[1].tisa_config() is not None:
        raise ValueError(
            "This check compares the baseline: with TISA, tisa-hf trains the kernels without weight decay (and at "
            "--tisa.lr) while the Trainer would not; leave out the --tisa options."
        )
    return settings


def check_finished(folder: Path, record: dict[str, Any], settings: tuple[Any, ...]) -> None:
    """Refuses a finished run made with other settings than `settings` (it is never overwritten)."""
    wanted, done = resolved_config(*settings), record["config"]
    compared = set(wanted) - set(RESUME_SAFE_SETTINGS) - settings[2].unresolved_step_settings()
    differing = sorted(name for name in compared if wanted[name] != done.get(name))
    if differing:
        raise ValueError(
            f"{folder} holds a finished run with other settings ({', '.join(differing)}); delete it or choose "
            "another --output-dir."
        )


def run_tisa_hf(argv: list[str], folder: Path) -> dict[str, Any]:
    """`tisa-hf glue` in its own process, with the tisa_hf this script imported (resuming the run when it has a
    checkpoint); its metrics.json record."""
    command = [sys.executable, "-m", "tisa_hf.commands.glue", *argv, "--output_dir", str(folder)]
    if RunFolder(folder).latest_checkpoint() is not None:
        command.append("--resume")
    package_root = str(Path(tisa_hf.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    completed = subprocess.run(command, check=False, env=env)
    if completed.returncode != 0:
        raise RuntimeError(f"tisa-hf glue failed (exit status {completed.returncode}): {shlex.join(command)}")
    return json.loads((folder / "metrics.json").read_text())


def run_trainer(
    settings: tuple[Any, ...],
    max_steps: int,
    warmup_steps: int,
    folder: Path,
    wrap_model: Callable[[nn.Module], nn.Module] | None = None,
) -> dict[str, Any]:
    """The same fine-tuning with transformers' Trainer: tisa-hf's data, tokenisation, model loading and metric.
    `wrap_model` replaces the loaded model by another built from it (another pooling of the same weights)."""
    model_args, tisa_args, args, data_args = settings
    started = time.perf_counter()
    task = get_task(data_args.task)
    set_seed(args.seed)  # as tisa-hf does before loading the model: the new head starts from the same weights
    raw = load_task_data(task, data_args)
    model, tokenizer = load_model(RunPlan(None, *model_sources(model_args)), tisa_args, task)
    if wrap_model is not None:
        model = wrap_model(model)
    encoded = tokenize(raw, task, tokenizer, data_args.max_seq_length)
    trainer_args = transformers.TrainingArguments(
        output_dir=str(folder),
        seed=args.seed,
        learning_rate=args.learning_rate,
        per_device_train_batch_size=args.train_batch_size // args.gradient_accumulation_steps,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        per_device_eval_batch_size=args.eval_batch_size,
        max_steps=max_steps,
        warmup_steps=warmup_steps,
        lr_scheduler_type="linear",
        optim="adamw_torch",
        weight_decay=args.weight_decay,
        adam_epsilon=args.adam_epsilon,
        max_grad_norm=args.max_grad_norm,
        bf16=args.mixed_precision == "bf16",
        fp16=args.mixed_precision == "fp16",
        logging_steps=args.logging_steps,
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        dataloader_pin_memory=torch.cuda.is_available(),  # pinning only serves copies to a GPU (torch warns on CPU)
    )
    trainer = Trainer(
        model=model,
        args=trainer_args,
        train_dataset=encoded["train"],
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
    )
    trainer.train()
    metrics = {}
    for split in task.eval_splits:
        output = trainer.predict(encoded[split])
        metrics[split] = glue_metrics(task.name, output.predictions, output.label_ids)
    return {
        "config": resolved_config(*settings),
        "metrics": metrics,
        "steps": trainer.state.global_step,
        "wall_time_s": time.perf_counter() - started,
    }


def compare(options: argparse.Namespace, overrides: list[str]) -> list[dict[str, Any]]:
    """Every (task, seed): both runs, after checking all settings and data sources before any training."""
    if torch.cuda.device_count() > 1:
        raise ValueError(
            "Several GPUs are visible: the Trainer would spread each batch over them and tisa-hf would use one; "
            "make one visible (CUDA_VISIBLE_DEVICES=0)."
        )
    plan = []
    for task in options.task:
        for seed in options.seeds:
            folders = {side: Path(options.output_dir, side, task, f"seed-{seed}") for side in ("tisa-hf", "trainer")}
            argv = tisa_hf_argv(options, task, seed, overrides)
            settings = parse_settings(argv, folders["tisa-hf"])
            for folder in folders.values():
                if (folder / "metrics.json").is_file():
                    check_finished(folder, json.loads((folder / "metrics.json").read_text()), settings)
            plan.append((task, seed, argv, settings, folders))
    for task in options.task:
        data_args = next(settings[3] for planned_task, _, _, settings, _ in plan if planned_task == task)
        load_task_data(get_task(task), data_args)  # the TSV files exist and parse

    results = []
    for task, seed, argv, settings, folders in plan:
        finished = folders["tisa-hf"] / "metrics.json"
        tisa_hf = json.loads(finished.read_text()) if finished.is_file() else run_tisa_hf(argv, folders["tisa-hf"])
        resolved = tisa_hf["config"]
        finished = folders["trainer"] / "metrics.json"
        if finished.is_file():
            trainer = json.loads(finished.read_text())
        else:
            trainer = run_trainer(settings, resolved["max_steps"], resolved["warmup_steps"], folders["trainer"])
            finished.parent.mkdir(parents=True, exist_ok=True)
            finished.write_text(json.dumps(trainer, indent=2))
        main_metric = get_task(task).main_metric
        results.append(
            {
                "task": task,
                "seed": seed,
                "main_metric": main_metric,
                "settings": resolved,
                "tisa_hf": {
                    "metrics": tisa_hf["metrics"],
                    "steps": tisa_hf["steps"],
                    "wall_time_s": tisa_hf["wall_time_s"],
                    "output_dir": str(folders["tisa-hf"]),
                },
                "trainer": {
                    "metrics": trainer["metrics"],
                    "steps": trainer["steps"],
                    "wall_time_s": trainer["wall_time_s"],
                    "output_dir": str(folders["trainer"]),
                },
            }
        )
    return results


def render(results: list[dict[str, Any]]) -> str:
    lines = [
        "| task | seed | metric | tisa-hf | Trainer | tisa-hf s | Trainer s |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        split = get_task(result["task"]).eval_splits[0]
        scores = [100 * result[side]["metrics"][split][result["main_metric"]] for side in ("tisa_hf", "trainer")]
        times = [result[side]["wall_time_s"] for side in ("tisa_hf", "trainer")]
        lines.append(
            f"| {result['task']} | {result['seed']} | {result['main_metric']} | {scores[0]:.1f} | {scores[1]:.1f} "
            f"| {times[0]:.0f} | {times[1]:.0f} |"
        )
    note = (
        "Dev scores x 100 (the task's main metric; every metric is in comparison.json). Wall times: each run's own "
        "clock, from loading the data to the final evaluation (tisa-hf's also saves the model)."
    )
    return "\n".join(lines) + "\n\n" + note


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """The script's own arguments and the tisa-hf overrides after `--`."""
    if "--" not in argv:
        return argv, []
    return argv[: argv.index("--")], argv[argv.index("--") + 1 :]


def script_parser(description: str, tasks: list[str], seeds: list[int], output_dir: str) -> argparse.ArgumentParser:
    """The options of a script that runs tisa-hf task configs on GLUE tasks and seeds."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--task", nargs="+", default=tasks, help="GLUE task(s).")
    parser.add_argument("--seeds", nargs="+", type=int, default=seeds, help="Seed(s), each run on every side.")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "glue", help="GLUE TSV folder.")
    parser.add_argument("--model", default="minilm", help="Any tisa-hf --model value (default: packaged MiniLM).")
    parser.add_argument(
        "--config-dir", type=Path, default=ROOT / "configs" / "glue-minilm-converged", help="tisa-hf TASK.yaml files."
    )
    parser.add_argument("--output-dir", type=Path, default=Path(output_dir), help="Runs go here.")
    return parser


def write_comparison(options: argparse.Namespace, overrides: list[str], results: list[dict[str, Any]]) -> None:
    """OUTPUT_DIR/comparison.json: the runs' results with the model, data, overrides and library versions."""
    document = {
        "model": options.model,
        "data_dir": str(options.data_dir),
        "overrides": overrides,
        "versions": versions(),
        "runs": results,
    }
    options.output_dir.mkdir(parents=True, exist_ok=True)
    (options.output_dir / "comparison.json").write_text(json.dumps(document, indent=2))


def script_main(
    name: str,
    parser: argparse.ArgumentParser,
    compare: Callable[[argparse.Namespace, list[str]], list[dict[str, Any]]],
    render: Callable[[list[dict[str, Any]]], str],
    argv: list[str] | None,
) -> int:
    """Parse, run the comparison, write comparison.json and print the table; an expected failure is one line."""
    own, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    options = parser.parse_args(own)
    try:
        results = compare(options, overrides)
    except (ValueError, RuntimeError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 2
    write_comparison(options, overrides, results)
    print(render(results))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__.split("\n\n")[0], ["mrpc", "stsb"], [1], "runs/check-against-trainer")
    return script_main("check_against_trainer", parser, compare, render, argv)


if __name__ == "__main__":
    sys.exit(main())
