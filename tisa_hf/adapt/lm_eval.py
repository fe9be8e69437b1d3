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
by linear position interpolation (the peer baseline beyond the table; tisa_hf/common/long_inputs.py). A model
that cannot read n tokens (a position table shorter than n) gets null at n. Long inputs fit CPU memory: TISA
`replace` mode attends blockwise at inference, and the other models run sdpa without a mask.

Writes OUT/lm_eval.json (every number, the settings and versions), OUT/lm_eval.md (a table per measure, models
against lengths) and OUT/lm_eval.png (each measure against length, log axis). Every setting, model config, the
text and the output folder are checked before any weights load. Each model's numbers at each length are kept in
OUT as soon as they are computed, and a rerun with the same settings resumes from them (common/result_files.py); a
progress bar (on a terminal) or a log line per model and length tells how far it is.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
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
from tqdm.auto import tqdm
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel

from ..common.checkpoints import CheckpointFacts
from ..common.hub_access import loading_errors, model_remedy, model_source
from ..common.long_inputs import PositionInterpolation
from ..common.machine import checked_device, machine, versions
from ..common.paired import paired_to
from ..common.result_files import FinishedCells, check_writable, replace_atomically, write_text_atomically
from ..common.spellings import INTERP, MEAN, WHOLE, parse_spelling
from ..common.tables import markdown_table, paired_cell
from ..common.text import block_count, mask_blocks, pack_blocks, read_articles, spread_selection, tokenize_articles
from ..errors import UsageError
from .lm_eval_options import lm_eval_parser
from .objectives import IGNORE_INDEX, check_mlm_head_module, masked_token_losses, mlm_head_of

logger = logging.getLogger(__name__)

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
        spelling = parse_spelling(spec)
        if spelling.reading not in (WHOLE, INTERP) or spelling.tisa is not None or spelling.readout is not MEAN:
            raise UsageError(f"{spec}: lm-eval reads a checkpoint whole or interpolated (interp:MODEL).")
        interpolated = spelling.reading.stretches
        facts = CheckpointFacts.read(spelling.model, "model")
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
    with loading_errors(f"the model {facts.name}", model_remedy("model")):
        model = auto_class.from_pretrained(facts.path, local_files_only=facts.local_files_only)
    return model.to(device).eval()


def _batches(tensor: torch.Tensor, length: int, batch_tokens: int, device: torch.device, progress: tqdm | None = None):
    """`tensor`'s rows in batches of about `batch_tokens` tokens on `device`; `progress` counts the rows done."""
    size = max(1, batch_tokens // length)
    for start in range(0, len(tensor), size):
        yield tensor[start : start + size].to(device)
        if progress is not None:
            progress.update(min(size, len(tensor) - start))


@torch.no_grad()
def final_hidden_states(
    model: PreTrainedModel,
    blocks: torch.Tensor,
    batch_tokens: int,
    device: torch.device,
    progress: tqdm | None = None,
) -> torch.Tensor:
    """(blocks, length, hidden) final hidden states, float32 on the CPU."""
    length = blocks.shape[1]
    return torch.cat(
        [
            model.base_model(input_ids=batch).last_hidden_state.float().cpu()
            for batch in _batches(blocks, length, batch_tokens, device, progress)
        ]
    )


@torch.no_grad()
def agreement_sums(
    model: PreTrainedModel,
    blocks: torch.Tensor,
    teacher_states: torch.Tensor,
    batch_tokens: int,
    device: torch.device,
    progress: tqdm | None = None,
) -> list[float]:
    """Per block, the sum over its tokens of cos(model's final hidden state, teacher's)."""
    states = final_hidden_states(model, blocks, batch_tokens, device, progress)
    return F.cosine_similarity(states, teacher_states, dim=-1).double().sum(-1).tolist()


@torch.no_grad()
def masked_loss_sums(
    model: PreTrainedModel,
    head: nn.Module,
    data: LengthData,
    batch_tokens: int,
    device: torch.device,
    progress: tqdm | None = None,
) -> list[float]:
    """Per block, the sum of the cross-entropy over its masked tokens."""
    length = data.masked.shape[1]
    return [
        value
        for masked, labels in zip(
            _batches(data.masked, length, batch_tokens, device, progress),
            _batches(data.labels, length, batch_tokens, device),
            strict=True,
        )
        for value in masked_token_losses(model.base_model(input_ids=masked).last_hidden_state, head, labels)[0]
        .double()
        .tolist()
    ]


@dataclass
class EvaluationSetup:
    """What every model is measured on and against, checked and built before any model loads, and the cells
    (model, length) already finished."""

    specs: list[ModelSpec]
    teacher: CheckpointFacts | None
    head_source: CheckpointFacts | None
    data: dict[int, LengthData]
    device: torch.device
    cells: FinishedCells

    def has_head(self, spec: ModelSpec) -> bool:
        return self.head_source is not None or spec.facts.has_mlm_head

    def measures_agreement(self, spec: ModelSpec, length: int) -> bool:
        return spec.reads(length) and self.teacher is not None and self.teacher.reads(length)

    def measures_loss(self, spec: ModelSpec, length: int) -> bool:
        return spec.reads(length) and self.has_head(spec)


def checked_lengths(args: argparse.Namespace) -> list[int]:
    """The lengths, short to long, once the settings that need no file are checked."""
    lengths = sorted(set(args.lengths))
    if lengths[0] < 3:
        raise UsageError(f"--lengths must be at least 3 tokens ([CLS], a token, [SEP]); got {lengths[0]}.")
    if not 0 < args.mlm_probability <= 1:
        raise UsageError(f"--mlm-probability is the share of tokens masked, in (0, 1]; got {args.mlm_probability}.")
    repeated = sorted({spec for spec in args.models if args.models.count(spec) > 1})
    if repeated:
        raise UsageError(f"{', '.join(repeated)}: given more than once; give each model once.")
    unknown = [reference for reference in args.paired if reference not in args.models]
    if unknown:
        raise UsageError(f"--paired {' '.join(unknown)}: a reference must be one of the compared models.")
    return lengths


def resume_settings(args: argparse.Namespace, lengths: list[int], device: torch.device) -> dict[str, Any]:
    """What the numbers depend on, which a resumed evaluation must keep (--paired and the bootstrap only change
    what is computed from them at the end). The text is compared by content too."""
    digest = hashlib.sha256(Path(args.text).read_bytes()).hexdigest()
    names = ("models", "text", "teacher", "mlm_head", "tokenizer", "max_tokens", "batch_tokens", "mlm_probability")
    return {
        **{name: getattr(args, name) for name in names},
        "text_sha256": digest,
        "lengths": lengths,
        "seed": args.seed,
        "device": str(device),
    }


def prepare(args: argparse.Namespace) -> EvaluationSetup:
    """Checks every request against the configs, the tokenizer, the text and the output folder; loads no
    weights."""
    started = time.perf_counter()
    lengths = checked_lengths(args)
    device = checked_device(args.device)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder (it is created when missing).")
    if (out / RESULTS_FILE).is_file() and not args.overwrite:
        raise UsageError(f"{out / RESULTS_FILE} exists; choose another --out or pass --overwrite.")
    specs = [ModelSpec.parse(spec) for spec in args.models]
    teacher = CheckpointFacts.read(args.teacher, "--teacher") if args.teacher else None
    head_source = CheckpointFacts.read(args.mlm_head, "--mlm-head") if args.mlm_head else None
    if head_source is not None and not head_source.has_mlm_head:
        raise UsageError(
            f"--mlm-head {args.mlm_head} holds no MLM head (its config names {', '.join(head_source.architectures)}); "
            "give the output of `tisa-hf adapt --objective mlm --train head`."
        )
    for facts in [head_source] if head_source else [spec.facts for spec in specs if spec.facts.has_mlm_head]:
        check_mlm_head_module(facts.config)
    if teacher is None and head_source is None and not any(spec.facts.has_mlm_head for spec in specs):
        raise UsageError(
            "Nothing to measure: give --teacher (agreement) or an MLM head (--mlm-head, or a *ForMaskedLM model)."
        )
    everyone = [spec.facts for spec in specs] + [facts for facts in (teacher, head_source) if facts is not None]
    if len({facts.vocab_size for facts in everyone}) > 1:
        sizes = ", ".join(f"{facts.name}: {facts.vocab_size}" for facts in everyone)
        raise UsageError(f"The models must share one vocabulary, but their sizes differ ({sizes}).")
    source = model_source(args.tokenizer, "--tokenizer", needs_config=False) if args.tokenizer else None
    facts = teacher or specs[0].facts
    path, local_only = (source.path, source.local_files_only) if source else (facts.path, facts.local_files_only)
    with loading_errors(f"the tokenizer {path}", model_remedy("--tokenizer")):
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local_only)
    documents = tokenize_articles(read_articles(args.text), tokenizer)
    if not block_count(documents, lengths[-1]):
        raise UsageError(f"{args.text} is too short for --lengths {lengths[-1]}: it gives no block of that length.")
    cells = FinishedCells.open(out, resume_settings(args, lengths, device), args.overwrite, started)
    data = {}
    for length in lengths:
        blocks = spread_selection(pack_blocks(documents, length, tokenizer), max(1, args.max_tokens // length))
        data[length] = LengthData(blocks, *mask_blocks(blocks, tokenizer, args.mlm_probability, args.seed))
    setup = EvaluationSetup(specs, teacher, head_source, data, device, cells)
    check_measurable(setup, args.mlm_probability)
    check_writable(out)
    return setup


def check_measurable(setup: EvaluationSetup, mlm_probability: float) -> None:
    """Every length gives some model a number, and the masks of every length where a loss is measured hold a
    token (a loss over no token is 0 / 0)."""
    for length, data in setup.data.items():
        if not any(setup.measures_agreement(spec, length) or setup.measures_loss(spec, length) for spec in setup.specs):
            tables = ", ".join(f"{spec.spec}: {spec.facts.table_length}" for spec in setup.specs)
            raise UsageError(
                f"--lengths {length}: no model gets a number at {length} tokens (their position tables: {tables}; "
                "agreement needs a teacher that reads the length, the masked-token loss an MLM head); drop the "
                "length, or add a model that reads it (TISA replace mode, or interp:MODEL)."
            )
        losses = any(setup.measures_loss(spec, length) for spec in setup.specs)
        if losses and not sum(data.block_weights["mlm_loss"]):
            raise UsageError(
                f"--mlm-probability {mlm_probability} masks no token of the {len(data.blocks)} block(s) of {length} "
                "tokens; raise --mlm-probability or --max-tokens."
            )


def _pending(setup: EvaluationSetup) -> dict[str, list[int]]:
    """Per model, the lengths no earlier run finished."""
    return {
        spec.spec: [length for length in setup.data if setup.cells.get(spec.spec, length) is None]
        for spec in setup.specs
    }


def _evaluate_model(
    spec: ModelSpec,
    lengths: list[int],
    setup: EvaluationSetup,
    teacher_states: dict[int, torch.Tensor],
    shared_head: nn.Module | None,
    batch_tokens: int,
    progress: tqdm,
) -> None:
    """Computes `spec`'s cells at `lengths`, each kept in `setup.cells` as soon as it is done."""
    device = setup.device
    model = load_model(spec.facts, device)
    interpolation = PositionInterpolation(model) if spec.interpolated else None
    head = shared_head or (mlm_head_of(model) if spec.facts.has_mlm_head else None)
    for length in lengths:
        data = setup.data[length]
        progress.set_description(f"lm-eval: {spec.spec} at {length} tokens")
        if interpolation is not None:
            interpolation.stretch_to(length)
        sums: dict[str, list[float] | None] = {measure: None for measure in MEASURES}
        if setup.measures_agreement(spec, length):
            sums["agreement"] = agreement_sums(
                model, data.blocks, teacher_states[length], batch_tokens, device, progress
            )
        if setup.measures_loss(spec, length):
            sums["mlm_loss"] = masked_loss_sums(model, head, data, batch_tokens, device, progress)
        setup.cells.add(spec.spec, length, sums)
        if progress.disable:  # no bar (not a terminal): a plain line per cell
            means = [
                f"{MEASURES[measure]} {sum(values) / sum(data.block_weights[measure]):.4f}"
                for measure, values in sums.items()
                if values is not None
            ]
            logger.info("%s at %d tokens: %s", spec.spec, length, ", ".join(means) or "not measurable")


def _model_record(spec: ModelSpec, setup: EvaluationSetup) -> dict[str, Any]:
    """A model's entry of lm_eval.json: per measure and length its number over all tokens (the ratio of the
    per-block sums to the blocks' weights; None where not measurable) and the per-block sums."""
    sums: dict[str, dict[str, list[float] | None]] = {measure: {} for measure in MEASURES}
    means: dict[str, dict[str, float | None]] = {measure: {} for measure in MEASURES}
    for length, data in setup.data.items():
        cell = setup.cells.get(spec.spec, length)
        for measure in MEASURES:
            values = cell[measure]
            sums[measure][str(length)] = values
            means[measure][str(length)] = None if values is None else sum(values) / sum(data.block_weights[measure])
    return {
        "tisa": spec.facts.tisa.to_dict() if spec.facts.tisa else None,
        "position_table_length": spec.facts.table_length,
        "interpolated": spec.interpolated,
        **means,
        "block_sums": sums,
    }


def evaluate(setup: EvaluationSetup, batch_tokens: int) -> dict[str, dict[str, Any]]:
    """Every model's record (`_model_record`): the cells an interrupted run finished are kept, the others computed.
    The teacher's hidden states are computed only at the lengths where a model still needs them."""
    pending = _pending(setup)
    total, to_do = len(setup.specs) * len(setup.data), sum(map(len, pending.values()))
    if to_do < total:
        logger.info(
            "Resuming: %d of the %d (model, length) results are kept from an earlier run with these settings "
            "(%s); %d to compute.",
            total - to_do,
            total,
            setup.cells.path,
            to_do,
        )
    teacher_lengths = [
        length
        for length in setup.data
        if any(length in pending[spec.spec] and setup.measures_agreement(spec, length) for spec in setup.specs)
    ]
    blocks = {length: len(data.blocks) for length, data in setup.data.items()}
    work = sum(blocks[length] for length in teacher_lengths) + sum(
        blocks[length] * (setup.measures_agreement(spec, length) + setup.measures_loss(spec, length))
        for spec in setup.specs
        for length in pending[spec.spec]
    )
    # tqdm's disable=None: a bar on a terminal only; elsewhere, as in a log file, a log line per cell.
    progress = tqdm(total=work, desc="lm-eval", unit="block", disable=None if work else True)
    teacher_states = {}
    if teacher_lengths:
        progress.set_description("lm-eval: teacher")
        teacher = load_model(setup.teacher, setup.device)
        for length in teacher_lengths:
            data = setup.data[length]
            teacher_states[length] = final_hidden_states(teacher, data.blocks, batch_tokens, setup.device, progress)
        del teacher
    shared_head = None
    if setup.head_source is not None and to_do:
        shared_head = mlm_head_of(load_model(setup.head_source, setup.device))
    for spec in setup.specs:
        if pending[spec.spec]:
            _evaluate_model(spec, pending[spec.spec], setup, teacher_states, shared_head, batch_tokens, progress)
    progress.close()
    return {spec.spec: _model_record(spec, setup) for spec in setup.specs}


def measured(record: dict[str, Any]) -> list[str]:
    """The measures that have a number for some model at some length."""
    return [
        measure
        for measure in MEASURES
        if any(value is not None for model in record["models"].values() for value in model[measure].values())
    ]


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
        table = markdown_table(lengths, rows)
        sections.append(f"{MEASURES[measure].capitalize()}, per input length (tokens):\n\n{table}")
    for reference, paired in record["paired"].items():
        for measure in measured(record):
            rows = {
                name: [paired_cell(entry[measure][n], DECIMALS[measure]) for n in lengths]
                for name, entry in paired.items()
            }
            sections.append(
                f"{MEASURES[measure].capitalize()}, minus {reference}'s (95% bootstrap interval over blocks; * "
                f"excludes 0):\n\n{markdown_table(lengths, rows)}"
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
    setup = prepare(args)
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
        "models": evaluate(setup, args.batch_tokens),
        # from reading the text to the last number, over the runs an interrupted evaluation took
        "wall_time_s": round(setup.cells.wall_time_s(), 1),
        "versions": versions(),
        "machine": machine(setup.device),
    }
    record["paired"] = {
        reference: paired_to(record, reference, args.bootstrap, args.bootstrap_seed) for reference in args.paired
    }
    out = Path(args.out)
    write_text_atomically(out / TABLES_FILE, format_tables(record))
    replace_atomically(out / PLOT_FILE, lambda path: plot_measures(record, path))
    write_text_atomically(out / RESULTS_FILE, json.dumps(record, indent=2))  # last: it marks the evaluation done
    setup.cells.remove()
    return record


def main(argv: list[str] | None = None) -> int:
    args = lm_eval_parser().parse_args(sys.argv[1:] if argv is None else argv)
    record = run(args)
    print(json.dumps({"out": args.out, "models": list(record["models"])}))
    return 0
