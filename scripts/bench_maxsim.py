"""The `late:` read-out's MaxSim: the hand-written `LateInteraction` against sentence-transformers'
`util.mean_maxsim`, at QMSum's sizes, on the CPU.

QMSum's `late:` run scores each of its 197 meetings (13,319 tokens on average) against the 1,527 summaries (about
90 tokens each) as soon as the meeting is read. Here: random unit vectors of MiniLM's width (384) in those shapes,
one document at a time as `LateScorer` calls it, both functions interleaved over `--repeats` rounds and their
median times printed, with the largest difference between their scores.

    nice -n 10 python scripts/bench_maxsim.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
from sentence_transformers import util

from tisa_hf.embeddings.retrieval.ranking import LateInteraction


def unit_rows(generator: np.random.Generator, rows: int, width: int) -> np.ndarray:
    vectors = generator.normal(size=(rows, width)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1527)
    parser.add_argument("--query-tokens", type=int, nargs=2, default=(40, 140), help="lowest and highest")
    parser.add_argument("--document-tokens", type=int, default=13_319)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    generator = np.random.default_rng(0)
    low, high = args.query_tokens
    queries = [unit_rows(generator, int(n), 384) for n in generator.integers(low, high + 1, size=args.queries)]
    document = unit_rows(generator, args.document_tokens, 384)
    late = LateInteraction(queries)
    query_tensors, document_tensor = [torch.from_numpy(query) for query in queries], torch.from_numpy(document)
    scorers = {
        "LateInteraction (numpy)": lambda: late(document),
        "util.mean_maxsim": lambda: util.mean_maxsim(query_tensors, [document_tensor])[:, 0].numpy(),
    }
    times: dict[str, list[float]] = {name: [] for name in scorers}
    for _ in range(args.repeats):
        for name, score in scorers.items():
            started = time.perf_counter()
            score()
            times[name].append(time.perf_counter() - started)
    difference = np.abs(scorers["LateInteraction (numpy)"]() - scorers["util.mean_maxsim"]()).max()
    print(f"{args.queries} queries, {args.document_tokens} document tokens, torch threads {torch.get_num_threads()}")
    print(f"CPU cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    for name, seconds in times.items():
        print(f"{name}: median {statistics.median(seconds):.2f} s, range {min(seconds):.2f}-{max(seconds):.2f} s")
    print(f"largest score difference {difference:.1e}")


if __name__ == "__main__":
    main()
