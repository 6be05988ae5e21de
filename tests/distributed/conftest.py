"""Run only when named: ``pytest tests/distributed``, as ``nox -s distributed`` does.

Plain ``pytest`` (the ``tests`` session) leaves this folder's tests out, also
where ray and distributed are installed: their clusters take minutes. Named,
each test module skips itself where ray or distributed is missing. The remote
load times that ``TestManyConcurrentLoads`` measures are printed at the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_FIGURES = pytest.StashKey[list[str]]()


def _named(config: pytest.Config) -> bool:
    """Whether an argument of this run is this folder or something in it."""
    for arg in config.args:
        path = Path(arg.split("::")[0])
        for base in (config.invocation_params.dir, config.rootpath):
            full = (base / path).resolve()
            if full == HERE or HERE in full.parents:
                return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name.startswith("test_") and not _named(config):
        return True
    return None


@pytest.fixture(scope="session")
def figures(pytestconfig: pytest.Config) -> list[str]:
    """Lines to print at the end of the run."""
    return pytestconfig.stash.setdefault(_FIGURES, [])


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    lines = config.stash.get(_FIGURES, [])
    if lines:
        terminalreporter.section("remote loads, guarded and unguarded (issue 17)")
        for line in lines:
            terminalreporter.write_line(line)
