"""`tisa-hf qmsum`: LongEmbed's QMSum retrieval, real meetings of 1.5k-37k tokens (`qmsum_data.py`).

Every system scores the 1,527 summaries against the 197 meeting transcripts; per query, the rank of its meeting
gives nDCG@10 (LongEmbed's score), Acc@1 and MRR@10 (`ranking.py`). A model reads a document's token ids, cut at
--max-tokens (default 32,768: of the packaged MiniLM's tokens it cuts one meeting of 36,718), in the way its
spelling says (`systems.py`); BM25 reads the whole text; a hybrid fuses the two rankings. With --paired REF, every
other system's measures minus REF's with 95% bootstrap intervals over the queries.

A model's document embeddings are the cost (hours for a TISA model on 2 CPU cores): each system embeds the
documents one by one in a fixed order, and OUT/embeddings/ keeps those done after every document, with the time
and tokens spent, so an interrupted run resumes mid-system (a `late:` system keeps each document's MaxSim scores,
one a query, not its token vectors). OUT/qmsum.json is rewritten after every finished system (a rerun with the
same settings measures only the systems it lacks; --overwrite starts over), with each system's documents and
tokens a second; OUT/qmsum.md holds the tables and OUT/qmsum.png plots nDCG@10 beside LongEmbed's published
numbers. Everything is checked and tokenized before any model loads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure

from ..common.machine import machine, versions
from ..common.paired import paired_per_query
from ..common.result_files import check_out_folder, file_name, resumable_record, save_array, scores_path, write_record
from ..common.tables import markdown_table, paired_cell
from ..errors import UsageError
from .kept_embeddings import EMBEDDINGS_FOLDER, embed_documents
from .lexical import bm25_scores
from .longembed import ordered, system_facts
from .options import qmsum_parser
from .qmsum_data import Meetings, read_meetings
from .query_groups import by_group, group_tables
from .ranking import MEASURE_LABELS, MEASURES, answer_ranks, per_query, reciprocal_rank_fusion
from .retrieval.readouts import scorer_for
from .systems import (
    Embedder,
    HybridSpec,
    LexicalSpec,
    RetrievalSystem,
    check_hybrid_parts,
    check_system_names,
    dense_systems,
    parse_system,
    shared_tokenizer,
)

logger = logging.getLogger(__name__)

CELL = "qmsum"
# nDCG@10 x100 on LongEmbed's QMSum task (LongEmbed repository, results/*/LEMBQMSumRetrieval.json)
PUBLISHED_NDCG_AT_10 = {
    "e5-base-v2 (512)": 23.8,
    "E5-Base-4k": 35.6,
    "bge-m3 (8k)": 35.5,
    "nomic-embed-text-v1": 36.7,
    "jina-embeddings-v2-base-en (8k)": 38.9,
    "E5-Mistral-7B": 43.6,
}


@dataclass(frozen=True)
class CorpusKind:
    """How a retrieval task over a corpus names itself: its files (NAME.json, NAME.md, NAME.png), its title, what
    its documents are, and published nDCG@10 to show beside the measured ones."""

    name: str
    title: str
    documents: str
    published: dict[str, float]

    @property
    def results_file(self) -> str:
        return f"{self.name}.json"

    @property
    def tables_file(self) -> str:
        return f"{self.name}.md"

    @property
    def plot_file(self) -> str:
        return f"{self.name}.png"


QMSUM = CorpusKind("qmsum", "QMSum", "meetings", PUBLISHED_NDCG_AT_10)
LENGTH_GROUPS = (0, 8192, 16384)  # the query's meeting, in tokens: [0, 8192), [8192, 16384), 16384+


@dataclass
class Task:
    """What a run measures, checked and tokenized before any model loads."""

    systems: list[RetrievalSystem]
    meetings: Meetings
    documents: list[list[int]]  # token ids, cut at --max-tokens ([] without a model among the systems)
    query_ids: list[list[int]]
    record: dict[str, Any]


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


def cut(document: list[int], cap: int) -> list[int]:
    """The document's first `cap` tokens, its final [SEP] kept."""
    return document if len(document) <= cap else document[: cap - 1] + document[-1:]


def prepare(args: argparse.Namespace, kind: CorpusKind = QMSUM, meetings: Meetings | None = None) -> Task:
    """Checks everything and tokenizes every text; loads no weights. The corpus is QMSum's meetings read from
    --data unless `meetings` gives another."""
    check_system_names(args.systems, args.paired)
    check_out_folder(args.out)
    systems = [parse_system(spec) for spec in args.systems]
    check_hybrid_parts(systems)
    meetings = meetings or read_meetings(args.data, args.meetings)
    settings = {
        "data": str(args.data),
        kind.documents: len(meetings.documents),
        "queries": len(meetings.queries),
        "repeated_summaries": meetings.repeated_summaries,
        "texts_sha256": digest([meetings.names, meetings.documents, meetings.queries, meetings.answers]),
        "max_tokens": args.max_tokens,
    }
    documents: list[list[int]] = []
    query_ids: list[list[int]] = []
    models = dense_systems(systems)
    if models:
        tokenizer = shared_tokenizer(models)
        query_ids = tokenizer(meetings.queries)["input_ids"]
        longest_query = max(map(len, query_ids))
        if args.max_tokens < longest_query:
            raise UsageError(
                f"--max-tokens {args.max_tokens} is shorter than the longest query ({longest_query} tokens); give "
                f"at least {longest_query}."
            )
        whole = tokenizer(meetings.documents, verbose=False)["input_ids"]
        documents = [cut(document, args.max_tokens) for document in whole]
        for spec in models:
            spec.check_lengths([max(map(len, documents))])
        settings["documents_cut"] = sum(len(document) > args.max_tokens for document in whole)
        settings["document_tokens"] = {
            "mean": float(np.mean([len(d) for d in whole])),
            "max": max(map(len, whole)),
            "per_query": [len(whole[answer]) for answer in meetings.answers],  # its relevant document's, uncut
        }
        settings["tokens_sha256"] = digest([documents, query_ids])
    results = Path(args.out) / kind.results_file
    record = resumable_record(results, {key: settings[key] for key in settings if "tokens" not in key}, args.overwrite)
    if record is not None:
        old = record["settings"].get("tokens_sha256")
        if old and settings.get("tokens_sha256") and old != settings["tokens_sha256"]:
            raise UsageError(
                f"{results} was measured on other tokens (another tokenizer); choose another --out, or pass "
                "--overwrite to start over."
            )
        record["settings"].update(settings)
    elif args.overwrite:
        for folder in (EMBEDDINGS_FOLDER, "scores"):
            shutil.rmtree(Path(args.out) / folder, ignore_errors=True)
    record = record or {"settings": settings, "systems": {}, "results": {}, "paired": {}}
    return Task(systems, meetings, documents, query_ids, record)


def pending_systems(task: Task, out: Path) -> list[RetrievalSystem]:
    """The systems to measure, hybrids last: those without a result, and the parts of a hybrid to measure whose
    scores `scores/` lacks."""
    pending = {system.spec for system in task.systems if system.spec not in task.record["results"]}
    for system in task.systems:
        if isinstance(system, HybridSpec) and system.spec in pending:
            pending |= {part for part in (system.lexical, system.dense) if not scores_path(out, part, CELL).is_file()}
    return [system for system in ordered(task.systems) if system.spec in pending]


def system_scores(system: RetrievalSystem, task: Task, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The system's scores (queries x documents), with its throughput for a model."""
    if isinstance(system, LexicalSpec):
        return {"scores": bm25_scores(task.meetings.documents, task.meetings.queries, system.tokenizer)}
    if isinstance(system, HybridSpec):
        parts = (np.load(scores_path(out, part, CELL)) for part in (system.lexical, system.dense))
        return {"scores": reciprocal_rank_fusion(*parts)}
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    scorer = scorer_for(Embedder(system, max(map(len, task.documents)), device, args.batch_tokens), task.query_ids)
    fingerprint = task.record["settings"]["tokens_sha256"]
    folder = out / EMBEDDINGS_FOLDER
    documents = embed_documents(scorer.keep, task.documents, folder, file_name(system.spec), fingerprint)
    throughput = {
        "documents": documents["documents"],
        "document_tokens": documents["tokens"],
        "embedding_wall_time_s": round(documents["wall_time_s"], 1),
        "embedding_cpu_time_s": round(documents["cpu_time_s"], 1),  # every thread's: shared cores inflate it
        "documents_per_s": round(documents["documents"] / documents["wall_time_s"], 3),
        "tokens_per_s": round(documents["tokens"] / documents["wall_time_s"], 1),
    }
    vectors = scorer.vectors_per_document(task.documents, documents["windows"])
    if vectors is not None:
        throughput["vectors_per_document"] = round(vectors, 1)
    return {"scores": scorer.scores(documents["embeddings"], documents["windows"]), "throughput": throughput}


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


def format_tables(record: dict[str, Any], kind: CorpusKind = QMSUM) -> str:
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
        sections.append(f"Published on LongEmbed's QMSum:\n\n{markdown_table(['nDCG@10'], published, 'model')}")
    for reference, paired in record["paired"].items():
        rows = {name: [paired_cell(scaled(by[m]), 1) for m in MEASURES] for name, by in paired.items()}
        title = f"Minus {reference}'s (x100, 95% bootstrap interval over queries; * excludes 0)"
        sections.append(f"{title}:\n\n{markdown_table(list(MEASURE_LABELS.values()), rows, 'system')}")
    return "\n\n".join(sections) + "\n"


def scaled(entry: dict[str, float | None]) -> dict[str, float | None]:
    return {key: None if value is None else 100 * value for key, value in entry.items()}


def ndcg_figure(record: dict[str, Any], kind: CorpusKind = QMSUM) -> Figure:
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
    axis.set_xlabel("nDCG@10 (x100)" + ("; grey: published on LongEmbed's QMSum" if kind.published else ""))
    settings = record["settings"]
    axis.set_title(f"{kind.title}: {settings['queries']} queries, {settings[kind.documents]} {kind.documents}")
    return figure


def run(args: argparse.Namespace, kind: CorpusKind = QMSUM, meetings: Meetings | None = None) -> dict[str, Any]:
    """Measures every pending system on the corpus (QMSum's meetings unless `meetings` gives another) and writes
    the record, tables and plot."""
    task = prepare(args, kind, meetings)
    record = task.record
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    record.update(versions=versions(), machine=machine(device))
    write_record(record, out / kind.results_file)  # the settings, before the first system (its embeddings resume)
    for system in pending_systems(task, out):
        started, cpu_started = time.perf_counter(), time.process_time()
        measured = system_scores(system, task, out, args)
        save_array(scores_path(out, system.spec, CELL), measured["scores"])
        ranks = answer_ranks(measured["scores"], task.meetings.answers)
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


def main(argv: list[str] | None = None) -> int:
    args = qmsum_parser().parse_args(sys.argv[1:] if argv is None else argv)
    record = run(args)
    lengths = record["settings"].get("document_tokens", {}).get("per_query")
    if lengths:  # counted where a model is among the systems
        out = Path(args.out)
        record["by_length"] = by_group(record, lengths, LENGTH_GROUPS, "tokens")
        write_record(record, out / QMSUM.results_file)
        with (out / QMSUM.tables_file).open("a") as tables:
            tables.write("\n" + group_tables(record["by_length"], "the length of the query's meeting"))
    for name, result in record["results"].items():
        print(f"{name}: nDCG@10 {100 * result['ndcg_at_10']:.1f}, Acc@1 {100 * result['acc_at_1']:.1f}")
    return 0
