"""What a resumable command has kept on disk so far, for the one line the command line says when it is interrupted
(Ctrl-C: `commands/cli.py`). Each resumable store notes what it holds as it writes it, under its file, and takes the
note back when it removes the file; the notes live as long as the process, which runs one command."""

from __future__ import annotations

from pathlib import Path

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
