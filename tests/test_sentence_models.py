"""TISA models as sentence-transformers models: the written folder, the reading limit, conversion and re-saving."""

from __future__ import annotations

import json
import random
import string

import pytest
import torch
import torch.nn.functional as F
from embedding_fixtures import direct_embedding, tiny_tokenizer, write_tiny_encoder
from transformers import AutoModel

import tisa_hf
from tisa_hf.errors import UsageError

sentence_transformers = pytest.importorskip("sentence_transformers")
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer  # noqa: E402

from tisa_hf.embeddings import (  # noqa: E402
    save_sentence_transformer,
    to_tisa_sentence_transformer,
    write_sentence_transformer,
)

_words = random.Random(0)
# random words, so that no stretch of the text repeats another (whose mean embedding would then match it)
LONG_TEXT = " ".join("".join(_words.choices(string.ascii_lowercase, k=_words.randint(2, 8))) for _ in range(2000))


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return write_tiny_encoder(tmp_path_factory.mktemp("plain") / "model", positions=512)


def replace_model(plain):
    return AutoModel.from_pretrained(
        plain, tisa=tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
    ).eval()


def test_a_replace_model_reads_a_4096_token_text_whole_after_a_round_trip(plain, tmp_path):
    model, tokenizer = replace_model(plain), tiny_tokenizer()
    folder = write_sentence_transformer(model, tokenizer, tmp_path / "st", max_seq_length=4096)
    assert json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"] == 4096
    assert json.loads((folder / "tokenizer_config.json").read_text())["model_max_length"] == 4096
    assert tokenizer.model_max_length != 4096  # the caller's tokenizer is left as it was
    loaded = SentenceTransformer(str(folder), device="cpu")
    assert loaded.max_seq_length == 4096
    ids = tokenizer(LONG_TEXT)["input_ids"][:4095] + [tokenizer.sep_token_id]
    text = tokenizer.decode(ids[1:-1])
    assert tokenizer(text)["input_ids"] == ids  # the text is exactly these 4,096 tokens
    encoded = loaded.encode(text, convert_to_tensor=True, normalize_embeddings=True)
    torch.testing.assert_close(encoded, direct_embedding(model, ids), rtol=1e-5, atol=1e-6)
    truncated = direct_embedding(model, ids[:511] + ids[-1:])
    assert (encoded - truncated).abs().max() > 1e-3  # a thousand times the tolerance above

    again = save_sentence_transformer(loaded, tmp_path / "again")  # sentence-transformers' save, plus the limit
    reloaded = SentenceTransformer(str(again), device="cpu")
    assert reloaded.max_seq_length == 4096
    torch.testing.assert_close(reloaded.encode(text, convert_to_tensor=True, normalize_embeddings=True), encoded)


def test_the_base_models_pooling_and_normalisation_are_copied(plain, tmp_path):
    base = SentenceTransformer(modules=[Transformer(str(plain)), Pooling(32, pooling_mode="cls"), Normalize()])
    base.max_seq_length = 64
    base.save(str(tmp_path / "base"))
    model, tokenizer = replace_model(plain), tiny_tokenizer()
    folder = write_sentence_transformer(
        model, tokenizer, tmp_path / "st", base=str(tmp_path / "base"), max_seq_length=900
    )
    ours, theirs = (json.loads((path / "modules.json").read_text()) for path in (folder, tmp_path / "base"))
    assert ours[1:] == theirs[1:]
    loaded = SentenceTransformer(str(folder), device="cpu")
    assert [type(module).__name__ for module in loaded] == ["Transformer", "Pooling", "Normalize"]
    ids = tokenizer(LONG_TEXT)["input_ids"][:899] + [tokenizer.sep_token_id]
    with torch.no_grad():
        cls_state = model(input_ids=torch.tensor([ids])).last_hidden_state[0, 0]
    encoded = loaded.encode(tokenizer.decode(ids[1:-1]), convert_to_tensor=True)
    torch.testing.assert_close(encoded, F.normalize(cls_state, dim=-1), rtol=1e-5, atol=1e-6)


def test_a_sentence_transformer_converted_to_tisa_keeps_its_pipeline(plain, tmp_path):
    base = SentenceTransformer(modules=[Transformer(str(plain)), Pooling(32), Normalize()])
    base.save(str(tmp_path / "base"))
    converted = to_tisa_sentence_transformer(
        str(tmp_path / "base"),
        tisa={"num_kernels": 2, "mode": "replace", "init": "random"},
        max_seq_length=700,
        device="cpu",
    )
    encoder = converted[0].auto_model
    assert tisa_hf.tisa_config_of(encoder).mode == "replace"
    assert converted.max_seq_length == 700
    tokenizer = tiny_tokenizer()
    ids = tokenizer(LONG_TEXT)["input_ids"][:699] + [tokenizer.sep_token_id]
    text = tokenizer.decode(ids[1:-1])
    encoded = converted.encode(text, convert_to_tensor=True)
    torch.testing.assert_close(encoded, direct_embedding(encoder.eval(), ids), rtol=1e-5, atol=1e-6)
    folder = save_sentence_transformer(converted, tmp_path / "converted")
    reloaded = SentenceTransformer(str(folder), device="cpu")
    assert reloaded.max_seq_length == 700
    torch.testing.assert_close(reloaded.encode(text, convert_to_tensor=True), encoded)


def test_a_saved_sentence_transformer_has_a_card_of_its_own(minilm, plain, tmp_path):
    """Not the base's README: the base, the TISA settings, the reading length and how to load it."""
    tisa = {"num_kernels": 2, "mode": "replace", "init": "random"}
    converted = to_tisa_sentence_transformer(minilm, tisa, max_seq_length=1024, device="cpu")
    card = (save_sentence_transformer(converted, tmp_path / "converted") / "README.md").read_text()
    assert "# all-MiniLM-L6-v2" not in card and "SentenceTransformer('sentence-transformers" not in card
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2\nlibrary_name: sentence-transformers" in card
    assert "`sentence-transformers/all-MiniLM-L6-v2` converted (kernels started by `random`, not trained" in card
    assert "| num_kernels | `2` |\n| mode | `replace` |" in card
    assert "It reads the first **1024 tokens** of each input (`max_seq_length` in `sentence_bert_config.json`)" in card
    assert "Without it, transformers does not recognise `tisa_hf_bert` and suggests updating Transformers" in card
    assert (
        f"import tisa_hf  # noqa: F401\nfrom sentence_transformers import SentenceTransformer\n\nmodel = "
        f'SentenceTransformer("{tmp_path / "converted"}")' in card
    )

    folder = write_sentence_transformer(replace_model(plain), tiny_tokenizer(), tmp_path / "st", max_seq_length=300)
    card = (folder / "README.md").read_text()
    assert f"`{plain}` converted" in card and "reads the first **300 tokens**" in card


def test_reading_limits_are_checked(plain, tmp_path):
    tokenizer = tiny_tokenizer()
    with pytest.raises(UsageError) as error:
        write_sentence_transformer(replace_model(plain), tokenizer, tmp_path / "a")
    assert str(error.value) == (
        "A TISA replace-mode model reads inputs of any length, so give max_seq_length, the number of tokens to read "
        "(e.g. max_seq_length=4096); sentence-transformers would otherwise cut every input at the 512 positions of "
        "its position table, which replace mode does not use."
    )
    add = AutoModel.from_pretrained(plain, tisa=tisa_hf.TisaConfig(num_kernels=2, mode="add", init="random"))
    with pytest.raises(UsageError) as error:
        write_sentence_transformer(add, tokenizer, tmp_path / "b", max_seq_length=1024)
    assert str(error.value) == (
        "max_seq_length 1024 is longer than the position table (512 positions) and TISA mode='add' keeps its "
        "position embeddings; ask for at most 512, or convert with TisaConfig(mode='replace'), which reads any length."
    )
    with pytest.raises(UsageError, match=r"^max_seq_length 513 is longer .* and the model has no TISA; ask for"):
        write_sentence_transformer(AutoModel.from_pretrained(plain), tokenizer, tmp_path / "c", max_seq_length=513)
    folder = write_sentence_transformer(add, tokenizer, tmp_path / "d")
    assert json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"] == 512
    with pytest.raises(UsageError) as error:
        write_sentence_transformer(add, tokenizer, folder)
    assert str(error.value) == (
        f"{folder} already holds a sentence-transformers model; choose another folder or overwrite."
    )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # refused before writing anything
