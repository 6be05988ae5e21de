"""Putting values the user passed into messages safely, at a sane length."""

from __future__ import annotations

REPR_LIMIT = 80
"""The most characters of one value's `repr` that a message shows."""


def short_repr(value: object, limit: int = REPR_LIMIT) -> str:
    """Return `repr(value)`, cut to `limit` characters, and never raise.

    A `__repr__` that raises (or returns something that is not a string)
    gives `<TypeName object>` instead, so building an error message can never
    fail in its turn or hide the error it describes.
    """
    try:
        text = repr(value)
    except Exception:
        text = f"<{_type_name(value)} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_str(value: object, limit: int = 200) -> str:
    """Return `str(value)` (an exception's text, say), cut, and never raise."""
    try:
        text = str(value)
    except Exception:
        text = f"<{_type_name(value)} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: object) -> str:
    return type(value).__name__
