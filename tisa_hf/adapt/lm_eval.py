"""`tisa-hf lm-eval`: how encoders read inputs of growing length, measured on held-out text.

Per length n, on the same blocks of n tokens for every model (packed from the whole articles of the text; as
many as --max-tokens allows, at least one, spread evenly over it, so that every length rests on about as many
tokens):
- agreement: the mean cosine between the model's final hidden states and the teacher's, over all tokens, at the
  lengths the teacher reads (n <= its position table);
- masked-token loss: cross-entropy at the masked tokens, with the same masks (one seed) for every model, through
  the model's own MLM head or, with --mlm-head, through that head for every model (`adapt --train head` fits one
  on the original model; distillation matches its final hidden states, so the head fits the adapted model too).
With --paired REF, every other model's difference to REF per measure and length, with a 95% bootstrap interval
over the blocks (the same blocks for both: the per-block sums are kept in the JSON).
A model is a checkpoint (folder, Hub id or `minilm`) or `interp:NAME`, NAME with its position table stretched
by linear position interpolation (the peer baseline beyond the table; tisa_hf/adapt/interpolation.py). A model
that cannot read n tokens (a position table shorter than n) gets null at n. Long inputs fit CPU memory: TISA
`replace` mode attends blockwise at inference, and the other models run sdpa without a mask.

Writes OUT/lm_eval.json (every number, the settings and versions), OUT/lm_eval.md (a table per measure, models
against lengths) and OUT/lm_eval.png (each measure against length, log axis).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import nn
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel

from ..cli_options import lm_eval_parser
from ..environment import machine, versions
from ..errors import UsageError
from ..packaged import resolve_model
from .checkpoints import CheckpointFacts
from .interpolation import INTERPOLATION_PREFIX, PositionInterpolation
from .objectives import IGNORE_INDEX, masked_token_losses, mlm_head_of
from .paired_blocks import paired_to
from .text import block_count, mask_blocks, pack_blocks, read_articles, spread_selection, tokenize_articles

RESULTS_FILE = "lm_eval.json"
PLOT_FILE = "lm_eval.png"
TABLES_FILE = "lm_eval.md"
MEASURES = {"agreement": "agreement with the teacher (mean cosine)", "mlm_loss": "masked-token loss"}
DECIMALS = {"agreement": 3, "mlm_loss": 2}


@dataclass(frozen=True)
class ModelSpec:
    """A compared model: `spec` as given, the checkpoint's facts, and whether its table is interpolated."""

    spec: str
    facts: CheckpointFacts
    interpolated: bool

    @classmethod
    def parse(cls, spec: str) -> ModelSpec:
        interpolated = spec.startswith(INTERPOLATION_PREFIX)
        facts = CheckpointFacts.read(spec.removeprefix(INTERPOLATION_PREFIX))
        if interpolated and facts.tisa is not None:
            raise UsageError(f"{spec}: interpolation stretches a position table; give the unpatched model.")
        return cls(spec, facts, interpolated)

    def reads(self, length: int) -> bool:
        return self.interpolated or self.facts.reads(length)


@dataclass
class LengthData:
    """The blocks of one length, and the same blocks masked (input ids and labels)."""

    blocks: torch.Tensor
    masked: torch.Tensor
    labels: torch.Tensor

    @cached_property
    def block_weights(self) -> dict[str, list[int]]:
        """Per measure, what each block's sum is over: its tokens (agreement), its masked tokens (loss)."""
        blocks, length = self.blocks.shape
        return {"agreement": [length] * blocks, "mlm_loss": (self.labels != IGNORE_INDEX).sum(-1).tolist()}


def load_model(facts: CheckpointFacts, device: torch.device) -> PreTrainedModel:
    """The checkpoint with its MLM head when it has one (a TISA checkpoint comes back patched), in eval mode."""
    auto_class = AutoModelForMaskedLM if facts.has_mlm_head else AutoModel
    return auto_class.from_pretrained(facts.path).to(device).eval()


def _batches(tensor: torch.Tensor, length: int, batch_tokens: int, device: torch.device):
    size = max(1, batch_tokens // length)
    for start in range(0, len(tensor), size):
        yield tensor[start : start + size].to(device)


@torch.no_grad()
def final_hidden_states(
    model: PreTrainedModel, blocks: torch.Tensor, batch_tokens: int, device: torch.device
) -> torch.Tensor:
    """(blocks, length, hidden) final hidden states, float32 on the CPU."""
    length = blocks.shape[1]
    return torch.cat(
        [
            model.base_model(input_ids=batch).last_hidden_state.float().cpu()
            for batch in _batches(blocks, length, batch_tokens, device)
        ]
    )


@torch.no_grad()
def agreement_sums(
    model: PreTrainedModel, blocks: torch.Tensor, teacher_states: torch.Tensor, batch_tokens: int, device: torch.device
) -> list[float]:
    """Per block, the sum over its tokens of cos(model's final hidden state, teacher's)."""
    states = final_hidden_states(model, blocks, batch_tokens, device)
    return F.cosine_similarity(states, teacher_states, dim=-1).double().sum(-1).tolist()


@torch.no_grad()
def masked_loss_sums(
    model: PreTrainedModel, head: nn.Module, data: LengthData, batch_tokens: int, device: torch.device
) -> list[float]:
    """Per block, the sum of the cross-entropy over its masked tokens."""
    length = data.masked.shape[1]
    return [
        value
        for masked, labels in zip(
            _batches(data.masked, length, batch_tokens, device),
            _batches(data.labels, length, batch_tokens, device),
            strict=True,
        )
        for value in masked_token_losses(model.base_model(input_ids=masked).last_hidden_state, head, labels)[0]
        .double()
        .tolist()
    ]


@dataclass
class EvaluationSetup:
    """What every model is measured on and against, checked and built before any model loads."""

    specs: list[ModelSpec]
    teacher: CheckpointFacts | None
    head_source: CheckpointFacts | None
    data: dict[int, LengthData]


def prepare(args: argparse.Namespace) -> EvaluationSetup:
    """Checks every request against the configs, the tokenizer and the text; loads no weights."""
    out = Path(args.out)
    if (out / RESULTS_FILE).is_file() and not args.overwrite:
        raise UsageError(f"{out / RESULTS_FILE} exists; choose another --out or pass --overwrite.")
    lengths = sorted(set(args.lengths))
    if lengths[0] < 3:
        raise UsageError(f"--lengths must be at least 3 tokens ([CLS], a token, [SEP]); got {lengths[0]}.")
    unknown = [reference for reference in args.paired if reference not in args.models]
    if unknown:
        raise UsageError(f"--paired {' '.join(unknown)}: a reference must be one of the compared models.")
    specs = [ModelSpec.parse(spec) for spec in args.models]
    teacher = CheckpointFacts.read(args.teacher) if args.teacher else None
    head_source = CheckpointFacts.read(args.mlm_head) if args.mlm_head else None
    if head_source is not None and not head_source.has_mlm_head:
        raise UsageError(
            f"--mlm-head {args.mlm_head} holds no MLM head (its config names {', '.join(head_source.architectures)}); "
            "give the output of `tisa-hf adapt --objective mlm --train head`."
        )
    for facts in [head_source] if head_source else [spec.facts for spec in specs if spec.facts.has_mlm_head]:
        facts.check_mlm_head_module()
    if teacher is None and head_source is None and not any(spec.facts.has_mlm_head for spec in specs):
        raise UsageError(
            "Nothing to measure: give --teacher (agreement) or an MLM head (--mlm-head, or a *ForMaskedLM model)."
        )
    everyone = [spec.facts for spec in specs] + [facts for facts in (teacher, head_source) if facts is not None]
    if len({facts.vocab_size for facts in everyone}) > 1:
        sizes = ", ".join(f"{facts.name}: {facts.vocab_size}" for facts in everyone)
        raise UsageError(f"The models must share one vocabulary, but their sizes differ ({sizes}).")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.tokenizer or (teacher or specs[0].facts).path))
    documents = tokenize_articles(read_articles(args.text), tokenizer)
    if not block_count(documents, lengths[-1]):
        raise UsageError(f"{args.text} is too short for --lengths {lengths[-1]}: it gives no block of that length.")
    data = {}
    for length in lengths:
        blocks = spread_selection(pack_blocks(documents, length, tokenizer), max(1, args.max_tokens // length))
        data[length] = LengthData(blocks, *mask_blocks(blocks, tokenizer, args.mlm_probability, args.seed))
    return EvaluationSetup(specs, teacher, head_source, data)


def evaluate(setup: EvaluationSetup, batch_tokens: int, device: torch.device) -> dict[str, dict[str, Any]]:
    """Per model, measure and length: the per-block sums (None where not measurable) and their ratio to the
    blocks' weights, the measure over all tokens."""
    teacher_states = {}
    if setup.teacher is not None:
        teacher = load_model(setup.teacher, device)
        for length, data in setup.data.items():
            if setup.teacher.reads(length):
                teacher_states[length] = final_hidden_states(teacher, data.blocks, batch_tokens, device)
        del teacher
    shared_head = mlm_head_of(load_model(setup.head_source, device)) if setup.head_source else None
    results = {}
    for spec in setup.specs:
        model = load_model(spec.facts, device)
        interpolation = PositionInterpolation(model) if spec.interpolated else None
        head = shared_head or (mlm_head_of(model) if spec.facts.has_mlm_head else None)
        sums: dict[str, dict[str, list[float] | None]] = {measure: {} for measure in MEASURES}
        means: dict[str, dict[str, float | None]] = {measure: {} for measure in MEASURES}
        for length, data in setup.data.items():
            readable = spec.reads(length)
            if interpolation is not None:
                interpolation.stretch_to(length)
            agreement = loss = None
            if readable and length in teacher_states:
                agreement = agreement_sums(model, data.blocks, teacher_states[length], batch_tokens, device)
            if readable and head is not None:
                loss = masked_loss_sums(model, head, data, batch_tokens, device)
            for measure, values in (("agreement", agreement), ("mlm_loss", loss)):
                sums[measure][str(length)] = values
                means[measure][str(length)] = None if values is None else sum(values) / sum(data.block_weights[measure])
        results[spec.spec] = {
            "tisa": spec.facts.tisa.to_dict() if spec.facts.tisa else None,
            "position_table_length": spec.facts.table_length,
            "interpolated": spec.interpolated,
            **means,
            "block_sums": sums,
        }
        del model
    return results


def measured(record: dict[str, Any]) -> list[str]:
    """The measures that have a number for some model at some length."""
    return [
        measure
        for measure in MEASURES
        if any(value is not None for model in record["models"].values() for value in model[measure].values())
    ]


def _table(lengths: list[str], rows: dict[str, list[str]]) -> str:
    header = [f"| model | {' | '.join(lengths)} |", f"|---|{'---:|' * len(lengths)}"]
    return "\n".join(header + [f"| {name} | {' | '.join(cells)} |" for name, cells in rows.items()])


def _paired_cell(entry: dict[str, float | None] | None, decimals: int) -> str:
    if entry is None:
        return "–"
    difference = f"{entry['difference']:+.{decimals}f}"
    if entry["low"] is None:
        return difference
    excludes_zero = entry["low"] > 0 or entry["high"] < 0
    return f"{difference} [{entry['low']:+.{decimals}f}, {entry['high']:+.{decimals}f}]{'*' if excludes_zero else ''}"


def format_tables(record: dict[str, Any]) -> str:
    """A Markdown table per measure (a row per model, a column per length; "–" where a model cannot be measured:
    a length beyond its position table, or beyond the teacher's for agreement), then per --paired reference and
    measure the differences to the reference with their intervals."""
    lengths = [str(length) for length in record["lengths"]]
    sections = []
    for measure in measured(record):
        rows = {
            name: ["–" if model[measure][n] is None else f"{model[measure][n]:.{DECIMALS[measure]}f}" for n in lengths]
            for name, model in record["models"].items()
        }
        sections.append(f"{MEASURES[measure].capitalize()}, per input length (tokens):\n\n{_table(lengths, rows)}")
    for reference, paired in record["paired"].items():
        for measure in measured(record):
            rows = {
                name: [_paired_cell(entry[measure][n], DECIMALS[measure]) for n in lengths]
                for name, entry in paired.items()
            }
            sections.append(
                f"{MEASURES[measure].capitalize()}, minus {reference}'s (95% bootstrap interval over blocks; * "
                f"excludes 0):\n\n{_table(lengths, rows)}"
            )
    return "\n\n".join(sections) + "\n"


def plot_measures(record: dict[str, Any], path: Path) -> None:
    """One panel per measure that has numbers, each model a line against length (log axis), in the same colour
    on every panel; one legend below them."""
    lengths = record["lengths"]
    measures = measured(record)
    # drawn by the Agg canvas, no pyplot state
    figure = Figure(figsize=(5.5 * len(measures), 4.2 + 0.25 * len(record["models"])), layout="constrained")
    for axis, measure in zip(figure.subplots(1, len(measures), squeeze=False)[0], measures, strict=True):
        for index, (name, model) in enumerate(record["models"].items()):
            points = [(int(length), value) for length, value in model[measure].items() if value is not None]
            if points:
                axis.plot(*zip(*points, strict=True), marker="o", color=f"C{index % 10}", label=name)
        axis.set_xscale("log", base=2)
        axis.set_xticks(lengths, labels=[str(length) for length in lengths])
        axis.minorticks_off()
        if record["teacher_table_length"]:
            axis.axvline(record["teacher_table_length"], color="0.6", linestyle=":", label="teacher's table")
        axis.set_xlabel("input length (tokens)")
        axis.set_ylabel(MEASURES[measure])
    labels = {}  # every model once, in the order given, from whichever panel drew it
    for axis in figure.axes:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            labels.setdefault(label, handle)
    figure.legend(labels.values(), labels.keys(), loc="outside lower center", ncols=2, fontsize=8)
    figure.savefig(path, dpi=110)


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    setup = prepare(args)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    record = {
        "text": args.text,
        "lengths": list(setup.data),
        "blocks": {str(length): len(data.blocks) for length, data in setup.data.items()},
        "teacher": args.teacher,
        "teacher_table_length": setup.teacher.table_length if setup.teacher else None,
        "mlm_head": args.mlm_head,
        "mlm_probability": args.mlm_probability,
        "seed": args.seed,
        "block_tokens": {str(length): data.block_weights for length, data in setup.data.items()},
        "models": evaluate(setup, args.batch_tokens, device),
        "wall_time_s": round(time.perf_counter() - started, 1),  # from reading the text to the last number
        "versions": versions(),
        "machine": machine(device),
    }
    record["paired"] = {
        reference: paired_to(record, reference, args.bootstrap, args.bootstrap_seed) for reference in args.paired
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULTS_FILE).write_text(json.dumps(record, indent=2))
    (out / TABLES_FILE).write_text(format_tables(record))
    plot_measures(record, out / PLOT_FILE)
    return record


def main(argv: list[str] | None = None) -> int:
    args = lm_eval_parser().parse_args(sys.argv[1:] if argv is None else argv)
    record = run(args)
    print(json.dumps({"out": args.out, "models": list(record["models"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
