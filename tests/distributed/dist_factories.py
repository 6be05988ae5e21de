"""Module-level factories, fake sessions and worker-side helpers for test_distributed.py.

Ray workers, Dask workers and spawned pool workers import this module by
name, so it must stay importable on its own (the project root is on their
``sys.path``: the test session puts it on ``PYTHONPATH``).
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import onnx_device_guard
from onnx_device_guard import device_guard, device_policy
from onnx_device_guard._policy import current_policy

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"


class FakeSession:
    """A picklable stand-in for an ``InferenceSession`` (providers after onnxruntime's fallback)."""

    def __init__(self, providers: list[str]) -> None:
        self.providers = list(providers)

    def get_providers(self) -> list[str]:
        return list(self.providers)

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {name: ({"device_id": "0"} if name == CUDA else {}) for name in self.providers}

    def run(self, output_names: Any, feeds: Any, run_options: Any = None) -> list[Any]:
        return []

    def set_providers(self, providers: Any = None, provider_options: Any = None) -> None:
        self.providers = list(providers or [])


def session_for(kind: str) -> FakeSession:
    """``"cpu"``: CUDA was dropped (the CPU build); ``"gpu"``: CUDA loaded on device 0."""
    return FakeSession([CPU] if kind == "cpu" else [CUDA, CPU])


@dataclass
class Model:
    session: FakeSession
    device: str
    made_in: int = 0

    @classmethod
    @device_guard
    def from_pretrained(cls, kind: str = "cpu", device: str = "cuda:0") -> Model:
        return cls(session_for(kind), device, os.getpid())


def load_plain(kind: str = "cpu", device: str = "cuda:0") -> Model:
    """The factory without a guard: the model keeps the device it asked for."""
    return Model(session_for(kind), device, os.getpid())


@device_guard
def load_model(kind: str = "cpu", device: str = "cuda:0") -> Model:
    """The same factory, guarded."""
    return Model(session_for(kind), device, os.getpid())


load_model_alias = device_guard(load_plain)
"""Guarded under another name while ``load_plain`` keeps its own: pickles as the alias."""


@device_guard(resolution_mode="fail")
def load_model_strictly(kind: str = "cpu", device: str = "cuda:0") -> Model:
    return Model(session_for(kind), device, os.getpid())


@device_policy(resolution_mode="fail")
@device_guard
def load_under_fail_policy(kind: str = "cpu", device: str = "cuda:0") -> Model:
    """``@device_policy`` as a decorator: the scope is part of the function."""
    return Model(session_for(kind), device, os.getpid())


def policy_in_force() -> tuple[str, str, bool]:
    policy = current_policy()
    return str(policy.resolution_mode), str(policy.fallback_device), bool(policy.warn)


def device_of(factory: Callable[..., Any], *args: Any) -> tuple[str, int]:
    """Call ``factory`` here (in a worker) and return its model's device and this pid."""
    return str(factory(*args).device), os.getpid()


def call_blob(blob: bytes, *args: Any) -> tuple[str, int]:
    """Load a cloudpickled factory in a worker, call it, return the device."""
    import cloudpickle

    return device_of(cloudpickle.loads(blob), *args)


@device_guard
def load_on_gpu_session(device: str = "cuda:0") -> Model:
    """A real session that reports CUDA: only real sessions are followed after load.

    ``tests.sessions.GPUSession`` runs on the CPU and reports the providers
    last asked of it, as a GPU machine's session would.
    """
    from tests.sessions import GPUSession

    return Model(GPUSession(), device, os.getpid())


def follow_in_worker() -> tuple[str, str]:
    """Load on a CUDA session, then let the session drop to CPU here: the model follows."""
    model = load_on_gpu_session("cuda:0")
    before = str(model.device)
    model.session.set_providers([CPU])
    return before, str(model.device)


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def counting_fallbacks() -> Iterator[dict[str, int]]:
    """Count the guard's WARNING records and DeviceFallbackWarnings raised in the block."""
    counts = {"records": 0, "warnings": 0}
    handler = _Count()
    logger = logging.getLogger("onnx_device_guard")
    logger.addHandler(handler)
    category = getattr(onnx_device_guard, "DeviceFallbackWarning", None)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield counts
        counts["warnings"] = sum(
            1 for w in caught if category is not None and issubclass(w.category, category)
        )
    finally:
        logger.removeHandler(handler)
        counts["records"] = len(handler.records)


def load_and_count(guarded: bool) -> tuple[str, int, int, float]:
    """One remote load: device, fallback records, fallback warnings, seconds inside the worker."""
    factory = load_model if guarded else load_plain
    with counting_fallbacks() as counts:
        start = time.perf_counter()
        model = factory("cpu", "cuda:0")
        elapsed = time.perf_counter() - start
    return str(model.device), counts["records"], counts["warnings"], elapsed


def load_and_print_nothing() -> str:
    """A fallback in a worker, with the worker's logging and warnings as they are."""
    return str(load_model("cpu", "cuda:0").device)


def warn_probe(text: str) -> int:
    """A plain ``warnings.warn`` in a worker, to see where a worker's warnings go."""
    warnings.warn(text, UserWarning, stacklevel=1)
    return os.getpid()


def patch_hooked() -> None:
    """A worker setup hook (Ray ``worker_process_setup_hook``, pool ``initializer``)."""
    onnx_device_guard.patch("tests.distributed.thirdparty_hooked:load_detector")


def detector_device(module: str) -> tuple[str, int]:
    """Call ``module.load_detector()`` as the worker's module holds it now."""
    import importlib

    loaded = importlib.import_module(module)
    return str(loaded.load_detector().device), os.getpid()


class Loader:
    """A Ray actor (``ray.remote(Loader)``): patches a loader in ``__init__``, calls callables."""

    def __init__(self, *targets: str) -> None:
        self.patches = [onnx_device_guard.patch(target) for target in targets]

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


try:
    from distributed import WorkerPlugin
except ImportError:  # pragma: no cover - the distributed session installs it
    WorkerPlugin = object  # type: ignore[assignment,misc,unused-ignore]


class PatchPlugin(WorkerPlugin):  # type: ignore[misc,valid-type,unused-ignore]
    """A Dask worker plugin: patch loaders in every worker, present and future."""

    def __init__(self, *targets: str, **options: Any) -> None:
        self.targets, self.options = targets, options

    def setup(self, worker: Any) -> None:
        self.patches = [onnx_device_guard.patch(t, **self.options) for t in self.targets]

    def teardown(self, worker: Any) -> None:
        for handle in getattr(self, "patches", []):
            handle.undo()


class CaptureWarningsPlugin(WorkerPlugin):  # type: ignore[misc,valid-type,unused-ignore]
    """A Dask worker plugin: route the worker's warnings to logging (``py.warnings``)."""

    def setup(self, worker: Any) -> None:
        logging.captureWarnings(True)


def print_line(text: str) -> None:
    """Print a line in a worker (Ray forwards it to the driver)."""
    print(text, flush=True)
