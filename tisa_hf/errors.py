"""The one error type for what a user got wrong: a setting, an input file, a model folder, an output folder.

Its message names the problem and the fix. The console entry (`tisa_hf.commands.cli`) prints it as one line and exits
with status 2; anything else escaping a command is a bug in tisa-hf and keeps its traceback. On Ctrl-C the entry
says in one line what a resumable command kept on disk so far: each resumable store notes what it holds as it
writes it, under its file (`note_kept`), and takes the note back when it removes the file; the notes live as long
as the process, which runs one command.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class UsageError(ValueError):
    """Something the user can fix, raised before expensive work starts where it can be known then. A ValueError,
    so that code catching ValueError from tisa-hf's Python API keeps working."""


@contextmanager
def usage_errors() -> Iterator[None]:
    """Around a call of tisa-hf's Python API on what the user gave (a TisaConfig from the options, `tisa=` for a
    checkpoint): the ValueErrors it raises for a wrong input are usage errors of the command, message unchanged."""
    try:
        yield
    except UsageError:
        raise
    except ValueError as error:
        raise UsageError(str(error)) from error


_notes: dict[str, str] = {}


def note_kept(path: Path, what: str) -> None:
    """`path` now holds `what` (words that follow "kept"), replacing its earlier note."""
    _notes[str(path)] = what


def forget_kept(path: Path) -> None:
    """`path` is removed (what it held is recorded elsewhere)."""
    _notes.pop(str(path), None)


def kept_so_far() -> list[str]:
    """The notes, oldest file first."""
    return list(_notes.values())


def clear_kept() -> None:
    """A new command starts: nothing of its own is kept yet."""
    _notes.clear()
