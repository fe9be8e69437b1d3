"""TISA models as sentence-transformers `MultiVectorEncoder`s: one normalised vector a token, scored by mean MaxSim,
which is the retrieval commands' `late:` read-out.

The folder is sentence-transformers' own (`MultiVectorEncoder.save`): the TISA encoder in a Transformer module that
reads documents of `document_length` tokens and queries of `query_length`, a `MultiVectorMask` that leaves [CLS]
and [SEP] out of the scoring on both sides, as `Embedder.read_tokens` does, and a token-level `Normalize`. It loads
with `MultiVectorEncoder(folder)` after `import tisa_hf` (which registers the TISA model types; no
trust_remote_code), and its `similarity` is `meanmaxsim`: sentence-transformers' `maxsim` sums over the query's
tokens where the `late:` read-out averages, which ranks a query's documents alike but scores on another scale.
"""

from __future__ import annotations

import copy
from pathlib import Path

from ..attaching import reading_range, tisa_config_of
from ..common.checkpoints import CheckpointFacts, reads_any_length
from ..common.sentence_models import (
    MODULES_FILE,
    SentenceTransformer,
    Transformer,
    check_reading_limit,
    record_reading_limit,
    require_sentence_transformers,
    transformer_module,
)
from ..config import TisaConfig
from ..errors import UsageError
from .card import multi_vector_model_card

# The longest documents the project measures (`tisa-hf longembed`): what a replace-mode model reads by default.
DOCUMENT_LENGTH = 32_768
SIMILARITY = "meanmaxsim"
SCORED_TASKS = ("query", "document")


def save_multi_vector_encoder(
    model_or_path: SentenceTransformer | str | Path,
    folder: str | Path,
    document_length: int | None = None,
    query_length: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Writes `folder` as a `MultiVectorEncoder` of a TISA model, with a card of its own, and returns it.

    `model_or_path`: a TISA sentence-transformers model (`to_tisa_sentence_transformer`), or the folder of a TISA
    model or TISA sentence-transformers model (`tisa-hf adapt`'s output); only its encoder is kept. Documents are
    read up to `document_length` tokens (default 32,768 for a `replace` model, the position table or rotary range
    for an `add` one), queries up to `query_length` (default: the document length, so that a query is read whole as the
    `late:` read-out reads it). A folder that already holds a sentence-transformers model is not written over
    unless `overwrite`.
    """
    require_sentence_transformers()
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Normalize
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    folder = Path(folder)
    if (folder / MODULES_FILE).is_file() and not overwrite:
        raise UsageError(f"{folder} already holds a sentence-transformers model; choose another folder or overwrite.")
    loaded = isinstance(model_or_path, SentenceTransformer)
    if loaded:
        encoder = transformer_module(model_or_path).auto_model
        source, tisa, (table, describes) = encoder.config.name_or_path, tisa_config_of(encoder), reading_range(encoder)
    else:
        facts = CheckpointFacts.read(str(model_or_path), "the model")
        source, tisa, table, describes = str(model_or_path), facts.tisa, facts.table_length, facts.positions.describes
    if tisa is None:
        raise UsageError(
            f"{source or 'The model'} has no TISA; give a TISA model, e.g. tisa-hf adapt's output or "
            "to_tisa_sentence_transformer(model, TisaConfig(mode='replace'), max_seq_length=...)."
        )
    documents = check_reading_limit(table, describes, tisa, document_length or _default_length(tisa, table), None)
    queries = check_reading_limit(table, describes, tisa, query_length or documents, None)
    model = model_or_path if loaded else SentenceTransformer(facts.path, device="cpu")
    reader = _reading_transformer(transformer_module(model), documents, queries)
    tokenizer = reader.tokenizer
    # [CLS] and [SEP] by token id: the library masks by id, and a text gets them only at its ends.
    ends = MultiVectorMask(skiplist_words=[tokenizer.cls_token, tokenizer.sep_token], skiplist_tasks=list(SCORED_TASKS))
    multi_vector = MultiVectorEncoder(
        modules=[reader, ends, Normalize(module_input_name="token_embeddings")],
        similarity_fn_name=SIMILARITY,
        device=str(model.device),
    )
    multi_vector.save(str(folder))
    record_reading_limit(folder, documents)
    multi_vector_model_card(reader.auto_model, folder, source, documents, queries).save(folder / "README.md")
    return folder


def _default_length(tisa: TisaConfig, table: int) -> int:
    """A replace model's `DOCUMENT_LENGTH`, an add model's trained length (`table`)."""
    return DOCUMENT_LENGTH if reads_any_length(tisa) else table


def _reading_transformer(transformer: Transformer, documents: int, queries: int) -> Transformer:
    """A shallow copy of `transformer` (the same encoder weights) with a tokenizer of its own, reading documents
    of `documents` tokens and queries of `queries`: the caller's model keeps its lengths."""
    reader = copy.copy(transformer)
    reader.processor = copy.deepcopy(transformer.processor)
    reader.max_seq_length = documents
    reader.document_length, reader.query_length = documents, queries
    return reader
