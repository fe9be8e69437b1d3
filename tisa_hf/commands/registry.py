"""The command table: each `tisa-hf` command's module, options, summary and extra, as strings (it imports nothing),
so that the dispatcher (`cli.py`) and `tisa-hf sweep`, which launches training commands, read one table."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

# How an interrupted resumable command carries on, said after what it kept.
RERUN = "the same command resumes from there"
RERUN_WITH_RESUME = "the same command with --resume continues from the checkpoint"
# Each extra of pyproject.toml by the modules it adds to the core install (import names; the tqdm, pyyaml and
# filelock it also names come with transformers): it is installed when all of them are found, which `find_spec`
# tells without importing any.
EXTRAS: dict[str, tuple[str, ...]] = {
    "finetune": ("accelerate", "datasets", "sklearn", "scipy", "matplotlib", "tensorboard"),
    "analysis": ("matplotlib", "scipy", "sklearn"),
    "st": ("sentence_transformers", "accelerate", "bm25s", "faiss", "datasets", "matplotlib", "scipy"),
}


@dataclass(frozen=True)
class Command:
    """One subcommand: `run` ("module[:function]", default `main`) runs it on its argument list; `options`
    ("module:name") is its argparse parser factory or its tuple of argument dataclasses, in modules light enough
    that `--help` and the check of a command line answer without importing torch or transformers' models.
    `checks` ("module:function", light too) takes the parsed options and checks the files, folders and models
    they name, before torch is imported; `resumes` says how an interrupted run carries on (None: it starts over)."""

    run: str
    options: str
    summary: str
    extra: str | None = None  # the extra of pyproject.toml it needs beyond the plugin (None: the core install)
    launcher: str | None = None  # a training command's `accelerate launch -m` module
    checks: str | None = None
    resumes: str | None = None


COMMANDS: dict[str, Command] = {
    "demo": Command(
        "tisa_hf.commands.demo",
        "tisa_hf.commands.demo_options:demo_parser",
        "Offline quickstart on the packaged MiniLM: patch, fit, plot, save, reload.",
        checks="tisa_hf.commands.demo_options:check_demo",
        extra="analysis",
    ),
    "analyze": Command(
        "tisa_hf.analysis.commands:analyze",
        "tisa_hf.analysis.options:analyze_parser",
        "Positional analysis report of one encoder.",
        extra="analysis",
    ),
    "compare": Command(
        "tisa_hf.analysis.commands:compare",
        "tisa_hf.analysis.options:compare_parser",
        "Key positional numbers of several encoders in one table.",
        extra="analysis",
    ),
    "glue": Command(
        "tisa_hf.finetune.glue.task",
        "tisa_hf.finetune.glue.options:GLUE_ARGUMENTS",
        "Fine-tune and evaluate on a GLUE task.",
        extra="finetune",
        launcher="tisa_hf.commands.glue",
        resumes=RERUN_WITH_RESUME,
    ),
    "squad": Command(
        "tisa_hf.finetune.squad.task",
        "tisa_hf.finetune.squad.options:SQUAD_ARGUMENTS",
        "Fine-tune and evaluate on SQuAD v1.1 / v2.0.",
        extra="finetune",
        launcher="tisa_hf.commands.squad",
        resumes=RERUN_WITH_RESUME,
    ),
    "classify": Command(
        "tisa_hf.finetune.classify.task",
        "tisa_hf.finetune.classify.options:CLASSIFY_ARGUMENTS",
        "Fine-tune and evaluate on long-document classification (Hyperpartisan, CSV/JSON).",
        extra="finetune",
        launcher="tisa_hf.commands.classify",
        resumes=RERUN_WITH_RESUME,
    ),
    "sweep": Command(
        "tisa_hf.experiments.sweep",
        "tisa_hf.experiments.options:sweep_parser",
        "Run a grid of fine-tuning runs, resumably.",
        resumes=RERUN,
        extra="finetune",
    ),
    "report": Command(
        "tisa_hf.experiments.report",
        "tisa_hf.experiments.options:report_parser",
        "Results table (the TISA paper's table 3 layout).",
        extra="finetune",
    ),
    "adapt": Command(
        "tisa_hf.adapt.adapt_task",
        "tisa_hf.adapt.arguments:ADAPT_ARGUMENTS",
        "Adapt a pretrained encoder to TISA on plain text (distillation or masked LM).",
        extra="finetune",
        launcher="tisa_hf.commands.adapt",
        resumes=RERUN_WITH_RESUME,
    ),
    "lm-eval": Command(
        "tisa_hf.adapt.lm_eval",
        "tisa_hf.adapt.lm_eval_options:lm_eval_parser",
        "Teacher agreement and masked-token loss against input length.",
        resumes=RERUN,
        extra="finetune",
    ),
    "longembed": Command(
        "tisa_hf.embeddings.retrieval.longembed",
        "tisa_hf.embeddings.options:longembed_parser",
        "Passkey and needle retrieval (Acc@1) against document length.",
        resumes=RERUN,
        extra="st",
    ),
    "qmsum": Command(
        "tisa_hf.embeddings.retrieval.qmsum",
        "tisa_hf.embeddings.options:qmsum_parser",
        "LongEmbed's QMSum retrieval (nDCG@10) of long meeting transcripts, with BM25 and hybrids.",
        resumes=RERUN,
        extra="st",
    ),
    "qmsum-passages": Command(
        "tisa_hf.embeddings.retrieval.passages",
        "tisa_hf.embeddings.options:passages_parser",
        "QMSum's query-based passages (nDCG@10, Recall@10/@50) within a meeting and across all: windows read apart "
        "against windows pooled from the whole meeting's read.",
        resumes=RERUN,
        extra="st",
    ),
    "context-passages": Command(
        "tisa_hf.context.dev_task",
        "tisa_hf.embeddings.options:context_passages_parser",
        "WikiText windows named only outside themselves (nDCG@10, Recall@10/@50), within an article and across all: "
        "the development task of training that rewards context.",
        resumes=RERUN,
        extra="st",
    ),
    "context-train": Command(
        "tisa_hf.context.train",
        "tisa_hf.context.options:context_train_parser",
        "Contrastive training with in-sequence negatives: each window pooled from its whole document's read must "
        "find its query (sentence-transformers' trainer).",
        resumes=RERUN,
        extra="st",
    ),
    "spans": Command(
        "tisa_hf.embeddings.retrieval.spans",
        "tisa_hf.embeddings.options:spans_parser",
        "Passages of WikiText articles find their article (development task of long reading), by passage depth.",
        resumes=RERUN,
        extra="st",
    ),
    "encode": Command(
        "tisa_hf.embeddings.encode",
        "tisa_hf.embeddings.options:encode_parser",
        "Embed a corpus of long documents (resumable; several processes or GPUs).",
        checks="tisa_hf.embeddings.corpus_files:check_encode_files",
        resumes=RERUN,
        extra="st",
    ),
    "index": Command(
        "tisa_hf.multivector.index",
        "tisa_hf.multivector.options:index_parser",
        "Turn a corpus into a token-vector index with a multi-vector model (resumable; several processes or GPUs).",
        checks="tisa_hf.multivector.checks:check_index_files",
        resumes=RERUN,
        extra="st",
    ),
    "search": Command(
        "tisa_hf.multivector.search",
        "tisa_hf.multivector.options:search_parser",
        "Search a token-vector index by exact MaxSim: the top-k documents of a query or a file of queries, as JSON.",
        checks="tisa_hf.multivector.checks:check_search_files",
        extra="st",
    ),
    "sts": Command(
        "tisa_hf.embeddings.sts",
        "tisa_hf.embeddings.options:sts_parser",
        "Zero-shot STS-B (Spearman of cosine similarities) of embedding models, paired.",
        resumes=RERUN,
        extra="st",
    ),
    "push": Command(
        "tisa_hf.finetune.push",
        "tisa_hf.finetune.push_options:push_parser",
        "Upload a run's model with a model card to the Hub.",
        extra="finetune",
    ),
    "bench": Command(
        "tisa_hf.performance.bench",
        "tisa_hf.performance.options:bench_parser",
        "Speed and memory of TISA against plain attention.",
        extra="analysis",
    ),
    "env": Command(
        "tisa_hf.performance.env",
        "tisa_hf.performance.options:env_parser",
        "This machine and the attention route each TISA configuration takes on it.",
    ),
}


def load(target: str) -> Any:
    """The object a table entry names: "module[:name]", `main` by default."""
    module_name, _, name = target.partition(":")
    return getattr(importlib.import_module(module_name), name or "main")


def installed(extra: str) -> bool:
    """Whether every module of `extra` can be imported (none is imported to tell)."""
    return all(importlib.util.find_spec(module) is not None for module in EXTRAS[extra])
