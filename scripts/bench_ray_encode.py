"""`tisa-hf encode --engine ray` on this machine: one actor against two, and one actor holding two CPUs, the
packaged MiniLM over WikiText-2 paragraphs.

Each setting runs --repeats times, the settings interleaved within each round (their order turned each round),
every run a fresh `tisa-hf encode` process starting its own local cluster; the medians and ranges of each
setting's throughput are printed and written to --out, with the machine's load around every run. A run's
throughput is its record's: documents and tokens over the wall time from the start of the Ray job to its last
part, the actors' start and the model's transfer included; `steady` leaves out the time to the first part.
Finished runs are kept in --work and not run again.

Each run's cluster stays on the loopback interface (`embeddings/ray_cluster.py`):

    HF_HUB_OFFLINE=1 python scripts/bench_ray_encode.py --work /tmp/bench-ray-encode \
        --out docs/results/ray-encode-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from tisa_hf.common.machine import processor_name
from tisa_hf.common.text import HEADING_MARKERS, WIKITEXT_MARKERS

SETTINGS = {
    "1 actor, 1 CPU": ["--actors", "1", "--actor-cpus", "1"],
    "2 actors, 1 CPU each": ["--actors", "2", "--actor-cpus", "1"],
    "1 actor, 2 CPUs": ["--actors", "1", "--actor-cpus", "2"],
}


def paragraphs(path: Path, count: int) -> list[str]:
    """The first `count` paragraphs of a WikiText file (no headings), its @-markers undone."""
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not HEADING_MARKERS.match(line):
            for marker, joined in WIKITEXT_MARKERS.items():
                line = line.replace(marker, joined)
            found.append(line.strip())
    return found[:count]


def run_once(name: str, repeat: int, corpus: Path, args: argparse.Namespace) -> dict:
    out = args.work / f"{'-'.join(name.replace(',', '').split())}-r{repeat}"
    record_file = out / "encode.json"
    if not (record_file.is_file() and "throughput" in json.loads(record_file.read_text())):
        load_before = os.getloadavg()[0]
        command = [
            sys.executable, "-m", "tisa_hf_cli", "encode", "minilm", "--input", str(corpus), "--out", str(out),
            "--part-size", str(args.part_size), "--batch-size", str(args.batch_size), "--engine", "ray",
            *SETTINGS[name], "--overwrite",
        ]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, text=True)
        (out / "load.json").write_text(json.dumps({"before": load_before, "after": os.getloadavg()[0]}))
    record = json.loads(record_file.read_text())
    run = record["ray_runs"][-1]
    first_part = min(args.part_size, record["documents"])
    return {
        "setting": name,
        "repeat": repeat,
        "documents_per_s": record["throughput"]["documents_per_s"],
        "tokens_per_s": record["throughput"]["tokens_per_s"],
        "steady_documents_per_s": round(
            (record["documents"] - first_part) / (run["wall_time_s"] - run["first_part_s"]), 3
        ),
        "first_part_s": run["first_part_s"],
        "wall_time_s": run["wall_time_s"],
        "embedding_s": run["embedding_s"],
        "actors": run["actors"],
        "torch_threads": run["torch_threads"],
        "load_1min": json.loads((out / "load.json").read_text()),
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", type=Path, default=Path("../shared/text/wikitext-2/valid.txt"))
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--part-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, required=True, help="Folder of the runs (and the corpus file).")
    parser.add_argument("--out", type=Path, help="JSON file of the results.")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    corpus = args.work / "paragraphs.txt"
    corpus.write_text("\n".join(paragraphs(args.text, args.documents)) + "\n", encoding="utf-8")
    names = list(SETTINGS)
    runs = []
    for repeat in range(args.repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            runs.append(run_once(name, repeat, corpus, args))
            print(json.dumps(runs[-1]), flush=True)
    summary = {
        name: {
            measure: spread([run[measure] for run in runs if run["setting"] == name])
            for measure in ("documents_per_s", "tokens_per_s", "steady_documents_per_s", "first_part_s")
        }
        for name in names
    }
    one, two = ([run for run in runs if run["setting"] == name] for name in names[:2])
    ratios = [b["documents_per_s"] / a["documents_per_s"] for a, b in zip(one, two, strict=True)]
    steady = [b["steady_documents_per_s"] / a["steady_documents_per_s"] for a, b in zip(one, two, strict=True)]
    result = {
        "what": __doc__.split("\n\n")[0],
        "corpus": {"text": str(args.text), "paragraphs": args.documents, "part_size": args.part_size},
        "batch_size": args.batch_size,
        "machine": {"cpu_count": os.cpu_count(), "processor": processor_name()},
        "summary": summary,
        "two_actors_over_one": {"documents_per_s": spread(ratios), "steady_documents_per_s": spread(steady)},
        "runs": runs,
    }
    print(json.dumps({"summary": summary, "two_actors_over_one": result["two_actors_over_one"]}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
