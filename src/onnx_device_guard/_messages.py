"""What every layer shares: the logger, the `MISSING` marker, and safe text for messages."""

from __future__ import annotations

import logging
import reprlib
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("onnx_device_guard")
"""The library's one logger. It has only a `NullHandler`: handlers are the application's."""
logger.addHandler(logging.NullHandler())

MISSING: Any = object()
"""Marks "no such attribute" (or "nothing was there"), where `None` is a real value."""


def short_repr(value: object, limit: int = 80) -> str:
    """`repr(value)`, cut to `limit` characters as written; `<Type object>` if it raises."""
    cutting = _Cutting()
    cutting.maxstring = cutting.maxother = cutting.maxlong = limit
    cutting.maxlist = cutting.maxtuple = cutting.maxdict = cutting.maxset = 16
    return _short(cutting.repr, value, limit)


def typed_repr(value: object) -> str:
    """`Type repr` of `value`, as a message names a value it cannot use."""
    return f"{type(value).__name__} {short_repr(value)}"


def error_text(error: BaseException, limit: int = 200) -> str:
    """`Type: message` of `error`, cut to `limit` characters, however broken its `str`."""
    text = _short(str, error, limit)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _Cutting(reprlib.Repr):
    """`reprlib.Repr`, showing an item as `_short` shows the value: cut, named if it raises."""

    def repr_instance(self, x: Any, level: int) -> str:
        return _short(repr, x, self.maxother)


def _short(show: Callable[[object], str], value: object, limit: int) -> str:
    try:
        text = show(value)
    except Exception:
        text = f"<{type(value).__name__} object>"
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    if text.isprintable():
        return text
    # A control character is escaped, so that no text forges a log line.
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
