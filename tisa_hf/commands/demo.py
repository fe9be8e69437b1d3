"""`tisa-hf demo`: the whole TISA workflow offline on the packaged MiniLM.

Loads the pretrained encoder with the TISA flag (fitting the kernels to its positional profiles), plots the
fitted scoring functions next to the profiles F̂_P, saves the model, reloads it and checks the logits agree.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from ..analysis.plots import FIGURE_DPI, scoring_comparison_figure
from ..analysis.positional_attention import analyze_profiles
from ..analysis.scoring import compare_scoring_to_profiles, fit_profile_length
from ..common.head_loading import load_under_head
from ..common.hub_access import loading_errors, model_remedy, model_source
from ..common.result_files import claim_finished_folder
from ..common.saved_files import check_output_folder
from ..config import TisaConfig
from ..counting import count_positional_parameters
from ..errors import usage_errors
from .demo_options import demo_parser

SUMMARY_FILE = "summary.json"  # written last: a folder holding it holds a finished demo
SENTENCES = [
    "The cat sat on the mat because it was warm.",
    "Translation-invariant self-attention scores positions by their distance alone.",
]


def plot_profiles_and_kernels(model, path: Path) -> float:
    """Saves every head's fitted f(k) over its F̂_P profile; returns the mean fit R² over heads."""
    scoring = compare_scoring_to_profiles(model, analyze_profiles(model, fit_profile_length(model)))
    figure = scoring_comparison_figure(scoring)
    figure.savefig(path, dpi=FIGURE_DPI)
    return scoring.r2.mean().item()


def check_output(out: Path, overwrite: bool) -> None:
    """Before any model loads: `out` can hold the demo, and holds no finished one unless `overwrite` (whose
    summary is then removed, so that an interrupted new demo does not look finished)."""
    check_output_folder(out, "--out")
    claim_finished_folder(out, SUMMARY_FILE, "demo", overwrite)


def main(argv: list[str] | None = None) -> int:
    return run(demo_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    source = model_source(args.model)
    out = Path(args.out)
    with usage_errors():
        tisa = TisaConfig(num_kernels=args.kernels, mode=args.mode)
    check_output(out, args.overwrite)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with loading_errors(args.model, model_remedy()), usage_errors():
        model = load_under_head(
            AutoModelForSequenceClassification,
            source.path,
            num_labels=2,
            tisa=tisa,
            local_files_only=source.local_files_only,
        ).eval()
    load_seconds = time.perf_counter() - start
    counts = count_positional_parameters(model)
    print(
        f"Loaded {args.model} with TISA {tisa.mode} S={tisa.num_kernels} (profiles extracted and kernels "
        f"fitted) in {load_seconds:.1f} s, under a new 2-class head (random: the demo checks that saving keeps "
        "the logits, not what they mean)"
    )
    print(f"Positional parameters: TISA {counts.tisa:,}, position embeddings {counts.position_embeddings:,}")

    figure = out / "tisa_profiles.png"
    mean_r2 = plot_profiles_and_kernels(model, figure)
    print(f"Mean fit R² over heads: {mean_r2:.3f}; plot: {figure}")

    with loading_errors(f"the tokenizer of {args.model}", model_remedy()):
        tokenizer = AutoTokenizer.from_pretrained(source.path, local_files_only=source.local_files_only)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    reloaded = AutoModelForSequenceClassification.from_pretrained(out / "model").eval()
    with torch.no_grad():
        before, after = model(**batch).logits, reloaded(**batch).logits
    difference = (before - after).abs().max().item()
    print(f"Saved to {out / 'model'} and reloaded: max |logit difference| = {difference:.2e}")
    summary = {
        "model": args.model,
        "tisa": tisa.to_dict(),
        "load_and_fit_seconds": load_seconds,
        "positional_parameters": {"tisa": counts.tisa, "position_embeddings": counts.position_embeddings},
        "mean_fit_r2": mean_r2,
        "reload_max_logit_difference": difference,
    }
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    if difference != 0.0:
        print("The reloaded model differs from the saved one.")
        return 1
    return 0
