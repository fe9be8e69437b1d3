"""Document embeddings kept as they are made, one document at a time, so that a long embedding run resumes at the
next document: `tisa-hf qmsum`'s and `tisa-hf spans`' systems, and `tisa-hf longembed`'s longest cells."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ...common.result_files import save_array
from ...errors import forget_kept, note_kept

logger = logging.getLogger(__name__)

EMBEDDINGS_FOLDER = "embeddings"
LOG_SECONDS = 30.0  # between progress lines where no bar is shown: a document may take minutes, or milliseconds
PROGRESS_LINE = "{desc}: {n_fmt}/{total_fmt} documents [{elapsed}<{remaining}, {rate_fmt}]"


class DocumentProgress:
    """Documents done of `total`, with the rate and the time left: tqdm's bar on a terminal; elsewhere (a log file,
    where a bar's carriage returns pile up into one line) the same facts in tqdm's words, a log line every
    `LOG_SECONDS` and at the end. `initial` documents were done before (a resumed run), and count for no rate."""

    def __init__(self, total: int, initial: int, desc: str) -> None:
        self.interactive = sys.stderr.isatty()
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="document", disable=not self.interactive)
        self.total, self.initial, self.done, self.desc = total, initial, initial, desc
        self.started = self.logged = time.perf_counter()

    def update(self) -> None:
        self.done += 1
        self.bar.update()
        now = time.perf_counter()
        if not self.interactive and (now - self.logged >= LOG_SECONDS or self.done == self.total):
            self.logged = now
            elapsed = now - self.started
            facts = {"prefix": self.desc, "unit": "document", "initial": self.initial, "bar_format": PROGRESS_LINE}
            logger.info(tqdm.format_meter(self.done, self.total, elapsed, **facts))

    def close(self) -> None:
        self.bar.close()


def embed_documents(
    read: Callable[[list[int]], np.ndarray],
    documents: list[list[int]],
    folder: Path,
    name: str,
    fingerprint: str,
) -> dict[str, Any]:
    """The documents' embeddings (`read` gives a document's (vectors, dim) array: one row, one per window for the
    max: read-out, or for the late: read-out one row of the document's scores against the run's queries, which
    `fingerprint` covers), one document at a time in order, kept in `folder` after each (with the time and tokens
    spent so far, and the rows of each document where there can be several), resuming from what is there when it
    was made of the same tokens (`fingerprint`); returns the rows in order, each document's row count, the
    totals, and the part of them that earlier runs spent (`earlier`). The rows are kept as one array, rewritten
    after each document."""
    array, state = folder / f"{name}.npy", folder / f"{name}.json"
    done = json.loads(state.read_text()) if state.is_file() else {}
    if done.get("tokens_sha256") != fingerprint:
        done = {}
    counts = done.get("windows", [1] * done.get("documents", 0))
    parts = [np.load(array)[: sum(counts)]] if done else []
    totals = {key: done.get(key, 0) for key in ("documents", "tokens", "wall_time_s", "cpu_time_s")}
    if counts:
        logger.info("%s: %d of %d documents embedded before, resuming", name, len(counts), len(documents))
    progress = DocumentProgress(len(documents), len(counts), name)
    for document in documents[len(counts) :]:
        started, cpu_started = time.perf_counter(), time.process_time()
        vectors = read(document)
        parts.append(vectors)
        counts.append(len(vectors))
        totals["wall_time_s"] += time.perf_counter() - started
        totals["cpu_time_s"] += time.process_time() - cpu_started
        totals["documents"] += 1
        totals["tokens"] += len(document)
        save_array(array, np.concatenate(parts))
        several = {"windows": counts} if max(counts) > 1 or "windows" in done else {}
        state.write_text(json.dumps({**totals, **several, "tokens_sha256": fingerprint}))
        note_kept(array, f"{len(counts)} of {len(documents)} documents embedded by {name} in {folder}")
        progress.update()
    progress.close()
    earlier = {key: done.get(key, 0) for key in ("documents", "wall_time_s", "cpu_time_s")}
    return {"embeddings": np.concatenate(parts), "windows": counts, **totals, "earlier": earlier}


def discard_kept(folder: Path, name: str) -> None:
    """Removes `name`'s kept embeddings once what they were kept for is recorded, and `folder` and the embeddings
    folder above it when that leaves them empty."""
    for path in (folder / f"{name}.npy", folder / f"{name}.json"):
        path.unlink(missing_ok=True)
        forget_kept(path)
    for empty in (folder, folder.parent):
        if empty.is_dir() and not any(empty.iterdir()):
            empty.rmdir()
