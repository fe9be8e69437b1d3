"""`tisa-hf` command line: one subcommand per job, each implemented in its own module, and the one error boundary.

A command raises `tisa_hf.errors.UsageError` for what the user got wrong; `main` prints it as one line,
`tisa-hf COMMAND: message`, and exits with status 2 (with its traceback under `--debug` or `TISA_HF_DEBUG=1`).
Ctrl-C is one line too, saying what a resumable command kept (`errors.note_kept`) and how it carries on, with
status 130 (128 + SIGINT, as a shell reports it). Anything else escaping a command is a bug and keeps its
traceback. `python -m tisa_hf.commands.glue` and the other launcher entries come through here too.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

import huggingface_hub.utils

from ..common.log_filters import OwnRecordsOrWarnings
from ..errors import UsageError, clear_kept, kept_so_far
from .registry import COMMANDS, Command, installed, load

DEBUG_OPTION = "--debug"  # before the command: `tisa-hf --debug glue ...`
DEBUG_VARIABLE = "TISA_HF_DEBUG"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PROGRESS_BAR_SWITCHES = (("transformers.utils.logging", "disable_progress_bar"), ("datasets", "disable_progress_bars"))
INTERRUPTED_STATUS = 130
NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # a value, as argparse reads it


def _refuse(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """What argparse cannot parse, as one UsageError line instead of the command's whole usage and the message."""
    raise UsageError(f"{message}; see {parser.prog} --help.")


def unknown_option(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """The line for the first option in `args` that `parser` lacks (as argparse reads them: a prefix of one option
    is that option), with the closest one when it looks misspelt; None when it has them all. argparse itself names
    an unknown option only once everything else parses, after a missing required option, say, which hides it."""
    options = [string for action in parser._actions for string in action.option_strings]  # argparse's own list
    for arg in args:
        if arg == "--":
            break
        name = arg.partition("=")[0]
        if not arg.startswith("-") or arg == "-" or NEGATIVE_NUMBER.match(arg) or name in options:
            continue
        if parser.allow_abbrev and name.startswith("--") and any(option.startswith(name) for option in options):
            continue
        close = difflib.get_close_matches(name, options, n=1)
        guess = f"did you mean {close[0]}? " if close else ""
        return f"unknown option {name}; {guess}see {parser.prog} --help."
    return None


def _refuse_unknown_first(parser: argparse.ArgumentParser, args: list[str], message: str) -> NoReturn:
    """`_refuse`, naming an unknown option before anything else argparse found wrong."""
    raise UsageError(unknown_option(parser, args) or f"{message}; see {parser.prog} --help.")


def check_options(name: str, command: Command, args: list[str]) -> Any:
    """Parses `tisa-hf NAME ARGS` with the command's options alone, which live in light modules (no torch): prints
    the help when asked (argparse then exits with status 0) and raises what the options refuse (a misspelt
    option, a value of the wrong type or outside the choices) as a UsageError, so that both answer at once,
    before the command imports its libraries; returns the parsed options. The command parses its arguments again
    when it runs."""
    options = load(command.options)
    prog = f"tisa-hf {name}"
    if isinstance(options, tuple):
        from ..finetune.arguments import parse_arguments  # here: it imports transformers' argument parser

        return parse_arguments(options, args, prog=prog, refuse=_refuse)
    parser = options()
    parser.prog = prog
    parser.error = functools.partial(_refuse_unknown_first, parser, args)
    return parser.parse_args(args)


def interrupted(command: Command) -> str:
    """The line for Ctrl-C: what a resumable command kept and how it carries on."""
    if command.resumes is None:
        return "interrupted; this command keeps nothing to resume, so it starts over when run again."
    kept = kept_so_far()
    return f"interrupted; {'kept ' + '; '.join(kept) if kept else 'nothing finished yet'}; {command.resumes}."


def check_extra(command: Command) -> None:
    """The extra the command needs is installed, or one line says how to install it; `find_spec` tells without
    importing anything."""
    if command.extra is not None and not installed(command.extra):
        raise UsageError(f'needs the {command.extra} extra: pip install "tisa-hf[{command.extra}]"')


def check_command_line(name: str, command: Command, args: list[str]) -> Any:
    """Before the command imports its libraries: its options (whose help answers on any install), then its extra;
    where both fail the missing extra is the line shown, since no options run without it. Returns the parsed
    options, for the command's own checks."""
    try:
        options = check_options(name, command, args)
    except UsageError:
        check_extra(command)
        raise
    check_extra(command)
    return options


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
    root = logging.getLogger()
    if not root.handlers:  # as logging.basicConfig, the handler passing other libraries' records from WARNING on
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler.addFilter(OwnRecordsOrWarnings())
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
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
    them: the entry of `python -m tisa_hf.commands.glue` and the other launcher modules."""

    def run_command(argv: list[str] | None = None) -> int:
        return main([name, *(sys.argv[1:] if argv is None else argv)])

    return run_command


def moved_entry(old_module: str, name: str) -> Callable[[list[str] | None], int]:
    """`entry(name)` under a module name the previous release documented (`accelerate launch -m tisa_hf.glue`):
    one line on stderr names the module that replaced it, then the command runs as it does there."""
    run_command = entry(name)

    def forwarded(argv: list[str] | None = None) -> int:
        new_module = COMMANDS[name].launcher
        print(
            f"{old_module} is deprecated and goes in tisa-hf 0.3: use {new_module} "
            f"(accelerate launch -m {new_module}, or tisa-hf {name})",
            file=sys.stderr,
        )
        return run_command(argv)

    return forwarded


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
    entry = COMMANDS[command]
    clear_kept()
    try:
        options = check_command_line(command, entry, rest)
        if entry.checks is not None:
            load(entry.checks)(options)
        before_running()
        configure_logging()
        return load(entry.run)(rest) or 0
    except UsageError as error:
        if debug:
            traceback.print_exc()
        print(f"tisa-hf {command}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print(f"tisa-hf {command}: {interrupted(entry)}", file=sys.stderr)
        return INTERRUPTED_STATUS
