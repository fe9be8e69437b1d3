"""The retrieval runner over one corpus (`tisa-hf qmsum`, `tisa-hf spans`, `tisa-hf qmsum-passages`): every system
scores every query against every candidate of a cell, and the task's judge measures the scores (`ranking.py`: the
rank of each query's one document gives nDCG@10, Acc@1 and MRR@10; several relevant windows give nDCG@10 and
Recall@10/@50), with paired intervals against the --paired references over the queries.

`CorpusRetrieval` is built as a sentence-transformers evaluator is: the data (a `Corpus`, read by the task's data
file) and the options go in the constructor, which checks everything and tokenizes every text before any model
loads; calling it measures every pending system and returns the record. A task is a data file giving the `Corpus`
and a measures file giving its `CorpusKind`, its cells (`CellsOf`; by default the one cell `qmsum` of the
documents, each query's one relevant document its answer) and what it adds to the record (groups of queries,
`query_groups.py`). A task of that one cell keeps each system's measures at the top of its result; a task of several
cells keeps them per cell. A model system is loaded once and scores every cell; its kept rows serve them all.

A model reads a document's token ids, cut at --max-tokens, in the way its spelling says; BM25 reads the whole text;
a hybrid fuses the two rankings (`scoring.py`). Each model system embeds the documents one by one in a fixed order
and WORK/embeddings/ keeps those done after every document, with the time and tokens spent, so an interrupted run
resumes mid-system (WORK: --work, by default --out; WORK/scores/ keeps every system's scores, which a hybrid of a
later call fuses). OUT/NAME.json is rewritten after every finished system (a rerun with the same settings
measures only the systems it lacks; --overwrite starts over), with each model system's documents and tokens a
second; OUT/NAME.md holds the tables and OUT/NAME.png plots nDCG@10, beside published numbers where there are.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure
from transformers import PreTrainedTokenizerBase

from ...common.machine import checked_device, machine, versions
from ...common.paired import kept_references, paired_per_query
from ...common.result_files import (
    SCORES_FOLDER,
    check_out_folder,
    check_work_folder,
    claim_work_folder,
    file_name,
    resumable_record,
    write_record,
)
from ...common.tables import markdown_table, paired_cell
from ...errors import UsageError, note_kept
from ..systems import (
    Embedder,
    RetrievalSystem,
    SystemSpec,
    check_hybrid_parts,
    check_system_names,
    dense_systems,
    parse_system,
    shared_tokenizer,
)
from .kept_embeddings import EMBEDDINGS_FOLDER
from .query_groups import Groups, group_tables
from .ranking import Judge, OneRelevant
from .scoring import Cell, Keeping, ordered, pending_cells, score, system_facts

logger = logging.getLogger(__name__)

# The cell of every task whose candidates are its documents: its scores are WORK/scores/SYSTEM/qmsum.npy, the name
# the first task gave them and its kept records hold
CELL = "qmsum"


@dataclass
class Corpus:
    """The documents (names, texts) and the queries with the index of each one's document."""

    names: list[str]
    documents: list[str]
    queries: list[str]
    answers: list[int]
    repeated_summaries: int  # queries found again for another (or the same) document, asked once


@dataclass(frozen=True)
class JudgedCell:
    """A cell of a task and the judge of its scores."""

    cell: Cell
    judge: Judge


@dataclass
class TaskCells:
    """A task's cells, and what its record's settings say of them (counts of what they were built from)."""

    cells: list[JudgedCell]
    settings: dict[str, Any] = field(default_factory=dict)


# A task's cells from its corpus, the tokenizer (None where no system has one), the documents' token ids as the
# models read them (cut at --max-tokens; none without a tokenizer) and the queries' token ids
CellsOf = Callable[[Corpus, PreTrainedTokenizerBase | None, list[list[int]], list[list[int]]], TaskCells]


def one_cell(
    corpus: Corpus, tokenizer: PreTrainedTokenizerBase | None, documents: list[list[int]], query_ids: list[list[int]]
) -> TaskCells:
    """The cell of every task whose candidates are its documents, each query's one relevant document its answer."""
    cell = Cell(CELL, documents, query_ids, corpus.queries, lambda: corpus.documents)
    return TaskCells([JudgedCell(cell, OneRelevant(corpus.answers))])


@dataclass(frozen=True)
class CorpusKind:
    """How a retrieval task over a corpus names itself: its files (NAME.json, NAME.md, NAME.png), its title, what
    its documents are, and published nDCG@10 to show beside the measured ones, with where they were published."""

    name: str
    title: str
    documents: str
    published: dict[str, float]
    published_on: str = ""

    @property
    def results_file(self) -> str:
        return f"{self.name}.json"

    @property
    def tables_file(self) -> str:
        return f"{self.name}.md"

    @property
    def plot_file(self) -> str:
        return f"{self.name}.png"


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


def cut(document: list[int], cap: int) -> list[int]:
    """The document's first `cap` tokens, its final [SEP] kept."""
    return document if len(document) <= cap else document[: cap - 1] + document[-1:]


class CorpusRetrieval:
    """A retrieval task over one corpus: the data and options in the constructor (checked and tokenized there, no
    weights loaded), the record from a call. `cells` builds the task's cells; `tokenizer_of` names a model whose
    tokenizer cuts the texts even where no model system is given (a task whose cells are cut in tokens), which
    every model system must share."""

    def __init__(
        self,
        kind: CorpusKind,
        corpus: Corpus,
        args: argparse.Namespace,
        cells: CellsOf = one_cell,
        tokenizer_of: str | None = None,
    ) -> None:
        check_system_names(args.systems, args.paired)
        check_out_folder(args.out)
        if args.token_states:
            check_out_folder(args.token_states, "--token-states")
        if args.work:
            check_out_folder(args.work, "--work")
        self.kind, self.corpus, self.args, self.out = kind, corpus, args, Path(args.out)
        self.work = Path(args.work or args.out)  # the kept embeddings and scores
        check_work_folder(self.work, self.out)
        self.systems = [parse_system(spec) for spec in args.systems]
        check_hybrid_parts(self.systems)
        settings = {
            "data": str(args.data),
            kind.documents: len(corpus.documents),
            "queries": len(corpus.queries),
            "repeated_summaries": corpus.repeated_summaries,
            "texts_sha256": digest([corpus.names, corpus.documents, corpus.queries, corpus.answers]),
            "max_tokens": args.max_tokens,
        }
        self.tokenizer: PreTrainedTokenizerBase | None = None
        documents: list[list[int]] = []
        query_ids: list[list[int]] = []
        models = dense_systems(self.systems)
        readers = [*([SystemSpec.parse(tokenizer_of)] if tokenizer_of else []), *models]
        if readers:
            self.tokenizer = shared_tokenizer(readers)
            query_ids = self.tokenizer(corpus.queries)["input_ids"]
            longest_query = max(map(len, query_ids))
            if args.max_tokens < longest_query:
                raise UsageError(
                    f"--max-tokens {args.max_tokens} is shorter than the longest query ({longest_query} tokens); "
                    f"give at least {longest_query}."
                )
            whole = self.tokenizer(corpus.documents, verbose=False)["input_ids"]
            documents = [cut(document, args.max_tokens) for document in whole]
            for spec in models:
                spec.check_lengths([max(map(len, documents))])
            settings["documents_cut"] = sum(len(document) > args.max_tokens for document in whole)
            settings["document_tokens"] = {
                "mean": float(np.mean([len(d) for d in whole])),
                "max": max(map(len, whole)),
                "per_query": [len(whole[answer]) for answer in corpus.answers],  # its relevant document's, uncut
            }
            settings["tokens_sha256"] = digest([documents, query_ids])
        task_cells = cells(corpus, self.tokenizer, documents, query_ids)
        settings.update(task_cells.settings)
        self.cells = task_cells.cells
        self.record = self.resumed(settings) or {"settings": settings, "systems": {}, "results": {}, "paired": {}}

    def resumed(self, settings: dict[str, Any]) -> dict[str, Any] | None:
        """The record to resume: one of the same settings and tokens; None to start afresh (with --overwrite, the
        kept embeddings and scores removed)."""
        results = self.out / self.kind.results_file
        wanted = {key: settings[key] for key in settings if "tokens" not in key}
        record = resumable_record(results, wanted, self.args.overwrite)
        if record is None:
            if self.args.overwrite:
                for folder in (EMBEDDINGS_FOLDER, SCORES_FOLDER):
                    shutil.rmtree(self.work / folder, ignore_errors=True)
            return None
        old = record["settings"].get("tokens_sha256")
        if old and settings.get("tokens_sha256") and old != settings["tokens_sha256"]:
            raise UsageError(
                f"{results} was measured on other tokens (another tokenizer); choose another --out, or pass "
                "--overwrite to start over."
            )
        record["settings"].update(settings)
        return record

    def __call__(self) -> dict[str, Any]:
        """Measures every pending system and writes the record, tables and plot; returns the record."""
        record, out, kind, args = self.record, self.out, self.kind, self.args
        out.mkdir(parents=True, exist_ok=True)
        claim_work_folder(self.work, out)
        device = checked_device(args.device)
        record.update(versions=versions(), machine=machine(device))
        write_record(record, out / kind.results_file)  # the settings, before the first system (its embeddings resume)
        names = [judged.cell.name for judged in self.cells]
        pending = pending_cells(self.systems, names, lambda spec, cell: spec in record["results"], self.work)
        for system in [system for system in ordered(self.systems) if pending[system.spec]]:
            started, cpu_started = time.perf_counter(), time.process_time()
            measured = self.measure(system, device)
            result = shaped(measured["results"], names)
            result.update(wall_time_s=round(time.perf_counter() - started, 1))
            result["cpu_time_s"] = round(time.process_time() - cpu_started, 1)
            if "throughput" in measured:
                result["throughput"] = measured["throughput"]
            record["systems"][system.spec] = system_facts(system)
            record["results"][system.spec] = result
            write_record(record, out / kind.results_file)
            done = len(record["results"])
            note_kept(
                out / kind.results_file, f"the results of {done} system{'s' * (done > 1)} in {out / kind.results_file}"
            )
            for name, measures in by_cell(result, names).items():
                summary = ", ".join(f"{label} {measures[key]:.3f}" for key, label in self.judges[name].labels.items())
                logger.info("%s%s: %s", system.spec, "" if names == [CELL] else f" {name}", summary)
        record["paired"] = {
            reference: paired_to(record, reference, self.judges, args.bootstrap, args.bootstrap_seed)
            for reference in kept_references(record, args.paired)
        }
        write_record(record, out / kind.results_file)
        (out / kind.tables_file).write_text(format_tables(record, kind, self.judges))
        ndcg_figure(record, kind, names).savefig(out / kind.plot_file, dpi=110)
        return record

    @property
    def judges(self) -> dict[str, Judge]:
        return {judged.cell.name: judged.judge for judged in self.cells}

    def measure(self, system: RetrievalSystem, device: torch.device) -> dict[str, Any]:
        """The system's result in every cell, with its throughput for a model system (its first cell's documents:
        the others reuse the rows kept then)."""
        if not isinstance(system, SystemSpec):
            return {
                "results": {
                    judged.cell.name: judged.judge.result(score(system, judged.cell, self.work).scores)
                    for judged in self.cells
                }
            }
        documents = self.cells[0].cell.documents
        kept_states = Path(self.args.token_states) if self.args.token_states else None
        embedder = Embedder(system, max(map(len, documents)), device, self.args.batch_tokens, kept_states)
        keeping = Keeping(
            self.work / EMBEDDINGS_FOLDER, file_name(system.spec), self.record["settings"]["tokens_sha256"]
        )
        scored = [score(system, judged.cell, self.work, embedder, keeping) for judged in self.cells]
        results = {
            judged.cell.name: judged.judge.result(one.scores) for judged, one in zip(self.cells, scored, strict=True)
        }
        documents = scored[0].kept
        throughput = {
            "documents": documents["documents"],
            "document_tokens": documents["tokens"],
            "embedding_wall_time_s": round(documents["wall_time_s"], 1),
            "embedding_cpu_time_s": round(documents["cpu_time_s"], 1),  # every thread's: shared cores inflate it
            "documents_per_s": round(documents["documents"] / documents["wall_time_s"], 3),
            "tokens_per_s": round(documents["tokens"] / documents["wall_time_s"], 1),
        }
        if embedder.kept_states is not None:
            throughput["whole_reads_reused"] = embedder.kept_states.reused  # documents read from --token-states
        vectors = scored[0].scorer.vectors_per_document(self.cells[0].cell.documents, documents["windows"])
        if vectors is not None:
            throughput["vectors_per_document"] = round(vectors, 1)
        return {"results": results, "throughput": throughput}


def by_cell(result: dict[str, Any], names: list[str]) -> dict[str, dict[str, Any]]:
    """A system's result (or paired differences) per cell: a task of the one cell `qmsum` keeps them flat."""
    return {CELL: result} if names == [CELL] else {name: result[name] for name in names}


def shaped(per_cell: dict[str, dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """The record's shape of a result given per cell (`by_cell`'s inverse)."""
    return dict(per_cell[CELL]) if names == [CELL] else dict(per_cell)


def paired_to(
    record: dict[str, Any], reference: str, judges: dict[str, Judge], resamples: int, seed: int
) -> dict[str, Any]:
    """Every other system's measures minus `reference`'s, per cell, over the same queries."""
    names = list(judges)
    base = by_cell(record["results"][reference], names)
    paired = {}
    for name, result in record["results"].items():
        if name == reference:
            continue
        per_cell = by_cell(result, names)
        paired[name] = shaped(
            {
                cell: {
                    measure: paired_per_query(
                        judge.per_query(per_cell[cell], measure), judge.per_query(base[cell], measure), resamples, seed
                    )
                    for measure in judge.labels
                }
                for cell, judge in judges.items()
            },
            names,
        )
    return paired


def measure_columns(judges: dict[str, Judge]) -> list[tuple[str, str, str]]:
    """(cell, measure, column label) of every measure of every cell; the cell named only where there are several."""
    several = list(judges) != [CELL]
    return [
        (cell, measure, f"{label} {cell}" if several else label)
        for cell, judge in judges.items()
        for measure, label in judge.labels.items()
    ]


def format_tables(record: dict[str, Any], kind: CorpusKind, judges: dict[str, Judge]) -> str:
    """Markdown: every system's measures (x100) and throughput, the published nDCG@10, and per --paired reference
    the others' differences with their intervals."""
    settings = record["settings"]
    names, measures = list(judges), measure_columns(judges)
    columns = [*(label for _, _, label in measures), "documents/s", "tokens/s", "minutes"]
    rows = {}
    for name, result in record["results"].items():
        speed = result.get("throughput")
        per_cell = by_cell(result, names)
        rows[name] = [f"{100 * per_cell[cell][measure]:.1f}" for cell, measure, _ in measures] + (
            [f"{speed['documents_per_s']:.2f}", f"{speed['tokens_per_s']:,.0f}"] if speed else ["–", "–"]
        )
        rows[name].append(f"{result['wall_time_s'] / 60:.1f}")
    title = (
        f"{kind.title}: {settings['queries']} queries, {settings[kind.documents]} {kind.documents}, documents cut at "
        f"{settings['max_tokens']} tokens for the models ({settings.get('documents_cut', 0)} cut); measures x100, "
        "documents and tokens a second of the document embedding, minutes of the whole system"
    )
    sections = [f"{title}:\n\n{markdown_table(columns, rows, 'system')}"]
    if kind.published:
        published = {name: [f"{value:.1f}"] for name, value in kind.published.items()}
        sections.append(f"Published on {kind.published_on}:\n\n{markdown_table(['nDCG@10'], published, 'model')}")
    for reference, paired in record["paired"].items():
        rows = {
            name: [paired_cell(scaled(by_cell(by, names)[cell][measure]), 1) for cell, measure, _ in measures]
            for name, by in paired.items()
        }
        title = f"Minus {reference}'s (x100, 95% bootstrap interval over queries; * excludes 0)"
        labels = [label for _, _, label in measures]
        sections.append(f"{title}:\n\n{markdown_table(labels, rows, 'system')}")
    return "\n\n".join(sections) + "\n"


def scaled(entry: dict[str, float | None]) -> dict[str, float | None]:
    return {key: None if value is None else 100 * value for key, value in entry.items()}


def ndcg_figure(record: dict[str, Any], kind: CorpusKind, cells: list[str]) -> Figure:
    """nDCG@10 of every system measured here, beside the published numbers (grey); a panel a cell."""
    settings = record["settings"]
    labels = [*record["results"], *kind.published]
    figure = Figure(figsize=(7.0 * len(cells), 1.2 + 0.32 * len(labels)), layout="constrained")
    axes = [figure.subplots()] if len(cells) == 1 else figure.subplots(1, len(cells))
    for axis, cell in zip(axes, cells, strict=True):
        measured = [100 * by_cell(result, cells)[cell]["ndcg_at_10"] for result in record["results"].values()]
        values = [*measured, *kind.published.values()]
        colours = [f"C{index % 10}" for index in range(len(measured))] + ["0.7"] * len(kind.published)
        axis.barh(range(len(labels)), values, color=colours)
        for index, value in enumerate(values):
            axis.text(value + 0.3, index, f"{value:.1f}", va="center", fontsize=8)
        axis.set_yticks(range(len(labels)), labels=labels, fontsize=8)
        axis.invert_yaxis()
        axis.set_xlabel("nDCG@10 (x100)" + (f"; grey: published on {kind.published_on}" if kind.published else ""))
        title = f"{kind.title}: {settings['queries']} queries, {settings[kind.documents]} {kind.documents}"
        axis.set_title(title if cells == [CELL] else f"{title}, {cell}")
    return figure


def add_groups(record: dict[str, Any], kind: CorpusKind, out: Path, key: str, groups: Groups, grouped_by: str) -> None:
    """Adds a task's groups of queries (`query_groups.by_group`) to the record as `key`, and their tables (titled
    by `grouped_by`) to its tables."""
    record[key] = groups
    write_record(record, out / kind.results_file)
    with (out / kind.tables_file).open("a") as tables:
        tables.write("\n" + group_tables(groups, grouped_by))


def print_summary(record: dict[str, Any]) -> None:
    for name, result in record["results"].items():
        print(f"{name}: nDCG@10 {100 * result['ndcg_at_10']:.1f}, Acc@1 {100 * result['acc_at_1']:.1f}")
