"""`tisa-hf index` and `tisa-hf search` on LongEmbed's QMSum, every measurement in one resumable run: the index
(build time, bytes a token and in all), nDCG@10 of each storage and candidate stage and of convex fusion, paired
against BM25, and the search time a query on the CPU.

Cells, each recorded in OUT/cells/NAME.json as it finishes and skipped by a rerun (`--work` keeps what they are
made of: the model folder, the indexes, the queries' vectors, the score matrices):
- `fusion-weight`: convex fusion's weight, chosen on the development task, never on QMSum: `tisa-hf spans bm25
  late:SYSTEM` on WikiText-2's test articles with passages of `--dev-span-words` words (at the default 48, BM25
  finds every passage and every weight ties), the weight of the best nDCG@10 on a grid of 0.05 (the smallest
  among ties: the nearest to BM25 alone);
- `index-float16`: the one encoding of the meetings (cut at 32,768 tokens, as `tisa-hf qmsum` cuts them) by
  `tisa-hf index`, with the token candidate stage; `index-int8`, `index-pq64`, `index-pq32`: the same vectors
  stored otherwise (`recompress`, no model);
- `queries`: the 1,527 summaries' token vectors, encoded once;
- `ndcg-NAME`: nDCG@10 over every summary of BM25, exact MaxSim per storage, each candidate stage (BM25 or the token
  stage, top N) then exact MaxSim, and convex fusion (over every meeting, and over BM25's top N), each with its
  per-query values and its paired difference to BM25 (the project's bootstrap over queries);
- `latency-STORAGE` (timed after the fp16 cells and before the compressed storages' exhaustive passes, which
  only add nDCG cells): `--latency-queries` summaries searched one at a time by the search command's own functions
  (encoding the query, apart too, and scoring; model, BM25 and stages loaded once) on the `--latency-storage`
  index, the configurations interleaved query by query, in the threads the process is given (run it under
  `taskset -c 0,1` with OMP_NUM_THREADS=2 for two cores).

The summary is OUT/search-qmsum.json and OUT/search-qmsum.md.

    OMP_NUM_THREADS=2 taskset -c 0,1 python scripts/qmsum_search.py --model runs/adapt-minilm/s5-all \\
        --work runs/qmsum-search --out docs/results/longdoc/search-qmsum-s5-all
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import tisa_hf
from tisa_hf.commands.cli import entry
from tisa_hf.common.paired import paired_per_query
from tisa_hf.common.result_files import scores_path, write_record
from tisa_hf.embeddings import to_tisa_sentence_transformer
from tisa_hf.embeddings.lexical import query_scores
from tisa_hf.embeddings.retrieval.corpus_task import CELL
from tisa_hf.embeddings.retrieval.qmsum_data import read_meetings
from tisa_hf.embeddings.retrieval.ranking import (
    answer_ranks,
    chosen_weight,
    convex_fusion,
    convex_weight_grid,
    ndcg_at_10,
)
from tisa_hf.embeddings.retrieval.span_data import read_span_task
from tisa_hf.multivector import save_multi_vector_encoder
from tisa_hf.multivector.index import recompress
from tisa_hf.multivector.index_folder import BM25_TOKENIZER, StoredVectors, finished_index
from tisa_hf.multivector.search import (
    TokenStage,
    candidate_scores,
    encode_queries,
    exact_scores,
    load_bm25,
    top_documents,
)

DOCUMENT_TOKENS = 32_768
STORAGES = ("float16", "int8", "pq64", "pq32")
UNADAPTED = "tisa:replace:5:minilm"


class Cells:
    """OUT/cells/NAME.json: a cell's record, written once it is finished; `done(name)` gives it back."""

    def __init__(self, out: Path) -> None:
        self.folder = out / "cells"
        self.folder.mkdir(parents=True, exist_ok=True)

    def done(self, name: str) -> dict[str, Any] | None:
        path = self.folder / f"{name}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def keep(self, name: str, record: dict[str, Any]) -> dict[str, Any]:
        write_record(record, self.folder / f"{name}.json")
        return record


def ndcg(scores: np.ndarray, answers: list[int]) -> list[float]:
    return [100 * ndcg_at_10(rank) for rank in answer_ranks(scores, answers)]


def choose_weight(args: argparse.Namespace, cells: Cells, system: str) -> dict[str, Any]:
    """`fusion-weight`: the development task's best convex weight for BM25 and `system`."""
    dev = Path(args.work) / "dev-spans"
    spans_argv = ["bm25", system, "--span-words", str(args.dev_span_words), "--out", str(dev)]
    entry("spans")(spans_argv + (["--articles", str(args.dev_articles)] if args.dev_articles else []))
    answers = read_span_task(args.dev_data, span_words=args.dev_span_words, limit=args.dev_articles).answers
    grid = convex_weight_grid(*(np.load(scores_path(dev, name, CELL)) for name in ("bm25", system)), answers)
    task = f"spans, {args.dev_span_words}-word passages"
    return {"task": task, "system": system, "grid": grid, "weight": chosen_weight(grid)}


def build_indexes(args: argparse.Namespace, cells: Cells, meetings) -> dict[str, Path]:
    """The meetings encoded once (`index-float16`), and stored each other way from those vectors."""
    work = Path(args.work)
    corpus = work / "meetings.jsonl"
    if not corpus.is_file():
        corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in meetings.documents))
    folders = {storage: work / f"index-{storage}" for storage in STORAGES}
    if cells.done("index-float16") is None:
        started = time.perf_counter()
        entry("index")([str(work / "multi-vector"), "--input", str(corpus), "--out", str(folders["float16"]),
                        "--devices", args.device, "--batch-size", "1", "--part-size", str(args.part_size),
                        "--token-centroids", str(args.token_centroids)])  # fmt: skip
        cells.keep("index-float16", index_facts(folders["float16"], time.perf_counter() - started))
    for storage in STORAGES[1:]:
        if cells.done(f"index-{storage}") is None:
            started = time.perf_counter()
            recompress(str(folders["float16"]), folders[storage], storage)
            cells.keep(f"index-{storage}", index_facts(folders[storage], time.perf_counter() - started))
    return folders


def index_facts(folder: Path, wall_s: float) -> dict[str, Any]:
    record = finished_index(str(folder))
    facts = ("documents", "vectors", "bytes_per_token", "index_bytes", "throughput", "devices")
    return {"wall_s": round(wall_s, 1), **{fact: record.get(fact) for fact in facts}}


def query_vectors(args: argparse.Namespace, cells: Cells, model, queries: list[str]) -> list[np.ndarray]:
    """Every summary's token vectors, encoded once and kept in --work."""
    path = Path(args.work) / "queries.npz"
    if cells.done("queries") is None:
        started = time.perf_counter()
        vectors = model.encode_query(queries, convert_to_numpy=True, batch_size=32, show_progress_bar=False)
        np.savez(path, rows=np.concatenate(vectors), counts=[len(rows) for rows in vectors])
        cells.keep("queries", {"queries": len(queries), "wall_s": round(time.perf_counter() - started, 1)})
    kept = np.load(path)
    return np.split(kept["rows"], np.cumsum(kept["counts"])[:-1])


def scored(args: argparse.Namespace, name: str, compute) -> np.ndarray:
    """A score matrix kept in --work/scores (the hours of exact MaxSim are not paid twice)."""
    path = Path(args.work) / "scores" / f"{name}.npy"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, compute())
    return np.load(path)


class NdcgCells:
    """The `ndcg-NAME` cells: nDCG@10 per query and its paired difference to BM25, each recorded as soon as its
    scores exist, so that an interrupted run keeps what it finished."""

    def __init__(self, args: argparse.Namespace, cells: Cells, answers: list[int], bm25: np.ndarray) -> None:
        self.args, self.cells, self.answers = args, cells, answers
        self.reference = ndcg(bm25, answers)
        self.results: dict[str, dict[str, Any]] = {}

    def measure(self, name: str, scores: Callable[[], np.ndarray]) -> None:
        """Records `name` from `scores()`, called only where the cell is not finished yet."""
        if (record := self.cells.done(f"ndcg-{name}")) is None:
            values = ndcg(scores(), self.answers)
            record = self.cells.keep(
                f"ndcg-{name}",
                {
                    "ndcg_at_10": float(np.mean(values)),
                    "per_query": values,
                    "minus_bm25": paired_per_query(values, self.reference, self.args.resamples, 0),
                },
            )
        self.results[name] = {key: value for key, value in record.items() if key != "per_query"}


def bm25_scores(args: argparse.Namespace, meetings, folders: dict[str, Path]) -> np.ndarray:
    def compute() -> np.ndarray:
        index = load_bm25(str(folders["float16"]))
        return query_scores(index, meetings.queries, BM25_TOKENIZER, len(meetings.documents))

    return scored(args, "bm25", compute)


def float16_cells(args, ndcg_cells: NdcgCells, meetings, folders, vectors, weight, bm25: np.ndarray) -> None:
    """BM25, exact MaxSim on the fp16 index, the candidate stages and the fusions."""
    index = str(folders["float16"])
    record = finished_index(index)
    store = StoredVectors(index, record)
    exact = functools.cache(lambda: scored(args, "exact-float16", lambda: exact_scores(vectors, store, device(args))))
    ndcg_cells.measure("bm25", lambda: bm25)
    ndcg_cells.measure("exact-float16", exact)
    ndcg_cells.measure(f"convex-{weight}", lambda: convex_fusion(bm25, exact(), weight))
    stage = TokenStage(index, record, args.probes)
    for count in args.candidates:
        candidate_cells(args, ndcg_cells, meetings.answers, store, stage, vectors, weight, bm25, count)


def candidate_cells(args, ndcg_cells: NdcgCells, answers, store, stage, vectors, weight, bm25, count: int) -> None:
    """Each query's top `count` meetings by BM25 and by the token stage, then exact MaxSim; fusion over BM25's."""
    reranked = functools.cache(lambda: candidate_scores(vectors, top_documents(bm25, count), store, device(args)))
    tokens = functools.cache(lambda: np.stack([stage.candidates(query, count) for query in vectors]))

    def fused_over_candidates() -> np.ndarray:
        scores = reranked()
        return convex_fusion(np.where(np.isfinite(scores), bm25, -np.inf), scores, weight)

    ndcg_cells.measure(f"bm25-top{count}", reranked)
    ndcg_cells.measure(f"convex-{weight}-bm25-top{count}", fused_over_candidates)
    ndcg_cells.measure(f"tokens-top{count}", lambda: candidate_scores(vectors, tokens(), store, device(args)))
    if ndcg_cells.cells.done(f"recall-tokens-top{count}") is None:
        recall = [float(answer in row) for answer, row in zip(answers, tokens(), strict=True)]
        ndcg_cells.cells.keep(f"recall-tokens-top{count}", {"recall": float(np.mean(recall)), "per_query": recall})


def device(args: argparse.Namespace) -> torch.device | None:
    """Where the exhaustive products run: None is numpy on the CPU."""
    return None if args.device == "cpu" else torch.device(args.device)


def compressed_cells(args, ndcg_cells: NdcgCells, folders, vectors) -> None:
    """Exact MaxSim on each compressed index: an exhaustive pass each (about half an hour on two cores)."""
    for storage in STORAGES[1:]:
        store = StoredVectors(str(folders[storage]), finished_index(str(folders[storage])))
        exhaustive = functools.partial(exact_scores, vectors, store, device(args))
        ndcg_cells.measure(f"exact-{storage}", functools.partial(scored, args, f"exact-{storage}", exhaustive))


def latency(args, cells, model, meetings, folders, weight) -> dict[str, Any]:
    """`latency-STORAGE`: seconds a query, searched one at a time, the configurations interleaved."""
    cell = f"latency-{args.latency_storage}"
    if (done := cells.done(cell)) is not None:
        return done
    index = str(folders[args.latency_storage])
    record = finished_index(index)
    stored, bm25 = StoredVectors(index, record), load_bm25(index)
    stage = TokenStage(str(folders["float16"]), finished_index(str(folders["float16"])), args.probes)
    count = args.latency_candidates
    step = max(1, len(meetings.queries) // args.latency_queries)
    sample = meetings.queries[::step][: args.latency_queries]

    def search(query: str, how: str) -> float:
        """Searches as `how` says; returns the seconds the query's encoding took."""
        started = time.perf_counter()
        vectors = encode_queries(model, [query])
        encoding = time.perf_counter() - started
        if how == "exact":
            scores = exact_scores(vectors, stored, None)
        elif how == "tokens":
            scores = candidate_scores(vectors, stage.candidates(vectors[0], count)[None], stored, None)
        else:
            lexical = query_scores(bm25, [query], BM25_TOKENIZER, len(stored))
            scores = candidate_scores(vectors, top_documents(lexical, count), stored, None)
            if how == "fused":
                scores = convex_fusion(np.where(np.isfinite(scores), lexical, -np.inf), scores, weight)
        top_documents(scores, 10)
        return encoding

    seconds: dict[str, list[float]] = {how: [] for how in ("exact", "bm25", "tokens", "fused")}
    encoding: list[float] = []
    for number, query in enumerate(sample):
        for how in seconds:
            if how == "exact" and number >= args.latency_exact_queries:
                continue  # seconds a query of exhaustive search: a few are enough to place it
            started = time.perf_counter()
            encoding.append(search(query, how))
            seconds[how].append(time.perf_counter() - started)
    summary = {
        how: {
            "queries": len(values),
            "p50_ms": round(1000 * statistics.median(values)),
            "p95_ms": round(1000 * float(np.percentile(values, 95))),
        }
        for how, values in {**seconds, "encoding_the_query": encoding}.items()
    }
    return cells.keep(
        cell,
        {
            "storage": args.latency_storage,
            "candidates": count,
            "threads": torch.get_num_threads(),
            "load_average": [round(load, 1) for load in os.getloadavg()],
            **summary,
        },
    )


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    write_record(summary, out / "search-qmsum.json")
    lines = ["| system | nDCG@10 | minus BM25 [95% interval] |", "|---|---:|---:|"]
    for name, result in summary["ndcg"].items():
        paired = result["minus_bm25"]
        interval = "" if paired["low"] is None else f" [{paired['low']:+.1f}, {paired['high']:+.1f}]"
        lines.append(f"| {name} | {result['ndcg_at_10']:.1f} | {paired['difference']:+.1f}{interval} |")
    (out / "search-qmsum.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/longdoc/qmsum", help="QMSum's folder (default: %(default)s).")
    parser.add_argument(
        "--dev-data",
        default="../shared/text/wikitext-2/test.txt",
        help="The development task's WikiText, where the fusion weight is chosen (default: %(default)s).",
    )
    parser.add_argument("--work", required=True, help="Folder of the model, indexes, vectors and score matrices.")
    parser.add_argument("--out", required=True, help="Folder of the cells' records and the summary.")
    parser.add_argument("--model", help=f"A TISA model folder, e.g. runs/adapt-minilm/s5-all (default: {UNADAPTED}).")
    parser.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="Where the meetings and summaries are encoded and the exhaustive scores computed; the latency cell "
        "always runs on the CPU (default: %(default)s).",
    )
    parser.add_argument("--meetings", type=int, help="The first N meetings only (a smoke run).")
    parser.add_argument("--dev-articles", type=int, help="The development task's first N articles (a smoke run).")
    parser.add_argument(
        "--dev-span-words",
        type=int,
        default=8,
        help="Words a development passage (at 48 BM25 finds every one and no weight wins; default: %(default)s).",
    )
    parser.add_argument(
        "--part-size", type=int, default=16, help="Meetings an index part (the unit of resume; default: %(default)s)."
    )
    parser.add_argument(
        "--token-centroids",
        type=int,
        default=4096,
        help="Centroids of the token candidate stage (default: %(default)s).",
    )
    parser.add_argument("--probes", type=int, default=8, help="Centroids a query token visits (default: %(default)s).")
    parser.add_argument(
        "--candidates",
        type=int,
        nargs="+",
        default=[5, 10, 20],
        help="Meetings each candidate stage hands to exact MaxSim (default: %(default)s).",
    )
    parser.add_argument(
        "--latency-queries",
        type=int,
        default=50,
        help="Summaries timed through each candidate stage and fusion (default: %(default)s).",
    )
    parser.add_argument(
        "--latency-exact-queries",
        type=int,
        default=5,
        help="Summaries timed through exact search over every meeting (default: %(default)s).",
    )
    parser.add_argument(
        "--latency-candidates",
        type=int,
        default=5,
        help="Candidates of the timed searches (default: %(default)s).",
    )
    parser.add_argument(
        "--latency-storage",
        default="float16",
        choices=STORAGES,
        help="The index the timed searches read (default: %(default)s).",
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=1000,
        help="Bootstrap resamples of the paired intervals (default: %(default)s).",
    )
    args = parser.parse_args()
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    cells = Cells(out)
    meetings = read_meetings(args.data, args.meetings)
    system = f"late:{args.model or UNADAPTED}"

    weight = (cells.done("fusion-weight") or cells.keep("fusion-weight", choose_weight(args, cells, system)))["weight"]
    if not (work / "multi-vector").is_dir():
        source = args.model or to_tisa_sentence_transformer(
            "minilm", tisa_hf.TisaConfig(num_kernels=5, mode="replace"), max_seq_length=DOCUMENT_TOKENS, device="cpu"
        )
        save_multi_vector_encoder(source, work / "multi-vector", document_length=DOCUMENT_TOKENS)
    folders = build_indexes(args, cells, meetings)

    from sentence_transformers import MultiVectorEncoder

    model = MultiVectorEncoder(str(work / "multi-vector"), device=args.device)
    vectors = query_vectors(args, cells, model, meetings.queries)
    bm25 = bm25_scores(args, meetings, folders)
    ndcg_cells = NdcgCells(args, cells, meetings.answers, bm25)
    float16_cells(args, ndcg_cells, meetings, folders, vectors, weight, bm25)
    model.to("cpu")
    timed = latency(args, cells, model, meetings, folders, weight)  # before the compressed passes: the goals first
    compressed_cells(args, ndcg_cells, folders, vectors)
    summary = {
        "model": args.model or UNADAPTED,
        "meetings": len(meetings.documents),
        "queries": len(meetings.queries),
        "fusion_weight": cells.done("fusion-weight"),
        "indexes": {storage: cells.done(f"index-{storage}") for storage in STORAGES},
        "ndcg": ndcg_cells.results,
        "latency": timed,
    }
    write_summary(out, summary)
    print((out / "search-qmsum.md").read_text())
    print(json.dumps(summary["latency"], indent=2))


if __name__ == "__main__":
    main()
