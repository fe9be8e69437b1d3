"""The training tasks' facts, one table each, light (no torch, no datasets): GLUE's tasks and their Hub dataset,
SQuAD's versions and theirs. The commands, their options' help, `tisa-hf push`'s cards and `tisa-hf report` read
them here; a new GLUE task is its row in `TASKS`."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError

GLUE_HUB_DATASET = "nyu-mll/glue"
# SQuAD task name (a run's `task`) -> Hub dataset
SQUAD_DATASETS = {"squad": "rajpurkar/squad", "squad_v2": "rajpurkar/squad_v2"}


def squad_task_name(version_2_with_negative: bool) -> str:
    return "squad_v2" if version_2_with_negative else "squad"


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task: its Hub columns, its original TSV layout, its main metric and its dev sets.

    `tsv_columns` name the TSV header fields holding (text..., label); integers are positions in header-less files.
    `main_metric` is the score that ranks models of the task, on its first dev set: the one the TISA paper's
    table 3 (and ALBERT's) reports, Matthews correlation for CoLA, Pearson for STS-B, accuracy elsewhere (MRPC and
    QQP too, whose F1 is reported beside it). Reports use it by default and --load_best_model_at_end selects on it.
    `official_metrics` are the task's metrics, in the order runs record them (`metrics`: the main metric alone
    where not given). `dev_files` maps each evaluation split to its TSV file name, and `report_columns` names each
    one's column in `tisa-hf report`'s table (the task's display name where it has one split).
    """

    name: str
    folder: str
    text_columns: tuple[str, ...]
    tsv_columns: tuple[str | int, ...]
    label_names: tuple[str, ...] | None
    main_metric: str
    dev_files: tuple[tuple[str, str], ...] = (("validation", "dev.tsv"),)
    official_metrics: tuple[str, ...] = ()
    report_columns: tuple[str, ...] = ()

    @property
    def metrics(self) -> tuple[str, ...]:
        return self.official_metrics or (self.main_metric,)

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """(report column, dev split) of each evaluation split."""
        return tuple(zip(self.report_columns or (self.folder,), self.eval_splits, strict=True))

    @property
    def is_regression(self) -> bool:
        return self.label_names is None

    @property
    def num_labels(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)

    @property
    def eval_splits(self) -> tuple[str, ...]:
        return tuple(split for split, _ in self.dev_files)

    def main_score(self, metrics: dict[str, dict[str, float]]) -> float:
        """The main metric of the first dev set (MNLI: matched) from an evaluation's {split: {metric: value}}."""
        return metrics[self.eval_splits[0]][self.main_metric]


_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")
TASKS: dict[str, GlueTask] = {
    task.name: task
    for task in (
        GlueTask("cola", "CoLA", ("sentence",), (3, 1), _BINARY, "matthews_correlation"),
        GlueTask("sst2", "SST-2", ("sentence",), ("sentence", "label"), _BINARY, "accuracy"),
        GlueTask(
            "mrpc",
            "MRPC",
            ("sentence1", "sentence2"),
            ("#1 String", "#2 String", "Quality"),
            _BINARY,
            "accuracy",
            official_metrics=("f1", "accuracy"),
        ),
        GlueTask(
            "stsb",
            "STS-B",
            ("sentence1", "sentence2"),
            ("sentence1", "sentence2", "score"),
            None,
            "pearson",
            official_metrics=("pearson", "spearmanr"),
        ),
        GlueTask(
            "qqp",
            "QQP",
            ("question1", "question2"),
            ("question1", "question2", "is_duplicate"),
            _BINARY,
            "accuracy",
            official_metrics=("f1", "accuracy"),
        ),
        GlueTask(
            "mnli",
            "MNLI",
            ("premise", "hypothesis"),
            ("sentence1", "sentence2", "gold_label"),
            ("entailment", "neutral", "contradiction"),
            "accuracy",
            (("validation_matched", "dev_matched.tsv"), ("validation_mismatched", "dev_mismatched.tsv")),
            report_columns=("MNLI-m", "MNLI-mm"),
        ),
        GlueTask("qnli", "QNLI", ("question", "sentence"), ("question", "sentence", "label"), _ENTAILMENT, "accuracy"),
        GlueTask(
            "rte", "RTE", ("sentence1", "sentence2"), ("sentence1", "sentence2", "label"), _ENTAILMENT, "accuracy"
        ),
        GlueTask("wnli", "WNLI", ("sentence1", "sentence2"), ("sentence1", "sentence2", "label"), _BINARY, "accuracy"),
    )
}


def get_task(name: str) -> GlueTask:
    key = name.lower().replace("-", "")
    if key not in TASKS:
        raise UsageError(f"Unknown GLUE task {name!r}; choose from {', '.join(TASKS)}.")
    return TASKS[key]
