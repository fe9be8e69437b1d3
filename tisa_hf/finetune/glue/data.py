"""GLUE tasks as `datasets.DatasetDict`s: from the Hub (nyu-mll/glue), the original TSV files, or CSV/JSON files.

Every source yields the Hub's columns: the task's text column(s) and `label` (an int class id, or a float for
STS-B), with one split per dev set (`validation`, or `validation_matched` and `validation_mismatched` for MNLI).
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import datasets

from ...common.hub_access import check_hub_dataset, loading_errors
from ...errors import UsageError
from ..splits import no_examples, require_examples
from ..task_tables import GLUE_HUB_DATASET, GlueTask


def _label_value(task: GlueTask, raw: str | int | float, where: str) -> int | float:
    """A label as the task's class id (its name, or for CSV/JSON files the Hub's class id), or STS-B's score."""
    if task.is_regression:
        if raw is None:  # an empty or NaN field of a CSV file (pandas reads both as missing)
            raise UsageError(f"{where}: no STS-B score (an empty or NaN field).")
        try:
            score = float(raw)
        except (TypeError, ValueError) as error:
            raise UsageError(f"{where}: STS-B score {raw!r} is not a number.") from error
        if not math.isfinite(score):
            raise UsageError(f"{where}: STS-B score {raw!r} is not a finite number.")
        return score
    text = str(raw).strip()
    if text in task.label_names:
        return task.label_names.index(text)
    if text.isdigit() and int(text) < task.num_labels:
        return int(text)
    raise UsageError(f"{where}: label {raw!r} is not one of {', '.join(task.label_names)} for {task.name}.")


def names_its_labels(task: GlueTask) -> bool:
    """Whether the task's original files write its labels as names (RTE, MNLI, QNLI), not as 0/1."""
    return task.label_names is not None and not any(name.isdigit() for name in task.label_names)


def check_label_vocabulary(task: GlueTask, labels: list, source: str, ids_allowed: bool) -> None:
    """Refuses labels written in another vocabulary than the task's: digits where the task's files name their
    labels (WNLI's files write 1 for entailment, which is RTE's not_entailment, so a class number read as the
    task's would flip the meaning), or, where the Hub's class ids are allowed (CSV/JSON files), a mix of both."""
    if not names_its_labels(task):
        return
    found = sorted({str(label).strip() for label in labels})
    digits = [value for value in found if value.isdigit()]
    if not digits or ids_allowed and len(digits) == len(found):
        return
    shown = ", ".join(found[:10]) + (", ..." if len(found) > 10 else "")
    names = ", ".join(task.label_names)
    if ids_allowed:
        raise UsageError(
            f"{source}: labels {shown} mix class numbers and names; give {task.name}'s names ({names}) or the "
            "Hub's class ids, not both."
        )
    raise UsageError(
        f"{source}: labels {shown} are not {task.name}'s, whose files name their labels ({names}), not class "
        f"numbers; class numbers mean other things in other tasks (WNLI's 1 is entailment, {task.name}'s 1 would "
        f"be {task.label_names[1]}). Pass the {task.folder} files."
    )


def read_glue_tsv(path: Path, task: GlueTask) -> datasets.Dataset:
    """One original GLUE TSV file.

    Hand-written because pandas' tokenizer errors name neither the file nor a usable line, and the GLUE files
    need quoting off (sentences hold unbalanced quotes), a BOM-tolerant header (MRPC) and header-less CoLA.
    """
    columns = {name: [] for name in task.text_columns}
    raw_labels = []
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = None if isinstance(task.tsv_columns[0], int) else next(rows, None)
        if header is None and not isinstance(task.tsv_columns[0], int):
            raise UsageError(f"{path} is empty; GLUE {task.folder} files start with a header row.")
        if header is not None:
            missing = [name for name in task.tsv_columns if name not in header]
            if missing:
                raise UsageError(
                    f"{path}:1: header lacks column(s) {', '.join(missing)} of GLUE {task.folder}; it has "
                    f"{', '.join(header)}."
                )
            positions = [header.index(name) for name in task.tsv_columns]
            width = len(header)
        else:
            positions, width = list(task.tsv_columns), None
        for row in rows:
            where = f"{path}:{rows.line_num}"
            if width is not None and len(row) != width:
                raise UsageError(f"{where}: expected {width} tab-separated fields, found {len(row)}.")
            if width is None and len(row) <= max(positions):
                raise UsageError(
                    f"{where}: expected at least {max(positions) + 1} tab-separated fields, found {len(row)}."
                )
            *texts, label = (row[position] for position in positions)
            for name, text in zip(task.text_columns, texts, strict=True):
                columns[name].append(text)
            raw_labels.append((label, where))
    check_label_vocabulary(task, [label for label, _ in raw_labels], str(path), ids_allowed=False)
    columns["label"] = [_label_value(task, label, where) for label, where in raw_labels]
    return require_examples(datasets.Dataset.from_dict(columns), str(path))


def task_folder(data_dir: Path, task: GlueTask) -> Path:
    """The folder of `task`'s TSV files: the GLUE folder's task folder, or `data_dir` itself."""
    for folder in (data_dir / task.folder, data_dir):
        if (folder / "train.tsv").is_file():
            return folder
    raise UsageError(f"No {task.folder}/train.tsv under {data_dir}; --data-dir takes the GLUE folder or the task's.")


def load_glue_tsv(data_dir: str | Path, task: GlueTask) -> datasets.DatasetDict:
    folder = task_folder(Path(data_dir), task)
    splits = {"train": read_glue_tsv(folder / "train.tsv", task)}
    for split, filename in task.dev_files:
        if not (folder / filename).is_file():
            raise UsageError(f"{folder / filename} is missing; GLUE {task.folder} is scored on it.")
        splits[split] = read_glue_tsv(folder / filename, task)
    return datasets.DatasetDict(splits)


def check_json_file(path: Path) -> None:
    """A JSON document or JSON lines with at least one record; raises with the path and line of the first
    malformed record."""
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise no_examples(str(path))
    try:
        document = json.loads(text)
    except json.JSONDecodeError as document_error:
        if text.lstrip().startswith("[") or text.count("\n") <= 1:
            raise UsageError(
                f"{path}:{document_error.lineno}: malformed JSON ({document_error.msg})."
            ) from document_error
    else:
        if document == []:
            raise no_examples(str(path))
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                json.loads(line)
            except json.JSONDecodeError as error:
                raise UsageError(f"{path}:{number}: malformed JSON line ({error.msg}).") from error


def check_csv_file(path: Path) -> None:
    """A header and at least one row; raises with the path and line of the first row whose field count differs
    from the header's."""
    csv.field_size_limit(sys.maxsize)
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = csv.reader(handle)
        header = next(rows, None)
        if header is None:
            raise UsageError(f"{path}:1: empty CSV file, expected a header row.")
        examples = 0
        for row in rows:
            if row and len(row) != len(header):
                raise UsageError(f"{path}:{rows.line_num}: expected {len(header)} fields, found {len(row)}.")
            examples += bool(row)
    if not examples:
        raise no_examples(str(path))


DATA_FILE_BUILDERS = {".csv": "csv", ".json": "json", ".jsonl": "json"}


def load_data_files(train_file: str, validation_file: str, task: GlueTask) -> datasets.DatasetDict:
    """CSV or JSON(-lines) files with the Hub column names; labels are the task's names or the Hub's class ids
    (not both in one file)."""
    if len(task.eval_splits) > 1:
        raise UsageError(
            f"{task.folder} is scored on {len(task.eval_splits)} dev sets ({', '.join(task.eval_splits)}) and "
            "--validation-file gives one; pass --data-dir with the GLUE TSV files instead."
        )
    files = {"train": Path(train_file), task.eval_splits[0]: Path(validation_file)}
    builders = {DATA_FILE_BUILDERS.get(path.suffix.lower()) for path in files.values()}
    if len(builders) != 1 or None in builders:
        raise UsageError(
            f"--train-file and --validation-file must both be .csv or both .json/.jsonl; got {train_file}, "
            f"{validation_file}."
        )
    builder = builders.pop()
    for path in files.values():
        if not path.is_file():
            raise UsageError(f"Data file {path} does not exist.")
        (check_csv_file if builder == "csv" else check_json_file)(path)
    # One file at a time: loaded together, their columns must share a type (class ids in one file and names in
    # the other would fail deep inside `datasets`).
    loaded = datasets.DatasetDict(
        {split: datasets.load_dataset(builder, data_files=str(path), split="train") for split, path in files.items()}
    )
    needed = (*task.text_columns, "label")
    for split, dataset in loaded.items():
        missing = [name for name in needed if name not in dataset.column_names]
        if missing:
            raise UsageError(
                f"{files[split]} lacks column(s) {', '.join(missing)}; {task.name} needs {', '.join(needed)}."
            )
    for split, dataset in loaded.items():
        check_label_vocabulary(task, dataset["label"], str(files[split]), ids_allowed=True)
        values = enumerate(dataset["label"], start=1)
        labels = [_label_value(task, value, f"{files[split]}: row {row}") for row, value in values]
        loaded[split] = dataset.select_columns(list(task.text_columns)).add_column("label", labels)
    return loaded


def load_glue(
    task: GlueTask,
    data_dir: str | None = None,
    train_file: str | None = None,
    validation_file: str | None = None,
    dataset_name: str = GLUE_HUB_DATASET,
    remedy: str = "pass --data-dir with the GLUE TSV files, or --train-file and --validation-file",
) -> datasets.DatasetDict:
    """The task's train split and dev split(s), from whichever source is given (the Hub when none is; `remedy`
    says what to give instead when it cannot answer)."""
    if data_dir and (train_file or validation_file):
        raise UsageError("Give either --data-dir (GLUE TSV files) or --train-file/--validation-file, not both.")
    if (data_dir or train_file or validation_file) and dataset_name != GLUE_HUB_DATASET:
        raise UsageError(f"--dataset-name {dataset_name} is read only when no files are given; leave it out.")
    if data_dir:
        return load_glue_tsv(data_dir, task)
    if train_file or validation_file:
        if not (train_file and validation_file):
            raise UsageError("--train-file and --validation-file go together.")
        return load_data_files(train_file, validation_file, task)
    check_hub_dataset(dataset_name, remedy)
    with loading_errors(f"{dataset_name} ({task.name})", remedy):
        loaded = datasets.load_dataset(dataset_name, task.name)
    splits = {
        split: require_examples(loaded[split], f"{dataset_name} ({task.name}) split {split}")
        for split in ("train", *task.eval_splits)
    }
    return datasets.DatasetDict(splits).select_columns([*task.text_columns, "label"])


def check_scorable(task: GlueTask, dataset: datasets.Dataset, source: str) -> None:
    """A dev split the task's metrics can score: STS-B's correlations need two different gold scores (one example,
    or equal scores, give no correlation, only after the whole training)."""
    if task.is_regression and len(set(dataset["label"])) < 2:
        raise UsageError(
            f"{source} has {len(dataset)} example(s) with {len(set(dataset['label']))} distinct score(s); the "
            f"{task.main_metric} correlation needs at least two different scores. Raise --max-eval-samples or "
            "use a larger dev file."
        )
