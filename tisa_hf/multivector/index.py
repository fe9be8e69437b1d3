"""`tisa-hf index`: a corpus to a token-vector index, read by a `MultiVectorEncoder` (`encoder.py`), for
`tisa-hf search`.

The corpus is read as `tisa-hf encode` reads it (`embeddings/encode.py`: a JSON Lines file, the text under
--text-field, or a text file, one document a line) and encoded in parts of --part-size documents by
sentence-transformers' `encode_document`, on one device, with several --devices through its multi-process pool, or
with --engine ray by the actors of a Ray cluster (`embeddings/ray_parts.py`).
Each part becomes a shard of token vectors (`index_folder.py`; fp16, or int8 with --dtype int8: `compression.py`)
as soon as it is encoded, and is named in `index.json`, so a killed run resumes at its next part; a rerun over
another input, model (its weights and settings, fingerprinted), part size or --dtype is refused in one line unless
--overwrite. Last, the documents' text is indexed for BM25 (bm25s), the candidate stage of `tisa-hf search
--candidates`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..common.result_files import check_out_folder, check_writable, save_array
from ..common.sentence_models import require_sentence_transformers
from ..embeddings.encode import PartState, encode_in_parts, input_digest, read_documents, run_devices
from ..embeddings.lexical import bm25_index
from ..embeddings.ray_cluster import check_engine
from .compression import bytes_per_token, compress
from .index_folder import (
    BM25_FOLDER,
    BM25_TOKENIZER,
    INDEX_FILE,
    OFFSETS_FILE,
    check_multi_vector_folder,
    counts_path,
    model_fingerprint,
    scales_path,
    vectors_path,
)
from .options import index_parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    check_out_folder(args.out)
    check_engine(args)
    out = Path(args.out)
    model_folder = check_multi_vector_folder(args.model)
    documents = read_documents(args.input, args.text_field)
    settings = {
        "model": str(model_folder.resolve()),
        "model_sha256": model_fingerprint(model_folder),
        "input": str(args.input),
        "input_sha256": input_digest(args.input, args.text_field),
        "text_field": args.text_field,
        "part_size": args.part_size,
        "dtype": args.dtype,
    }
    check_writable(out)
    state = PartState(out, settings, args.overwrite, INDEX_FILE)
    require_sentence_transformers()
    from sentence_transformers import MultiVectorEncoder

    model = MultiVectorEncoder(str(model_folder), device=run_devices(args)[0])
    limit = model[0].document_length or model.max_seq_length

    def keep(part: int, encoded: list[np.ndarray]) -> None:
        codes, scales = compress(np.concatenate(encoded), args.dtype)
        save_array(vectors_path(out, part), codes)
        if scales is not None:
            save_array(scales_path(out, part), scales)
        save_array(counts_path(out, part), np.array([len(rows) for rows in encoded], dtype=np.int64))

    encode_in_parts(model, documents, args, state, limit, keep)
    counts = np.concatenate([np.load(counts_path(out, part)) for part in range(state.record["parts"])])
    save_array(out / OFFSETS_FILE, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    bm25_index(documents, BM25_TOKENIZER).save(str(out / BM25_FOLDER))
    dimension = model.get_embedding_dimension()
    return state.finish(
        run_devices(args),
        vectors=int(counts.sum()),
        dimension=dimension,
        bytes_per_token=bytes_per_token(dimension, args.dtype),
        index_bytes=sum(file.stat().st_size for file in out.rglob("*.npy")),
        document_length=limit,
        query_length=model[0].query_length,
        similarity=model.similarity_fn_name,
    )


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
