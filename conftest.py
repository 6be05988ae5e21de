"""Run the examples in docstrings, the docs and the README as tests (Sybil)."""

from __future__ import annotations

import ast
import os
import re
import shutil
from collections.abc import Iterator
from doctest import ELLIPSIS, NORMALIZE_WHITESPACE
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
    """An empty working directory, as a newcomer trying the examples has.

    Examples that need a model file get it from ``example_model()``, on the page.
    """
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(previous)


@pytest.fixture
def docstring_workdir(example_workdir: Path) -> Path:
    """An empty working directory but for ``model.onnx`` (the tiny model).

    The seed examples of ``align_device_with_onnx_session`` open
    ``"model.onnx"``, as a model's own ``from_pretrained`` would; they are
    kept as written.
    """
    from onnx_device_guard import example_model

    shutil.copy(example_model(), example_workdir / "model.onnx")
    return example_workdir


def _docstring_namespace(namespace: dict[str, Any]) -> None:
    # Docstrings only: the seed examples of align_device_with_onnx_session use
    # these names without importing them, as a model's own module would have
    # them. The README and the docs pages get no such help: each page runs in
    # a namespace of its own, empty but for what it imports itself.
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


pytest_collect_file = (
    Sybil(
        parsers=[DocTestParser(optionflags=OPTIONS)],
        patterns=["src/onnx_device_guard/*.py", "src/onnx_device_guard/*/*.py"],
        document_types={".py": DocStringsAndAttributeDocStrings},
        name="docstrings",
        setup=_docstring_namespace,
        fixtures=["docstring_workdir"],
    )
    + Sybil(
        parsers=[PythonCodeBlockParser(doctest_optionflags=OPTIONS), SkipParser()],
        patterns=["docs/*.md", "README.md"],
        name="markdown",
        fixtures=["example_workdir"],
    )
).pytest()
