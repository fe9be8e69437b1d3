"""`tisa-hf` command line: one subcommand per job, each implemented in its own module, and the one error boundary.

A command raises `tisa_hf.errors.UsageError` for what the user got wrong; `main` prints it as one line,
`tisa-hf COMMAND: message`, and exits with status 2 (with its traceback under `--debug` or `TISA_HF_DEBUG=1`).
Anything else escaping a command is a bug and keeps its traceback. `python -m tisa_hf.glue` and the other
launcher entries come through here too.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import huggingface_hub.utils

from .errors import UsageError


@dataclass(frozen=True)
class Command:
    """One subcommand: `run` ("module[:function]", default `main`) runs it on its argument list; `options`
    ("module:name") is its argparse parser factory or its tuple of argument dataclasses, in modules light enough
    that `--help` and the check of a command line answer without importing torch or transformers' models."""

    run: str
    options: str
    summary: str


COMMANDS: dict[str, Command] = {
    "demo": Command(
        "tisa_hf.demo",
        "tisa_hf.cli_options:demo_parser",
        "Offline quickstart on the packaged MiniLM: patch, fit, plot, save, reload.",
    ),
    "analyze": Command(
        "tisa_hf.analysis.commands:analyze",
        "tisa_hf.cli_options:analyze_parser",
        "Positional analysis report of one encoder.",
    ),
    "compare": Command(
        "tisa_hf.analysis.commands:compare",
        "tisa_hf.cli_options:compare_parser",
        "Key positional numbers of several encoders in one table.",
    ),
    "glue": Command(
        "tisa_hf.finetune.glue.task",
        "tisa_hf.finetune.glue.options:GLUE_ARGUMENTS",
        "Fine-tune and evaluate on a GLUE task.",
    ),
    "squad": Command(
        "tisa_hf.finetune.squad.task",
        "tisa_hf.finetune.squad.options:SQUAD_ARGUMENTS",
        "Fine-tune and evaluate on SQuAD v1.1 / v2.0.",
    ),
    "classify": Command(
        "tisa_hf.finetune.classify.task",
        "tisa_hf.finetune.classify.options:CLASSIFY_ARGUMENTS",
        "Fine-tune and evaluate on long-document classification (Hyperpartisan, CSV/JSON).",
    ),
    "sweep": Command(
        "tisa_hf.experiments.sweep", "tisa_hf.cli_options:sweep_parser", "Run a grid of fine-tuning runs, resumably."
    ),
    "report": Command(
        "tisa_hf.experiments.report",
        "tisa_hf.cli_options:report_parser",
        "Results table (the TISA paper's table 3 layout).",
    ),
    "adapt": Command(
        "tisa_hf.adapt.adapt_task",
        "tisa_hf.adapt.arguments:ADAPT_ARGUMENTS",
        "Adapt a pretrained encoder to TISA on plain text (distillation or masked LM).",
    ),
    "lm-eval": Command(
        "tisa_hf.adapt.lm_eval",
        "tisa_hf.cli_options:lm_eval_parser",
        "Teacher agreement and masked-token loss against input length.",
    ),
    "longembed": Command(
        "tisa_hf.embeddings.retrieval.longembed",
        "tisa_hf.embeddings.options:longembed_parser",
        "Passkey and needle retrieval (Acc@1) against document length.",
    ),
    "qmsum": Command(
        "tisa_hf.embeddings.retrieval.qmsum",
        "tisa_hf.embeddings.options:qmsum_parser",
        "LongEmbed's QMSum retrieval (nDCG@10) of long meeting transcripts, with BM25 and hybrids.",
    ),
    "qmsum-passages": Command(
        "tisa_hf.embeddings.retrieval.passages",
        "tisa_hf.embeddings.options:passages_parser",
        "QMSum's query-based passages (nDCG@10, Recall@10/@50) within a meeting and across all: windows read apart "
        "against windows pooled from the whole meeting's read.",
    ),
    "context-passages": Command(
        "tisa_hf.context.dev_task",
        "tisa_hf.embeddings.options:context_passages_parser",
        "WikiText windows named only outside themselves (nDCG@10, Recall@10/@50), within an article and across all: "
        "the development task of training that rewards context.",
    ),
    "context-train": Command(
        "tisa_hf.context.train",
        "tisa_hf.context.options:context_train_parser",
        "Contrastive training with in-sequence negatives: each window pooled from its whole document's read must "
        "find its query (sentence-transformers' trainer).",
    ),
    "spans": Command(
        "tisa_hf.embeddings.retrieval.spans",
        "tisa_hf.embeddings.options:spans_parser",
        "Passages of WikiText articles find their article (development task of long reading), by passage depth.",
    ),
    "encode": Command(
        "tisa_hf.embeddings.corpus",
        "tisa_hf.embeddings.options:encode_parser",
        "Embed a corpus of long documents (resumable; several processes or GPUs).",
    ),
    "index": Command(
        "tisa_hf.multivector.index",
        "tisa_hf.multivector.options:index_parser",
        "Turn a corpus into a token-vector index with a multi-vector model (resumable; several processes or GPUs).",
    ),
    "search": Command(
        "tisa_hf.multivector.search",
        "tisa_hf.multivector.options:search_parser",
        "Search a token-vector index by exact MaxSim: the top-k documents of a query or a file of queries, as JSON.",
    ),
    "sts": Command(
        "tisa_hf.embeddings.sts",
        "tisa_hf.embeddings.options:sts_parser",
        "Zero-shot STS-B (Spearman of cosine similarities) of embedding models, paired.",
    ),
    "push": Command(
        "tisa_hf.finetune.push", "tisa_hf.cli_options:push_parser", "Upload a run's model with a model card to the Hub."
    ),
    "bench": Command(
        "tisa_hf.performance.bench",
        "tisa_hf.cli_options:bench_parser",
        "Speed and memory of TISA against plain attention.",
    ),
    "env": Command(
        "tisa_hf.performance.environment_report",
        "tisa_hf.cli_options:env_parser",
        "This machine and the attention route each TISA configuration takes on it.",
    ),
}
DEBUG_OPTION = "--debug"  # before the command: `tisa-hf --debug glue ...`
DEBUG_VARIABLE = "TISA_HF_DEBUG"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PROGRESS_BAR_SWITCHES = (("transformers.utils.logging", "disable_progress_bar"), ("datasets", "disable_progress_bars"))


def _load(target: str) -> Any:
    module_name, _, name = target.partition(":")
    return getattr(importlib.import_module(module_name), name or "main")


def _refuse(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """What argparse cannot parse, as one UsageError line instead of the command's whole usage and the message."""
    raise UsageError(f"{message}; see {parser.prog} --help.")


def check_options(name: str, command: Command, args: list[str]) -> None:
    """Parses `tisa-hf NAME ARGS` with the command's options alone, which live in light modules (no torch): prints
    the help when asked (argparse then exits with status 0) and raises what the options refuse (a misspelt
    option, a value of the wrong type or outside the choices) as a UsageError, so that both answer at once,
    before the command imports its libraries. The command parses its arguments again when it runs."""
    options = _load(command.options)
    prog = f"tisa-hf {name}"
    if isinstance(options, tuple):
        from .finetune.arguments import parse_arguments  # here: it imports transformers' argument parser

        parse_arguments(options, args, prog=prog, refuse=_refuse)
    else:
        parser = options()
        parser.prog = prog
        parser.error = functools.partial(_refuse, parser)
        parser.parse_args(args)


def unknown_command(name: str) -> str:
    """The line for a command tisa-hf does not have, with the closest one when the name looks misspelt."""
    close = difflib.get_close_matches(name, COMMANDS, n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return f"tisa-hf: unknown command {name!r}; {guess}the commands are {', '.join(COMMANDS)}."


def configure_logging() -> None:
    """tisa-hf's own INFO lines, other libraries' from WARNING on (accelerate's per-checkpoint notes and HTTP
    request lines are noise in a run's log), and the libraries' progress bars only on a terminal: in a log file
    their carriage returns pile up into one unreadable line (tisa-hf logs plain progress lines there instead).

    The environment variables reach libraries imported later and child processes (sweeps); libraries imported
    already are switched off directly (huggingface_hub's switch also covers transformers imported later)."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    logging.getLogger("tisa_hf").setLevel(logging.INFO)
    if sys.stderr.isatty():
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    huggingface_hub.utils.disable_progress_bars()
    for module, switch in PROGRESS_BAR_SWITCHES:
        if module in sys.modules:
            getattr(sys.modules[module], switch)()


def entry(name: str) -> Callable[[list[str] | None], int]:
    """`tisa-hf NAME ARGS` as a function of ARGS (default `sys.argv[1:]`), its errors reported as `main` reports
    them: the entry of `python -m tisa_hf.glue` and the other launcher modules."""

    def run_command(argv: list[str] | None = None) -> int:
        return main([name, *(sys.argv[1:] if argv is None else argv)])

    return run_command


def debugging(argv: list[str]) -> tuple[bool, list[str]]:
    """Whether a usage error shows its traceback (`--debug` before the command, or `TISA_HF_DEBUG=1`), and the
    arguments without `--debug`."""
    asked = argv[:1] == [DEBUG_OPTION]
    return asked or os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"), argv[1:] if asked else argv


def main(argv: list[str] | None = None, before_running: Callable[[], None] = lambda: None) -> int:
    """Runs `tisa-hf ARGV`: the command list, a command's help, or the command once its options parse;
    `before_running` is called just before the command's module is imported (the console script imports
    tisa_hf in full there)."""
    debug, argv = debugging(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
        print(f"usage: tisa-hf [{DEBUG_OPTION}] COMMAND [ARGS]\n\ncommands:\n" + "\n".join(lines))
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(unknown_command(command), file=sys.stderr)
        return 2
    try:
        check_options(command, COMMANDS[command], rest)
        before_running()
        configure_logging()
        return _load(COMMANDS[command].run)(rest) or 0
    except UsageError as error:
        if debug:
            traceback.print_exc()
        print(f"tisa-hf {command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
