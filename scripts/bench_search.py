"""`tisa-hf index` and `tisa-hf search` on LongEmbed's QMSum: the index's size and build time, nDCG@10 of exact
search and of BM25 candidates, and the search time a query on two CPU cores.

The model is a `MultiVectorEncoder` written by `save_multi_vector_encoder` (default: the packaged MiniLM given TISA
at load, `tisa:replace:5:minilm`; `--model` takes an adapted run such as `runs/adapt-minilm/s5-all`). The 197
meetings (cut at 32,768 tokens, as `tisa-hf qmsum` cuts them) are indexed by `tisa-hf index` on `--device`, and the
1,527 summaries searched by the search command's own functions: all of them for nDCG@10 (a query's meeting at
position p of the top 10 scores 1 / log2(p + 2)), then `--latency-queries` of them one at a time for the search
time (encoding the query and scoring; the model and BM25 loaded once), the products on the CPU in whatever threads
the process is given (run it under `taskset -c 0,1` with OMP_NUM_THREADS=2 for two cores). The nDCG@10 that
`--dtype int8` keeps is measured on the fp16 vectors rounded to int8.

    OMP_NUM_THREADS=2 taskset -c 0,1 python scripts/bench_search.py --work /tmp/qmsum-index --device cuda
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import tisa_hf
from tisa_hf.commands.cli import entry
from tisa_hf.embeddings import to_tisa_sentence_transformer
from tisa_hf.embeddings.retrieval.qmsum_data import read_meetings
from tisa_hf.multivector import save_multi_vector_encoder
from tisa_hf.multivector.compression import compress, decompress
from tisa_hf.multivector.index_folder import StoredVectors, finished_index
from tisa_hf.multivector.search import bm25_candidates, candidate_scores, exact_scores, load_bm25, top_documents

DOCUMENT_TOKENS = 32_768


def ndcg_at_10(top: np.ndarray, answers: list[int]) -> float:
    gains = [
        next((1 / math.log2(p + 2) for p, d in enumerate(row[:10]) if d == a), 0.0)
        for row, a in zip(top, answers, strict=True)
    ]
    return float(np.mean(gains))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/longdoc/qmsum")
    parser.add_argument("--work", required=True, help="Folder for the corpus, the model and the index.")
    parser.add_argument("--model", help="A TISA model folder (default: tisa:replace:5:minilm).")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--candidates", type=int, nargs="+", default=[20, 50])
    parser.add_argument("--latency-queries", type=int, default=20)
    parser.add_argument("--meetings", type=int, help="The first N meetings only (a smoke run).")
    parser.add_argument("--out", default="bench_search.json")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    meetings = read_meetings(args.data, args.meetings)
    corpus = work / "meetings.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in meetings.documents))

    model_folder = work / "multi-vector"
    if not model_folder.is_dir():
        source = args.model or to_tisa_sentence_transformer(
            "minilm", tisa_hf.TisaConfig(num_kernels=5, mode="replace"), max_seq_length=DOCUMENT_TOKENS, device="cpu"
        )
        save_multi_vector_encoder(source, model_folder, document_length=DOCUMENT_TOKENS)
    index = work / "index"
    built = time.perf_counter()
    entry("index")([str(model_folder), "--input", str(corpus), "--out", str(index), "--devices", args.device,
                    "--batch-size", "1", "--part-size", "16"])  # fmt: skip
    record = finished_index(str(index))
    result = {
        "model": args.model or "tisa:replace:5:minilm",
        "index_device": args.device,
        "index_wall_s": round(time.perf_counter() - built, 1),
        **{key: record[key] for key in ("documents", "vectors", "bytes_per_token", "index_bytes", "throughput")},
        "cpu_threads": torch.get_num_threads(),
        "cpu_affinity": len(os.sched_getaffinity(0)),
    }

    from sentence_transformers import MultiVectorEncoder

    device = torch.device(args.device)
    model = MultiVectorEncoder(str(model_folder), device=str(device))
    stored = StoredVectors(str(index), record)
    bm25 = load_bm25(str(index))
    queries = model.encode_query(meetings.queries, convert_to_numpy=True, batch_size=64)
    products = None if device.type == "cpu" else device
    started = time.perf_counter()
    result["ndcg_at_10"] = {
        "exact": ndcg_at_10(top_documents(exact_scores(queries, stored, products), 10), meetings.answers)
    }
    result["exact_all_queries_s"] = round(time.perf_counter() - started, 1)
    int8 = [decompress(*compress(stored[document], "int8")) for document in range(len(stored))]
    exact_int8 = top_documents(exact_scores(queries, int8, products), 10)
    result["ndcg_at_10"]["exact_int8"] = ndcg_at_10(exact_int8, meetings.answers)  # what --dtype int8 would keep
    del int8
    candidates = bm25_candidates(bm25, meetings.queries, len(stored), max(args.candidates))
    for count in args.candidates:
        top = top_documents(candidate_scores(queries, candidates[:, :count], stored, products), 10)
        result["ndcg_at_10"][f"bm25_top_{count}"] = ndcg_at_10(top, meetings.answers)
        result["ndcg_at_10"][f"bm25_top_{count}_recall"] = float(
            np.mean([a in row for a, row in zip(meetings.answers, candidates[:, :count], strict=True)])
        )

    model.to("cpu")
    sample = meetings.queries[:: len(meetings.queries) // args.latency_queries][: args.latency_queries]
    latency = {}
    for name, count in [("exact", None), *((f"bm25_top_{count}", count) for count in args.candidates)]:
        seconds = []
        for query in sample:
            started = time.perf_counter()
            vectors = model.encode_query([query], convert_to_numpy=True, show_progress_bar=False)
            if count is None:
                scores = exact_scores(vectors, stored, None)
            else:
                scores = candidate_scores(vectors, bm25_candidates(bm25, [query], len(stored), count), stored, None)
            top_documents(scores, 10)
            seconds.append(time.perf_counter() - started)
            if name == "exact" and len(seconds) == 5:
                break  # seconds a query: five are enough to place it
        latency[name] = {
            "queries": len(seconds),
            "p50_ms": round(1000 * statistics.median(seconds)),
            "p95_ms": round(1000 * float(np.percentile(seconds, 95))),
        }
    result["cpu_latency"] = latency
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
