"""Dropping one known log record of a library for the length of a call, and nothing else it says."""

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
