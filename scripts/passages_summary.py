"""The summary tables of QMSum's passage cells (docs/results-longdoc.md, section 2d) from the records of
`scripts/qmsum_passages.sh`: every system's measures at each W in both settings, then nDCG@10 minus each reference's
with its 95% bootstrap interval, as markdown. Reads only the committed records (no model, no data):

    python scripts/passages_summary.py                               # against bm25
    python scripts/passages_summary.py --references bm25 chunk:minilm late:chunk:minilm
    python scripts/passages_summary.py --context chunk:minilm   # each whole read against the same read-out apart

`--similarity` adds how alike a one-vector system's windows are: the mean cosine of two windows of one meeting, of
neighbouring windows, and of two windows drawn at random from the corpus, from the window embeddings that the
machine which ran the cells keeps (`--work`, as `scripts/qmsum_passages.sh` keeps them: `wW/embeddings/`).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from tisa_hf.common.result_files import file_name
from tisa_hf.embeddings.retrieval.kept_embeddings import EMBEDDINGS_FOLDER

RECORDS = Path(__file__).resolve().parents[1] / "docs/results/longdoc/qmsum-passages-minilm"
WORK = Path(__file__).resolve().parents[1] / "runs/longdoc/qmsum-passages-minilm"
MEASURES = ("ndcg_at_10", "recall_at_10", "recall_at_50")
CELLS = ("across", "within")


def shown(system: str) -> str:
    """The system as the docs write it: a model folder by its last name (`runs/adapt-minilm/s5-all`: `s5-all`)."""
    return re.sub(r"[^\s:+]*/", "", system)


def signed(value: float) -> str:
    return f"{100 * value:+.1f}".replace("-", "−")


def interval(entry: dict[str, float]) -> str:
    """A paired difference x100 with its interval: `+1.0 [+0.2, +1.7]`."""
    return f"{signed(entry['difference'])} [{signed(entry['low'])}, {signed(entry['high'])}]"


def measures_table(records: dict[int, dict]) -> list[str]:
    header = " | ".join(f"{name} {cell}" for cell in CELLS for name in ("nDCG@10", "Recall@10", "Recall@50"))
    lines = [f"| W | system | {header} | minutes |", "|---:|---|" + "---:|" * 7]
    for window, record in records.items():
        for system, result in record["results"].items():
            values = " | ".join(f"{100 * result[cell][key]:.1f}" for cell in CELLS for key in MEASURES)
            lines.append(f"| {window} | `{shown(system)}` | {values} | {result['wall_time_s'] / 60:.1f} |")
    return lines


def paired_table(records: dict[int, dict], reference: str) -> list[str]:
    lines = [f"nDCG@10 minus `{shown(reference)}`'s (95% bootstrap interval over the queries):", ""]
    lines += ["| W | system | across | within |", "|---:|---|---:|---:|"]
    for window, record in records.items():
        for system, cells in record["paired"].get(reference, {}).items():
            shown_cells = " | ".join(interval(cells[cell]["ndcg_at_10"]) for cell in CELLS)
            lines.append(f"| {window} | `{shown(system)}` | {shown_cells} |")
    return lines


def read_apart(system: str, apart: str) -> str:
    """The system of windows read apart (`apart`, one vector a window) with `system`'s read-out and fusion."""
    for prefix in ("hybrid:bm25+late:", "hybrid:bm25+", "late:"):
        if system.startswith(prefix):
            return prefix + apart
    return apart


def context_table(records: dict[int, dict], apart: str) -> list[str]:
    """Each whole read's nDCG@10 against the windows read apart with the same read-out, and against BM25."""
    lines = [
        f"| W | whole read | nDCG@10 across | minus `{shown(apart)}` with its read-out, across | within | "
        "minus `bm25`, across | within |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for window, record in records.items():
        paired = record["paired"]
        references = {"bm25", *paired}
        for system, result in record["results"].items():
            twin = read_apart(system, apart)
            if system in references or twin not in paired or system not in paired[twin]:
                continue
            entries = [paired[reference][system][cell]["ndcg_at_10"] for reference in (twin, "bm25") for cell in CELLS]
            differences = " | ".join(map(interval, entries))
            lines.append(
                f"| {window} | `{shown(system)}` | {100 * result['across']['ndcg_at_10']:.1f} | {differences} |"
            )
    return lines


def similarity_table(folder: Path, records: dict[int, dict]) -> list[str]:
    lines = ["| W | system | two windows of a meeting | neighbouring windows | two windows at random |"]
    lines.append("|---:|---|---:|---:|---:|")
    for window, record in records.items():
        for system in record["results"]:
            state = folder / f"w{window}" / EMBEDDINGS_FOLDER / f"{file_name(system)}.json"
            if system.startswith("late:") or not state.is_file():
                continue  # late: keeps scores, not vectors; BM25 and fusions keep none
            vectors, counts = np.load(state.with_suffix(".npy")), json.loads(state.read_text())["windows"]
            bounds = np.cumsum([0, *counts])
            meetings = [vectors[start:end] for start, end in zip(bounds[:-1], bounds[1:], strict=True)]
            pairs = [(m @ m.T)[np.triu_indices(len(m), 1)].mean() for m in meetings if len(m) > 1]
            neighbours = [np.sum(m[1:] * m[:-1], axis=1).mean() for m in meetings if len(m) > 1]
            drawn = np.random.default_rng(0).integers(0, len(vectors), (2, 10_000))
            anywhere = np.sum(vectors[drawn[0]] * vectors[drawn[1]], axis=1).mean()
            alike = " | ".join(f"{value:.3f}" for value in (np.mean(pairs), np.mean(neighbours), anywhere))
            lines.append(f"| {window} | `{shown(system)}` | {alike} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=RECORDS, help="The folder of the wW record folders.")
    parser.add_argument("--work", type=Path, default=WORK, help="The folder of the wW --work folders (--similarity).")
    parser.add_argument("--windows", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--references", nargs="+", default=["bm25"], help="Systems to pair against.")
    parser.add_argument("--similarity", action="store_true", help="Add how alike each system's windows are.")
    parser.add_argument(
        "--context", metavar="APART", help="Add each whole read against APART's windows read apart, same read-out."
    )
    args = parser.parse_args()
    records = {
        window: json.loads((args.records / f"w{window}" / "qmsum-passages.json").read_text()) for window in args.windows
    }
    blocks = [measures_table(records)] + [paired_table(records, reference) for reference in args.references]
    if args.context:
        blocks.append(context_table(records, args.context))
    if args.similarity:
        blocks.append(similarity_table(args.work, records))
    print("\n\n".join("\n".join(block) for block in blocks))


if __name__ == "__main__":
    main()
