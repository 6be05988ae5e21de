"""Worker-side functions for test_watch_in_workers.py: real sessions opened in a worker.

Ray and Dask workers import this module by name (the test session puts the
project root on their ``PYTHONPATH``), so it imports nothing from the tests
but itself. Each function opens a real session of the tiny model: asked for
CUDA first, the CPU build of onnxruntime gives one that runs on CPU only,
the drop a watch reports.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import onnxruntime

from onnx_device_guard import example_model

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
ASKS_FOR_CUDA = (CUDA, CPU)


def open_session(providers: tuple[str, ...] = ASKS_FOR_CUDA) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(str(example_model()), providers=list(providers))


def session_in_worker(
    providers: tuple[str, ...] = ASKS_FOR_CUDA,
) -> tuple[list[str], list[tuple[str, str]], int]:
    """Open a session here; its providers, the warnings it raised (category, file), this pid."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = open_session(providers)
    raised = [(w.category.__name__, Path(w.filename).name) for w in caught]
    return session.get_providers(), raised, os.getpid()


class SessionActor:
    """A Ray actor (``ray.remote(SessionActor)``) that opens sessions in its own process."""

    def session_in_worker(
        self, providers: tuple[str, ...] = ASKS_FOR_CUDA
    ) -> tuple[list[str], list[tuple[str, str]], int]:
        return session_in_worker(providers)

    def fall_back(self) -> int:
        """A fallback left to the worker's warnings and logging as they are."""
        open_session()
        return os.getpid()


def fall_back_in_task() -> int:
    """As ``SessionActor.fall_back``, for a task: a call site of its own (warned once per site)."""
    open_session()
    return os.getpid()


def fall_back_in_dask() -> list[str]:
    """As ``fall_back_in_task``, for the Dask worker."""
    providers: list[str] = open_session().get_providers()
    return providers
