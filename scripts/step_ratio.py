"""TISA's cost in one training step on this machine, to a stated precision, at any commit.

`time` runs training steps (forward, backward, AdamW), or with `--step infer` forward passes without gradients, of a
BERT-base-shaped classifier, stock and with TISA `add` (S = 5), interleaved in alternating order, and appends one JSON
line of each round's milliseconds to `--record`. For BERT it imports only `tisa_hf.patch` and `tisa_hf.TisaConfig`,
so the same script times an older checkout put first on the path (`PYTHONPATH=<checkout> python
scripts/step_ratio.py time ...`), which `tisa-hf bench` (whose options change between commits) cannot; a RoPE
encoder (`--architecture modernbert`, ...) is built at BERT base's size by `tisa-hf bench`'s own config.
`summarize` pools the lines of each label: the median TISA ÷ stock ratio of paired rounds
with a bootstrap interval, each side's median step, and the difference between two labels.

    python scripts/step_ratio.py time --label main --implementation sdpa --rounds 12 --record sdpa.jsonl
    python scripts/step_ratio.py summarize sdpa.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
from scipy.stats import bootstrap

INTERVAL = 0.95


def train_step(
    tisa: bool, implementation: str, batch: int, length: int, dropout: float, architecture: str, step: str
) -> Callable[[], None]:
    import torch
    from transformers import AutoModelForSequenceClassification, BertConfig

    import tisa_hf

    torch.manual_seed(0)
    if architecture == "bert":
        sizes = {"num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 768, "intermediate_size": 3072}
        config = BertConfig(**sizes, attention_probs_dropout_prob=dropout, num_labels=2)
        config.problem_type = "single_label_classification"
        config._attn_implementation = implementation
    else:
        from tisa_hf.performance.cases import rotary_base_config

        config = rotary_base_config(architecture, implementation, dropout, layers=12)
    model = AutoModelForSequenceClassification.from_config(config).train(step == "train")
    if tisa:
        tisa_hf.patch(model, tisa_hf.TisaConfig(num_kernels=5, mode="add", init="random"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    generator = torch.Generator().manual_seed(1)
    inputs = {
        "input_ids": torch.randint(1000, 20000, (batch, length), generator=generator),
        "attention_mask": torch.ones(batch, length, dtype=torch.long),
        "labels": torch.randint(0, 2, (batch,), generator=generator),
    }

    def train() -> None:
        model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    @torch.no_grad()
    def infer() -> None:
        model(**inputs)

    return train if step == "train" else infer


def time_rounds(args: argparse.Namespace) -> None:
    import tisa_hf

    steps = {
        name: train_step(
            name == "tisa", args.implementation, args.batch, args.length, args.dropout, args.architecture, args.step
        )
        for name in ("stock", "tisa")
    }
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for round_index in range(args.warmup + args.rounds):
        for name in steps if round_index % 2 == 0 else reversed(list(steps)):
            start = time.perf_counter()
            steps[name]()
            if round_index >= args.warmup:
                samples[name].append(1000 * (time.perf_counter() - start))
    keys = ("architecture", "step", "implementation", "batch", "length", "dropout", "warmup")
    settings = {key: getattr(args, key) for key in keys}
    line = {"label": args.label, "tisa_hf": tisa_hf.__file__, **settings, "ms": samples}
    with open(args.record, "a") as record:
        record.write(json.dumps(line) + "\n")


def interval(samples: tuple[np.ndarray, ...], statistic: Callable) -> tuple[float, float]:
    result = bootstrap(samples, statistic, confidence_level=INTERVAL, method="percentile", random_state=0)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def describe(label: str, pooled: dict[str, list[float]]) -> str:
    ratio = np.array(pooled["ratio"])
    low, high = interval((ratio,), np.median)
    return (
        f"{label}: {len(ratio)} paired rounds, TISA ÷ stock median {np.median(ratio):.3f} [{INTERVAL:.0%} bootstrap "
        f"{low:.3f}, {high:.3f}], rounds {ratio.min():.3f} to {ratio.max():.3f}; median step: stock "
        f"{statistics.median(pooled['stock']):.0f} ms, TISA {statistics.median(pooled['tisa']):.0f} ms"
    )


def summarize(args: argparse.Namespace) -> None:
    by_label: dict[str, dict[str, list[float]]] = {}
    for path in args.records:
        with open(path) as record:
            for line in record:
                run = json.loads(line)
                pooled = by_label.setdefault(run["label"], {"stock": [], "tisa": [], "ratio": []})
                pooled["stock"] += run["ms"]["stock"]
                pooled["tisa"] += run["ms"]["tisa"]
                pooled["ratio"] += [t / s for t, s in zip(run["ms"]["tisa"], run["ms"]["stock"], strict=True)]
    for label, pooled in by_label.items():
        print(describe(label, pooled))
    if len(by_label) == 2:
        (first, a), (second, b) = by_label.items()
        print(describe("both", {key: a[key] + b[key] for key in a}))
        for quantity, digits in (("ratio", 3), ("tisa", 0), ("stock", 0)):
            samples = (np.array(a[quantity]), np.array(b[quantity]))
            low, high = interval(samples, lambda x, y, axis=-1: np.median(y, axis=axis) - np.median(x, axis=axis))
            difference = np.median(samples[1]) - np.median(samples[0])
            print(
                f"{second} - {first}, median {quantity}: {difference:+.{digits}f} "
                f"[{INTERVAL:.0%} bootstrap {low:+.{digits}f}, {high:+.{digits}f}]"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    timing = commands.add_parser("time", help="time interleaved rounds and append them to --record")
    timing.add_argument("--label", required=True, help="what is timed, such as a commit")
    timing.add_argument(
        "--architecture", choices=("bert", "modernbert", "nomic_bert", "gte", "eurobert"), default="bert"
    )
    timing.add_argument("--step", choices=("train", "infer"), default="train")
    timing.add_argument("--implementation", choices=("sdpa", "eager"), default="sdpa")
    timing.add_argument("--batch", type=int, default=2)
    timing.add_argument("--length", type=int, default=512)
    timing.add_argument("--dropout", type=float, default=0.1, help="attention dropout (BERT's 0.1)")
    timing.add_argument("--warmup", type=int, default=2)
    timing.add_argument("--rounds", type=int, default=12)
    timing.add_argument("--record", required=True, help="JSON Lines file the rounds are appended to")
    summary = commands.add_parser("summarize", help="pool the records of each label")
    summary.add_argument("records", nargs="+")
    args = parser.parse_args(argv)
    time_rounds(args) if args.command == "time" else summarize(args)


if __name__ == "__main__":
    main()
