"""Regressions of the doctor's command line: issue 9's items 6 to 9 and its smaller CLI items.

Each test names the item it covers. The ones about file descriptors and
encodings run the installed command in a subprocess, in parallel.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from onnx_device_guard import ModelInputError
from onnx_device_guard._cli import main
from onnx_device_guard._doctor.probe import import_onnxruntime

from . import doctor_models

ONE_LINE_PREFIX = "onnx-device-guard doctor: error: "


def script() -> str:
    found = shutil.which("onnx-device-guard", path=str(Path(sys.executable).parent))
    assert found, "onnx-device-guard is not installed next to this Python: pip install -e ."
    return found


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the tiny model under a non-ASCII name, and a FIFO."""
    folder = tmp_path_factory.mktemp("places")
    source = Path(__file__).resolve().parents[1] / "src" / "onnx_device_guard" / "data"
    shutil.copy(source / "tiny.onnx", folder / "modèle.onnx")
    os.mkfifo(folder / "pipe.onnx")
    return folder


def _shell(command: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **kwargs,
    )


@pytest.fixture(scope="module")
def runs(places: Path) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """The subprocess runs, started together."""
    doctor = f"'{script()}' doctor --device cpu"
    ascii_env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    commands: dict[str, tuple[str, dict[str, Any]]] = {
        # The read end is gone before the report is written: `doctor | head -0`.
        "closed-pipe": (f"{doctor} | (exec 0<&-; sleep 0)", {}),
        "full-device": (f"{doctor} > /dev/full", {}),
        "stderr-closed": (f"{doctor} '{places / 'missing.onnx'}' 2>&-", {}),
        "ascii": (f"{doctor} '{places / 'modèle.onnx'}'", {"env": ascii_env}),
        "fifo": (f"{doctor} '{places / 'pipe.onnx'}'", {}),
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        yield {
            name: pool.submit(_shell, command, **kwargs)
            for name, (command, kwargs) in commands.items()
        }


def result(runs: dict[str, Future[subprocess.CompletedProcess[str]]], name: str) -> Any:
    return runs[name].result()


def assert_one_line(err: str, fragment: str) -> None:
    assert err.count("\n") == 1, err
    assert err.startswith(ONE_LINE_PREFIX), err
    assert fragment in err, err
    assert "Traceback" not in err


class TestItem6NoTracebacks:
    def test_a_path_too_long_for_the_file_system(self, capsys: pytest.CaptureFixture[str]) -> None:
        """OSError ENAMETOOLONG from stat: exit 2, one line, not a traceback and exit 1."""
        assert main(["doctor", "/tmp/" + "a" * 5000 + ".onnx"]) == 2

        assert_one_line(capsys.readouterr().err, "longer than the file system allows")

    def test_a_folder_without_search_permission(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """PermissionError from stat (root ignores chmod, so stat is made to refuse): exit 2."""
        model = tmp_path / "locked" / "model.onnx"
        real_stat = os.stat

        def refuse(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            if str(path).startswith(str(tmp_path / "locked")):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_stat(path, *args, **kwargs)

        monkeypatch.setattr(os, "stat", refuse)

        assert main(["doctor", str(model)]) == 2
        assert_one_line(capsys.readouterr().err, "permission denied")

    def test_a_folder_that_cannot_be_listed(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """PermissionError from listing a folder: one error entry, exit 2."""

        def refuse(path: Any) -> Any:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))

        monkeypatch.setattr(os, "scandir", refuse)

        assert main(["doctor", str(tmp_path)]) == 2
        assert_one_line(capsys.readouterr().err, "permission denied")

    def test_a_closed_pipe_ends_quietly(self, runs: Any) -> None:
        """`doctor | head -0`: nothing on stderr (no 'Exception ignored'), status 141."""
        done = result(runs, "closed-pipe")

        assert done.stderr == ""
        # sh reports the last command of the pipeline; run the doctor alone to see its status.
        read, write = os.pipe()
        os.close(read)
        try:
            alone = subprocess.run(
                [script(), "doctor", "--device", "cpu"],
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
                check=False,
            )
        finally:
            os.close(write)
        assert (alone.returncode, alone.stderr) == (141, "")

    def test_a_full_device(self, runs: Any) -> None:
        """`> /dev/full`: one line saying why, exit 2."""
        done = result(runs, "full-device")

        assert done.returncode == 2
        assert_one_line(done.stderr, "cannot write the report to stdout: No space left on device")

    def test_an_onnxruntime_whose_import_raises_something_else(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A broken onnxruntime raising RuntimeError on import: ModelInputError, so exit 2."""
        package = tmp_path / "onnxruntime"
        package.mkdir()
        (package / "__init__.py").write_text("raise RuntimeError('DLL initialisation failed')\n")
        for name in [name for name in sys.modules if name.split(".")[0] == "onnxruntime"]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.syspath_prepend(str(tmp_path))

        with pytest.raises(ModelInputError, match="importing it raised RuntimeError: DLL"):
            import_onnxruntime()

    def test_a_non_ascii_path_on_an_ascii_terminal(self, runs: Any) -> None:
        """PYTHONIOENCODING=ascii: the path is printed with escapes, the check runs."""
        done = result(runs, "ascii")

        assert done.returncode == 0, done.stderr
        assert "mod\\xe8le.onnx" in done.stdout
        assert done.stderr == ""


class TestItem7NotARegularFile:
    def test_a_fifo_is_refused_without_opening_it(self, runs: Any) -> None:
        """A FIFO as MODEL: exit 2 'not a regular file' at once, not a hang."""
        done = result(runs, "fifo")

        assert done.returncode == 2
        assert_one_line(done.stderr, "is not a regular file")

    def test_a_device_file(self, capsys: pytest.CaptureFixture[str]) -> None:
        """/dev/null is a character device: refused the same way."""
        assert main(["doctor", os.devnull]) == 2
        assert_one_line(capsys.readouterr().err, "is not a regular file")


class TestItem8InputsTooLarge:
    def test_a_tiny_model_with_a_huge_static_input(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An 81-byte-class model with a [20000, 20000] input: inconclusive, exit 4."""
        model = doctor_models.static_input(tmp_path / "huge.onnx", [20000, 20000])

        assert main(["doctor", str(model)]) == 4
        text = capsys.readouterr().out
        assert "inconclusive: inputs too large" in text
        assert "--max-input-mib 1526" in text


class TestItem9FileNameNotUtf8:
    def test_the_model_is_loaded_by_its_bytes(
        self, tmp_path: Path, tiny_model_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A valid model named with a Latin-1 byte is checked; its name shows as \\xe9."""
        name = os.fsdecode(b"caf\xe9.onnx")
        shutil.copy(tiny_model_path, tmp_path / name)

        assert main(["doctor", str(tmp_path / name), "--device", "cpu"]) == 0
        out = capsys.readouterr().out
        assert "caf\\xe9.onnx" in out
        assert "OK: the session reads tensors on 'cpu'." in out


class TestSmallerItems:
    @pytest.mark.parametrize(
        "argv",
        [["doctor", "--bogus"], ["doctor", "--device"], ["nothing"], [], ["doctor", ""]],
        ids=["unknown-option", "missing-value", "unknown-command", "no-command", "empty-path"],
    )
    def test_usage_errors_are_one_line(
        self, argv: list[str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """argparse's errors: one line on stderr pointing to --help, exit 2."""
        with pytest.raises(SystemExit) as exited:
            main(argv)

        err = capsys.readouterr().err
        assert exited.value.code == 2
        assert err.count("\n") == 1, err
        assert err.startswith("onnx-device-guard")
        assert err.rstrip().endswith("--help')")

    def test_an_empty_provider_name(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--providers '': a message about an empty name, not about a missing ':'."""
        assert main(["doctor", "--providers", ""]) == 2

        err = capsys.readouterr().err
        assert_one_line(err, "--providers got an empty name")
        assert "before ':'" not in err

    def test_the_opset_message_keeps_its_useful_part(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Opset 999: the C++ signature is cut, the end of onnxruntime's message is kept."""
        model = doctor_models.future_opset(tmp_path / "future.onnx")

        assert main(["doctor", str(model)]) == 2
        err = capsys.readouterr().err
        assert_one_line(err, "Opset 999 is under development")
        assert "Current official support for domain ai.onnx is till opset" in err
        assert "std::" not in err
        assert "ValidateOpsetForDomain" not in err

    def test_with_stderr_closed_the_error_does_not_go_to_stdout(self, runs: Any) -> None:
        """`2>&-`: exit 2, and stdout stays empty."""
        done = result(runs, "stderr-closed")

        assert (done.returncode, done.stdout) == (2, "")
