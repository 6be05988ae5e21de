"""Capturing the library's log records in tests, at every level, away from pytest's capture."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class RecordingHandler(logging.Handler):
    """Keeps every record it is handed (logging serialises ``emit`` with a lock)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def recorded_logs() -> Iterator[list[logging.LogRecord]]:
    """Collect the ``onnx_device_guard`` logger's records, DEBUG included, during the block.

    The records do not propagate to the root logger meanwhile, so thousands of
    expected fallbacks do not flood pytest's log capture.
    """
    logger = logging.getLogger("onnx_device_guard")
    handler = RecordingHandler()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def warning_records(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    """The records at WARNING, exactly."""
    return [record for record in records if record.levelno == logging.WARNING]


def warning_texts(records: list[logging.LogRecord]) -> list[str]:
    """The messages of the records at WARNING, exactly."""
    return [record.getMessage() for record in warning_records(records)]
