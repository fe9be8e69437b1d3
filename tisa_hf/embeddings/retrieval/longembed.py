"""`tisa-hf longembed`: retrieval past the position table, on LongEmbed's synthetic tasks rebuilt offline.

Per task (passkey, needle; `longembed_data.py`) and document length, every system (`systems.py`) scores the same
candidate documents against the same queries, and Acc@1 is the share of queries whose document scores highest
(LongEmbed's nDCG@1 with one relevant document; a tie with another candidate counts as a miss; `ranking.py`).
A model embeds the documents' token ids (one vector a text, or with the `late:` read-out one a token, scored by
MaxSim); BM25 reads their text (the token ids decoded, special tokens left out); a hybrid fuses the rankings of
the two. With --paired REF, every other system's Acc@1 minus REF's with a 95%
bootstrap interval over the queries (the same queries for both; `common/paired.py`).

Everything that can be wrong (settings, output folder, systems' configs and tokenizers, lengths against the
tables, the text) is checked and the documents are built before any model loads. OUT/longembed.json is
rewritten after every finished (system, task, length) cell, whose scores are kept in WORK/scores/ (WORK: --work,
by default --out); a rerun with the same settings and documents skips the finished cells (and may add systems),
--overwrite starts over. A cell whose documents a model reads one a forward pass (whole reads of at least half
--batch-tokens: the long cells) keeps their embeddings in WORK/embeddings/ as they are made (a `late:` system's
MaxSim scores), so an interrupted cell resumes at its next document.
OUT/longembed.md holds the tables and OUT/longembed.png plots Acc@1 against length.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from ...common.hub_access import wikitext_file
from ...common.machine import checked_device, machine, versions
from ...common.paired import kept_references, paired_per_query
from ...common.result_files import (
    check_out_folder,
    check_work_folder,
    claim_work_folder,
    file_name,
    resumable_record,
    write_record,
)
from ...common.tables import markdown_table, paired_cell
from ...errors import UsageError
from ..options import LONGEMBED, longembed_parser
from ..systems import (
    Embedder,
    RetrievalSystem,
    SystemSpec,
    check_hybrid_parts,
    check_readouts,
    check_system_names,
    dense_systems,
    parse_system,
    shared_tokenizer,
)
from .kept_embeddings import EMBEDDINGS_FOLDER, discard_kept
from .longembed_data import RetrievalSet, build_task, text_haystack
from .needles import NAMES
from .ranking import answer_ranks
from .scoring import Cell, Keeping, ordered, pending_cells, score, system_facts

logger = logging.getLogger(__name__)

RESULTS_FILE = "longembed.json"
PLOT_FILE = "longembed.png"
TABLES_FILE = "longembed.md"
LENGTH_UNIT = "tokens of the models' tokenizer, [CLS] and [SEP] included"


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
    check_out_folder(args.out)
    if "needle" in args.tasks and args.text is None:
        args.text = str(wikitext_file("test", "--text"))
    if args.work:
        check_out_folder(args.work, "--work")
        check_work_folder(Path(args.work), Path(args.out))
    return resumable_record(Path(args.out) / RESULTS_FILE, requested_settings(args), args.overwrite)


def documents_digest(sets: dict[str, dict[int, RetrievalSet]]) -> str:
    """A fingerprint of every document and query, to resume only onto the same ones."""
    digest = hashlib.sha256()
    for task, per_length in sets.items():
        for length, retrieval in per_length.items():
            digest.update(json.dumps([task, length, retrieval.documents, retrieval.query_ids]).encode())
    return digest.hexdigest()


def paired_to(record: dict[str, Any], reference: str, resamples: int, seed: int) -> dict[str, Any]:
    """Every other system's Acc@1 minus `reference`'s, per task and length where both are measured."""
    base = record["results"][reference]
    paired: dict[str, Any] = {}
    for name, results in record["results"].items():
        if name == reference:
            continue
        paired[name] = {
            task: {
                length: paired_per_query(cell["correct"], base[task][length]["correct"], resamples, seed)
                for length, cell in per_length.items()
                if length in base.get(task, {})
            }
            for task, per_length in results.items()
        }
    return paired


MARKERS = "osD^v<>pXh*P"
SPREAD = 0.035  # each system's points shifted by this many octaves of length from the next one's


def accuracy_figure(record: dict[str, Any]) -> Figure:
    """A panel per task: each system's Acc@1 against length (log axis), in the same colour and marker on every
    panel. Systems with equal numbers would hide each other's lines, so each system gets its own marker and is
    shifted a little along the length axis (SPREAD octaves from the next)."""
    tasks = record["settings"]["tasks"]
    lengths = record["settings"]["lengths"]
    names = list(record["results"])
    figure = Figure(figsize=(5.0 * len(tasks), 4.2 + 0.25 * len(names)), layout="constrained")
    for axis, task in zip(figure.subplots(1, len(tasks), squeeze=False)[0], tasks, strict=True):
        for index, name in enumerate(names):
            points = sorted(
                (int(length), cell["acc_at_1"]) for length, cell in record["results"][name].get(task, {}).items()
            )
            if points:
                shift = 2 ** (SPREAD * (index - (len(names) - 1) / 2))
                xs, ys = zip(*points, strict=True)
                axis.plot(
                    [x * shift for x in xs],
                    ys,
                    marker=MARKERS[index % len(MARKERS)],
                    markersize=5,
                    alpha=0.85,
                    color=f"C{index % 10}",
                    label=name,
                )
        axis.set_xscale("log", base=2)
        axis.set_xticks(lengths, labels=[str(length) for length in lengths])
        axis.minorticks_off()
        axis.set_ylim(-0.02, 1.02)
        axis.set_title(task)
        axis.set_xlabel("document length (tokens; systems shifted slightly apart)")
        axis.set_ylabel("Acc@1")
    handles, labels = figure.axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=8)
    return figure


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


def cell_of(retrieval: RetrievalSet, tokenizer: PreTrainedTokenizerBase) -> Cell:
    """A task at a length as the runner's cell, named `TASK-LENGTH`; BM25 reads the documents' tokens decoded,
    special tokens left out."""
    return Cell(
        f"{retrieval.task}-{retrieval.length}",
        retrieval.documents,
        retrieval.query_ids,
        retrieval.queries,
        lambda: tokenizer.batch_decode(retrieval.documents, skip_special_tokens=True),
    )


def keeps_documents(system: RetrievalSystem, length: int, batch_tokens: int) -> bool:
    """Whether a cell's document embeddings are kept as they are made (`kept_embeddings.py`), so that an
    interrupted cell resumes at its next document: for a model reading each document whole in a forward pass of
    its own anyway (`batch_tokens` holds one document), so that keeping them changes no number. Those are the
    cells of many CPU minutes."""
    return isinstance(system, SystemSpec) and system.reading.one_pass and batch_tokens // length <= 1


def kept_folder(out: Path, system: RetrievalSystem) -> Path:
    return out / EMBEDDINGS_FOLDER / file_name(system.spec)


class LongEmbedRetrieval:
    """The passkey and needle tasks at every length, as a sentence-transformers evaluator is built: the options in
    the constructor, which checks everything and builds every document (`longembed_data.py`) before any model
    loads; a call measures every pending (system, task, length) cell on the runner (`scoring.py`) and returns the
    record."""

    def __init__(self, args: argparse.Namespace) -> None:
        resumed = check_settings(args)
        settings = requested_settings(args)
        systems = [parse_system(spec) for spec in args.systems]
        check_hybrid_parts(systems)
        models = dense_systems(systems)
        if not models:
            raise UsageError("Give a model among the systems: the documents are built from its tokenizer's tokens.")
        check_readouts(models, LONGEMBED)
        for spec in models:
            spec.check_lengths(settings["lengths"])
        tokenizer = shared_tokenizer(models)
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
        self.args, self.out, self.systems, self.sets, self.tokenizer = args, Path(args.out), systems, sets, tokenizer
        self.work = Path(args.work or args.out)  # the kept scores and embeddings
        self.record = resumed or {"settings": settings, "systems": {}, "results": {}, "paired": {}}

    def measure(
        self,
        system: RetrievalSystem,
        embedder: Embedder | None,
        name: str,
        retrieval: RetrievalSet,
        here: dict[str, Any],
    ) -> dict[str, Any]:
        """One cell's result: each query's hit, Acc@1, and the time spent (earlier runs' on its kept documents
        included), on the machine `here`."""
        started, cpu_started = time.perf_counter(), time.process_time()
        keeping = None
        if keeps_documents(system, retrieval.length, self.args.batch_tokens):
            keeping = Keeping(kept_folder(self.work, system), name, self.record["settings"]["documents_sha256"])
        label = f"{system.spec} {retrieval.task} {retrieval.length}" if sys.stderr.isatty() else None
        cell = cell_of(retrieval, self.tokenizer)
        scored = score(system, cell, self.work, embedder, keeping, torch_products=True, progress=label)
        earlier = scored.kept["earlier"] if scored.kept else {}
        correct = [int(rank == 1) for rank in answer_ranks(scored.scores, retrieval.answers)]
        wall_time = time.perf_counter() - started + earlier.get("wall_time_s", 0)
        cpu_time = time.process_time() - cpu_started + earlier.get("cpu_time_s", 0)
        result = {
            "acc_at_1": sum(correct) / len(correct),
            "correct": correct,
            "wall_time_s": round(wall_time, 2),
            "cpu_time_s": round(cpu_time, 2),  # every thread's: shared cores inflate it
            "machine": here,
        }
        if earlier.get("documents"):
            result["resumed_after_documents"] = earlier["documents"]
        return result

    def __call__(self) -> dict[str, Any]:
        """Measures every pending cell and writes the record, tables and plot; returns the record."""
        record, out, args = self.record, self.out, self.args
        out.mkdir(parents=True, exist_ok=True)
        claim_work_folder(self.work, out)
        device = checked_device(args.device)
        here = machine(device)  # the record's last writer; each cell names its own, since a resumed run may move
        record.update(versions=versions(), machine=here)
        lengths = record["settings"]["lengths"]
        cells = {f"{task}-{length}": (task, length) for task in self.sets for length in lengths}

        def measured(spec: str, name: str) -> bool:
            task, length = cells[name]
            return str(length) in record["results"].get(spec, {}).get(task, {})

        pending = pending_cells(self.systems, list(cells), measured, self.work)
        interactive = sys.stderr.isatty()
        progress = tqdm(total=sum(map(len, pending.values())), desc="longembed", disable=not interactive)
        for system in ordered(self.systems):
            if not pending[system.spec]:
                continue
            loads = isinstance(system, SystemSpec)
            embedder = Embedder(system, lengths[-1], device, args.batch_tokens) if loads else None
            record["systems"][system.spec] = system_facts(system)
            for name in pending[system.spec]:
                task, length = cells[name]
                result = self.measure(system, embedder, name, self.sets[task][length], here)
                record["results"].setdefault(system.spec, {}).setdefault(task, {})[str(length)] = result
                write_record(record, out / RESULTS_FILE)
                discard_kept(kept_folder(self.work, system), name)
                progress.update()
                summary = (
                    f"Acc@1 {result['acc_at_1']:.3f} ({result['wall_time_s']:.1f} s, {result['cpu_time_s']:.1f} s CPU)"
                )
                logger.info("%s %s %d tokens: %s", system.spec, task, length, summary)
            del embedder
        progress.close()
        record["paired"] = {
            reference: paired_to(record, reference, args.bootstrap, args.bootstrap_seed)
            for reference in kept_references(record, args.paired)
        }
        write_record(record, out / RESULTS_FILE)
        (out / TABLES_FILE).write_text(format_tables(record))
        accuracy_figure(record).savefig(out / PLOT_FILE, dpi=110)
        return record


def run(args: argparse.Namespace) -> dict[str, Any]:
    return LongEmbedRetrieval(args)()


def main(argv: list[str] | None = None) -> int:
    args = longembed_parser().parse_args(sys.argv[1:] if argv is None else argv)
    record = run(args)
    print(json.dumps({"out": args.out, "systems": list(record["results"])}))
    return 0
