"""How a token-vector index's cost grows with its corpus: build time, size on disk and search time a query against
the corpus' tokens, on generated corpora of `--documents` documents of 2,000 to 8,000 tokens.

Encoding 50 million tokens is out of reach of a 2-core VM (the encoder's own rate is measured apart: `tisa-hf index`
records tokens a second, and docs/results-longdoc.md states it), so the token vectors are generated: a vocabulary
of 30,000 random unit "word" vectors, each document drawing its tokens from a few hundred words of its own
(Zipf-distributed, as words in text are) and each token its word's vector plus noise (its context), normalised as a
model's are. Each query is 32 tokens of one document's words with fresh noise, so the candidate stage's recall of
that document is measured too. The vectors are stored by the index's own code (`store_part`, `finish_parts`: the
`--dtype` storage and the token candidate stage, centroids learned from the first part), part by part, resumable:
a rerun skips the parts done. Searching is the search command's: the token stage's `--candidates`, then exact
MaxSim on them, one query at a time, in the threads the process is given (run it under `taskset -c 0,1` with
OMP_NUM_THREADS=2 for two cores).

    OMP_NUM_THREADS=2 taskset -c 0,1 python scripts/bench_index_scaling.py --documents 1000 --work runs/scaling
    OMP_NUM_THREADS=2 taskset -c 0,1 python scripts/bench_index_scaling.py --documents 10000 --work runs/scaling
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from tisa_hf.common.result_files import write_record
from tisa_hf.embeddings.encode import PartState
from tisa_hf.multivector.compression import bytes_per_token
from tisa_hf.multivector.index import finish_parts, index_bytes, store_part
from tisa_hf.multivector.index_folder import INDEX_FILE, StoredVectors, finished_index
from tisa_hf.multivector.search import TokenStage, candidate_scores, exact_scores, top_documents

DIMENSION = 384  # MiniLM's
VOCABULARY = 30_000
WORDS_A_DOCUMENT = 300
NOISE = 0.5  # a token's context, against its word's unit vector
QUERY_TOKENS = 32
TOKENS = (2_000, 8_000)
MEASURES = {"candidates": "recall_of_the_target", "top_10": "target_in_top_10", "first": "target_first"}


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


class Generated:
    """The corpus, a document at a time from its own seed (the same document in any run, part or order)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.words = unit(np.random.default_rng(seed).standard_normal((VOCABULARY, DIMENSION)))
        ranks = np.arange(1, WORDS_A_DOCUMENT + 1)
        self.zipf = (1 / ranks) / (1 / ranks).sum()

    def vocabulary(self, document: int) -> np.ndarray:
        return np.random.default_rng([self.seed, document, 0]).choice(VOCABULARY, WORDS_A_DOCUMENT, replace=False)

    def document(self, document: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, document, 1])
        tokens = int(rng.integers(TOKENS[0], TOKENS[1] + 1))
        drawn = self.vocabulary(document)[rng.choice(WORDS_A_DOCUMENT, tokens, p=self.zipf)]
        return unit(self.words[drawn] + NOISE / np.sqrt(DIMENSION) * rng.standard_normal((tokens, DIMENSION)))

    def query(self, document: int, number: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, document, 2, number])
        drawn = self.vocabulary(document)[rng.choice(WORDS_A_DOCUMENT, QUERY_TOKENS, p=self.zipf)]
        return unit(self.words[drawn] + NOISE / np.sqrt(DIMENSION) * rng.standard_normal((QUERY_TOKENS, DIMENSION)))


def build(args: argparse.Namespace, out: Path, corpus: Generated) -> dict:
    settings = {"generated": True, "seed": args.seed, "documents": args.documents, "part_size": args.part_size,
                "dtype": args.dtype, "token_centroids": args.token_centroids}  # fmt: skip
    state = PartState(out, settings, False, INDEX_FILE)
    parts = range(0, args.documents, args.part_size)
    generating = 0.0
    for part, start in enumerate(parts):
        if part < state.record["parts"]:
            continue
        made = time.perf_counter()
        documents = [corpus.document(d) for d in range(start, min(start + args.part_size, args.documents))]
        stored = time.perf_counter()
        store_part(out, part, documents, args.dtype, args.token_centroids)
        generating += stored - made
        state.add_part(len(documents), sum(map(len, documents)), 0, time.perf_counter() - stored)
        print(f"part {part + 1}/{len(parts)}: {state.record['tokens_read']:,} tokens, "
              f"{state.throughput()['tokens_per_s']:.0f} tokens a second stored", flush=True)  # fmt: skip
    if not (out / "offsets.npy").is_file():
        started = time.perf_counter()
        counts = finish_parts(out, len(parts), args.token_centroids)
        state.record["wall_time_s"] += time.perf_counter() - started
        state.finish(["cpu"], vectors=int(counts.sum()), dimension=DIMENSION,
                     bytes_per_token=bytes_per_token(DIMENSION, args.dtype), index_bytes=index_bytes(out))  # fmt: skip
    return finished_index(str(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, required=True)
    parser.add_argument("--work", required=True, help="Folder of the generated indexes (one a corpus size).")
    parser.add_argument("--dtype", default="pq64")
    parser.add_argument("--part-size", type=int, default=100)
    parser.add_argument("--token-centroids", type=int, default=4096)
    parser.add_argument("--probes", type=int, default=8)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--exact-queries", type=int, default=3, help="Queries searched exhaustively too.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="docs/results/longdoc/search-scaling")
    args = parser.parse_args()
    out = Path(args.work) / f"generated-{args.documents}-{args.dtype}"
    corpus = Generated(args.seed)
    record = build(args, out, corpus)

    stored = StoredVectors(str(out), record)
    stage = TokenStage(str(out), record, args.probes)
    targets = np.random.default_rng([args.seed, 3]).choice(args.documents, args.queries, replace=False)
    seconds, approximate, found = [], [], []
    for number, target in enumerate(targets):
        query = corpus.query(int(target), number)
        started = time.perf_counter()
        candidates = stage.candidates(query, args.candidates)
        chosen = time.perf_counter()
        scores = candidate_scores([query], candidates[None], stored, None)
        top = top_documents(scores, 10)[0]
        seconds.append(time.perf_counter() - started)
        approximate.append(chosen - started)
        found.append(
            {"candidates": bool(target in candidates), "top_10": bool(target in top), "first": bool(top[0] == target)}
        )
    exact = []
    for number, target in enumerate(targets[: args.exact_queries]):
        started = time.perf_counter()
        top_documents(exact_scores([corpus.query(int(target), number)], stored, None), 10)
        exact.append(time.perf_counter() - started)
    result = {
        "documents": args.documents,
        "dtype": args.dtype,
        "vectors": record["vectors"],
        "bytes_per_token": record["bytes_per_token"],
        "index_bytes": record["index_bytes"],
        "build_s": round(record["wall_time_s"], 1),
        "build_tokens_per_s": record["throughput"]["tokens_per_s"],
        "token_centroids": len(stage.centroids),
        "postings": len(stage.postings.documents),
        "search": {
            "candidates": args.candidates,
            "probes": args.probes,
            "queries": len(seconds),
            "p50_ms": round(1000 * statistics.median(seconds)),
            "p95_ms": round(1000 * float(np.percentile(seconds, 95))),
            "candidate_stage_p50_ms": round(1000 * statistics.median(approximate)),
            **{measure: float(np.mean([f[key] for f in found])) for key, measure in MEASURES.items()},
        },
        "exact_search": {"queries": len(exact), "p50_ms": round(1000 * statistics.median(exact))} if exact else None,
        "threads": torch.get_num_threads(),
        "load_average": [round(load, 1) for load in os.getloadavg()],
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    write_record(result, Path(args.out) / f"generated-{args.documents}-{args.dtype}.json")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
