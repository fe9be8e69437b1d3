"""SQuAD loading from official-format JSON, feature preparation with the MiniLM tokenizer, and the task bundle."""

import json

import numpy as np
import pytest
from transformers import AutoTokenizer

import tisa_hf
from tisa_hf.errors import UsageError
from tisa_hf.finetune.squad.data import (
    SquadFormatError,
    build_squad_task,
    check_windows,
    load_squad,
    load_squad_data,
    prepare_eval_features,
    prepare_train_features,
    read_squad_json,
)
from tisa_hf.finetune.squad.options import SquadArguments

MINILM = tisa_hf.minilm_path()

CONTEXT = (
    "The river Loire rises in the Massif Central and flows north and then west for about one thousand "
    "kilometres. It passes the cities of Orleans, Tours and Angers before reaching the Atlantic at Saint-Nazaire."
)
ANSWER = "Saint-Nazaire"
SQUAD_V2 = {
    "version": "v2.0",
    "data": [
        {
            "title": "Loire",
            "paragraphs": [
                {
                    "context": CONTEXT,
                    "qas": [
                        {
                            "id": "q-mouth",
                            "question": "Where does the Loire reach the Atlantic?",
                            "answers": [{"text": ANSWER, "answer_start": CONTEXT.index(ANSWER)}],
                            "is_impossible": False,
                        },
                        {
                            "id": "q-source",
                            "question": "Where does the Loire rise?",
                            "answers": [
                                {"text": "the Massif Central", "answer_start": CONTEXT.index("the Massif Central")},
                                {"text": "Massif Central", "answer_start": CONTEXT.index("Massif Central")},
                            ],
                            "is_impossible": False,
                        },
                        {
                            "id": "q-fish",
                            "question": "Which fish live in the Loire?",
                            "answers": [],
                            "plausible_answers": [{"text": "Tours", "answer_start": CONTEXT.index("Tours")}],
                            "is_impossible": True,
                        },
                    ],
                }
            ],
        }
    ],
}


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(MINILM)


def _write(path, document):
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    return path


def test_read_official_json_flattens_questions(tmp_path):
    dataset = read_squad_json(_write(tmp_path / "dev.json", SQUAD_V2))
    assert dataset.column_names == ["id", "title", "context", "question", "answers"]
    assert dataset["id"] == ["q-mouth", "q-source", "q-fish"]
    assert dataset[0] == {
        "id": "q-mouth",
        "title": "Loire",
        "context": CONTEXT,
        "question": "Where does the Loire reach the Atlantic?",
        "answers": {"text": [ANSWER], "answer_start": [CONTEXT.index(ANSWER)]},
    }
    assert dataset[1]["answers"]["text"] == ["the Massif Central", "Massif Central"]
    assert dataset[2]["answers"] == {"text": [], "answer_start": []}


def test_load_squad_needs_both_files(tmp_path):
    path = _write(tmp_path / "dev.json", SQUAD_V2)
    splits = load_squad(True, str(path), str(path))
    assert set(splits) == {"train", "validation"} and len(splits["validation"]) == 3
    with pytest.raises(ValueError, match="Pass both train_file and validation_file"):
        load_squad(True, str(path), None)


def test_invalid_json_names_file_line_and_column(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"version": "v1.1",\n "data": [\n  {"title": "x",}\n ]\n}', encoding="utf-8")
    with pytest.raises(SquadFormatError) as error:
        read_squad_json(path)
    assert str(error.value) == (
        f"{path}: not valid JSON at line 3, column 17: Expecting property name enclosed in double quotes."
    )


def test_missing_field_names_its_place_in_the_structure(tmp_path):
    document = json.loads(json.dumps(SQUAD_V2))
    del document["data"][0]["paragraphs"][0]["qas"][1]["question"]
    path = _write(tmp_path / "dev.json", document)
    with pytest.raises(SquadFormatError) as error:
        read_squad_json(path)
    assert str(error.value) == (
        f'{path}: data[0].paragraphs[0].qas[1] has no "question"; expected the official SQuAD format '
        "(https://rajpurkar.github.io/SQuAD-explorer/)."
    )


def test_wrong_type_names_the_field(tmp_path):
    document = json.loads(json.dumps(SQUAD_V2))
    document["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = "12"
    path = _write(tmp_path / "dev.json", document)
    with pytest.raises(SquadFormatError, match=r"qas\[0\]\.answers\[0\]\.answer_start must be int, got str"):
        read_squad_json(path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(SquadFormatError, match="nope.json: no such file"):
        read_squad_json(tmp_path / "nope.json")


def _batch(tmp_path):
    return read_squad_json(_write(tmp_path / "dev.json", SQUAD_V2)).to_dict()


def test_train_positions_map_back_to_the_answer_in_every_window(tmp_path, tokenizer):
    batch = _batch(tmp_path)
    features = prepare_train_features(batch, tokenizer, max_seq_length=40, doc_stride=16)
    eval_features = prepare_eval_features(batch, tokenizer, max_seq_length=40, doc_stride=16)
    example_ids = eval_features["example_id"]
    assert len(features["input_ids"]) == len(example_ids) > 3  # the context does not fit one 40-token feature
    assert all(len(ids) == 40 for ids in features["input_ids"])
    windows_with_answer = {"q-mouth": 0, "q-source": 0}
    for i, example_id in enumerate(example_ids):
        start, end = features["start_positions"][i], features["end_positions"][i]
        offsets = eval_features["offset_mapping"][i]
        context_chars = [o for o in offsets if o is not None]
        if example_id == "q-fish":
            assert start == end == 0
            continue
        first_answer = batch["answers"][batch["id"].index(example_id)]
        answer_start = first_answer["answer_start"][0]
        answer_end = answer_start + len(first_answer["text"][0])
        inside = context_chars[0][0] <= answer_start and answer_end <= context_chars[-1][1]
        if inside:
            windows_with_answer[example_id] += 1
            assert CONTEXT[offsets[start][0] : offsets[end][1]] == first_answer["text"][0]
            decoded = tokenizer.decode(features["input_ids"][i][start : end + 1])
            assert decoded == first_answer["text"][0].lower().replace("-", " - ")
        else:
            assert start == end == 0
    assert windows_with_answer["q-mouth"] >= 1 and windows_with_answer["q-source"] >= 1


def test_eval_windows_overlap_by_the_stride_and_hide_non_context_offsets(tmp_path, tokenizer):
    batch = _batch(tmp_path)
    features = prepare_eval_features(batch, tokenizer, max_seq_length=40, doc_stride=16)
    windows = [(i, features["offset_mapping"][i]) for i, qid in enumerate(features["example_id"]) if qid == "q-source"]
    assert len(windows) >= 2
    for i, offsets in windows:
        tokens = features["input_ids"][i]
        assert offsets[0] is None and tokens[0] == tokenizer.cls_token_id
        context_positions = [t for t, o in enumerate(offsets) if o is not None]
        # the question and the special tokens carry no offset
        assert all(tokens[t] not in (tokenizer.sep_token_id, tokenizer.pad_token_id) for t in context_positions)
    first, second = windows[0][1], windows[1][1]
    first_context = [o for o in first if o is not None]
    second_context = [o for o in second if o is not None]
    assert first_context[-16:] == second_context[:16]


def _squad_args(path, version_2):
    return SquadArguments(
        version_2_with_negative=version_2,
        train_file=str(path),
        validation_file=str(path),
        max_seq_length=40,
        doc_stride=16,
    )


@pytest.mark.parametrize("version_2", [False, True])
def test_task_bundle_scores_oracle_logits_perfectly(tmp_path, tokenizer, version_2):
    document = json.loads(json.dumps(SQUAD_V2))
    if not version_2:
        document["data"][0]["paragraphs"][0]["qas"].pop()
    args = _squad_args(_write(tmp_path / "squad.json", document), version_2)
    train, evaluation, examples, compute_metrics = build_squad_task(args, load_squad_data(args), tokenizer)
    assert set(evaluation.column_names) == {"input_ids", "token_type_ids", "attention_mask"}
    assert evaluation["input_ids"] == train["input_ids"]  # same examples, same windows
    assert len(examples) == len(document["data"][0]["paragraphs"][0]["qas"])
    # Logits that point at the training labels: every window votes for the gold span (or [CLS]).
    starts = np.full((len(train), 40), -5.0)
    ends = np.full((len(train), 40), -5.0)
    for i, (start, end) in enumerate(zip(train["start_positions"], train["end_positions"], strict=True)):
        starts[i, start] = ends[i, end] = 5.0
        if start != 0:
            starts[i, 0] = ends[i, 0] = 0.0  # a span-bearing window keeps the null score below the span
    metrics = compute_metrics(starts, ends)
    if version_2:
        assert metrics["exact"] == metrics["f1"] == 100.0
        assert metrics["HasAns_total"] == 2 and metrics["NoAns_total"] == 1
        assert metrics["best_f1"] == 100.0
    else:
        assert metrics == {"exact_match": 100.0, "f1": 100.0}
    if version_2:
        # [CLS] far above every other token in every window: each question is answered "" at threshold 0.
        cls_first = np.where(np.arange(40) == 0, 10.0, 0.0)[None].repeat(len(train), axis=0)
        metrics = compute_metrics(cls_first, cls_first)
        assert metrics["NoAns_exact"] == 100.0 and metrics["HasAns_exact"] == 0.0
        assert metrics["exact"] == pytest.approx(100 / 3)


def test_a_stride_as_long_as_the_features_is_refused_when_parsed():
    with pytest.raises(UsageError) as error:
        SquadArguments(max_seq_length=40, doc_stride=40)
    assert str(error.value) == "--doc-stride (40) must be smaller than --max-seq-length (40)."


def test_windows_leave_room_for_the_longest_question_and_the_stride(tmp_path, tokenizer):
    # "Where does the Loire reach the Atlantic?" is 8 MiniLM tokens; with [CLS] [SEP] [SEP], 13 of 24 are left.
    raw = load_squad_data(_squad_args(_write(tmp_path / "squad.json", SQUAD_V2), True))
    check_windows(SquadArguments(max_seq_length=24, doc_stride=12), raw, tokenizer)
    with pytest.raises(UsageError) as error:
        check_windows(SquadArguments(max_seq_length=24, doc_stride=13), raw, tokenizer)
    assert str(error.value) == (
        "--max-seq-length 24 leaves 13 context token(s) per window beside the 3 special tokens and the longest "
        "question (train question q-mouth, 8 tokens), and --doc-stride 13 must be smaller than that. Raise "
        "--max-seq-length to at least 25, or lower --doc-stride."
    )


def test_v1_refuses_unanswerable_questions_and_misplaced_answers(tmp_path):
    path = _write(tmp_path / "squad.json", SQUAD_V2)
    with pytest.raises(UsageError) as error:
        load_squad_data(_squad_args(path, False))
    assert str(error.value) == (
        "SQuAD train question q-fish has no answer, as in SQuAD v2.0; pass --version-2-with-negative to train and "
        "score unanswerable questions."
    )
    shifted = json.loads(json.dumps(SQUAD_V2))
    shifted["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1  # counted from 1
    with pytest.raises(UsageError) as error:
        load_squad_data(_squad_args(_write(tmp_path / "shifted.json", shifted), True))
    assert str(error.value) == (
        "SQuAD train question q-mouth: its answer 'Saint-Nazaire' is not at answer_start 192 of its context (which "
        "holds 'aint-Nazaire.' there); answer_start must count characters of the context from 0."
    )
