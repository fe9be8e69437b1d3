import datasets
import numpy as np
import pytest
from transformers import BertTokenizerFast

from tests.fixtures import tiny_config
from tisa_hf import TisaConfig, tisa_model_config
from tisa_hf.common.checkpoints import check_sequence_length
from tisa_hf.errors import UsageError
from tisa_hf.finetune.classify.labels import LabelVocabulary
from tisa_hf.finetune.classify.metrics import document_metrics, main_metric
from tisa_hf.finetune.classify.truncation import Truncation, encode_documents, tokenize_documents

WORDS = [f"w{index}" for index in range(300)]


@pytest.fixture(scope="module")
def tokenizer() -> BertTokenizerFast:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    return BertTokenizerFast(vocab={token: index for index, token in enumerate(vocab)}, do_lower_case=True)


def test_head_and_tail_keeps_exactly_the_first_and_last_tokens(tokenizer):
    text = " ".join(WORDS)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    encoded = encode_documents([text, "w1 w2"], tokenizer, Truncation("head+tail", max_length=64, head_tokens=16))
    assert encoded["input_ids"][0] == [cls, *ids[:16], *ids[-(64 - 2 - 16) :], sep]
    assert encoded["input_ids"][1] == [cls, *ids[1:3], sep]
    assert encoded["attention_mask"][0] == [1] * 64 and encoded["token_type_ids"][0] == [0] * 64
    assert encoded["document_tokens"] == [300, 2]
    head = encode_documents([text], tokenizer, Truncation("head", max_length=64))
    assert head["input_ids"][0] == [cls, *ids[:62], sep]


def test_the_text_of_a_special_token_inside_a_document_does_not_shift_the_cut(tokenizer):
    text = "w1 [SEP] " + " ".join(WORDS[:20])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    encoded = encode_documents([text], tokenizer, Truncation("head+tail", max_length=10, head_tokens=3))
    assert encoded["input_ids"][0] == [tokenizer.cls_token_id, *ids[:3], *ids[-5:], tokenizer.sep_token_id]


def test_head_tokens_must_leave_room_within_the_length(tokenizer):
    with pytest.raises(UsageError, match=r"^--head-tokens 63 exceeds the 62 document tokens that --max-seq-length 64"):
        encode_documents(["w1"], tokenizer, Truncation("head+tail", max_length=64, head_tokens=63))
    with pytest.raises(UsageError, match=r"^--head-tokens must be at least 0 and below --max-seq-length 64; got 64\.$"):
        Truncation("head+tail", max_length=64, head_tokens=64)


def test_tokenized_splits_hold_model_inputs_and_say_what_was_cut(tokenizer):
    splits = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"id": ["a", "b"], "text": [" ".join(WORDS), "w5"], "label": [1, 0]}),
            "test": datasets.Dataset.from_dict({"id": ["c"], "text": ["w7 w8"], "label": [1]}),
        }
    )
    encoded, summaries = tokenize_documents(splits, tokenizer, Truncation("head", max_length=32))
    assert encoded["train"].column_names == ["input_ids", "token_type_ids", "attention_mask", "labels"]
    assert [len(ids) for ids in encoded["train"]["input_ids"]] == [32, 3]
    assert encoded["train"]["labels"] == [1, 0]
    assert (summaries["train"].documents, summaries["train"].truncated, summaries["train"].longest) == (2, 1, 300)
    assert (summaries["test"].truncated, summaries["test"].longest) == (0, 2)


def test_lengths_beyond_the_position_table_need_replace_mode():
    config = tiny_config("bert", num_hidden_layers=1, max_position_embeddings=64)
    check_sequence_length(config, 64)
    with pytest.raises(UsageError) as caught:
        check_sequence_length(config, 65, name="tiny")
    assert str(caught.value) == (
        "--max-seq-length 65 exceeds the position table of tiny, 64 positions (no TISA); use TISA in replace mode "
        "(--tisa.num_kernels 5 --tisa.mode replace), which reads any length, or --max-seq-length 64 or less."
    )
    with pytest.raises(UsageError, match=r"64 positions \(TISA mode='add' keeps it\)"):
        check_sequence_length(config, 65, TisaConfig(num_kernels=2, mode="add"))
    check_sequence_length(config, 4096, TisaConfig(num_kernels=2, mode="replace"))
    replace_checkpoint = tisa_model_config(config, TisaConfig(num_kernels=2, mode="replace", init="zeros"))
    check_sequence_length(replace_checkpoint, 4096)
    with pytest.raises(UsageError, match=r"keeps it"):
        check_sequence_length(replace_checkpoint, 4096, TisaConfig(num_kernels=2, mode="add"))
    roberta = tiny_config("roberta")  # 42 rows, 2 of them before the first position
    with pytest.raises(UsageError, match=r"exceeds the position table of the model, 40 positions"):
        check_sequence_length(roberta, 41)


def test_metrics_against_a_direct_count():
    labels = LabelVocabulary(("false", "true"), "true")
    gold = np.array([1, 0, 1, 1, 0, 0])
    predicted = np.array([1, 1, 0, 1, 0, 0])
    logits = np.eye(2)[predicted] + 0.1  # argmax = predicted
    scores = document_metrics(logits, gold, labels)
    true_positives, false_positives, false_negatives = 2, 1, 1
    positive_f1 = 2 * true_positives / (2 * true_positives + false_positives + false_negatives)
    negative_f1 = 2 * 2 / (2 * 2 + 1 + 1)  # negatives: 2 right, one missed, one wrongly claimed
    assert scores == pytest.approx({"accuracy": 4 / 6, "f1": positive_f1, "macro_f1": (positive_f1 + negative_f1) / 2})
    assert main_metric(labels) == "f1"
    three = LabelVocabulary(("a", "b", "c"), None)
    assert set(document_metrics(np.eye(3), np.arange(3), three)) == {"accuracy", "macro_f1"}
    assert main_metric(three) == "macro_f1"
