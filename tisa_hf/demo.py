"""`tisa-hf demo`: the whole TISA workflow offline on the packaged MiniLM.

Loads the pretrained encoder with the TISA flag (fitting the kernels to its positional profiles), plots the
fitted scoring functions next to the profiles F̂_P, saves the model, reloads it and checks the logits agree.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import matplotlib
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from .config import TisaConfig
from .counting import count_positional_parameters
from .fitting import scoring_function_r2
from .packaged import MINILM_ALIAS, resolve_model
from .profiles import extract_positional_profiles

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the non-interactive backend)

SENTENCES = [
    "The cat sat on the mat because it was warm.",
    "Translation-invariant self-attention scores positions by their distance alone.",
]


def plot_profiles_and_kernels(model, path: Path, window: int) -> float:
    """Grid of every layer and head: the Toeplitz profile of F̂_P and the fitted f(k), both shifted to mean 0.

    Returns the mean fit R² over heads.
    """
    profiles = extract_positional_profiles(model)
    length = profiles.length
    offsets = torch.arange(-window, window + 1)
    profile = profiles.toeplitz.profile[..., length - 1 - window : length + window].float()
    fitted = model.base_model.tisa.scoring_function(offsets.float()).detach()
    layers, heads = profile.shape[:2]
    figure, axes = plt.subplots(layers, heads, figsize=(1.6 * heads, 1.3 * layers), sharex=True, squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            axis = axes[layer, head]
            axis.plot(offsets, profile[layer, head] - profile[layer, head].mean(), lw=0.8, label="F̂_P profile")
            axis.plot(offsets, fitted[layer, head] - fitted[layer, head].mean(), lw=0.8, label="TISA f(k)")
            axis.tick_params(labelsize=5)
            if layer == 0:
                axis.set_title(f"head {head + 1}", fontsize=7)
            if head == 0:
                axis.set_ylabel(f"layer {layer + 1}\nlogit", fontsize=7)
            if layer == layers - 1:
                axis.set_xlabel("offset j - i (tokens)", fontsize=6)
    axes[0, 0].legend(fontsize=5)
    figure.suptitle("Positional profiles F̂_P (mean of each diagonal) and fitted TISA scoring functions")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    weights = (length - offsets.abs()).double()
    return scoring_function_r2(profile, fitted, weights).mean().item()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tisa-hf demo", description=__doc__)
    parser.add_argument("--model", default=MINILM_ALIAS, help="Hub id or path (default: the packaged MiniLM)")
    parser.add_argument("--out", default="tisa-demo", help="output folder")
    parser.add_argument("--kernels", type=int, default=5, help="S, kernels per head and layer")
    parser.add_argument("--mode", default="add", choices=["add", "replace"])
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = resolve_model(args.model)
    tisa = TisaConfig(num_kernels=args.kernels, mode=args.mode)

    start = time.perf_counter()
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2, tisa=tisa).eval()
    load_seconds = time.perf_counter() - start
    counts = count_positional_parameters(model)
    print(
        f"Loaded {args.model} with TISA {tisa.mode} S={tisa.num_kernels} (profiles extracted and kernels "
        f"fitted) in {load_seconds:.1f} s"
    )
    print(f"Positional parameters: TISA {counts.tisa:,}, position embeddings {counts.position_embeddings:,}")

    figure = out / "tisa_profiles.png"
    mean_r2 = plot_profiles_and_kernels(model, figure, tisa.fit_window)
    print(f"Mean fit R² over heads: {mean_r2:.3f}; plot: {figure}")

    tokenizer = AutoTokenizer.from_pretrained(path)
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
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if difference != 0.0:
        print("The reloaded model differs from the saved one.")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
