"""`tisa-hf longembed`: retrieval past the position table, on LongEmbed's synthetic tasks rebuilt offline.

Per task (passkey, needle; `tasks.py`) and document length, every system (`systems.py`) embeds the same
candidate documents and queries, and Acc@1 is the share of queries whose document is the most similar
candidate (LongEmbed's nDCG@1 with one relevant document; a tie with another candidate counts as a miss). With
--paired REF, every other system's Acc@1 minus REF's with a 95% bootstrap interval over the queries (the same
queries for both; tisa_hf/adapt/paired_blocks.py with one query per block).

Everything that can be wrong (settings, output folder, systems' configs and tokenizers, lengths against the
tables, the text) is checked and the documents are built before any model loads. OUT/longembed.json is
rewritten after every finished (system, task, length) cell; a rerun with the same settings and documents skips
the finished cells (and may add systems), --overwrite starts over. OUT/longembed.md holds the tables and
OUT/longembed.png plots Acc@1 against length.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from ..adapt.paired_blocks import paired_difference
from ..cli import entry
from ..environment import machine, versions
from ..errors import UsageError
from ..markdown import markdown_table, paired_cell
from .facts import NAMES
from .options import longembed_parser
from .systems import Embedder, SystemSpec, check_system_names, shared_tokenizer
from .tasks import RetrievalSet, build_task, text_haystack

logger = logging.getLogger(__name__)

RESULTS_FILE = "longembed.json"
PLOT_FILE = "longembed.png"
TABLES_FILE = "longembed.md"
LENGTH_UNIT = "tokens of the models' tokenizer, [CLS] and [SEP] included"


@dataclass
class Evaluation:
    """What a run measures, checked and built before any model loads: the systems, the retrieval sets per task
    and length, and the record so far (a resumed one, or a new one)."""

    systems: list[SystemSpec]
    sets: dict[str, dict[int, RetrievalSet]]
    record: dict[str, Any]


def requested_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "tasks": list(args.tasks),
        "lengths": sorted(set(args.lengths)),
        "length_unit": LENGTH_UNIT,
        "documents": args.documents,
        "queries": args.queries,
        "seed": args.seed,
        "text": args.text if "needle" in args.tasks else None,
    }


def check_settings(args: argparse.Namespace) -> dict[str, Any] | None:
    """The settings' own consistency and the output folder; returns the record to resume, if any."""
    if args.documents > len(NAMES):
        raise UsageError(f"--documents {args.documents}: there are {len(NAMES)} needles, so at most {len(NAMES)}.")
    if args.queries > args.documents:
        raise UsageError(f"--queries {args.queries} is more than --documents {args.documents}; each asks for one.")
    check_system_names(args.systems, args.paired)
    results = Path(args.out) / RESULTS_FILE
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is a file; give a folder.")
    if not results.is_file() or args.overwrite:
        return None
    record = json.loads(results.read_text())
    wanted = requested_settings(args)
    old = record["settings"]
    differ = [f"{key} {old.get(key)} -> {value}" for key, value in wanted.items() if old.get(key) != value]
    if differ:
        raise UsageError(
            f"{results} holds results of other settings ({'; '.join(differ)}); rerun with its settings to resume, "
            "or choose another --out, or pass --overwrite to start over."
        )
    return record


def documents_digest(sets: dict[str, dict[int, RetrievalSet]]) -> str:
    """A fingerprint of every document and query, to resume only onto the same ones."""
    digest = hashlib.sha256()
    for task, per_length in sets.items():
        for length, retrieval in per_length.items():
            digest.update(json.dumps([task, length, retrieval.documents, retrieval.query_ids]).encode())
    return digest.hexdigest()


def prepare(args: argparse.Namespace) -> Evaluation:
    """Checks everything and builds every document; loads no weights."""
    resumed = check_settings(args)
    settings = requested_settings(args)
    systems = [SystemSpec.parse(spec) for spec in args.systems]
    for spec in systems:
        spec.check_lengths(settings["lengths"])
    tokenizer = shared_tokenizer(systems)
    stream = text_haystack(args.text, tokenizer) if "needle" in args.tasks else None
    sets = {
        task: {
            length: build_task(task, length, tokenizer, args.documents, args.queries, args.seed, stream)
            for length in settings["lengths"]
        }
        for task in args.tasks
    }
    settings["documents_sha256"] = documents_digest(sets)
    if resumed is not None and resumed["settings"]["documents_sha256"] != settings["documents_sha256"]:
        raise UsageError(
            f"{Path(args.out) / RESULTS_FILE} was measured on other documents (another tokenizer or text); choose "
            "another --out, or pass --overwrite to start over."
        )
    record = resumed or {"settings": settings, "systems": {}, "results": {}, "paired": {}}
    return Evaluation(systems, sets, record)


def correct_at_1(queries: torch.Tensor, documents: torch.Tensor, answers: list[int]) -> list[int]:
    """Per query, 1 when its document is more similar to it (cosine of normalised embeddings) than every other
    candidate, else 0."""
    scores = queries @ documents.T
    right = scores[torch.arange(len(answers)), torch.tensor(answers)]
    others = scores.clone()
    others[torch.arange(len(answers)), torch.tensor(answers)] = -torch.inf
    return (right > others.max(-1).values).int().tolist()


def paired_to(record: dict[str, Any], reference: str, resamples: int, seed: int) -> dict[str, Any]:
    """Every other system's Acc@1 minus `reference`'s, per task and length where both are measured."""
    base = record["results"][reference]
    paired: dict[str, Any] = {}
    for name, results in record["results"].items():
        if name == reference:
            continue
        paired[name] = {
            task: {
                length: paired_difference(
                    cell["correct"], base[task][length]["correct"], [1] * len(cell["correct"]), resamples, seed
                )
                for length, cell in per_length.items()
                if length in base.get(task, {})
            }
            for task, per_length in results.items()
        }
    return paired


def plot_accuracy(record: dict[str, Any], path: Path) -> None:
    """A panel per task: each system's Acc@1 against length (log axis), in the same colour on every panel."""
    tasks = record["settings"]["tasks"]
    lengths = record["settings"]["lengths"]
    figure = Figure(figsize=(5.0 * len(tasks), 4.2 + 0.25 * len(record["results"])), layout="constrained")
    for axis, task in zip(figure.subplots(1, len(tasks), squeeze=False)[0], tasks, strict=True):
        for index, (name, results) in enumerate(record["results"].items()):
            points = sorted((int(length), cell["acc_at_1"]) for length, cell in results.get(task, {}).items())
            if points:
                axis.plot(*zip(*points, strict=True), marker="o", color=f"C{index % 10}", label=name)
        axis.set_xscale("log", base=2)
        axis.set_xticks(lengths, labels=[str(length) for length in lengths])
        axis.minorticks_off()
        axis.set_ylim(-0.02, 1.02)
        axis.set_title(task)
        axis.set_xlabel("document length (tokens)")
        axis.set_ylabel("Acc@1")
    handles, labels = figure.axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=8)
    figure.savefig(path, dpi=110)


def format_tables(record: dict[str, Any]) -> str:
    """Markdown: per task, Acc@1 of every system per length ("–" where not measured), then per --paired reference
    the other systems' differences with their intervals; last, each system's wall time over its cells."""
    lengths = [str(length) for length in record["settings"]["lengths"]]
    queries = record["settings"]["queries"]
    sections = []
    for task in record["settings"]["tasks"]:
        rows = {
            name: [f"{results[task][n]['acc_at_1']:.2f}" if n in results.get(task, {}) else "–" for n in lengths]
            for name, results in record["results"].items()
        }
        title = f"{task}: Acc@1 per document length (tokens), {queries} queries a length"
        sections.append(f"{title}:\n\n{markdown_table(lengths, rows, 'system')}")
        for reference, paired in record["paired"].items():
            rows = {
                name: [paired_cell(by_task.get(task, {}).get(n), 2) for n in lengths]
                for name, by_task in paired.items()
            }
            title = f"{task}: Acc@1 minus {reference}'s (95% bootstrap interval over queries; * excludes 0)"
            sections.append(f"{title}:\n\n{markdown_table(lengths, rows, 'system')}")
    times = {
        name: [f"{sum(cell['wall_time_s'] for cells in results.values() for cell in cells.values()) / 60:.1f}"]
        for name, results in record["results"].items()
    }
    sections.append(f"Wall time over the measured cells:\n\n{markdown_table(['minutes'], times, 'system')}")
    return "\n\n".join(sections) + "\n"


def write_record(record: dict[str, Any], out: Path) -> None:
    """The record, replaced whole (a kill mid-write leaves the previous one)."""
    partial = out / f"{RESULTS_FILE}.partial"
    partial.write_text(json.dumps(record, indent=2))
    os.replace(partial, out / RESULTS_FILE)


def run(args: argparse.Namespace) -> dict[str, Any]:
    evaluation = prepare(args)
    record = evaluation.record
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    record.update(versions=versions(), machine=machine(device))
    lengths = record["settings"]["lengths"]
    pending = {
        spec.spec: [
            (task, length)
            for task in args.tasks
            for length in lengths
            if str(length) not in record["results"].get(spec.spec, {}).get(task, {})
        ]
        for spec in evaluation.systems
    }
    interactive = sys.stderr.isatty()
    cells = tqdm(total=sum(map(len, pending.values())), desc="longembed", disable=not interactive)
    for spec in evaluation.systems:
        if not pending[spec.spec]:
            continue
        embedder = Embedder(spec, lengths[-1], device, args.batch_tokens)
        record["systems"][spec.spec] = {
            "model": spec.facts.path,
            "reading": spec.reading,
            "tisa": spec.effective_tisa.to_dict() if spec.effective_tisa else None,
            "position_table_length": spec.table_length,
        }
        for task, length in pending[spec.spec]:
            started, cpu_started = time.perf_counter(), time.process_time()
            retrieval = evaluation.sets[task][length]
            queries = embedder.read(retrieval.query_ids)
            label = f"{spec.spec} {task} {length}" if interactive else None
            documents = embedder.read(retrieval.documents, progress=label)
            correct = correct_at_1(queries, documents, retrieval.answers)
            cell = {
                "acc_at_1": sum(correct) / len(correct),
                "correct": correct,
                "wall_time_s": round(time.perf_counter() - started, 2),
                "cpu_time_s": round(time.process_time() - cpu_started, 2),  # every thread's: shared cores inflate
            }
            record["results"].setdefault(spec.spec, {}).setdefault(task, {})[str(length)] = cell
            write_record(record, out)
            cells.update()
            summary = f"Acc@1 {cell['acc_at_1']:.3f} ({cell['wall_time_s']:.1f} s, {cell['cpu_time_s']:.1f} s CPU)"
            logger.info("%s %s %d tokens: %s", spec.spec, task, length, summary)
        del embedder
    cells.close()
    record["paired"] = {
        reference: paired_to(record, reference, args.bootstrap, args.bootstrap_seed) for reference in args.paired
    }
    write_record(record, out)
    (out / TABLES_FILE).write_text(format_tables(record))
    plot_accuracy(record, out / PLOT_FILE)
    return record


def main(argv: list[str] | None = None) -> int:
    args = longembed_parser().parse_args(sys.argv[1:] if argv is None else argv)
    record = run(args)
    print(json.dumps({"out": args.out, "systems": list(record["results"])}))
    return 0


if __name__ == "__main__":
    sys.exit(entry("longembed")())
