"""TISA models as sentence-transformers `MultiVectorEncoder`s: the written folder loads and reads whole long
documents, its scores are the `late:` read-out's, it pickles and encodes alike on two processes, and bad requests
are refused in one line."""

from __future__ import annotations

import json
import pickle
import random
import string

import numpy as np
import pytest
import torch
from embedding_fixtures import tiny_tokenizer, write_tiny_encoder
from transformers import AutoModel

import tisa_hf
from tisa_hf.errors import UsageError

pytest.importorskip("sentence_transformers")
from sentence_transformers import MultiVectorEncoder  # noqa: E402

from tisa_hf.common.sentence_models import to_tisa_sentence_transformer  # noqa: E402
from tisa_hf.embeddings.retrieval.readouts import LateScorer  # noqa: E402
from tisa_hf.embeddings.systems import Embedder, SystemSpec  # noqa: E402
from tisa_hf.multivector import save_multi_vector_encoder  # noqa: E402

_words = random.Random(0)
DOCUMENTS = [
    " ".join("".join(_words.choices(string.ascii_lowercase, k=_words.randint(2, 8))) for _ in range(words))
    for words in (300, 40, 7)
]
QUERIES = ["what is the pass key", "the sky is blue", "green grass"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return write_tiny_encoder(tmp_path_factory.mktemp("plain") / "model", positions=32)


def tisa_folder(plain, folder, mode: str = "replace"):
    tisa = tisa_hf.TisaConfig(num_kernels=2, mode=mode, init="random")
    AutoModel.from_pretrained(plain, tisa=tisa).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def late_scores(folder) -> np.ndarray:
    """(queries, documents): the `late:` read-out of the retrieval commands, on the same texts."""
    tokenizer = tiny_tokenizer()
    embedder = Embedder(SystemSpec.parse(f"late:{folder}"), 0, torch.device("cpu"), batch_tokens=4096)
    scorer = LateScorer(embedder, tokenizer(QUERIES)["input_ids"])
    return np.concatenate([scorer.keep(ids) for ids in tokenizer(DOCUMENTS)["input_ids"]]).T


def test_a_tisa_folder_loads_as_a_multi_vector_encoder_reading_whole_documents_scored_as_late(plain, tmp_path):
    source = tisa_folder(plain, tmp_path / "tisa")
    folder = save_multi_vector_encoder(source, tmp_path / "multi")
    model = MultiVectorEncoder(str(folder), device="cpu")  # no trust_remote_code
    assert model.similarity_fn_name == "meanmaxsim"
    assert (model[0].document_length, model[0].query_length, model.max_seq_length) == (32_768, 32_768, 32_768)
    documents, queries = model.encode_document(DOCUMENTS), model.encode_query(QUERIES)
    lengths = [len(ids) - 2 for ids in tiny_tokenizer()(DOCUMENTS)["input_ids"]]
    assert lengths[0] > 512  # past BERT's table, and far past this model's 32 positions
    assert [len(document) for document in documents] == lengths  # every token but [CLS] and [SEP]
    np.testing.assert_allclose(model.similarity(queries, documents).numpy(), late_scores(source), rtol=0, atol=1e-5)
    card = (folder / "README.md").read_text()
    assert "**32,768 tokens** of a document" in card and "**32,768 tokens** of a query" in card
    assert "`similarity` is `meanmaxsim`" in card and "`late:` read-out" in card


def test_a_tisa_sentence_transformer_writes_its_encoder_and_keeps_its_own_lengths(plain, tmp_path):
    model = to_tisa_sentence_transformer(
        str(plain), {"num_kernels": 2, "mode": "replace", "init": "random"}, max_seq_length=64, device="cpu"
    )
    folder = save_multi_vector_encoder(model, tmp_path / "multi", document_length=2048, query_length=16)
    assert model.max_seq_length == 64  # the caller's model keeps its own
    settings = json.loads((folder / "sentence_bert_config.json").read_text())
    assert (settings["document_length"], settings["query_length"], settings["max_seq_length"]) == (2048, 16, 2048)
    modules = [entry["type"].rsplit(".", 1)[-1] for entry in json.loads((folder / "modules.json").read_text())]
    assert modules == ["Transformer", "MultiVectorMask", "Normalize"]  # the mean pooling is left behind
    loaded = MultiVectorEncoder(str(folder), device="cpu")
    long_query = " ".join(["blue"] * 40)
    assert len(loaded.encode_query(long_query)) == 14  # 16 tokens, [CLS] and [SEP] left out
    ids = tiny_tokenizer()(DOCUMENTS[0])["input_ids"]
    with torch.no_grad():
        states = model[0].auto_model(input_ids=torch.tensor([ids])).last_hidden_state[0, 1:-1]
    torch.testing.assert_close(
        loaded.encode_document(DOCUMENTS[0]), torch.nn.functional.normalize(states, dim=-1), rtol=0, atol=1e-6
    )


def test_an_add_model_reads_its_table_and_bad_requests_are_refused_in_one_line(plain, tmp_path):
    add = tisa_folder(plain, tmp_path / "add", mode="add")
    folder = save_multi_vector_encoder(add, tmp_path / "multi")
    settings = json.loads((folder / "sentence_bert_config.json").read_text())
    assert (settings["document_length"], settings["query_length"]) == (32, 32)
    cases = {
        (str(plain), tmp_path / "plain"): (
            f"{plain} has no TISA; give a TISA model, e.g. tisa-hf adapt's output or "
            "to_tisa_sentence_transformer(model, TisaConfig(mode='replace'), max_seq_length=...)."
        ),
        (str(add), tmp_path / "long", 64): (
            "max_seq_length 64 is longer than the position table (32 positions) and TISA mode='add' keeps its "
            "position embeddings; ask for at most 32, or convert with TisaConfig(mode='replace'), which reads any "
            "length."
        ),
        (
            str(add),
            folder,
        ): f"{folder} already holds a sentence-transformers model; choose another folder or overwrite.",
    }
    for arguments, message in cases.items():
        with pytest.raises(UsageError) as error:
            save_multi_vector_encoder(*arguments)
        assert str(error.value) == message
    assert not (tmp_path / "plain").exists() and not (tmp_path / "long").exists()


def test_the_encoder_pickles_and_encodes_on_two_processes_as_on_one(plain, tmp_path):
    folder = save_multi_vector_encoder(tisa_folder(plain, tmp_path / "tisa"), tmp_path / "multi")
    model = MultiVectorEncoder(str(folder), device="cpu")
    texts = [*DOCUMENTS, "the sun is yellow"]
    # The workers get chunks of one text (4 texts over 2 processes): the reference encodes them one at a time too.
    expected = [model.encode_document(text) for text in texts]
    for got in (
        pickle.loads(pickle.dumps(model)).encode_document(texts),
        model.encode_document(texts, device=["cpu", "cpu"], chunk_size=1),
    ):
        assert len(got) == len(expected)
        for one, reference in zip(got, expected, strict=True):
            torch.testing.assert_close(one, reference, rtol=0, atol=1e-6)
