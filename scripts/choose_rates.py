"""The learning rate of each configuration of a document-classification sweep, chosen on one fold's dev split.

A sweep's variants named CONFIGURATION-lr-RATE (configs/sweeps/hyperpartisan-minilm.yaml) are grouped by
CONFIGURATION; of each group's finished runs on --fold (seed: the sweep's first), the one with the best validation
main metric (positive-class F1) wins, ties going to the higher validation accuracy, then to the lower rate. Prints
the chosen variants' names on one line (for `tisa-hf sweep --variants`), or with --folders their run folders (for
`tisa-hf report`), and writes every candidate's scores and the choice to OUTPUT_DIR/chosen_rates.json. A
configuration whose runs on the fold are not all finished is left out (the unfinished runs are named on stderr):
its choice waits for them, while the others go on.

    python scripts/choose_rates.py configs/sweeps/hyperpartisan-minilm.yaml [--fold 0] [--folders]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

from tisa_hf.errors import UsageError
from tisa_hf.finetune.run_folder import RunFolder

VARIANT = re.compile(r"(?P<configuration>.+)-lr-(?P<rate>[0-9.e+-]+)")
CHOICE_FILE = "chosen_rates.json"


def candidates(sweep: dict, fold: int) -> tuple[dict[str, list[dict]], list[str]]:
    """{configuration: [{variant, rate, run_dir, validation}]} of the sweep's rate variants on `fold`, for the
    configurations whose runs there are all finished, and the unfinished runs' folders."""
    seed = sweep["seeds"][0]
    groups: dict[str, list[dict]] = {}
    unfinished: dict[str, list[str]] = {}
    for task in sweep["tasks"]:
        for variant in sweep["variants"]:
            match = VARIANT.fullmatch(variant)
            if match is None:
                raise UsageError(f"Variant {variant} is not named CONFIGURATION-lr-RATE; the choice needs that name.")
            configuration = f"{task}/{match['configuration']}"
            folder = RunFolder(Path(sweep["output_dir"], task, variant, f"fold-{fold}", f"seed-{seed}"))
            if not folder.is_finished():
                unfinished.setdefault(configuration, []).append(str(folder.path))
                continue
            validation = folder.read_record()["metrics"]["validation"]
            run = {"variant": variant, "rate": float(match["rate"]), "run_dir": str(folder.path)}
            groups.setdefault(configuration, []).append({**run, "validation": validation})
    complete = {name: runs for name, runs in groups.items() if name not in unfinished}
    return complete, [folder for folders in unfinished.values() for folder in folders]


def best(runs: list[dict]) -> dict:
    return max(runs, key=lambda run: (run["validation"]["f1"], run["validation"]["accuracy"], -run["rate"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", help="The sweep file (variants named CONFIGURATION-lr-RATE).")
    parser.add_argument("--fold", type=int, default=0, help="The fold whose dev split chooses.")
    parser.add_argument("--folders", action="store_true", help="Print the chosen variants' folders instead.")
    args = parser.parse_args(argv)
    sweep = yaml.safe_load(Path(args.sweep).read_text())
    groups, unfinished = candidates(sweep, args.fold)
    if unfinished:
        waiting = ", ".join(unfinished)
        print(f"choose_rates.py: waiting for unfinished runs of fold {args.fold}: {waiting}", file=sys.stderr)
    if not groups:
        raise UsageError(
            f"No configuration has all its runs of fold {args.fold} finished; run `tisa-hf sweep --config "
            f"{args.sweep} --folds {args.fold}` first."
        )
    chosen = {configuration: best(runs) for configuration, runs in groups.items()}
    record = {"sweep": args.sweep, "fold": args.fold, "candidates": groups, "chosen": chosen}
    Path(sweep["output_dir"], CHOICE_FILE).write_text(json.dumps(record, indent=1))
    if args.folders:
        print(" ".join(str(Path(run["run_dir"]).parent.parent) for run in chosen.values()))
    else:
        print(" ".join(run["variant"] for run in chosen.values()))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as error:
        sys.exit(f"choose_rates.py: {error}")
