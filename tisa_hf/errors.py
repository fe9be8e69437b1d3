"""The one error type for what a user got wrong: a setting, an input file, a model folder, an output folder.

Its message names the problem and the fix. The console entry (`tisa_hf.commands.cli`) prints it as one line and exits
with status 2; anything else escaping a command is a bug in tisa-hf and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


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
