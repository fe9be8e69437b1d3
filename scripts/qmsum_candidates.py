"""BM25 candidates re-ranked by late interaction, and convex fusion of BM25 and late interaction, on QMSum, from
the scores of `tisa-hf qmsum`: no model runs.

Re-ranking: for each query, BM25's N best meetings (BM25's order, the earlier meeting first among ties) are ranked by
a `late:` system's MaxSim scores and placed above every other meeting, which keep BM25's order: what `tisa-hf search
--candidates N` returns. Convex fusion (`convex:W:bm25+SYSTEM`, `tisa-hf search --fuse W`): W times the late
system's min-max normalised scores plus 1 - W times BM25's, W chosen on the development task, never on QMSum: the
best nDCG@10 on a grid of 0.05 (the smallest among ties) of the same fusion in a `tisa-hf spans` run (`--dev`) that
measured `bm25` and the system. Printed per system: nDCG@10 of each, with its paired difference to BM25 (95%
bootstrap interval over the queries), and the candidates' recall of the query's meeting.

    tisa-hf spans bm25 late:chunk:minilm --span-words 8 --out dev-spans/
    python scripts/qmsum_candidates.py --dev dev-spans/ --systems late:chunk:minilm

The QMSum scores are read from `SCORES`, the committed matrices of BM25 and the default systems (compressed: the
numbers of docs/results-longdoc.md are computed from them), or from the --work folder of a `tisa-hf qmsum` run that
measured them (`--scores runs/longdoc/qmsum-minilm` after `bash scripts/longdoc_minilm.sh qmsum`), whose matrices
`--save` writes as such a file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from tisa_hf.common.paired import paired_per_query
from tisa_hf.common.result_files import file_name, scores_path
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

SCORES = Path(__file__).resolve().parents[1] / "docs/results/longdoc/qmsum-minilm/qmsum-scores.npz"
SYSTEMS = ("late:runs/adapt-minilm/s5-all", "late:chunk:minilm")


def score_matrices(source: Path, systems: list[str]) -> dict[str, np.ndarray]:
    """BM25's and each system's QMSum scores (queries x meetings), from a .npz of them by `file_name` or from the
    scores/ of a `tisa-hf qmsum` --work (or --out) folder."""
    names = ["bm25", *systems]
    if source.suffix != ".npz":
        return {name: np.load(scores_path(source, name, CELL)) for name in names}
    with np.load(source) as kept:
        missing = [name for name in names if file_name(name) not in kept]
        if missing:
            raise SystemExit(f"{source} keeps no scores of {', '.join(missing)}; pass --scores with a qmsum run's.")
        return {name: kept[file_name(name)] for name in names}


def ndcg(scores: np.ndarray, answers: list[int]) -> list[float]:
    return [100 * ndcg_at_10(rank) for rank in answer_ranks(scores, answers)]


def line(name: str, values: list[float], reference: list[float]) -> str:
    paired = paired_per_query(values, reference, 1000, 0)
    return (
        f"{name}: nDCG@10 {np.mean(values):.1f}, minus BM25 {paired['difference']:+.1f} "
        f"[{paired['low']:+.1f}, {paired['high']:+.1f}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/longdoc/qmsum")
    parser.add_argument("--candidates", type=int, nargs="+", default=[3, 5, 10, 20, 50])
    parser.add_argument("--scores", type=Path, default=SCORES, help="A .npz of the scores, or a qmsum --work folder.")
    parser.add_argument("--save", type=Path, help="Write the scores read (BM25's and the systems') as a .npz here.")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    parser.add_argument("--dev", help="A tisa-hf spans run of bm25 and the systems: convex fusion's weight.")
    parser.add_argument("--dev-data", default="../shared/text/wikitext-2/test.txt")
    parser.add_argument("--dev-span-words", type=int, default=8, help="The --span-words of the --dev run.")
    args = parser.parse_args()
    answers = read_meetings(args.data).answers
    matrices = score_matrices(args.scores, args.systems)
    if args.save:
        np.savez_compressed(args.save, **{file_name(name): scores for name, scores in matrices.items()})
    bm25 = matrices["bm25"]
    reference = ndcg(bm25, answers)
    order = np.argsort(-bm25, axis=1, kind="stable")
    rows = np.arange(len(bm25))[:, None]
    print(f"bm25: nDCG@10 {np.mean(reference):.1f}")
    for system in args.systems:
        late = matrices[system]
        print(line(f"{system}, exact", ndcg(late, answers), reference))
        for count in args.candidates:
            candidates = order[:, :count]
            # BM25's ranks below every candidate; the candidates by late interaction above them all
            reranked = -np.argsort(order, axis=1).astype(float) - 10.0
            reranked[rows, candidates] = late[rows, candidates]
            recall = 100 * np.mean([answer in row for answer, row in zip(answers, candidates, strict=True)])
            print(f"  {line(f'BM25 top {count} re-ranked', ndcg(reranked, answers), reference)}; recall {recall:.1f}")
        if args.dev:
            dev_answers = read_span_task(args.dev_data, span_words=args.dev_span_words).answers
            dev = [np.load(scores_path(Path(args.dev), name, CELL)) for name in ("bm25", system)]
            grid = convex_weight_grid(*dev, dev_answers)
            weight = chosen_weight(grid)
            print(f"  development task: {' '.join(f'{w}:{100 * v:.1f}' for w, v in grid.items())}")
            fused = ndcg(convex_fusion(bm25, late, weight), answers)
            print(f"  {line(f'convex:{weight}:bm25+{system}', fused, reference)}")


if __name__ == "__main__":
    main()
