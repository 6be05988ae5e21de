"""The docs' examples can be pasted: copy buttons give what a person types, and it runs."""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .browser import Browser, chromium
from .pasted import PAGES, ROOT, blocks, repl_error, typed

EXAMPLES = [(page, block) for page in PAGES for block in blocks(page)]


class TestPastedExamples:
    @pytest.mark.parametrize(
        "block",
        [block for _, block in EXAMPLES if block.startswith(">>> ")],
    )
    def test_each_python_block_compiles_when_pasted_into_the_repl(self, block: str) -> None:
        """Its prompts and output left out, a block compiles line by line as the REPL reads it."""
        assert repl_error(typed(block)) is None

    def test_no_block_installs_both_onnxruntime_packages(self) -> None:
        """onnxruntime and onnxruntime-gpu never share a block one copy would take."""
        both = [block for _, block in EXAMPLES if "[cpu]" in block and "[gpu]" in block]

        assert both == []

    def test_shell_lines_are_the_commands_alone(self) -> None:
        """The typed text of a shell block holds no prompt and no output line."""
        block = '$ pip install x \\\n    y\ninstalled x\n$ echo "$ HOME"\n$ HOME\n'

        assert typed(block) == 'pip install x \\\n    y\necho "$ HOME"\nHOME'


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built as `nox -s docs` builds it."""
    folder = tmp_path_factory.mktemp("site")
    environ = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), environ.get("PYTHONPATH", "")])
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(folder)],
        cwd=ROOT,
        env=environ,
        check=True,
        timeout=600,
    )
    return folder


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The site served on 127.0.0.1; its base address."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A headless Chromium; the tests are skipped where there is none."""
    executable = chromium()
    if executable is None:
        pytest.skip("needs chromium (apt-get install chromium)")
    opened = Browser(executable)
    try:
        yield opened
    finally:
        opened.close()


RECORD_COPIES = """
window.copied = [];
document.addEventListener("copy", () => {
  const el = document.activeElement;
  window.copied.push(el && "value" in el ? el.value : String(document.getSelection()));
}, true);
true
"""

BUTTON = """(() => {{
  const button = document.querySelectorAll("[data-clipboard-target]")[{index}];
  button.scrollIntoView({{block: "center"}});
  const box = button.getBoundingClientRect();
  const code = document.querySelector(button.dataset.clipboardTarget);
  return [box.x + box.width / 2, box.y + box.height / 2, code.textContent];
}})()"""


@pytest.mark.parametrize("page", ["index.html", "guide/index.html", "doctor/index.html"])
def test_copy_buttons_copy_what_a_person_types(browser: Browser, served: str, page: str) -> None:
    """In a real browser, each prompt block's copy button copies its commands alone."""
    browser.open(f"{served}/{page}", ready="document.querySelector('[data-clipboard-target]')")
    browser.evaluate(RECORD_COPIES)
    count = browser.evaluate("document.querySelectorAll('[data-clipboard-target]').length")
    checked = 0
    for index in range(count):
        x, y, shown = browser.evaluate(BUTTON.format(index=index))
        if not shown.lstrip().startswith(("$ ", ">>> ")):
            continue
        before = browser.evaluate("window.copied.length")
        browser.click(x, y)
        copied = browser.evaluate(f"window.copied[{before}]")

        assert copied == typed(shown.lstrip()), json.dumps([shown, copied])
        assert not copied.startswith(("$ ", ">>> "))
        if shown.lstrip().startswith(">>> "):
            assert repl_error(copied) is None
        checked += 1
    assert checked > 0
