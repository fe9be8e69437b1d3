"""How closely models agree with the original encoder on a GLUE task's dev sentence pairs, segment by segment.

`tisa-hf lm-eval` measures agreement on single-segment blocks of running text, the kind of input `tisa-hf adapt`
trains on; GLUE pair tasks feed the encoder "[CLS] first [SEP] second [SEP]" with the second segment's token type.
This script measures, on every dev pair of a task: the mean cosine between each model's final hidden states and
the teacher's over the first segment's tokens, over the second segment's tokens, at [CLS] (what the
classification head reads), and over the second sentence encoded alone. With `--paired REF`, each model's
difference to REF comes with a 95% paired bootstrap interval over the dev pairs (the same pairs resampled for both
models, as lm-eval resamples blocks).

    python scripts/segment_agreement.py mrpc runs/adapt-minilm/s5-unadapted runs/adapt-minilm/s5-all \\
        --teacher minilm --paired runs/adapt-minilm/s5-unadapted --out runs/adapt-minilm/segment-agreement-mrpc.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer

import tisa_hf  # noqa: F401  (TISA checkpoints load patched)
from tisa_hf.common.machine import machine, versions
from tisa_hf.common.options import positive_int
from tisa_hf.common.paired import paired_difference
from tisa_hf.finetune.glue.data import load_glue
from tisa_hf.finetune.task_tables import get_task
from tisa_hf.packaged import resolve_model

ROOT = Path(__file__).resolve().parents[1]
MEASURES = ("first segment", "second segment", "[CLS]", "second alone")


@torch.no_grad()
def final_states(name: str, inputs: dict[str, dict[str, torch.Tensor]], batch_size: int) -> dict[str, torch.Tensor]:
    """Per input, (pairs, length, hidden) final hidden states of the model `name` (TISA checkpoints load patched)."""
    model = AutoModel.from_pretrained(resolve_model(name)).eval()
    return {
        kind: torch.cat(
            [
                model(**{key: value[start : start + batch_size] for key, value in encoded.items()}).last_hidden_state
                for start in range(0, len(encoded["input_ids"]), batch_size)
            ]
        ).float()
        for kind, encoded in inputs.items()
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Each model's agreement per measure, the per-pair sums behind it and, with --paired, the differences."""
    task = get_task(args.task)
    if len(task.text_columns) != 2:
        raise ValueError(f"{args.task} is a single-sentence task; this script measures sentence pairs.")
    first_column, second_column = task.text_columns
    dev = load_glue(task, data_dir=str(args.data_dir))["validation"]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.teacher))
    limits = dict(padding=True, truncation=True, max_length=args.max_length, return_tensors="pt")
    inputs = {
        "pairs": dict(tokenizer(list(dev[first_column]), list(dev[second_column]), **limits)),
        "alone": dict(tokenizer(list(dev[second_column]), **limits)),
    }
    real = inputs["pairs"]["attention_mask"].bool()
    cls = torch.zeros_like(real)
    cls[:, 0] = True
    # Each measure: which input it reads and which of its tokens it averages over.
    masks = {
        "first segment": ("pairs", real & (inputs["pairs"]["token_type_ids"] == 0)),
        "second segment": ("pairs", real & (inputs["pairs"]["token_type_ids"] == 1)),
        "[CLS]": ("pairs", cls),
        "second alone": ("alone", inputs["alone"]["attention_mask"].bool()),
    }
    weights = {measure: mask.sum(-1).tolist() for measure, (_, mask) in masks.items()}
    teacher = final_states(args.teacher, inputs, args.batch_size)
    models = {}
    for name in args.models:
        states = final_states(name, inputs, args.batch_size)
        cosines = {kind: F.cosine_similarity(states[kind], teacher[kind], dim=-1) for kind in inputs}
        sums = {  # 6 decimals: the record stays small, the means and intervals do not move
            measure: [round(value, 6) for value in (cosines[kind] * mask).double().sum(-1).tolist()]
            for measure, (kind, mask) in masks.items()
        }
        models[name] = {
            "agreement": {measure: sum(values) / sum(weights[measure]) for measure, values in sums.items()},
            "pair_sums": sums,
        }
    record = {
        "task": args.task,
        "teacher": args.teacher,
        "dev_pairs": len(dev),
        "max_length": args.max_length,
        "pair_weights": weights,
        "models": models,
        "machine": machine(),
        "versions": versions(),
    }
    if args.paired:
        reference = models[args.paired]["pair_sums"]
        record["paired"] = {
            "reference": args.paired,
            "differences": {
                name: {
                    measure: paired_difference(model["pair_sums"][measure], reference[measure], weights[measure])
                    for measure in MEASURES
                }
                for name, model in models.items()
                if name != args.paired
            },
        }
    return record


def render(record: dict[str, Any]) -> str:
    """A markdown table: each model's agreement per measure, and its difference to the reference with intervals."""
    paired = record.get("paired", {"reference": None, "differences": {}})
    lines = [
        f"| model ({record['task']} dev, {record['dev_pairs']} pairs) | " + " | ".join(MEASURES) + " |",
        "|---|" + "---:|" * len(MEASURES),
    ]
    for name, model in record["models"].items():
        cells = []
        for measure in MEASURES:
            cell = f"{model['agreement'][measure]:.3f}"
            difference = paired["differences"].get(name, {}).get(measure)
            if difference is not None:
                cell += f" ({difference['difference']:+.3f} [{difference['low']:+.3f}, {difference['high']:+.3f}])"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    note = f"Mean cosine with {record['teacher']}'s final hidden states"
    if paired["reference"]:
        note += f"; in brackets, the difference to {paired['reference']} with its 95% paired bootstrap interval"
    return "\n".join(lines) + "\n\n" + note + "."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", help="A GLUE sentence-pair task (mrpc, stsb, rte, ...).")
    parser.add_argument("models", nargs="+", help="Models to compare (paths, Hub ids or `minilm`).")
    parser.add_argument("--teacher", default="minilm", help="The original encoder; its tokenizer serves every model.")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "glue", help="GLUE TSV folder.")
    parser.add_argument("--max-length", type=positive_int, default=128, help="Pairs are truncated to this many tokens.")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="Pairs per forward pass.")
    parser.add_argument("--paired", default=None, help="One of the models: the others' differences to it.")
    parser.add_argument("--out", type=Path, default=None, help="Write the record (JSON) here.")
    args = parser.parse_args(argv)
    if args.paired is not None and args.paired not in args.models:
        parser.error(f"--paired {args.paired} is not one of the models")
    try:
        record = measure(args)
    except (ValueError, OSError) as error:
        print(f"segment_agreement: {error}".splitlines()[0], file=sys.stderr)
        return 2
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2))
    print(render(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
