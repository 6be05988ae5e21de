"""Development sessions: ``nox`` runs the defaults, ``nox -l`` lists them all."""

from __future__ import annotations

import re
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
PYTHONS = [
    match.group(1)
    for classifier in PYPROJECT["project"]["classifiers"]
    if (match := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", classifier))
]
# The CPU build of torch 2.13.0 that CI installs lies on local disk for this
# Python; on the others pip fetches the default (CUDA) build from PyPI.
MAIN_PYTHON = "3.11"
TORCH = "torch==2.13.0"

nox.options.default_venv_backend = "venv"
nox.options.error_on_missing_interpreters = True
# The newest Python binds a classmethod around a decorator differently (3.13
# no longer chains __get__), so the defaults test device_guard there too; its
# torch comes from PyPI (the CUDA build, about 3 GB on first install).
NEWEST_PYTHON = PYTHONS[-1]
nox.options.sessions = [
    f"tests-{MAIN_PYTHON}",
    f"tests-{NEWEST_PYTHON}",
    "lint",
    "typecheck",
    "docs",
]


def install_project(session: nox.Session, *groups: str) -> None:
    """Install torch first (so the project's range is already met), then the project."""
    session.install(TORCH)
    session.install("-e", ".")
    for group in groups:
        session.install(*nox.project.dependency_groups(PYPROJECT, group))


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the test suite, docstring and documentation examples included."""
    install_project(session, "test")
    session.run("pytest", *session.posargs)


@nox.session(python=MAIN_PYTHON)
def lint(session: nox.Session) -> None:
    """Check style and formatting with ruff."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=MAIN_PYTHON)
def typecheck(session: nox.Session) -> None:
    """Run mypy --strict over the package and the tests."""
    install_project(session, "typecheck")
    session.run("mypy", "--strict", "src", "tests")


@nox.session(python=MAIN_PYTHON)
def docs(session: nox.Session) -> None:
    """Build the documentation site with ``mkdocs build --strict`` (warnings fail it).

    ``nox -s docs -- serve`` serves it with live reload instead.
    """
    install_project(session, "docs")
    session.env["NO_MKDOCS_2_WARNING"] = "1"  # Material's notice about its successor
    if session.posargs == ["serve"]:
        session.run("mkdocs", "serve", "--strict")
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session(python=MAIN_PYTHON)
def bench(session: nox.Session) -> None:
    """Measure what the core, the guard and the import cost (not run by default).

    Pass options through: ``nox -s bench -- --output results.json`` or ``-- --quick``.
    """
    install_project(session)
    session.install("onnxruntime>=1.17")
    session.run("python", "benchmarks/bench.py", *session.posargs)
