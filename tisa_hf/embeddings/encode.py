"""`tisa-hf encode`: a corpus of long documents to embeddings with a sentence-transformers model, TISA or not.

Documents come from a JSON Lines file (one object a line, the text under --text-field) or a plain-text file (one
document a line). They are embedded in parts of --part-size documents through sentence-transformers' own
`encode_document`: on one device, or with several --devices through its multi-process pool, which ships the
model to each worker (a TISA model pickles like any transformers model; the worker's unpickling imports tisa_hf),
or with --engine ray by the actors of a Ray cluster (`ray_parts.py`).
Each finished part is saved at once and named in the state file, so a killed run resumes at the next part; a
rerun over another input, model or reading length is refused unless --overwrite.

Writes OUT/embeddings.npy (float32, one row a document, in input order, written when every part is done), OUT/parts/
(the finished parts) and OUT/encode.json: the settings, how many documents were longer than the model reads and
were cut (sentence-transformers truncates without a word; this says how many), the tokens read and the throughput
(documents and tokens a second over the whole run, resumed parts included).
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..attaching import reading_range, tisa_config_of
from ..common.checkpoints import reads_any_length
from ..common.machine import machine, versions
from ..common.result_files import check_writable, resumable_record, save_array, write_record
from ..common.sentence_models import check_reading_limit, require_sentence_transformers
from ..errors import note_kept
from ..packaged import resolve_model
from .corpus_files import check_encode_files, input_digest
from .options import encode_parser

logger = logging.getLogger(__name__)

STATE_FILE = "encode.json"
EMBEDDINGS_FILE = "embeddings.npy"
PARTS_FOLDER = "parts"


def load_model(name: str, device: str, max_seq_length: int | None) -> Any:
    """The sentence-transformers model `name` reading `max_seq_length` tokens (default: its own limit), checked
    against what its encoder can read before any document is embedded."""
    require_sentence_transformers()
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(resolve_model(name), device=device)
    encoder = model[0].auto_model
    tisa = tisa_config_of(encoder)
    if max_seq_length is not None or not reads_any_length(tisa):
        default = None if reads_any_length(tisa) else model.max_seq_length
        model.max_seq_length = check_reading_limit(*reading_range(encoder), tisa, max_seq_length, default)
    return model


def read_lengths(tokenizer: Any, documents: list[str]) -> list[int]:
    """Each document's tokens, special tokens counted, as the model's tokenizer cuts nothing."""
    counted = tokenizer(documents, add_special_tokens=True, verbose=False)  # no "longer than the maximum" warning
    return [len(ids) for ids in counted["input_ids"]]


class PartState:
    """The run's state file (`file` in `out`): its settings, the finished parts, and the totals the throughput is
    computed from."""

    def __init__(self, out: Path, settings: dict[str, Any], overwrite: bool, file: str = STATE_FILE) -> None:
        self.path = out / file
        self.record = resumable_record(self.path, settings, overwrite, what="input, model or settings") or {
            "settings": settings,
            "parts": 0,
            "documents": 0,
            "tokens_read": 0,
            "documents_cut": 0,
            "wall_time_s": 0.0,
        }

    def add_part(self, documents: int, tokens_read: int, documents_cut: int, wall_time_s: float) -> None:
        record = self.record
        record["parts"] += 1
        record["documents"] += documents
        record["tokens_read"] += tokens_read
        record["documents_cut"] += documents_cut
        record["wall_time_s"] += wall_time_s
        write_record(record, self.path)
        parts = record["parts"]
        note_kept(self.path, f"{parts} part{'s' * (parts > 1)} ({record['documents']} documents) in {self.path.parent}")

    def finish(self, devices: list[str], **facts: Any) -> dict[str, Any]:
        """The finished run's record, written: the totals, `facts`, the devices, the throughput, the library versions
        and the machine."""
        self.record.update(
            facts,
            devices=devices,
            throughput=self.throughput(),
            versions=versions(),
            machine=machine(torch.device(devices[0])),
        )
        write_record(self.record, self.path)
        return self.record

    def throughput(self) -> dict[str, float]:
        seconds = max(self.record["wall_time_s"], 1e-9)
        return {
            "documents_per_s": round(self.record["documents"] / seconds, 3),
            "tokens_per_s": round(self.record["tokens_read"] / seconds, 1),
        }

    def progress(self, total: int) -> str:
        """Documents done of `total`, the rate and the time left at that rate, for the line each part logs."""
        from tqdm import tqdm  # here: the command's extra brings it

        done, rate = self.record["documents"], self.throughput()
        left = (total - done) / rate["documents_per_s"] if rate["documents_per_s"] else 0.0
        return (
            f"{done}/{total} documents, {rate['documents_per_s']:.2f} documents a second, "
            f"{rate['tokens_per_s']:.0f} tokens a second, {tqdm.format_interval(left)} left"
        )


def part_path(out: Path, index: int) -> Path:
    return out / PARTS_FOLDER / f"{index:05d}.npy"


def encode_in_parts(
    model: Any,
    documents: list[str],
    args: argparse.Namespace,
    state: PartState,
    limit: int,
    keep: Callable[[int, Any], None],
) -> None:
    """Encodes `documents` by `embed_part` in parts of --part-size, on `args.devices` (several: sentence-transformers'
    multi-process pool) or, with --engine ray, on a Ray cluster's actors, skipping the parts `state` has done;
    `keep(part, encoded)` saves each part as it finishes, then `state` counts it (the tokens read up to `limit`)."""
    work = functools.partial(embed_part, batch_size=args.batch_size, limit=limit)
    if args.engine == "ray":  # the same parts, each embedded by `work` in an actor of a Ray cluster
        from .ray_parts import encode_parts_on_ray

        return encode_parts_on_ray(model, documents, args, state, work, keep)
    devices = run_devices(args)
    starts = range(0, len(documents), args.part_size)
    pool = model.start_multi_process_pool(devices) if len(devices) > 1 else None
    try:
        for part, start in enumerate(starts):
            if part < state.record["parts"]:
                continue
            texts = documents[start : start + args.part_size]
            encoded, tokens_read, documents_cut, elapsed = work(model, texts, pool=pool)
            keep(part, encoded)
            state.add_part(len(texts), tokens_read, documents_cut, elapsed)
            logger.info("part %d/%d: %s", part + 1, len(starts), state.progress(len(documents)))
    finally:
        if pool is not None:
            model.stop_multi_process_pool(pool)


def embed_part(
    model: Any, texts: list[str], batch_size: int, limit: int, pool: dict[str, Any] | None = None
) -> tuple[Any, int, int, float]:
    """`texts` encoded by `model.encode_document` (`batch_size` a forward pass, in `pool` where given), the tokens
    read (up to `limit` a document), the documents cut there, and the seconds the encoding took."""
    lengths = read_lengths(model.tokenizer, texts)
    started = time.perf_counter()
    encoded = model.encode_document(
        texts, batch_size=batch_size, pool=pool, convert_to_numpy=True, show_progress_bar=False
    )
    elapsed = time.perf_counter() - started
    return encoded, sum(min(n, limit) for n in lengths), sum(n > limit for n in lengths), elapsed


def run_devices(args: argparse.Namespace) -> list[str]:
    if args.engine == "ray":
        return ["cpu"]  # this process's copy of the model, which each actor takes to its own device
    return args.devices or ["cuda" if torch.cuda.is_available() else "cpu"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    documents = check_encode_files(args)
    out = Path(args.out)
    settings = {
        "model": args.model,
        "input": str(args.input),
        "input_sha256": input_digest(args.input, args.text_field),
        "text_field": args.text_field,
        "max_seq_length": args.max_seq_length,
        "part_size": args.part_size,
        "batch_size": args.batch_size,
    }
    check_writable(out)
    state = PartState(out, settings, args.overwrite)
    model = load_model(args.model, run_devices(args)[0], args.max_seq_length)
    limit = model.max_seq_length
    encode_in_parts(
        model,
        documents,
        args,
        state,
        limit,
        lambda part, encoded: save_array(part_path(out, part), encoded.astype(np.float32)),
    )
    parts = range(state.record["parts"])
    save_array(out / EMBEDDINGS_FILE, np.concatenate([np.load(part_path(out, part)) for part in parts]))
    return state.finish(run_devices(args), reads_tokens=limit)


def main(argv: list[str] | None = None) -> int:
    args = encode_parser().parse_args(sys.argv[1:] if argv is None else argv)
    record = run(args)
    rate = record["throughput"]
    print(
        f"{record['documents']} documents embedded into {Path(args.out) / EMBEDDINGS_FILE} "
        f"({rate['documents_per_s']} documents a second, {rate['tokens_per_s']:.0f} tokens a second)."
    )
    if record["documents_cut"]:
        print(
            f"{record['documents_cut']} of {record['documents']} documents are longer than the model reads "
            f"({record['reads_tokens']} tokens) and were cut there; a TISA replace-mode model reads them whole "
            "(tisa-hf adapt; --max-seq-length sets how far)."
        )
    return 0
