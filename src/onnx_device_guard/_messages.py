"""What every layer shares: the logger, the `MISSING` marker, safe text for messages, and
`ObjectTable`, which keeps a value beside each live object by the object's identity."""

from __future__ import annotations

import functools
import logging
import reprlib
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

V = TypeVar("V")

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


class ObjectTable(Generic[V]):
    """A value per live object, by identity (unhashable ones too), none kept alive: the weak
    reference's callback pops the id, which no other object holds while the dying one does."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], V]] = {}

    def get(self, key: object) -> V | None:
        """The value kept for `key`, or `None`."""
        entry = self._entries.get(id(key))
        return entry[1] if entry is not None and entry[0]() is key else None

    def set(self, key: object, value: V) -> None:
        """Keep `value` for `key` until `key` is collected."""
        end = functools.partial(self._entries.pop, id(key))  # called as pop(id, <reference>)
        self._entries[id(key)] = (weakref.ref(key, end), value)

    def values(self) -> list[V]:
        """The values kept, read at once (another thread may change the table)."""
        return [value for _, value in list(self._entries.values())]
