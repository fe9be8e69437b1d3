"""What of the libraries' logging reaches a command's log: one known record of a library dropped for the length of a
call, and nothing else it says; and below WARNING, tisa-hf's own records only."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


class _DropContaining(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


@contextlib.contextmanager
def dropping_records(logger_name: str, text: str) -> Iterator[None]:
    """Inside the block, the records of `logger_name` whose message contains `text` are dropped."""
    logger, record_filter = logging.getLogger(logger_name), _DropContaining(text)
    logger.addFilter(record_filter)
    try:
        yield
    finally:
        logger.removeFilter(record_filter)


class OwnRecordsOrWarnings(logging.Filter):
    """Passes tisa-hf's records and the other libraries' from WARNING on, whatever level a library gives its own
    logger: bm25s sets its logger to DEBUG when imported, after the command line has set the levels."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.partition(".")[0] == "tisa_hf"
