"""Run the scripts of docs/distributed.md (Ray, Dask, process pools) and check what they print.

The documentation run (Sybil) skips them: each starts a cluster. Here each
block marked ``<!-- distributed-example -->`` runs as a script in a fresh
folder that also holds the files marked ``<!-- distributed-file: NAME -->``,
and its stdout must equal the ``text`` block that follows it. A marker
``<!-- distributed-stderr: PATTERN -->`` before the script asks for a match
of that regular expression in its stderr too (a worker's fallback warning,
forwarded to the driver).

The scripts run as a user would run them: with Ray's defaults, so without
the ``RAY_DEDUP_LOGS=0`` that test_distributed.py sets for itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the distributed nox session installs ray")
pytest.importorskip("distributed", reason="the distributed nox session installs it")

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "distributed.md"
TEXT = PAGE.read_text()
FENCE = r"(?:<!--[^>]*-->\s*)*```python\n(?P<code>.*?)```"
FILES = dict(
    re.findall(r"<!-- distributed-file: (\S+) -->\s*" + FENCE.replace("(?P<code>", "("), TEXT, re.S)
)
EXAMPLE = re.compile(
    r"<!-- distributed-example -->\s*"
    r"(?:<!-- distributed-stderr: (?P<stderr>.*?) -->\s*)?"
    + FENCE
    + r"\s*```text\n(?P<out>.*?)```",
    re.S,
)
EXAMPLES = [(m["code"], m["out"], m["stderr"] or "") for m in EXAMPLE.finditer(TEXT)]


PARALLEL = 2
"""Scripts run at once: each waits mostly on its cluster starting and stopping."""


def test_page_has_examples() -> None:
    assert len(EXAMPLES) >= 5
    assert "detector.py" in FILES
    assert any(stderr for *_, stderr in EXAMPLES)


def run_script(folder: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as a script in ``folder``, beside the page's files."""
    folder.mkdir()
    for name, content in FILES.items():
        (folder / name).write_text(content)
    script = folder / "example.py"
    script.write_text(code)
    env = {key: value for key, value in os.environ.items() if key != "RAY_DEDUP_LOGS"}
    env["PYTHONPATH"] = os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture(scope="module")
def results(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[Future[subprocess.CompletedProcess[str]]]]:
    """Every example started, ``PARALLEL`` at a time, in the order of the page."""
    root = tmp_path_factory.mktemp("examples")
    with ThreadPoolExecutor(PARALLEL) as pool:
        yield [
            pool.submit(run_script, root / f"example-{index + 1}", code)
            for index, (code, _, _) in enumerate(EXAMPLES)
        ]


@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=lambda i: f"example-{i + 1}")
def test_example_prints_what_the_page_says(
    results: list[Future[subprocess.CompletedProcess[str]]], index: int
) -> None:
    _, expected, stderr = EXAMPLES[index]
    result = results[index].result()
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == expected.strip(), result.stderr[-3000:]
    assert re.search(stderr, result.stderr), result.stderr[-3000:]
