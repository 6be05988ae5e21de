"""Fixtures shared by the test suite."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

import pytest

# A relative PYTHONPATH (`PYTHONPATH=src`) would name another tree in the programs the tests
# start in other folders: they import the code under test, as this process does.
if os.environ.get("PYTHONPATH"):
    paths = os.environ["PYTHONPATH"].split(os.pathsep)
    os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(path) for path in paths if path)


def _cuda_unavailable_reason() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    try:
        import onnxruntime
    except ImportError:
        return "onnxruntime is not installed"
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return "this onnxruntime build has no CUDAExecutionProvider"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``cuda`` unless torch and onnxruntime can both use CUDA."""
    if not any(item.get_closest_marker("cuda") for item in items):
        return
    reason = _cuda_unavailable_reason()
    if reason is None:
        return
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def tiny_model_path() -> Iterator[Path]:
    """The tiny ``y = x + 1`` ONNX model that ships in the package."""
    with as_file(files("onnx_device_guard") / "data" / "tiny.onnx") as path:
        yield path


@pytest.fixture(scope="session")
def real_cpu_session(tiny_model_path: Path) -> Any:
    """A real onnxruntime session on the tiny model, created with the CPU provider only."""
    import onnxruntime

    return onnxruntime.InferenceSession(str(tiny_model_path), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="session")
def real_dropped_cuda_session(tiny_model_path: Path) -> Any:
    """A real session that asked for CUDA; on a CPU-only onnxruntime it silently runs on CPU."""
    import onnxruntime

    with warnings.catch_warnings():
        # onnxruntime warns that the provider is unavailable, then carries on.
        warnings.simplefilter("ignore", UserWarning)
        return onnxruntime.InferenceSession(
            str(tiny_model_path), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
        )
