"""Every help link the library can hand out leads to a page and an anchor of the built docs."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import onnx_device_guard
from onnx_device_guard import DeviceGuardError
from onnx_device_guard._errors import DOCS_URL

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "src" / "onnx_device_guard").glob("*.py"))
DOCS = ROOT / "docs"
# A full link to the docs, as it appears in messages, docstrings and comments.
LITERAL_URL = re.compile(re.escape(DOCS_URL) + r"[^\s'\"`)>]*")


@dataclass(frozen=True)
class HelpLink:
    """A link into the docs, and where in the library it comes from."""

    url: str
    origin: str

    @property
    def page(self) -> str:
        """The page's path below the site root, without slashes: '' is the home page."""
        return urlsplit(self.url).path.removeprefix(urlsplit(DOCS_URL).path).strip("/")

    @property
    def anchor(self) -> str:
        return urlsplit(self.url).fragment


def _help_url_calls(path: Path) -> Iterator[HelpLink | str]:
    """Yield the link of each ``help_url(page, anchor)`` call, or a complaint if it is dynamic."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name != "help_url":
            continue
        where = f"{path.name}:{node.lineno}"
        values = [
            arg.value
            for arg in node.args
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
        ]
        if len(node.args) == 2 and len(values) == 2 and not node.keywords:
            page, anchor = values
            yield HelpLink(f"{DOCS_URL}{page}/#{anchor}", where)
        else:
            yield f"{where}: help_url() must get two string literals so this test can check it"


def _literal_links(path: Path) -> Iterator[HelpLink]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        for match in LITERAL_URL.finditer(line):
            yield HelpLink(match.group(), f"{path.name}:{number}")


def _error_classes() -> Iterator[type[DeviceGuardError]]:
    for module in pkgutil.iter_modules(onnx_device_guard.__path__):
        if module.name != "__main__":  # importing it would run the command line
            importlib.import_module(f"onnx_device_guard.{module.name}")
    pending: list[type[DeviceGuardError]] = [DeviceGuardError]
    while pending:
        cls = pending.pop()
        yield cls
        pending.extend(cls.__subclasses__())


def _all_links() -> tuple[list[HelpLink], list[str]]:
    links: list[HelpLink] = []
    problems: list[str] = []
    for path in SOURCES:
        for found in _help_url_calls(path):
            if isinstance(found, str):
                problems.append(found)
            else:
                links.append(found)
        links.extend(_literal_links(path))
    for cls in _error_classes():
        links.append(HelpLink(cls.default_help_url, f"{cls.__qualname__}.default_help_url"))
    return links, problems


LINKS, DYNAMIC_CALLS = _all_links()
# One test per address; the first place it comes from names it in failures.
UNIQUE_LINKS = list({link.url: link for link in reversed(LINKS)}.values())


class _Ids(HTMLParser):
    """Collect the ``id`` of every element of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids.update(value for name, value in attrs if name == "id" and value)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built with ``mkdocs build --strict`` into a temporary folder."""
    pytest.importorskip(
        "mkdocs", reason="mkdocs is not installed; install the 'docs' dependency group"
    )
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}")
    return site


def _page_ids(site: Path, page: str) -> set[str]:
    parser = _Ids()
    parser.feed((site / page / "index.html").read_text(encoding="utf-8"))
    return parser.ids


class TestHelpLinks:
    def test_links_found(self) -> None:
        """The scan finds the links the errors are known to use, so it is not vacuous."""
        anchors = {link.anchor for link in LINKS}
        assert {
            "no-data-transfer-registered",
            "device-id-mismatch",
            "sessions-on-different-gpus",
            "bad-arguments",
            "guarded-factories",
        } <= anchors

    def test_help_url_calls_are_literal(self) -> None:
        """Every help_url() call names its page and anchor literally, so the scan sees them."""
        assert DYNAMIC_CALLS == []

    def test_site_url_is_docs_url(self) -> None:
        """The site is published where the links point."""
        config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
        match = re.search(r"^site_url:\s*(\S+)\s*$", config, re.MULTILINE)
        assert match is not None
        assert match.group(1) == DOCS_URL

    @pytest.mark.parametrize(
        "link", UNIQUE_LINKS, ids=lambda link: f"{link.page or 'index'}#{link.anchor}"
    )
    def test_link_resolves(self, link: HelpLink, built_site: Path) -> None:
        """The link's page exists in docs/ and its anchor, if any, exists in the built page."""
        source = DOCS / f"{link.page or 'index'}.md"
        assert source.is_file(), f"{link.origin}: {link.url} needs the page {source}"
        if link.anchor:
            assert link.anchor in _page_ids(built_site, link.page), (
                f"{link.origin}: {link.url} needs the anchor #{link.anchor} on {source.name}"
            )


class _Links(HTMLParser):
    """Every `href` and `src` of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.links += [value for name, value in attrs if name in ("href", "src") and value]


class TestNotFoundPage:
    def test_links_are_relative_to_the_site(self, built_site: Path) -> None:
        """The 404 page's own links work wherever the site is served (no site_url in them).

        Before: MkDocs wrote them from site_url, tying the page to one
        published version and breaking it on a local build.
        """
        parser = _Links()
        parser.feed((built_site / "404.html").read_text(encoding="utf-8"))
        own = [link for link in parser.links if link.startswith(DOCS_URL)]
        assert parser.links
        assert own == []
