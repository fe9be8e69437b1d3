"""SQuAD v1.1 / v2.0 data: loading (Hub or official JSON files), tokenised features, and the task bundle a trainer
needs (`build_squad_task`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset, DatasetDict, Features, Sequence, Value, load_dataset
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ...common.hub_access import check_hub_dataset, loading_errors
from ...errors import UsageError
from ..splits import first_examples, no_examples, require_examples
from ..task_tables import SQUAD_DATASETS, squad_task_name
from .metrics import postprocess_predictions, squad_v1_scores, squad_v2_scores
from .options import SquadArguments

SPLITS = ("train", "validation")

SQUAD_FEATURES = Features(
    {
        "id": Value("string"),
        "title": Value("string"),
        "context": Value("string"),
        "question": Value("string"),
        "answers": {"text": Sequence(Value("string")), "answer_start": Sequence(Value("int32"))},
    }
)


class SquadFormatError(UsageError):
    """A SQuAD JSON file that does not follow the official format."""


def _require(value: Any, kind: type | tuple[type, ...], path: Path, where: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise SquadFormatError(
            f"{path}: {where} must be {names}, got {type(value).__name__}; "
            "expected the official SQuAD format (https://rajpurkar.github.io/SQuAD-explorer/)."
        )
    return value


def _field(record: Mapping, key: str, kind: type | tuple[type, ...], path: Path, where: str) -> Any:
    if key not in record:
        raise SquadFormatError(
            f'{path}: {where} has no "{key}"; expected the official SQuAD format '
            "(https://rajpurkar.github.io/SQuAD-explorer/)."
        )
    return _require(record[key], kind, path, f"{where}.{key}")


def read_squad_json(path: str | Path) -> Dataset:
    """One row per question (columns id, title, context, question, answers{text, answer_start}) from an
    official-format SQuAD file. Unanswerable v2 questions (`is_impossible`) get empty answers."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError as error:
        raise SquadFormatError(f"{path}: no such file; pass the path of a SQuAD JSON file.") from error
    except json.JSONDecodeError as error:
        raise SquadFormatError(
            f"{path}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}."
        ) from error
    _require(document, dict, path, "the top level")
    rows = []
    for a, article in enumerate(_field(document, "data", list, path, "the top level")):
        where = f"data[{a}]"
        _require(article, dict, path, where)
        title = _field(article, "title", str, path, where) if "title" in article else ""
        for p, paragraph in enumerate(_field(article, "paragraphs", list, path, where)):
            where = f"data[{a}].paragraphs[{p}]"
            _require(paragraph, dict, path, where)
            context = _field(paragraph, "context", str, path, where)
            for q, qa in enumerate(_field(paragraph, "qas", list, path, where)):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                _require(qa, dict, path, where)
                question = _field(qa, "question", str, path, where)
                qid = _field(qa, "id", str, path, where)
                impossible = _field(qa, "is_impossible", bool, path, where) if "is_impossible" in qa else False
                answers = [] if impossible else _field(qa, "answers", list, path, where)
                texts, starts = [], []
                for n, answer in enumerate(answers):
                    _require(answer, dict, path, f"{where}.answers[{n}]")
                    texts.append(_field(answer, "text", str, path, f"{where}.answers[{n}]"))
                    starts.append(_field(answer, "answer_start", int, path, f"{where}.answers[{n}]"))
                rows.append(
                    {
                        "id": qid,
                        "title": title,
                        "context": context,
                        "question": question,
                        "answers": {"text": texts, "answer_start": starts},
                    }
                )
    if not rows:
        raise no_examples(f"{path} (no questions)")
    return Dataset.from_list(rows, features=SQUAD_FEATURES)


def load_squad(
    version_2_with_negative: bool, train_file: str | None = None, validation_file: str | None = None
) -> DatasetDict:
    """`train` and `validation` splits: from the given JSON files, else from the Hub (`rajpurkar/squad[_v2]`)."""
    if train_file is None and validation_file is None:
        name, remedy = (
            SQUAD_DATASETS[squad_task_name(version_2_with_negative)],
            "pass --train-file and --validation-file (SQuAD JSON)",
        )
        check_hub_dataset(name, remedy)
        with loading_errors(name, remedy):
            loaded = load_dataset(name)
        return DatasetDict({split: require_examples(loaded[split], f"{name} split {split}") for split in SPLITS})
    if train_file is None or validation_file is None:
        raise UsageError("Pass both train_file and validation_file (or neither, to load SQuAD from the Hub).")
    return DatasetDict({"train": read_squad_json(train_file), "validation": read_squad_json(validation_file)})


CONTEXT_SEQUENCE = 1  # features are "[CLS] question [SEP] context [SEP]"


def _tokenize(examples: Mapping[str, list], tokenizer: PreTrainedTokenizerFast, max_seq_length: int, doc_stride: int):
    """Question + context windows: contexts longer than one feature overflow into windows that overlap by
    `doc_stride` tokens; only the context is ever truncated."""
    return tokenizer(
        [question.lstrip() for question in examples["question"]],
        examples["context"],
        truncation="only_second",
        max_length=max_seq_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )


def prepare_train_features(
    examples: Mapping[str, list], tokenizer: PreTrainedTokenizerFast, max_seq_length: int, doc_stride: int
) -> dict[str, list]:
    """Batched `Dataset.map` function: features with `start_positions`/`end_positions`, the token indices of the
    first answer; both point at the [CLS] token (index 0) when the question has no answer or the answer is
    not inside the feature's window."""
    encoding = _tokenize(examples, tokenizer, max_seq_length, doc_stride)
    example_of_feature = encoding.pop("overflow_to_sample_mapping")
    offsets_of_feature = encoding.pop("offset_mapping")
    encoding["start_positions"], encoding["end_positions"] = [], []
    for i, offsets in enumerate(offsets_of_feature):
        cls_index = encoding["input_ids"][i].index(tokenizer.cls_token_id)
        answers = examples["answers"][example_of_feature[i]]
        start, end = cls_index, cls_index
        if answers["answer_start"]:
            start_char = answers["answer_start"][0]
            end_char = start_char + len(answers["text"][0])
            sequence_ids = encoding.sequence_ids(i)
            context_tokens = [t for t, s in enumerate(sequence_ids) if s == CONTEXT_SEQUENCE]
            first_token, last_token = context_tokens[0], context_tokens[-1]
            if offsets[first_token][0] <= start_char and offsets[last_token][1] >= end_char:
                start = first_token
                while start <= last_token and offsets[start][0] <= start_char:
                    start += 1
                end = last_token
                while end >= first_token and offsets[end][1] >= end_char:
                    end -= 1
                start, end = start - 1, end + 1
        encoding["start_positions"].append(start)
        encoding["end_positions"].append(end)
    return dict(encoding)


def prepare_eval_features(
    examples: Mapping[str, list], tokenizer: PreTrainedTokenizerFast, max_seq_length: int, doc_stride: int
) -> dict[str, list]:
    """Batched `Dataset.map` function: features with `example_id` and an `offset_mapping` that is None for
    every token outside the context, so post-processing only picks spans of context text."""
    encoding = _tokenize(examples, tokenizer, max_seq_length, doc_stride)
    example_of_feature = encoding.pop("overflow_to_sample_mapping")
    encoding["example_id"] = []
    for i in range(len(encoding["input_ids"])):
        sequence_ids = encoding.sequence_ids(i)
        encoding["example_id"].append(examples["id"][example_of_feature[i]])
        encoding["offset_mapping"][i] = [
            offset if sequence_ids[t] == CONTEXT_SEQUENCE else None
            for t, offset in enumerate(encoding["offset_mapping"][i])
        ]
    return dict(encoding)


def load_squad_data(args: SquadArguments) -> DatasetDict:
    """The examples a run trains and scores on, checked (non-empty, `--max-*-samples` applied, window sizes)
    before any model or tokenizer is loaded."""
    raw = load_squad(args.version_2_with_negative, args.train_file, args.validation_file)
    raw = DatasetDict(
        {
            "train": first_examples(raw["train"], args.max_train_samples, "--max-train-samples"),
            "validation": first_examples(raw["validation"], args.max_eval_samples, "--max-eval-samples"),
        }
    )
    if not args.version_2_with_negative:
        check_answerable(raw)
    check_answer_positions(raw["train"])
    return raw


def check_answerable(raw: DatasetDict) -> None:
    """SQuAD v1.1 has an answer to every question; a question without one (a v2.0 file) would train towards
    [CLS] and score against no answer."""
    for split, examples in raw.items():
        for qid, answers in zip(examples["id"], examples["answers"], strict=True):
            if not answers["text"]:
                raise UsageError(
                    f"SQuAD {split} question {qid} has no answer, as in SQuAD v2.0; pass --version-2-with-negative "
                    "to train and score unanswerable questions."
                )


def check_answer_positions(train: Dataset) -> None:
    """Each trained answer (the first of a question) must be the context's text at its `answer_start`: a file
    that counts characters otherwise (bytes, from 1) would train towards the wrong spans."""
    for qid, context, answers in zip(train["id"], train["context"], train["answers"], strict=True):
        if not answers["text"]:
            continue
        text, start = answers["text"][0], answers["answer_start"][0]
        found = context[start : start + len(text)] if start >= 0 else ""
        if found != text:
            raise UsageError(
                f"SQuAD train question {qid}: its answer {text!r} is not at answer_start {start} of its context "
                f"(which holds {found!r} there); answer_start must count characters of the context from 0."
            )


def require_fast_tokenizer(tokenizer: PreTrainedTokenizerBase) -> None:
    if not getattr(tokenizer, "is_fast", False):
        raise UsageError(
            f"SQuAD features need a fast tokenizer (offset mappings); got {type(tokenizer).__name__}. "
            "Load it with AutoTokenizer.from_pretrained(..., use_fast=True)."
        )


def check_windows(args: SquadArguments, raw: DatasetDict, tokenizer: PreTrainedTokenizerBase) -> None:
    """Features are "[CLS] question [SEP] context [SEP]" and only the context is cut into windows, so the longest
    question must leave room for at least one context token, and `doc_stride` (the overlap of windows) must be
    smaller than that room; the tokenizer would otherwise fail in the middle of featurizing (a Rust panic)."""
    require_fast_tokenizer(tokenizer)
    specials = tokenizer.num_special_tokens_to_add(pair=True)
    longest, where = 0, None
    for split, examples in raw.items():
        questions = [question.lstrip() for question in examples["question"]]
        lengths = [len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]]
        index = max(range(len(lengths)), key=lengths.__getitem__)
        if lengths[index] > longest:
            longest, where = lengths[index], f"{split} question {examples['id'][index]}"
    room = args.max_seq_length - specials - longest
    if room < 1 or args.doc_stride >= room:
        raise UsageError(
            f"--max-seq-length {args.max_seq_length} leaves {max(room, 0)} context token(s) per window beside the "
            f"{specials} special tokens and the longest question ({where}, {longest} tokens), and --doc-stride "
            f"{args.doc_stride} must be smaller than that. Raise --max-seq-length to at least "
            f"{specials + longest + args.doc_stride + 1}, or lower --doc-stride."
        )


def build_squad_task(
    args: SquadArguments, raw: DatasetDict, tokenizer: PreTrainedTokenizerFast
) -> tuple[Dataset, Dataset, Dataset, Callable[[np.ndarray, np.ndarray], dict[str, float]]]:
    """Everything a question-answering trainer needs, from the examples of `load_squad_data`.

    Returns:
        train_dataset: model inputs plus `start_positions`/`end_positions`.
        eval_dataset: model inputs only, one row per feature (an example may span several).
        eval_examples: the dev questions (id, title, context, question, answers).
        compute_metrics: `(start_logits, end_logits) -> dict`, each array (features, sequence length) in
            `eval_dataset` order; v1.1 gives `exact_match`/`f1`, v2.0 the official v2 result (see
            `squad_v2_scores`).
    """
    require_fast_tokenizer(tokenizer)
    sizes = {"max_seq_length": args.max_seq_length, "doc_stride": args.doc_stride}
    train_examples = raw["train"]
    train_dataset = train_examples.map(
        prepare_train_features,
        batched=True,
        remove_columns=train_examples.column_names,
        fn_kwargs={"tokenizer": tokenizer, **sizes},
        desc="Tokenising SQuAD train",
    )
    eval_examples = raw["validation"]
    eval_features = eval_examples.map(
        prepare_eval_features,
        batched=True,
        remove_columns=eval_examples.column_names,
        fn_kwargs={"tokenizer": tokenizer, **sizes},
        desc="Tokenising SQuAD dev",
    )
    eval_dataset = eval_features.remove_columns(["example_id", "offset_mapping"])
    feature_rows = eval_features.select_columns(["example_id", "offset_mapping"]).to_list()
    example_rows = eval_examples.select_columns(["id", "context"]).to_list()
    gold = {row["id"]: row["answers"]["text"] for row in eval_examples}

    def compute_metrics(start_logits: np.ndarray, end_logits: np.ndarray) -> dict[str, float]:
        best_spans, null_score_diffs = postprocess_predictions(
            example_rows, feature_rows, start_logits, end_logits, args.n_best_size, args.max_answer_length
        )
        if args.version_2_with_negative:
            return squad_v2_scores(gold, best_spans, null_score_diffs, args.null_score_diff_threshold)
        return squad_v1_scores(gold, best_spans)

    return train_dataset, eval_dataset, eval_examples, compute_metrics
