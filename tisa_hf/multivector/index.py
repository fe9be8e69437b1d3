"""`tisa-hf index`: a corpus to a token-vector index, read by a `MultiVectorEncoder` (`encoder.py`), for
`tisa-hf search`.

The corpus is read as `tisa-hf encode` reads it (`embeddings/encode.py`: a JSON Lines file, the text under
--text-field, or a text file, one document a line) and encoded in parts of --part-size documents by
sentence-transformers' `encode_document`, on one device, with several --devices through its multi-process pool, or
with --engine ray by the actors of a Ray cluster (`embeddings/ray_parts.py`).
Each part becomes a shard of token vectors (`index_folder.py`; fp16, int8 or product-quantized codes under a
codebook learned from the first part: --dtype, `compression.py`) as soon as it is encoded, and is named in
`index.json`, so a killed run resumes at its next part; a rerun over another input, model (its weights and
settings, fingerprinted, with the files' sizes and times recorded for search's cheap check), part size or --dtype
is refused in one line unless --overwrite. Last, the documents' text is indexed for BM25 (bm25s), the candidate
stage of `tisa-hf search --candidates`, and the documents' own ids are kept where the corpus gives them (--id-field),
for search's hits.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..common.result_files import check_writable, save_array
from ..common.sentence_models import require_sentence_transformers
from ..embeddings.corpus_files import input_digest
from ..embeddings.encode import PartState, encode_in_parts, run_devices
from ..embeddings.lexical import bm25_index
from ..embeddings.ray_cluster import check_engine
from .checks import check_index_files
from .compression import bytes_per_token, check_pq_dimension, compress, pq_bytes, train_codebook
from .index_folder import (
    BM25_FOLDER,
    BM25_TOKENIZER,
    INDEX_FILE,
    OFFSETS_FILE,
    StoredVectors,
    centroid_counts_path,
    centroids_path,
    codebook_path,
    counts_path,
    document_centroids_path,
    finished_index,
    model_files,
    model_fingerprint,
    postings_path,
    scales_path,
    stored_ids,
    vectors_path,
    write_ids,
)
from .options import index_parser
from .token_candidates import Postings, document_centroids, train_centroids


def run(args: argparse.Namespace) -> dict[str, Any]:
    corpus = check_index_files(args)
    check_engine(args)
    out, model_folder, documents = Path(args.out), Path(args.model), corpus.texts
    files = model_files(model_folder)  # before the fingerprint: a file changed while it is read shows later
    settings = {
        "model": str(model_folder.resolve()),
        "model_sha256": model_fingerprint(model_folder),
        "input": str(args.input),
        "input_sha256": input_digest(args.input, args.text_field),
        "text_field": args.text_field,
        "part_size": args.part_size,
        "dtype": args.dtype,
        "token_centroids": args.token_centroids,
    }
    check_writable(out)
    state = PartState(out, settings, args.overwrite, INDEX_FILE)
    require_sentence_transformers()
    from sentence_transformers import MultiVectorEncoder

    model = MultiVectorEncoder(str(model_folder), device=run_devices(args)[0])
    limit = model[0].document_length or model.max_seq_length

    def keep(part: int, encoded: list[np.ndarray]) -> None:
        store_part(out, part, encoded, args.dtype, args.token_centroids)

    encode_in_parts(model, documents, args, state, limit, keep)
    counts = finish_parts(out, state.record["parts"], args.token_centroids)
    bm25_index(documents, BM25_TOKENIZER).save(str(out / BM25_FOLDER))
    write_ids(out, corpus.ids)
    dimension = model.get_embedding_dimension()
    return state.finish(
        run_devices(args),
        vectors=int(counts.sum()),
        dimension=dimension,
        bytes_per_token=bytes_per_token(dimension, args.dtype),
        index_bytes=index_bytes(out),
        document_length=limit,
        query_length=model[0].query_length,
        similarity=model.similarity_fn_name,
        model_files=files,
        id_field=corpus.id_field,
    )


def store_part(out: Path, part: int, encoded: list[np.ndarray], dtype: str, token_centroids: int | None) -> None:
    """Saves a part's documents' (tokens, dim) token vectors as `dtype` stores them, with their counts and, with
    `token_centroids`, each document's centroids (`token_candidates.py`). The first part also learns what every
    part shares: the `pqM` codebook and the centroids (at most `token_centroids`); a resumed run reads them."""
    rows = np.concatenate(encoded)
    if part == 0:
        codebook = train_codebook(rows, dtype)
        if codebook is not None:
            save_array(codebook_path(out), codebook)
        if token_centroids:
            save_array(centroids_path(out), train_centroids(rows, token_centroids))
    codebook = np.load(codebook_path(out)) if pq_bytes(dtype) else None
    codes, scales = compress(rows, dtype, codebook)
    save_array(vectors_path(out, part), codes)
    if scales is not None:
        save_array(scales_path(out, part), scales)
    if token_centroids:
        found = document_centroids(np.load(centroids_path(out)), encoded)
        save_array(document_centroids_path(out, part), np.concatenate(found))
        save_array(centroid_counts_path(out, part), np.array([len(ids) for ids in found], dtype=np.int64))
    save_array(counts_path(out, part), np.array([len(rows) for rows in encoded], dtype=np.int64))


def finish_parts(out: Path, parts: int, token_centroids: int | None) -> np.ndarray:
    """Writes what needs every part, once they are all stored: the documents' offsets and, with
    `token_centroids`, the postings from centroids to documents. Returns each document's token count."""
    counts = np.concatenate([np.load(counts_path(out, part)) for part in range(parts)])
    if token_centroids:
        per_document = []
        for part in range(parts):
            bounds = np.cumsum([0, *np.load(centroid_counts_path(out, part))])
            ids = np.load(document_centroids_path(out, part))
            per_document += [ids[start:end] for start, end in zip(bounds[:-1], bounds[1:], strict=True)]
        postings = Postings.invert(per_document, len(np.load(centroids_path(out))))
        save_array(postings_path(out, "starts"), postings.starts)
        save_array(postings_path(out, "documents"), postings.documents)
    save_array(out / OFFSETS_FILE, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    return counts


def recompress(source: str, out: Path, dtype: str, token_centroids: int | None = None) -> dict[str, Any]:
    """Writes in `out` the finished index in `source` stored as `dtype` (and with the token candidate stage of at
    most `token_centroids` centroids), from its stored vectors, part by part and resumable, without the model: a
    corpus is encoded once. Vectors stored as fp16 are rounded again, so the copy holds what `dtype` keeps of
    fp16's numbers. Returns the copy's record."""
    record = finished_index(source)
    stored = StoredVectors(source, record)
    settings = record["settings"] | {"dtype": dtype, "token_centroids": token_centroids, "from_index": str(source)}
    check_pq_dimension(dtype, record["dimension"])
    state = PartState(out, settings, False, INDEX_FILE)
    part_size = settings["part_size"]
    for part in range(state.record["parts"], record["parts"]):
        started = time.perf_counter()
        documents = range(part * part_size, min((part + 1) * part_size, len(stored)))
        store_part(out, part, [stored[document] for document in documents], dtype, token_centroids)
        state.add_part(len(documents), int(sum(len(stored[d]) for d in documents)), 0, time.perf_counter() - started)
    finish_parts(out, record["parts"], token_centroids)
    shutil.copytree(Path(source) / BM25_FOLDER, out / BM25_FOLDER, dirs_exist_ok=True)
    write_ids(out, stored_ids(source))
    facts = ("vectors", "dimension", "document_length", "query_length", "similarity", "model_files")
    return state.finish(
        ["cpu"],
        **{fact: record[fact] for fact in facts},
        id_field=record.get("id_field"),
        bytes_per_token=bytes_per_token(record["dimension"], dtype),
        index_bytes=index_bytes(out),
    )


def index_bytes(out: Path) -> int:
    """The bytes of the index's token vectors and what reads them (shards, offsets, codebook, centroids and
    postings); BM25's text index aside."""
    return sum(file.stat().st_size for file in out.rglob("*.npy") if BM25_FOLDER not in file.relative_to(out).parts)


def main(argv: list[str] | None = None) -> int:
    args = index_parser().parse_args(sys.argv[1:] if argv is None else argv)
    record = run(args)
    print(
        f"{record['documents']} documents indexed in {args.out}: {record['vectors']} token vectors, "
        f"{record['bytes_per_token']} bytes a token, {record['index_bytes'] / 2**20:.1f} MiB "
        f"({record['throughput']['tokens_per_s']:.0f} tokens a second)."
    )
    if record["documents_cut"]:
        print(
            f"{record['documents_cut']} of {record['documents']} documents are longer than the model reads "
            f"({record['document_length']} tokens) and were cut there."
        )
    return 0
