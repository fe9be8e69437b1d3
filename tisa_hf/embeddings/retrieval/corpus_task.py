"""The retrieval runner over one corpus (`tisa-hf qmsum`, `tisa-hf spans`): every system scores every query against
every document, and per query the rank of its document gives nDCG@10, Acc@1 and MRR@10 (`ranking.py`), with
paired intervals against the --paired references over the queries.

`CorpusRetrieval` is built as a sentence-transformers evaluator is: the data (a `Corpus`, read by the task's data
file) and the options go in the constructor, which checks everything and tokenizes every text before any model
loads; calling it measures every pending system and returns the record. A task is a data file giving the `Corpus`
and a measures file giving its `CorpusKind` and what it adds to the record (groups of queries, `query_groups.py`).

A model reads a document's token ids, cut at --max-tokens, in the way its spelling says; BM25 reads the whole text;
a hybrid fuses the two rankings (`scoring.py`). Each model system embeds the documents one by one in a fixed order
and OUT/embeddings/ keeps those done after every document, with the time and tokens spent, so an interrupted run
resumes mid-system. OUT/NAME.json is rewritten after every finished system (a rerun with the same settings
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure
from transformers import PreTrainedTokenizerBase

from ...common.machine import machine, versions
from ...common.paired import paired_per_query
from ...common.result_files import SCORES_FOLDER, check_out_folder, file_name, resumable_record, write_record
from ...common.tables import markdown_table, paired_cell
from ...errors import UsageError
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
from .ranking import MEASURE_LABELS, MEASURES, answer_ranks, per_query
from .scoring import Cell, Keeping, ordered, pending_cells, score, system_facts

logger = logging.getLogger(__name__)

# Every corpus task's scores are OUT/scores/SYSTEM/qmsum.npy, the name the first one gave them and its kept
# records hold
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
    weights loaded), the record from a call."""

    def __init__(self, kind: CorpusKind, corpus: Corpus, args: argparse.Namespace) -> None:
        check_system_names(args.systems, args.paired)
        check_out_folder(args.out)
        self.kind, self.corpus, self.args, self.out = kind, corpus, args, Path(args.out)
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
        if models:
            self.tokenizer = shared_tokenizer(models)
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
        self.cell = Cell(CELL, documents, query_ids, corpus.queries, lambda: corpus.documents)
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
                    shutil.rmtree(self.out / folder, ignore_errors=True)
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
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        record.update(versions=versions(), machine=machine(device))
        write_record(record, out / kind.results_file)  # the settings, before the first system (its embeddings resume)
        pending = pending_cells(self.systems, [CELL], lambda spec, cell: spec in record["results"], out)
        for system in [system for system in ordered(self.systems) if pending[system.spec]]:
            started, cpu_started = time.perf_counter(), time.process_time()
            measured = self.measure(system, device)
            ranks = answer_ranks(measured["scores"], self.corpus.answers)
            result = {measure: float(np.mean(per_query(measure, ranks))) for measure in MEASURES}
            result.update(ranks=ranks, wall_time_s=round(time.perf_counter() - started, 1))
            result["cpu_time_s"] = round(time.process_time() - cpu_started, 1)
            if "throughput" in measured:
                result["throughput"] = measured["throughput"]
            record["systems"][system.spec] = system_facts(system)
            record["results"][system.spec] = result
            write_record(record, out / kind.results_file)
            logger.info("%s: nDCG@10 %.3f, Acc@1 %.3f", system.spec, result["ndcg_at_10"], result["acc_at_1"])
        record["paired"] = {
            reference: paired_to(record, reference, args.bootstrap, args.bootstrap_seed) for reference in args.paired
        }
        write_record(record, out / kind.results_file)
        (out / kind.tables_file).write_text(format_tables(record, kind))
        ndcg_figure(record, kind).savefig(out / kind.plot_file, dpi=110)
        return record

    def measure(self, system: RetrievalSystem, device: torch.device) -> dict[str, Any]:
        """The system's scores (queries x documents), with its throughput for a model system."""
        if not isinstance(system, SystemSpec):
            return {"scores": score(system, self.cell, self.out).scores}
        embedder = Embedder(system, max(map(len, self.cell.documents)), device, self.args.batch_tokens)
        keeping = Keeping(
            self.out / EMBEDDINGS_FOLDER, file_name(system.spec), self.record["settings"]["tokens_sha256"]
        )
        scored = score(system, self.cell, self.out, embedder, keeping)
        documents = scored.kept
        throughput = {
            "documents": documents["documents"],
            "document_tokens": documents["tokens"],
            "embedding_wall_time_s": round(documents["wall_time_s"], 1),
            "embedding_cpu_time_s": round(documents["cpu_time_s"], 1),  # every thread's: shared cores inflate it
            "documents_per_s": round(documents["documents"] / documents["wall_time_s"], 3),
            "tokens_per_s": round(documents["tokens"] / documents["wall_time_s"], 1),
        }
        vectors = scored.scorer.vectors_per_document(self.cell.documents, documents["windows"])
        if vectors is not None:
            throughput["vectors_per_document"] = round(vectors, 1)
        return {"scores": scored.scores, "throughput": throughput}


def paired_to(record: dict[str, Any], reference: str, resamples: int, seed: int) -> dict[str, Any]:
    """Every other system's measures minus `reference`'s, over the same queries."""
    base = record["results"][reference]["ranks"]
    return {
        name: {
            measure: paired_per_query(per_query(measure, result["ranks"]), per_query(measure, base), resamples, seed)
            for measure in MEASURES
        }
        for name, result in record["results"].items()
        if name != reference
    }


def format_tables(record: dict[str, Any], kind: CorpusKind) -> str:
    """Markdown: every system's measures (x100) and throughput, the published nDCG@10, and per --paired reference
    the others' differences with their intervals."""
    settings = record["settings"]
    columns = [*MEASURE_LABELS.values(), "documents/s", "tokens/s", "minutes"]
    rows = {}
    for name, result in record["results"].items():
        speed = result.get("throughput")
        rows[name] = [f"{100 * result[measure]:.1f}" for measure in MEASURES] + (
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
        rows = {name: [paired_cell(scaled(by[m]), 1) for m in MEASURES] for name, by in paired.items()}
        title = f"Minus {reference}'s (x100, 95% bootstrap interval over queries; * excludes 0)"
        sections.append(f"{title}:\n\n{markdown_table(list(MEASURE_LABELS.values()), rows, 'system')}")
    return "\n\n".join(sections) + "\n"


def scaled(entry: dict[str, float | None]) -> dict[str, float | None]:
    return {key: None if value is None else 100 * value for key, value in entry.items()}


def ndcg_figure(record: dict[str, Any], kind: CorpusKind) -> Figure:
    """nDCG@10 of every system measured here, beside the published numbers (grey)."""
    measured = {name: 100 * result["ndcg_at_10"] for name, result in record["results"].items()}
    names = [*measured, *kind.published]
    values = [*measured.values(), *kind.published.values()]
    colours = [f"C{index % 10}" for index in range(len(measured))] + ["0.7"] * len(kind.published)
    figure = Figure(figsize=(7.0, 1.2 + 0.32 * len(names)), layout="constrained")
    axis = figure.subplots()
    axis.barh(range(len(names)), values, color=colours)
    for index, value in enumerate(values):
        axis.text(value + 0.3, index, f"{value:.1f}", va="center", fontsize=8)
    axis.set_yticks(range(len(names)), labels=names, fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel("nDCG@10 (x100)" + (f"; grey: published on {kind.published_on}" if kind.published else ""))
    settings = record["settings"]
    axis.set_title(f"{kind.title}: {settings['queries']} queries, {settings[kind.documents]} {kind.documents}")
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
