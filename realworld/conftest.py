"""Helpers for the tests against real packages: snapshots of a package's namespaces,
the fallback reports a block gives, and no network."""

from __future__ import annotations

import logging
import os
import socket
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from tests.logs import recorded_logs

from onnx_device_guard import DeviceFallbackWarning

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


# Nothing may be downloaded: Hugging Face libraries stay offline, and any
# INET connection attempt fails the test that makes it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True, scope="session")
def no_network() -> Iterator[None]:
    """Any INET or INET6 connection attempt raises, so a test that downloads fails."""
    real = socket.socket.connect

    def refuse(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise OSError(f"network disabled in the realworld tests: {address!r}")
        real(self, address)

    socket.socket.connect = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        socket.socket.connect = real  # type: ignore[method-assign]


def cuda_listed(monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
    """Make `module` see a GPU build of onnxruntime whose CUDA libraries do not load.

    The rapid* packages import `get_available_providers` and `get_device` by
    name and ask for CUDA only when both say a GPU is there; the session they
    then open still runs on CPU, as onnxruntime drops the provider it cannot start.
    """
    real = module.get_available_providers
    monkeypatch.setattr(
        module, "get_available_providers", lambda: ["CUDAExecutionProvider", *real()]
    )
    monkeypatch.setattr(module, "get_device", lambda: "GPU")


@contextmanager
def one_fallback(
    caller: str, logged: Callable[[], list[logging.LogRecord]], count: int = 1
) -> Iterator[None]:
    """The block reports `count` fallbacks: DeviceFallbackWarnings at a line of
    `caller` (a test file), and as many WARNING records."""
    with pytest.warns(DeviceFallbackWarning) as caught:
        yield
    ours = [w for w in caught if issubclass(w.category, DeviceFallbackWarning)]
    assert len(ours) == count, [str(w.message)[:160] for w in ours]
    assert all(w.filename == caller for w in ours), [(w.filename, w.lineno) for w in ours]
    assert len(logged()) == count, [r.getMessage()[:160] for r in logged()]


@contextmanager
def no_fallback(logged: Callable[[], list[logging.LogRecord]]) -> Iterator[None]:
    """The block reports no fallback: neither a DeviceFallbackWarning nor a WARNING record."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    ours = [w for w in caught if issubclass(w.category, DeviceFallbackWarning)]
    assert ours == [], [str(w.message)[:160] for w in ours]
    assert logged() == [], [r.getMessage()[:160] for r in logged()]


@pytest.fixture(scope="session", autouse=True)
def temporary_folders_collected_here() -> Iterator[None]:
    """Collect what the packages' exports left to the garbage collector before pytest ends.

    Some exports leave a `TemporaryDirectory` behind; collected at some later,
    unrelated moment, its `ResourceWarning` would fail whatever runs then.
    """
    yield
    import gc

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
