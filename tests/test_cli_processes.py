"""The command as a separate process: what only a real process and its descriptors show.

Each of these starts Python and imports torch, so they are few, and they
start together.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

Runs = dict[str, "Future[subprocess.CompletedProcess[str]]"]


def script() -> str:
    """The installed ``onnx-device-guard`` console script, next to this Python."""
    found = shutil.which("onnx-device-guard", path=str(Path(sys.executable).parent))
    assert found, "onnx-device-guard is not installed next to this Python: pip install -e ."
    return found


def _shell(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, timeout=300, check=False
    )


def _closed_stdout() -> subprocess.CompletedProcess[str]:
    """The doctor alone with a pipe whose read end is closed: its own exit status."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [script(), "doctor", "--device", "cpu"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        os.close(write)


def _reader_leaves_early(folder: Path) -> subprocess.CompletedProcess[str]:
    """The doctor's report on `folder` into a pipe whose reader takes 10 bytes and leaves.

    Unbuffered, as under PYTHONUNBUFFERED=1: one write of the whole report, which the
    pipe takes only in part once the reader has gone.
    """
    read, write = os.pipe()
    environ = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [script(), "doctor", "--device", "cpu", "--json", str(folder)]
    with subprocess.Popen(
        command, stdout=write, stderr=subprocess.PIPE, text=True, env=environ
    ) as doctor:
        os.close(write)
        with os.fdopen(read, "rb", buffering=0) as reader:
            reader.read(10)  # the report has started: the doctor is inside its one write
        stderr = doctor.communicate(timeout=300)[1]
    return subprocess.CompletedProcess(command, doctor.returncode, "", stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: Path) -> Iterator[Runs]:
    """The processes, started together; each test waits for its own."""
    missing = tmp_path_factory.mktemp("missing") / "missing.onnx"
    many = tmp_path_factory.mktemp("many")  # a JSON report of 160 KB, over a pipe's 64 KiB
    for number in range(100):
        shutil.copy(tiny_model_path, many / f"m{number}.onnx")
    doctor = f"'{script()}' doctor --device cpu"
    commands = {
        "module": f"'{sys.executable}' -m onnx_device_guard doctor --device cpu",
        "stderr-closed": f"{doctor} '{missing}' 2>&-",
        "stdout-closed": f"{doctor} >&-",
    }
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures: Runs = {name: pool.submit(_shell, line) for name, line in commands.items()}
        futures["closed-stdout"] = pool.submit(_closed_stdout)
        futures["reader-leaves"] = pool.submit(_reader_leaves_early, many)
        yield futures


class TestProcess:
    def test_runs_as_a_module(self, runs: Runs) -> None:
        """python -m onnx_device_guard doctor is the same command."""
        done = runs["module"].result()

        assert done.returncode == 0, done.stderr
        assert "OK: the session reads tensors on 'cpu'." in done.stdout

    def test_a_closed_pipe_ends_quietly(self, runs: Runs) -> None:
        """`doctor | head -0`: nothing on stderr (no 'Exception ignored'), status 141."""
        done = runs["closed-stdout"].result()

        assert (done.returncode, done.stderr) == (141, "")

    def test_a_reader_leaving_partway_is_a_broken_pipe(self, runs: Runs) -> None:
        """`doctor many | head -c 10`: status 141, quietly. Before: 0, the report's rest lost
        without a word, when an unbuffered stdout's write was taken only in part."""
        done = runs["reader-leaves"].result()

        assert (done.returncode, done.stderr) == (141, "")

    def test_a_closed_stdout_is_a_write_error_not_a_broken_pipe(self, runs: Runs) -> None:
        """`>&-`: a write error, as `cat` gives one: one line on stderr and exit 2, not 141."""
        done = runs["stdout-closed"].result()

        assert (done.returncode, done.stderr) == (
            2,
            "onnx-device-guard doctor: error: cannot write the report: stdout is closed\n",
        )

    def test_with_stderr_closed_the_error_does_not_go_to_stdout(self, runs: Runs) -> None:
        """`2>&-`: exit 2, and stdout stays empty."""
        done = runs["stderr-closed"].result()

        assert (done.returncode, done.stdout) == (2, "")
