"""Run the examples in docstrings, the docs and the README as tests (Sybil)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from doctest import ELLIPSIS, NORMALIZE_WHITESPACE
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser
from sybil.parsers.rest import DocTestParser

OPTIONS = ELLIPSIS | NORMALIZE_WHITESPACE


@pytest.fixture
def example_workdir(tmp_path: Path) -> Iterator[Path]:
    """A working directory holding ``model.onnx`` (the tiny model), as the examples assume."""
    with as_file(files("onnx_device_guard") / "data" / "tiny.onnx") as model:
        shutil.copy(model, tmp_path / "model.onnx")
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(previous)


def _example_namespace(namespace: dict[str, Any]) -> None:
    # The seed examples of align_device_with_onnx_session use these names
    # without importing them, as a model's own module would have them.
    import onnxruntime
    import torch

    from onnx_device_guard import align_device_with_onnx_session

    namespace.setdefault("onnxruntime", onnxruntime)
    namespace.setdefault("torch", torch)
    namespace.setdefault("align_device_with_onnx_session", align_device_with_onnx_session)


_shared = {"setup": _example_namespace, "fixtures": ["example_workdir"]}

pytest_collect_file = (
    Sybil(
        parsers=[DocTestParser(optionflags=OPTIONS)],
        patterns=["src/onnx_device_guard/*.py"],
        name="docstrings",
        **_shared,
    )
    + Sybil(
        parsers=[PythonCodeBlockParser(doctest_optionflags=OPTIONS), SkipParser()],
        patterns=["docs/*.md", "README.md"],
        name="markdown",
        **_shared,
    )
).pytest()
