"""Run the examples in docstrings, the docs and the README as tests (Sybil)."""

from __future__ import annotations

import ast
import os
import re
import shutil
from collections.abc import Iterator
from doctest import ELLIPSIS, NORMALIZE_WHITESPACE
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

import pytest
from sybil import Sybil
from sybil.document import PythonDocStringDocument
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


_STRING_QUOTES = re.compile(r"[rRuU]?(\"\"\"|'''|\"|')")


class DocStringsAndAttributeDocStrings(PythonDocStringDocument):
    """Docstrings, plus the string that follows an assignment in a module or class body.

    Python keeps no such "attribute docstring" at run time, but mkdocstrings
    renders it, so constants such as ``GPU_CAPABLE_EXECUTION_PROVIDERS`` carry
    their examples there; this makes Sybil run them too.
    """

    @staticmethod
    def extract_docstrings(python_source_code: str) -> Iterator[tuple[int, int, str]]:
        yield from PythonDocStringDocument.extract_docstrings(python_source_code)
        line_starts = [0]
        for line in python_source_code.splitlines(keepends=True):
            line_starts.append(line_starts[-1] + len(line))
        for node in ast.walk(ast.parse(python_source_code)):
            if not isinstance(node, ast.Module | ast.ClassDef):
                continue
            for previous, statement in zip(node.body, node.body[1:], strict=False):
                if not (
                    isinstance(previous, ast.Assign | ast.AnnAssign)
                    and isinstance(statement, ast.Expr)
                    and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, str)
                ):
                    continue
                string = statement.value
                start = line_starts[string.lineno - 1] + string.col_offset
                end = line_starts[(string.end_lineno or 1) - 1] + (string.end_col_offset or 0)
                quotes = _STRING_QUOTES.match(python_source_code, start, end)
                if quotes is None:  # an implicitly concatenated string: not a docstring
                    continue
                yield quotes.end(), end - len(quotes.group(1)), string.value


_shared = {"setup": _example_namespace, "fixtures": ["example_workdir"]}

pytest_collect_file = (
    Sybil(
        parsers=[DocTestParser(optionflags=OPTIONS)],
        patterns=["src/onnx_device_guard/*.py", "src/onnx_device_guard/*/*.py"],
        document_types={".py": DocStringsAndAttributeDocStrings},
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
