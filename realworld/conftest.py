"""Helpers for the tests against real packages: snapshots of a package's namespaces."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.logs import recorded_logs

Snapshot = dict[tuple[str, str], object]


def snapshot(package: str, *classes: type) -> Snapshot:
    """Every name in the package's loaded modules, and in `classes`, with its object."""
    taken: Snapshot = {}
    for name, module in list(sys.modules.items()):
        if name == package or name.startswith(package + "."):
            for attribute, value in list(vars(module).items()):
                taken[(name, attribute)] = value
    for cls in classes:
        for attribute, value in list(vars(cls).items()):
            taken[(f"{cls.__module__}.{cls.__qualname__}", attribute)] = value
    return taken


def changed(before: Snapshot, package: str, *classes: type) -> list[tuple[str, str]]:
    """The names of `before` whose object is no longer the same one, or that are gone or new.

    Names a module gained meanwhile are not counted: importing a submodule
    adds one to its package.
    """
    after = snapshot(package, *classes)
    differ = [key for key, value in before.items() if after.get(key, _GONE) is not value]
    added = [
        key
        for key in after
        if key not in before and any(key[0] == f"{c.__module__}.{c.__qualname__}" for c in classes)
    ]
    return differ + added


_GONE = object()


@pytest.fixture
def warnings_logged() -> Iterator[Callable[[], list[logging.LogRecord]]]:
    """The library's WARNING records logged during the test."""
    with recorded_logs() as records:
        yield lambda: [record for record in records if record.levelno == logging.WARNING]


def name_of(value: Any) -> str:
    """A short name for error messages in assertions."""
    return getattr(value, "__qualname__", repr(value))
