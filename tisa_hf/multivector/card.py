"""The card of a `MultiVectorEncoder` folder tisa-hf writes (`encoder.py`): what it is, how many tokens it reads,
which similarity it declares and why, and how to load it. The sections it shares with a sentence-transformers
folder's card are `common/model_cards.py`'s."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData
from transformers import PreTrainedModel

from ..attaching import tisa_config_of
from ..common.model_cards import adaptation_of, base_model_id, model_section, tisa_section, title_section


def reading_section(documents: int, queries: int) -> str:
    return (
        "## Multi-vector reading\n\nThis folder is a sentence-transformers `MultiVectorEncoder`: one normalised "
        "vector a token ([CLS] and [SEP] left out). `encode_document` reads the first "
        f"**{documents:,} tokens** of a document in one pass (`document_length` in `sentence_bert_config.json`) "
        f"and `encode_query` the first **{queries:,} tokens** of a query (`query_length`).\n\n"
        "`similarity` is `meanmaxsim`: for each query token its best cosine with one of the document's tokens, "
        "averaged over the query's tokens. These are the scores of tisa-hf's `late:` read-out (`tisa-hf qmsum`, "
        "`spans`, `longembed`). sentence-transformers' `maxsim` sums instead of averaging: the same ranking for a "
        "query, on a scale that grows with its length."
    )


def usage_section(model: PreTrainedModel, name: str) -> str:
    model_type = model.config.model_type
    return (
        "## Usage\n\nImport `tisa_hf` first (`pip install tisa-hf`): it registers this checkpoint's model type "
        f"(`{model_type}`) with transformers, so no `trust_remote_code` is needed.\n\n"
        "```python\nimport tisa_hf  # noqa: F401\nfrom sentence_transformers import MultiVectorEncoder\n\n"
        f'model = MultiVectorEncoder("{name}")\nqueries = model.encode_query(["Who chaired the meeting?"])\n'
        'documents = model.encode_document(["A long meeting transcript ...", "Another one ..."])\n'
        "scores = model.similarity(queries, documents)  # (queries, documents), mean MaxSim\n```"
    )


def multi_vector_model_card(
    model: PreTrainedModel, folder: Path, source: str, documents: int, queries: int
) -> ModelCard:
    """The card of the `MultiVectorEncoder` folder around `model` (its TISA encoder), written from `source`, that
    reads documents of `documents` tokens and queries of `queries`."""
    marked = adaptation_of(model)
    base = (marked or {}).get("from") or source
    base_name = base_model_id(base) or base
    how = "adapted by `tisa-hf adapt` to" if marked else "converted to"
    card_data = ModelCardData(
        model_name=str(folder),
        base_model=base_model_id(base),
        library_name="sentence-transformers",
        pipeline_tag="feature-extraction",
        tags=["tisa", "tisa-hf", "translation-invariant-self-attention", "sentence-transformers", "multi-vector",
              "late-interaction"],
    )  # fmt: skip
    sections = [
        title_section(str(folder), f"A late-interaction model: `{base_name}` {how}"),
        model_section(model, base_name),
        tisa_section(tisa_config_of(model), "None: the encoder has no TISA."),
        reading_section(documents, queries),
        usage_section(model, str(folder)),
    ]
    return ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")
