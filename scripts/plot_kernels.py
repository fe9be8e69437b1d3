"""Fine-tuned TISA scoring functions next to the ones they started from.

Reads a fine-tuning run (its metrics.json names the pretrained model and TISA settings), rebuilds the kernels the
run started from (the same TISA config on the same pretrained model: `init="fit"` fits them to its positional
profiles), and plots f(k) per layer and head: dashed at the start, solid after fine-tuning. Prints how far each
layer's functions moved.

    python scripts/plot_kernels.py runs/minilm-glue/mrpc/s5-add/seed-1 --out kernels.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from matplotlib.figure import Figure
from transformers import AutoModel

import tisa_hf
from tisa_hf.attaching import tisa_bias_module
from tisa_hf.finetune.push import load_run_model, read_run_metrics
from tisa_hf.packaged import resolve_model


def scoring_functions(model: torch.nn.Module, offsets: torch.Tensor) -> torch.Tensor:
    """f(k) of every layer and head, (layers, heads, offsets), each shifted to mean zero (softmax ignores it)."""
    bias = tisa_bias_module(model.base_model)
    if bias is None:
        raise ValueError("The model has no TISA kernels (a baseline run, or S = 0).")
    with torch.no_grad():
        values = bias.scoring_function(offsets).double()
    return values - values.mean(-1, keepdim=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="A finished `tisa-hf glue` / `tisa-hf squad` run with TISA.")
    parser.add_argument("--out", type=Path, required=True, help="PNG file to write.")
    parser.add_argument("--max-offset", type=int, default=None, help="Plot |k| up to this (default: fit window).")
    args = parser.parse_args()

    record = read_run_metrics(args.run_dir)
    if not record.get("tisa") or not record["tisa"]["num_kernels"]:
        raise SystemExit(f"{args.run_dir} has no TISA kernels (tisa: {record.get('tisa')}).")
    config = tisa_hf.TisaConfig.from_value(record["tisa"])
    tuned = load_run_model(args.run_dir)
    start = AutoModel.from_pretrained(resolve_model(record["model"]), tisa=config).eval()
    max_offset = args.max_offset or config.fit_window or 64
    offsets = torch.arange(-max_offset, max_offset + 1)
    before, after = scoring_functions(start, offsets), scoring_functions(tuned, offsets)

    layers, heads = after.shape[:2]
    columns = min(layers, 3)
    rows = -(-layers // columns)
    figure = Figure(figsize=(4.2 * columns, 2.8 * rows))  # drawn by the Agg canvas, no pyplot state
    axes = figure.subplots(rows, columns, squeeze=False, sharex=True)
    colors = [f"C{head % 10}" for head in range(heads)]
    for layer, axis in enumerate(axes.flat):
        if layer >= layers:
            axis.set_visible(False)
            continue
        for head in range(heads):
            axis.plot(offsets, before[layer, head], linestyle="--", linewidth=0.7, color=colors[head], alpha=0.7)
            axis.plot(offsets, after[layer, head], linewidth=1.0, color=colors[head])
        axis.set_title(f"layer {layer}", fontsize=9)
        axis.axvline(0, color="0.8", linewidth=0.5, zorder=0)
    for axis in axes[-1]:
        axis.set_xlabel("offset k = j - i")
    for axis in axes[:, 0]:
        axis.set_ylabel("f(k) - mean")
    task = record["task"].upper()
    title = f"TISA S={config.num_kernels} ({config.mode}), {task} seed {record['seed']}"
    figure.suptitle(f"{title}: at the start (dashed) and fine-tuned")
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=110)

    print(f"wrote {args.out}")
    print("layer  spread of f at start  spread after  rms change  change / start's spread (- for a flat start)")
    for layer in range(layers):
        spread_before = before[layer].std().item()
        spread_after = after[layer].std().item()
        change = (after[layer] - before[layer]).square().mean().sqrt().item()
        relative = f"{change / spread_before:8.3f}" if spread_before > 0 else "       -"
        print(f"{layer:5d}  {spread_before:20.3f}  {spread_after:12.3f}  {change:10.3f}  {relative}")


if __name__ == "__main__":
    main()
