"""`tisa-hf demo`: the whole TISA workflow offline on the packaged MiniLM.

Loads the pretrained encoder with the TISA flag (fitting the kernels to its positional profiles), plots the
fitted scoring functions next to the profiles F̂_P (the profiles alone with S = 0, bag of words in replace mode:
nothing to fit), saves the model, reloads it and checks the logits agree.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from ..analysis.plots import FIGURE_DPI, scoring_comparison_figure, toeplitz_profiles_figure
from ..analysis.positional_attention import analyze_profiles
from ..analysis.scoring import compare_scoring_to_profiles, fit_profile_length
from ..common.head_loading import load_under_head
from ..common.hub_access import loading_errors, model_remedy
from ..counting import count_positional_parameters
from ..errors import usage_errors
from .demo_options import SUMMARY_FILE, check_demo, demo_parser

SENTENCES = [
    "The cat sat on the mat because it was warm.",
    "Translation-invariant self-attention scores positions by their distance alone.",
]


def plot_profiles_and_kernels(model, path: Path) -> float | None:
    """Saves every head's fitted f(k) over its F̂_P profile; returns the mean fit R² over heads. A model without
    kernels (S = 0) has its profiles saved alone, and no R² (None)."""
    profiles = analyze_profiles(model, fit_profile_length(model))
    scoring = compare_scoring_to_profiles(model, profiles)
    figure = toeplitz_profiles_figure(profiles) if scoring is None else scoring_comparison_figure(scoring)
    figure.savefig(path, dpi=FIGURE_DPI)
    return None if scoring is None else scoring.r2.mean().item()


def main(argv: list[str] | None = None) -> int:
    return run(demo_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    source, tisa = check_demo(args)
    out = Path(args.out)
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
    fitted = "profiles extracted and kernels fitted" if tisa.num_kernels else "no kernels to fit"
    print(
        f"Loaded {args.model} with TISA {tisa.mode} S={tisa.num_kernels} ({fitted}) in {load_seconds:.1f} s, under "
        "a new 2-class head (random: the demo checks that saving keeps the logits, not what they mean)"
    )
    print(f"Positional parameters: TISA {counts.tisa:,}, position embeddings {counts.position_embeddings:,}")

    figure = out / "tisa_profiles.png"
    mean_r2 = plot_profiles_and_kernels(model, figure)
    if mean_r2 is None:
        print(f"No kernels were fitted (S = 0), so F̂_P is plotted alone: {figure}")
    else:
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
        "kernels_fitted": tisa.num_kernels > 0,
        "positional_parameters": {"tisa": counts.tisa, "position_embeddings": counts.position_embeddings},
        "mean_fit_r2": mean_r2,  # None: no kernels fitted
        "reload_max_logit_difference": difference,
    }
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    if difference != 0.0:
        print("The reloaded model differs from the saved one.")
        return 1
    return 0
