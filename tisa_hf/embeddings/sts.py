"""`tisa-hf sts`: zero-shot STS-B, the check that a long-document embedder is still a good short-text encoder.

sentence-transformers' own evaluation of all-MiniLM-L6-v2 (its `EmbeddingSimilarityEvaluator`): each system
embeds both sentences of every pair, unchanged by any fine-tuning, and the score is the Spearman correlation (x100)
between the pairs' cosine similarities and the gold scores; Pearson beside it. Systems are given as in
`tisa-hf longembed` (`systems.py`), so the original, an adapted folder and `tisa:replace:5:minilm` are compared on
the same tokenized pairs. With --paired REF, every other system's Spearman minus REF's, with a 95% paired bootstrap
interval over the pairs (the same resampled pairs for both; scipy's percentile bootstrap).

The pairs' cosines are computed here rather than by the evaluator because the paired interval needs them per pair;
tests/test_sts.py checks the score against `EmbeddingSimilarityEvaluator` on the same model. They are kept in
sts.json, so that a rerun on the same tokenized pairs scores only the systems it lacks (a system is known by its
name: --overwrite rescores a model folder that has changed) and pairs every system, old and new.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from ..common.machine import checked_device, machine, versions
from ..common.paired import paired_interval
from ..common.result_files import check_out_folder, resumable_record, write_record
from ..errors import UsageError
from ..finetune.glue.data import load_glue, read_glue_tsv
from ..finetune.task_tables import GLUE_HUB_DATASET, get_task
from .options import STS, sts_parser
from .systems import Embedder, SystemSpec, check_readouts, check_system_names, shared_tokenizer

RESULTS_FILE = "sts.json"


def read_pairs(path: str | Path | None) -> tuple[list[str], list[str], list[float]]:
    """The sentence pairs and gold scores of an STS-B TSV (GLUE's layout; its checks name the file and line), or,
    without one, of GLUE's STS-B validation split from the Hub (the same pairs as dev.tsv)."""
    if path is None:
        pairs = load_glue(get_task("stsb"), remedy="pass --data with GLUE's STS-B dev.tsv")["validation"]
        return list(pairs["sentence1"]), list(pairs["sentence2"]), [float(score) for score in pairs["label"]]
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"--data {path}: no such file; pass --data with GLUE's STS-B dev.tsv (the labelled split).")
    pairs = read_glue_tsv(file, get_task("stsb"))
    return list(pairs["sentence1"]), list(pairs["sentence2"]), [float(score) for score in pairs["label"]]


def spearman_difference(cosines: np.ndarray, reference: np.ndarray, gold: np.ndarray) -> float:
    """Spearman (x100) of `cosines` with `gold` minus that of `reference`."""
    return 100 * float(stats.spearmanr(cosines, gold).statistic - stats.spearmanr(reference, gold).statistic)


def paired_spearman(
    cosines: list[float], reference: list[float], gold: list[float], resamples: int, seed: int
) -> dict[str, float]:
    arrays = tuple(np.asarray(values, dtype=float) for values in (cosines, reference, gold))
    low, high = paired_interval(arrays, spearman_difference, resamples, seed)
    return {"difference": spearman_difference(*arrays), "low": low, "high": high}


def pair_cosines(embedder: Embedder, first: list[list[int]], second: list[list[int]]) -> list[float]:
    return (embedder.read(first) * embedder.read(second)).sum(-1).tolist()


def resumed_record(results: Path, settings: dict[str, Any], overwrite: bool) -> dict[str, Any] | None:
    """The record in `results` to add systems to, when it was scored on the same tokenized pairs; None to start
    over (no record yet, or --overwrite)."""
    remedy = "choose another --out, or pass --overwrite to score every system again."
    record = resumable_record(results, settings, overwrite, what="pairs", remedy=remedy)
    if record is not None and "cosines" not in record:
        raise UsageError(f"{results} holds no per-pair cosines to pair with; {remedy}")
    return record


def run(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    results = out / RESULTS_FILE
    check_out_folder(args.out)
    check_system_names(args.systems, args.paired)
    first_texts, second_texts, gold = read_pairs(args.data)
    systems = [SystemSpec.parse(spec) for spec in args.systems]
    check_readouts(systems, STS)
    tokenizer = shared_tokenizer(systems)
    first, second = (tokenizer(texts)["input_ids"] for texts in (first_texts, second_texts))
    longest = max(map(len, first + second))
    for spec in systems:
        if not spec.reads(longest):
            raise UsageError(
                f"{args.data}: its longest sentence takes {longest} tokens, more than {spec.spec} reads (its position "
                f"table holds {spec.table_length}); give the model as trunc:MODEL to cut sentences at its table."
            )
    device = checked_device(args.device)
    settings = {
        "data": str(args.data or f"{GLUE_HUB_DATASET} stsb validation"),
        "data_sha256": hashlib.sha256(
            Path(args.data).read_bytes() if args.data else json.dumps([first_texts, second_texts, gold]).encode()
        ).hexdigest(),
        "pairs": len(gold),
        "longest_tokens": longest,
        "tokens_sha256": hashlib.sha256(json.dumps([first, second]).encode()).hexdigest(),
    }
    record = resumed_record(results, settings, args.overwrite) or {"settings": settings, "results": {}, "cosines": {}}
    record.update(versions=versions(), machine=machine(device), paired={})
    cosines = record["cosines"]
    for spec in systems:
        if spec.spec in cosines:
            print(f"{spec.spec}: scored in {results}, kept", file=sys.stderr)
            continue
        started = time.perf_counter()
        embedder = Embedder(spec, longest, device, args.batch_tokens)
        cosines[spec.spec] = pair_cosines(embedder, first, second)
        del embedder
        record["results"][spec.spec] = {
            "model": spec.facts.path,
            "spearman": 100 * float(stats.spearmanr(cosines[spec.spec], gold).statistic),
            "pearson": 100 * float(stats.pearsonr(cosines[spec.spec], gold).statistic),
            "wall_time_s": round(time.perf_counter() - started, 1),  # loading (and a TISA fit) included
        }
        write_record(record, results)
    for reference in args.paired:
        record["paired"][reference] = {
            name: paired_spearman(values, cosines[reference], gold, args.bootstrap, args.bootstrap_seed)
            for name, values in cosines.items()
            if name != reference
        }
    write_record(record, results)
    return record


def main(argv: list[str] | None = None) -> int:
    args = sts_parser().parse_args(sys.argv[1:] if argv is None else argv)
    record = run(args)
    for name, scores in record["results"].items():
        print(f"{name}: Spearman {scores['spearman']:.2f}, Pearson {scores['pearson']:.2f}")
    for reference, differences in record["paired"].items():
        for name, paired in differences.items():
            print(
                f"{name} - {reference}: Spearman {paired['difference']:+.2f} "
                f"[{paired['low']:+.2f}, {paired['high']:+.2f}]"
            )
    return 0
