"""`tisa-hf` command line: one subcommand per job, each implemented in its own module."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable

import huggingface_hub.utils

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("tisa_hf.demo", "Offline quickstart on the packaged MiniLM: patch, fit, plot, save, reload."),
    "analyze": ("tisa_hf.analysis.cli:analyze", "Positional analysis report of one encoder."),
    "compare": ("tisa_hf.analysis.cli:compare", "Key positional numbers of several encoders in one table."),
    "glue": ("tisa_hf.finetune.glue", "Fine-tune and evaluate on a GLUE task."),
    "squad": ("tisa_hf.finetune.squad", "Fine-tune and evaluate on SQuAD v1.1 / v2.0."),
    "sweep": ("tisa_hf.finetune.sweep", "Run a grid of fine-tuning runs, resumably."),
    "report": ("tisa_hf.finetune.report", "Results table (the TISA paper's table 3 layout)."),
    "adapt": ("tisa_hf.adapt.run", "Adapt a pretrained encoder to TISA on plain text (distillation or masked LM)."),
    "lm-eval": ("tisa_hf.adapt.lm_eval", "Teacher agreement and masked-token loss against input length."),
    "push": ("tisa_hf.hub", "Upload a run's model with a model card to the Hub."),
    "bench": ("tisa_hf.bench", "Speed and memory of TISA against plain attention."),
}
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PROGRESS_BAR_SWITCHES = (("transformers.utils.logging", "disable_progress_bar"), ("datasets", "disable_progress_bars"))


def _load(target: str) -> Callable:
    module_name, _, function = target.partition(":")
    return getattr(importlib.import_module(module_name), function or "main")


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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in COMMANDS.items()]
        print("usage: tisa-hf COMMAND [ARGS]\n\ncommands:\n" + "\n".join(lines))
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"tisa-hf: unknown command {command!r}; choose from {', '.join(COMMANDS)}.", file=sys.stderr)
        return 2
    configure_logging()
    return _load(COMMANDS[command][0])(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
