"""The ``onnx-device-guard`` command, run in-process through ``main(argv)``.

The few behaviours that only a real process shows (a closed pipe, a closed
stderr, ``python -m``) are in ``test_cli_processes.py``.
"""

from __future__ import annotations

import errno
import io
import json
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import onnxruntime
import pytest
import torch

from onnx_device_guard._cli import EXIT_STATUS, main
from onnx_device_guard._doctor.command import parse_provider

from . import doctor_models

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
PREFIX = "onnx-device-guard doctor: error: "

CPU_ONLY_MACHINE = not torch.cuda.is_available() and CUDA not in (
    onnxruntime.get_available_providers()
)
cpu_only_machine = pytest.mark.skipif(
    not CPU_ONLY_MACHINE, reason="expects torch and onnxruntime without CUDA"
)
gpu_machine = pytest.mark.skipif(
    CPU_ONLY_MACHINE
    or not torch.cuda.is_available()
    or CUDA not in onnxruntime.get_available_providers(),
    reason="needs torch and onnxruntime that both use CUDA",
)


def doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``doctor ARGV`` in-process; return the exit status, stdout and stderr."""
    code = main(["doctor", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def doctor_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    """Run ``doctor --json ARGV`` in-process; return the exit status and the parsed report."""
    code, out, _ = doctor(capsys, "--json", *argv)
    return code, json.loads(out)


def assert_one_line(err: str, pattern: str) -> None:
    """One line on stderr, the doctor's prefix, no traceback, matching ``pattern``."""
    assert err.count("\n") == 1, err
    assert err.startswith(PREFIX), err
    assert "Traceback" not in err
    assert re.search(pattern, err), err


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    """A folder with ``notes.onnx`` (text named like a model) and a folder without models."""
    (tmp_path / "notes.onnx").write_text("These are meeting notes, not weights.\n")
    (tmp_path / "no-models").mkdir()
    (tmp_path / "no-models" / "README.txt").write_text("no models here\n")
    return tmp_path


class TestDefaultRun:
    def test_checks_the_packaged_model_and_says_ok(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """No arguments: the tiny model is checked, the report ends in a verdict, exit 0."""
        code, out, err = doctor(capsys, "--device", "cpu")

        assert (code, err) == (0, "")
        assert "packaged tiny model" in out
        assert CPU in out
        assert f"onnx-device-guard      {metadata.version('onnx-device-guard')}" in out
        assert "\nOK: the session reads tensors on 'cpu'." in out

    def test_json_has_the_documented_keys(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--json prints one JSON object with the documented keys and types."""
        code, report = doctor_json(capsys, "--device", "cpu")

        assert code == 0
        assert isinstance(report["requested_device"], str)
        assert report["aligned_device"] == report["requested_device"]
        assert report["fell_back"] is False
        assert CPU in report["session_providers"]
        assert report["available_providers"] == onnxruntime.get_available_providers()
        assert any(
            dist["provides_module"] and dist["version"] == onnxruntime.__version__
            for dist in report["installed_distributions"]
        )
        assert report["inference_ok"] is True
        assert report["diagnosis"] == []


@cpu_only_machine
class TestCudaOnThisCpuMachine:
    def test_strict_exits_1(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--device cuda:0 --strict falls back to cpu and exits 1, saying why."""
        code, out, _ = doctor(capsys, "--device", "cuda:0", "--strict")

        assert code == 1
        assert "FALLBACK: 'cuda:0' -> 'cpu'." in out
        assert "pip install onnxruntime-gpu" in out
        assert "--strict: the device had to be changed, so the exit status is 1." in out
        # torch's side of it: a CPU-only build, or a CUDA build that sees no GPU.
        assert "CPU-only build" in out or "sees no CUDA device" in out

    def test_without_strict_exits_0_and_reports_the_fallback(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without --strict the fallback is reported in the JSON, exit 0."""
        code, report = doctor_json(capsys, "--device", "cuda:0")

        assert code == 0
        assert report["requested_device"] == "cuda:0"
        assert report["aligned_device"] == "cpu"
        assert report["fell_back"] is True
        assert report["inference_ok"] is True
        assert report["diagnosis"]
        assert [f["kind"] for f in report["findings"]] == [
            "no-gpu-provider-in-build",
            "torch-sees-no-cuda",
        ]

    def test_cpu_strict_exits_0(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--device cpu --strict needs no change: exit 0."""
        code, out, _ = doctor(capsys, "--device", "cpu", "--strict")

        assert code == 0
        assert "OK: the session reads tensors on 'cpu'." in out

    def test_cuda_requested_of_the_cpu_build(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Asking this CPU build for CUDA: not in the build, onnxruntime's warning shown."""
        code, report = doctor_json(capsys, "--device", "cuda", "--providers", CUDA, CPU)

        assert code == 0
        assert report["session_providers"] == [CPU]
        assert report["findings"][0]["kind"] == "provider-not-in-build"
        assert any(CUDA in message for message in report["onnxruntime_messages"])


class TestBadInput:
    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["{broken}/missing.onnx"], r"the path '.*missing\.onnx' does not exist"),
            (["/nonexistent_dir/"], r"the path '/nonexistent_dir/?' does not exist"),
            (["{broken}/no-models"], r"'.*no-models' is a directory with no \.onnx file in it"),
            (["{broken}/notes.onnx"], r"'.*notes\.onnx' is not an ONNX model: onnxruntime"),
            (["--device", "gpu:0"], r"--device 'gpu:0' is not a device torch understands"),
            (["--providers", "CUDAExecutonProvider", CPU], rf"did you mean '{CUDA}'\?"),
            (["--providers", f"{CUDA}:device_id"], "KEY=VALUE pairs"),
            (["--providers", CPU, "model.onnx"], "put the models before --providers"),
            (["--providers", ""], "--providers got an empty name"),
            (["/tmp/" + "a" * 5000 + ".onnx"], "longer than the file system allows"),
            (["/dev/null"], "is not a regular file"),
        ],
        ids=[
            "missing",
            "missing-folder",
            "no-models",
            "not-onnx",
            "bad-device",
            "provider-typo",
            "provider-options",
            "model-after-providers",
            "empty-provider",
            "path-too-long",
            "device-file",
        ],
    )
    def test_exits_2_with_one_line(
        self, broken: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Bad input: exit 2, nothing on stdout, one line on stderr naming the problem."""
        code, out, err = doctor(capsys, *(arg.format(broken=broken) for arg in argv))

        assert (code, out) == (2, "")
        assert_one_line(err, message)

    def test_empty_model_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An empty .onnx file is bad input."""
        (tmp_path / "empty.onnx").touch()

        code, _, err = doctor(capsys, str(tmp_path / "empty.onnx"))

        assert code == 2
        assert_one_line(err, "is empty, not an ONNX model")

    def test_a_device_beyond_torch_is_said_once(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--device cuda:999: the value is quoted once, not twice."""
        code, _, err = doctor(capsys, "--device", "cuda:999")

        assert code == 2
        assert_one_line(err, "has device index 999, which torch cannot address")
        assert err.count("cuda:999") == 1, err

    def test_device_id_on_the_cpu_provider(self, capsys: pytest.CaptureFixture[str]) -> None:
        """CPUExecutionProvider:device_id=1 is a mistake, not an option to pass on."""
        code, out, err = doctor(capsys, "--providers", f"{CPU}:device_id=1")

        assert (code, out) == (2, "")
        assert_one_line(err, f"{CPU} runs on no device of its own and takes no device_id")

    def test_without_onnxruntime(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """No onnxruntime module and none listed by pip: how to install one, exit 2."""
        for name in [name for name in sys.modules if name.split(".")[0] == "onnxruntime"]:
            monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.setattr(metadata, "distributions", lambda **kwargs: iter(()))

        code, out, err = doctor(capsys)

        assert (code, out) == (2, "")
        assert_one_line(err, "onnxruntime is not installed; install exactly one")

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

    def test_the_opset_message_keeps_its_useful_part(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Opset 999: the C++ signature is cut, the end of onnxruntime's message is kept."""
        model = doctor_models.future_opset(tmp_path / "future.onnx")

        code, _, err = doctor(capsys, str(model))

        assert code == 2
        assert_one_line(err, "Opset 999 is under development")
        assert "Current official support for domain ai.onnx is till opset" in err
        assert "std::" not in err
        assert "ValidateOpsetForDomain" not in err


class TestJsonOnBadInput:
    def test_a_model_that_cannot_be_checked_is_an_error_object(
        self, broken: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--json on one bad model: an error object on stdout, one line on stderr, exit 2."""
        code, out, err = doctor(capsys, "--json", str(broken / "notes.onnx"))
        report = json.loads(out)

        assert code == 2
        assert report["verdict"] == "error"
        assert report["exit_code"] == 2
        assert report["model"].endswith("notes.onnx")
        assert "is not an ONNX model" in report["error"]
        assert report["summary"] == f"ERROR: {report['error']}"
        assert_one_line(err, "is not an ONNX model")

    def test_a_missing_model_too(self, broken: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--json on a path that does not exist: still JSON."""
        code, report = doctor_json(capsys, str(broken / "missing.onnx"))

        assert (code, report["verdict"]) == (2, "error")

    def test_a_bad_option_is_stderr_only(self, capsys: pytest.CaptureFixture[str]) -> None:
        """An option refused before any model is read: nothing on stdout, as documented."""
        code, out, err = doctor(capsys, "--json", "--device", "gpu:0")

        assert (code, out) == (2, "")
        assert_one_line(err, "--device 'gpu:0'")


class TestHelpAndVersion:
    def test_help_documents_the_exit_status(self, capsys: pytest.CaptureFixture[str]) -> None:
        """doctor --help lists every exit status, and the environment variables it reads."""
        with pytest.raises(SystemExit) as exited:
            main(["doctor", "--help"])

        text = capsys.readouterr().out
        assert exited.value.code == 0
        assert "exit status:" in text
        for status in ("0  the session", "1  --strict", "2  bad input", "3  the test", "4  incon"):
            assert f"    {status}" in text
        assert "ONNX_DEVICE_GUARD_RESOLUTION_MODE=fail acts like --strict" in text
        assert "--timeout SECONDS" in text

    def test_the_exit_status_table_is_aligned(self) -> None:
        """Every status ends in the same column, 141 and 130 included, and texts line up."""
        rows = [line for line in EXIT_STATUS.splitlines() if re.match(r"^ *\d+  \S", line)]

        assert [row.split()[0] for row in rows] == ["0", "1", "2", "3", "4", "130", "141"]
        assert {row.index(row.split()[0]) + len(row.split()[0]) for row in rows} == {5}
        assert {len(row) - len(row[5:].lstrip()) for row in rows} == {7}

    def test_version(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--version prints the installed distribution's version."""
        with pytest.raises(SystemExit):
            main(["--version"])

        assert capsys.readouterr().out == (
            f"onnx-device-guard {metadata.version('onnx-device-guard')}\n"
        )


class TestProviders:
    def test_options_are_comma_separated_pairs(self) -> None:
        """NAME:K=V,K=V gives the name and a dict of string options."""
        assert parse_provider(f"{CUDA}:device_id=1, arena_extend_strategy=kSameAsRequested") == (
            CUDA,
            {"device_id": "1", "arena_extend_strategy": "kSameAsRequested"},
        )

    def test_provider_options_reach_the_session(
        self, tiny_model_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """EP:KEY=VALUE options are requested and reported."""
        code, report = doctor_json(
            capsys, str(tiny_model_path), "--providers", f"{CPU}:use_arena=0"
        )

        assert code == 0
        assert report["requested_provider_options"] == {CPU: {"use_arena": "0"}}
        assert report["model"] == str(tiny_model_path)

    @pytest.mark.cuda
    @gpu_machine
    def test_cuda_session_reads_cuda_tensors(self, capsys: pytest.CaptureFixture[str]) -> None:
        """On a GPU machine, cuda:0 stays and the IO-bound inference completes."""
        code, report = doctor_json(capsys, "--device", "cuda:0", "--providers", CUDA, CPU)

        assert code == 0, report["diagnosis"]
        assert report["aligned_device"] == "cuda:0"
        assert report["inference"]["detail"].startswith("run_with_iobinding on cuda:0")


class TestStandardOutput:
    def test_a_full_device(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """stdout on a full disk: one line saying why, exit 2."""

        class Full(io.StringIO):
            def write(self, text: str) -> int:
                raise OSError(errno.ENOSPC, "No space left on device")

            def fileno(self) -> int:
                raise io.UnsupportedOperation("no descriptor")

        monkeypatch.setattr(sys, "stdout", Full())

        code = main(["doctor", "--device", "cpu"])

        assert code == 2
        assert capsys.readouterr().err == (
            f"{PREFIX}cannot write the report to stdout: No space left on device\n"
        )

    def test_a_closed_stdout_is_a_write_error(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`>&-` (Python's stdout is None): one line, one space after 'error:', exit 2."""
        monkeypatch.setattr(sys, "stdout", None)

        code = main(["doctor", "--device", "cpu"])

        assert code == 2
        assert capsys.readouterr().err == f"{PREFIX}cannot write the report: stdout is closed\n"

    def test_a_non_ascii_path_on_an_ascii_terminal(
        self, tmp_path: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An ASCII stdout: the path is printed with escapes, the check runs."""
        model = tmp_path / "modèle.onnx"
        model.write_bytes(tiny_model_path.read_bytes())
        raw = io.BytesIO()
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="ascii"))

        code = main(["doctor", str(model), "--device", "cpu"])
        sys.stdout.flush()

        assert code == 0
        assert b"mod\\xe8le.onnx" in raw.getvalue()


class TestMisspeltOption:
    @pytest.mark.parametrize(
        ("typed", "meant"),
        [("--devcie", "--device"), ("--jsno", "--json"), ("--stirct", "--strict")],
    )
    def test_the_closest_option_is_suggested(
        self, typed: str, meant: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A misspelt option: one line naming the closest one and pointing at doctor --help."""
        with pytest.raises(SystemExit) as exited:
            main(["doctor", typed, "cuda"])

        assert exited.value.code == 2
        assert capsys.readouterr().err == (
            f"onnx-device-guard: error: unknown option {typed!r}; did you mean {meant!r}? "
            "(see 'onnx-device-guard doctor --help')\n"
        )

    def test_an_option_like_none_points_at_doctor_help(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Nothing close: argparse's own words, still pointing at doctor --help."""
        with pytest.raises(SystemExit):
            main(["doctor", "--zzzzzz"])

        assert "(see 'onnx-device-guard doctor --help')" in capsys.readouterr().err
