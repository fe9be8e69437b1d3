"""Memory of one training step on a long document: TISA `replace` against the plain model, on CPU.

For each model (the packaged MiniLM, a BERT-base-shaped random model: 12 layers, hidden 768, 12 heads), one step
of sequence classification (forward with a loss, backward; batch 1, no optimizer) at each length: the plain model
(its position table stretched by linear position interpolation past 512, `tisa_hf.common.long_inputs`) and
TISA `mode="replace"` with S kernels (no position table to stretch). Each measurement runs in a fresh process
(its peak resident set, VmHWM reset after the model is built, with glibc's mmap threshold fixed so that freed
tensors go back to the OS: the method of `tisa-hf bench`); the cases are interleaved over `--repeats` rounds and
the medians printed (the peaks repeat to within 1 MiB). `peak` is the process's whole resident set (Python,
libraries, weights included); `step` is what the step adds to the resident set before it (activations,
gradients, temporaries). Attention dropout is the models' own (0.1), so both variants take PyTorch's unfused
attention in training; `--attention-dropout 0` measures the fused kernels instead.

    nice -n 10 python scripts/longdoc_memory.py --json longdoc_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
MODELS = ("minilm", "bert-base")
VARIANTS = ("plain", "tisa")


def build_model(model_name: str, variant: str, length: int, kernels: int, attention_dropout: float | None):
    """The classifier of one case (weights fixed by seed 0); a plain model's table is stretched to `length` past
    its end."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, BertForSequenceClassification

    import tisa_hf
    from tisa_hf.common.long_inputs import PositionInterpolation
    from tisa_hf.performance.cases import bert_base_config

    torch.manual_seed(0)
    if model_name == "minilm":
        config = AutoConfig.from_pretrained(tisa_hf.minilm_path(), num_labels=2)
        if attention_dropout is not None:
            config.attention_probs_dropout_prob = attention_dropout
        model = AutoModelForSequenceClassification.from_pretrained(tisa_hf.minilm_path(), config=config)
    else:
        default_dropout = bert_base_config("sdpa", 0.1).attention_probs_dropout_prob
        dropout = default_dropout if attention_dropout is None else attention_dropout
        model = BertForSequenceClassification(bert_base_config("sdpa", dropout))
    if variant == "tisa":
        tisa_hf.patch(model, tisa_hf.TisaConfig(num_kernels=kernels, mode="replace", init="random"))
    elif length > model.config.max_position_embeddings:
        PositionInterpolation(model).stretch_to(length)  # a frozen table: the stretched rows are not trained
    return model.train()


def worker(spec: str) -> int:
    """Measures one case and prints {baseline_mib, peak_mib} as a JSON line."""
    import torch

    from tisa_hf.performance.bench import reset_peak_resident_set, resident_mib

    case = json.loads(spec)
    model = build_model(case["model"], case["variant"], case["length"], case["kernels"], case["attention_dropout"])
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1000, 20000, (1, case["length"]), generator=generator)
    labels = torch.tensor([1])
    reset_peak_resident_set()
    baseline = resident_mib("VmRSS")
    model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=labels).loss.backward()
    print(json.dumps({"baseline_mib": baseline, "peak_mib": resident_mib("VmHWM")}))
    return 0


def measure(case: dict) -> dict:
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
        "MALLOC_MMAP_THRESHOLD_": "65536",
    }
    command = [sys.executable, __file__, "--worker", json.dumps(case)]
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=environment)
    if result.returncode != 0:
        raise RuntimeError(f"Measuring {case} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--lengths", nargs="+", type=int, default=[512, 2048])
    parser.add_argument("--kernels", type=int, default=5, help="TISA kernels per head (S).")
    parser.add_argument(
        "--attention-dropout", type=float, default=None, help="Override the models' attention dropout (0.1)."
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", help="Also write every measurement to this file.")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker)

    cases = [
        {"model": model, "variant": variant, "length": length, "kernels": args.kernels,
         "attention_dropout": args.attention_dropout}
        for model in args.models for length in args.lengths for variant in VARIANTS
    ]  # fmt: skip
    samples: dict[int, list[dict]] = {index: [] for index in range(len(cases))}
    for round_index in range(args.repeats):
        order = range(len(cases)) if round_index % 2 == 0 else reversed(range(len(cases)))
        for index in order:
            samples[index].append(measure(cases[index]))
            print(f"round {round_index + 1}: {cases[index]} -> {samples[index][-1]}", file=sys.stderr, flush=True)

    def median(index: int, key: str) -> float:
        if key == "step_mib":
            return statistics.median(s["peak_mib"] - s["baseline_mib"] for s in samples[index])
        return statistics.median(s[key] for s in samples[index])

    print(
        f"One training step (forward + backward), batch 1, CPU, medians of {args.repeats}; MiB. plain: the model "
        f"(position table interpolated past 512); tisa: TISA replace S={args.kernels}; step = peak - resident "
        "set before the step."
    )
    print(f"{'model':<10}{'n':>6}{'plain peak':>12}{'tisa peak':>11}{'ratio':>7}{'plain step':>12}"
          f"{'tisa step':>11}{'ratio':>7}")  # fmt: skip
    for model in args.models:
        for length in args.lengths:
            plain = cases.index({**cases[0], "model": model, "variant": "plain", "length": length})
            tisa = cases.index({**cases[0], "model": model, "variant": "tisa", "length": length})
            plain_peak, tisa_peak = median(plain, "peak_mib"), median(tisa, "peak_mib")
            plain_step, tisa_step = median(plain, "step_mib"), median(tisa, "step_mib")
            print(
                f"{model:<10}{length:>6}{plain_peak:>12.0f}{tisa_peak:>11.0f}{tisa_peak / plain_peak:>7.3f}"
                f"{plain_step:>12.0f}{tisa_step:>11.0f}{tisa_step / plain_step:>7.3f}"
            )
    if args.json:
        records = [{**case, "samples": samples[index]} for index, case in enumerate(cases)]
        machine = {"platform": platform.platform(), "cpus": os.cpu_count()}
        Path(args.json).write_text(json.dumps({"machine": machine, "cases": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
