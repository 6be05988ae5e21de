"""The public API's docstrings have the sections the API reference promises."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

import onnx_device_guard

if TYPE_CHECKING:
    import griffe

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "src" / "onnx_device_guard").rglob("*.py"))
PUBLIC = sorted(name for name in onnx_device_guard.__all__ if name != "__version__")
CALLABLES = [
    name
    for name in PUBLIC
    if inspect.isfunction(getattr(onnx_device_guard, name))
    or inspect.isclass(getattr(onnx_device_guard, name))
]
# Error classes are built by the library, not called for a result.
NO_RAISES = {
    "DeviceGuardError",
    "ModelInputError",
    "EnvironmentConfigurationError",
    "DeviceFallbackWarning",
}
SPHINX_ROLE = re.compile(r":(?:func|class|meth|attr|data|mod|exc|obj):`")


@pytest.fixture(scope="module")
def api() -> griffe.Module:
    """The package as mkdocstrings sees it: loaded statically, Google-style docstrings."""
    loader = pytest.importorskip(
        "griffe", reason="griffe is not installed; install the 'docs' dependency group"
    )
    # The same parser options as the mkdocstrings handler in mkdocs.yml.
    package: griffe.Module = loader.load(
        "onnx_device_guard",
        search_paths=[str(ROOT / "src")],
        docstring_parser="google",
        docstring_options={"returns_multiple_items": False},
    )
    return package


def _documented(api: griffe.Module, name: str) -> griffe.Object:
    """The object behind a public name, followed through its re-export."""
    member = api.members[name]
    target = cast("griffe.Object", getattr(member, "final_target", member))
    assert target.docstring is not None, f"{name} has no docstring"
    return target


def _sections(obj: griffe.Object | griffe.Alias) -> set[str]:
    assert obj.docstring is not None
    return {section.kind.value for section in obj.docstring.parsed}


def _documented_parameters(obj: griffe.Object | griffe.Alias) -> list[str]:
    assert obj.docstring is not None
    return [
        parameter.name
        for section in obj.docstring.parsed
        if section.kind.value == "parameters"
        for parameter in section.value
    ]


def _signature_parameters(obj: griffe.Object | griffe.Alias) -> list[str]:
    function = cast("griffe.Function", obj.all_members["__init__"] if obj.is_class else obj)
    return [p.name for p in function.parameters if p.name not in {"self", "cls"}]


def _rendered_methods(obj: griffe.Object) -> list[griffe.Object | griffe.Alias]:
    """Methods the reference shows: documented, and not private (dunder methods count)."""
    return [
        member
        for name, member in obj.members.items()
        if member.is_function and member.docstring and not re.match(r"_[^_]", name)
    ]


class TestDocstrings:
    @pytest.mark.parametrize("name", PUBLIC)
    def test_has_examples(self, api: griffe.Module, name: str) -> None:
        """Every public object has an Examples section (which Sybil runs)."""
        assert "examples" in _sections(_documented(api, name))

    @pytest.mark.parametrize("name", CALLABLES)
    def test_documents_its_parameters(self, api: griffe.Module, name: str) -> None:
        """Functions and classes document exactly the parameters they take, in order."""
        obj = _documented(api, name)
        assert _documented_parameters(obj) == _signature_parameters(obj)

    @pytest.mark.parametrize("name", CALLABLES)
    def test_documents_returns_and_raises(self, api: griffe.Module, name: str) -> None:
        """Functions say what they return or yield; callables say what they raise."""
        obj = _documented(api, name)
        sections = _sections(obj)
        if obj.is_function:
            assert sections & {"returns", "yields"}
        if name not in NO_RAISES:
            assert "raises" in sections

    @pytest.mark.parametrize(
        "name", [n for n in CALLABLES if inspect.isclass(getattr(onnx_device_guard, n))]
    )
    def test_public_methods_are_complete(self, api: griffe.Module, name: str) -> None:
        """Methods shown in the reference have parameters, returns, raises and examples."""
        for method in _rendered_methods(_documented(api, name)):
            wanted = {"returns", "raises", "examples"}
            if _signature_parameters(method):
                wanted.add("parameters")
            assert wanted <= _sections(method), method.path
            assert _documented_parameters(method) == _signature_parameters(method)


class TestMarkup:
    @pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.name)
    def test_no_sphinx_roles(self, path: Path) -> None:
        """Docstrings use Markdown cross-references: mkdocstrings shows Sphinx roles raw."""
        lines = path.read_text(encoding="utf-8").splitlines()
        assert [line for line in lines if SPHINX_ROLE.search(line)] == []

    @pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.name)
    def test_examples_heading_is_plural(self, path: Path) -> None:
        """'Example:' is not a Google section for griffe: its '>>>' lines would render as quotes."""
        assert re.findall(r"^\s*Example:\s*$", path.read_text(encoding="utf-8"), re.M) == []
