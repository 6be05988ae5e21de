"""The ``onnx-device-guard`` command: the installed script run as a user runs it, and main()."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import onnxruntime
import pytest
import torch

from onnx_device_guard import __version__
from onnx_device_guard._cli import main, parse_provider

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"

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

# A Python that cannot import onnxruntime, and whose pip lists none, runs the command.
WITHOUT_ONNXRUNTIME = (
    "import sys, importlib.metadata as m; "
    "sys.modules['onnxruntime'] = None; "
    "m.distributions = lambda **kwargs: iter(()); "
    "from onnx_device_guard._cli import main; "
    "sys.exit(main(sys.argv[1:]))"
)


def script() -> str:
    """The installed ``onnx-device-guard`` console script, next to this Python."""
    found = shutil.which("onnx-device-guard", path=str(Path(sys.executable).parent))
    assert found, "onnx-device-guard is not installed next to this Python: pip install -e ."
    return found


def invocations(broken: Path) -> dict[str, list[str]]:
    """Every subprocess the tests run, by name; each one imports torch, so they are few."""
    doctor = [script(), "doctor"]
    return {
        "default": doctor,
        "json": [*doctor, "--json"],
        "cuda-strict": [*doctor, "--device", "cuda:0", "--strict"],
        "cpu-strict": [*doctor, "--device", "cpu", "--strict"],
        "module": [sys.executable, "-m", "onnx_device_guard", "doctor", "--device", "cpu"],
        "typo": [*doctor, "--providers", "CUDAExecutonProvider", CPU],
        "missing": [*doctor, str(broken / "missing.onnx")],
        "directory": [*doctor, str(broken / "no-models")],
        "not-onnx": [*doctor, str(broken / "notes.onnx")],
        "bad-device": [*doctor, "--device", "gpu:0"],
        "no-onnxruntime": [sys.executable, "-c", WITHOUT_ONNXRUNTIME, "doctor"],
    }


class Runs:
    """The results of :func:`invocations`, started all at once and awaited one by one."""

    def __init__(self, futures: dict[str, Future[subprocess.CompletedProcess[str]]]) -> None:
        self._futures = futures

    def __getitem__(self, name: str) -> subprocess.CompletedProcess[str]:
        return self._futures[name].result()


def _run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ``notes.onnx`` (text named like a model), no ``missing.onnx``, and a
    subfolder ``no-models`` without any model."""
    folder = tmp_path_factory.mktemp("broken")
    (folder / "notes.onnx").write_text("These are meeting notes, not weights.\n")
    (folder / "no-models").mkdir()
    (folder / "no-models" / "README.txt").write_text("no models here\n")
    return folder


@pytest.fixture(scope="module")
def runs(broken: Path) -> Iterator[Runs]:
    """The command's runs, in parallel: the module waits for the slowest, not their sum."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield Runs({name: pool.submit(_run, argv) for name, argv in invocations(broken).items()})


class TestDefaultRun:
    def test_checks_the_packaged_model_and_says_ok(self, runs: Runs) -> None:
        """No arguments: the tiny model is checked, the report ends in a verdict, exit 0."""
        result = runs["default"]

        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        assert "packaged tiny model" in result.stdout
        assert CPU in result.stdout
        assert f"onnx-device-guard    {__version__}" in result.stdout
        assert "\nOK: the session reads tensors on" in result.stdout

    def test_json_has_the_documented_keys(self, runs: Runs) -> None:
        """--json prints one JSON object with the documented keys and types."""
        result = runs["json"]
        report = json.loads(result.stdout)

        assert result.returncode == 0, result.stderr
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

    def test_runs_as_a_module(self, runs: Runs) -> None:
        """python -m onnx_device_guard doctor is the same command."""
        result = runs["module"]

        assert result.returncode == 0, result.stderr
        assert "OK: the session reads tensors on 'cpu'." in result.stdout


@cpu_only_machine
class TestCudaOnThisCpuMachine:
    def test_strict_exits_1(self, runs: Runs) -> None:
        """--device cuda:0 --strict falls back to cpu and exits 1, saying why."""
        result = runs["cuda-strict"]

        assert result.returncode == 1, result.stderr
        assert "FALLBACK: 'cuda:0' -> 'cpu'." in result.stdout
        assert "pip install onnxruntime-gpu" in result.stdout
        # torch's side of it: a CPU-only build, or a CUDA build that sees no GPU.
        assert "CPU-only build" in result.stdout or "sees no CUDA device" in result.stdout

    def test_without_strict_exits_0_and_reports_the_fallback(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without --strict the fallback is reported in the JSON, exit 0 (run in-process)."""
        code = main(["doctor", "--device", "cuda:0", "--json"])
        report: dict[str, Any] = json.loads(capsys.readouterr().out)

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

    def test_cpu_strict_exits_0(self, runs: Runs) -> None:
        """--device cpu --strict needs no change: exit 0."""
        result = runs["cpu-strict"]

        assert result.returncode == 0, result.stderr
        assert "OK: the session reads tensors on 'cpu'." in result.stdout


class TestBadInput:
    @pytest.mark.parametrize(
        ("run", "message"),
        [
            ("missing", r"model file '.*missing\.onnx' does not exist"),
            ("directory", r"'.*no-models' is a directory with no \.onnx file in it"),
            ("not-onnx", r"'.*notes\.onnx' is not an ONNX model: onnxruntime cannot parse it"),
            ("bad-device", r"--device 'gpu:0' is not a device torch understands"),
            ("no-onnxruntime", r"onnxruntime is not installed; install exactly one"),
            (
                "typo",
                rf"unknown execution provider 'CUDAExecutonProvider'; did you mean '{CUDA}'\?",
            ),
        ],
    )
    def test_exits_2_with_one_line(self, runs: Runs, run: str, message: str) -> None:
        """Bad input: exit 2, nothing on stdout, one line on stderr naming the problem."""
        result = runs[run]

        assert result.returncode == 2
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("onnx-device-guard doctor: error: ")
        assert "Traceback" not in result.stderr
        assert re.search(message, result.stderr), result.stderr


class TestMainInProcess:
    def test_help_documents_the_exit_status(self, capsys: pytest.CaptureFixture[str]) -> None:
        """doctor --help lists every exit status."""
        with pytest.raises(SystemExit) as exited:
            main(["doctor", "--help"])

        text = capsys.readouterr().out
        assert exited.value.code == 0
        assert "exit status:" in text
        for line in ("  0  the session", "  1  --strict", "  2  bad input", "  3  the test"):
            assert line in text

    def test_version(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--version prints the package version."""
        with pytest.raises(SystemExit):
            main(["--version"])

        assert capsys.readouterr().out == f"onnx-device-guard {__version__}\n"

    def test_empty_model_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An empty .onnx file is bad input."""
        (tmp_path / "empty.onnx").touch()

        assert main(["doctor", str(tmp_path / "empty.onnx")]) == 2
        assert "is empty, not an ONNX model" in capsys.readouterr().err

    def test_model_swallowed_by_providers(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A model path after --providers gets a hint instead of 'unknown provider'."""
        assert main(["doctor", "--providers", CPU, "model.onnx"]) == 2
        assert "put the models before --providers" in capsys.readouterr().err

    def test_malformed_provider_options(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Provider options must be KEY=VALUE pairs."""
        assert main(["doctor", "--providers", f"{CUDA}:device_id"]) == 2
        assert "KEY=VALUE pairs" in capsys.readouterr().err

    def test_provider_options_reach_the_session(
        self, tiny_model_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """EP:KEY=VALUE options are requested and reported."""
        code = main(["doctor", str(tiny_model_path), "--providers", f"{CPU}:use_arena=0", "--json"])
        report: dict[str, Any] = json.loads(capsys.readouterr().out)

        assert code == 0
        assert report["requested_provider_options"] == {CPU: {"use_arena": "0"}}
        assert report["model"] == str(tiny_model_path)

    @cpu_only_machine
    def test_cuda_requested_of_the_cpu_build(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Asking this CPU build for CUDA: not in the build, onnxruntime's warning shown."""
        code = main(["doctor", "--device", "cuda", "--providers", CUDA, CPU, "--json"])
        report: dict[str, Any] = json.loads(capsys.readouterr().out)

        assert code == 0
        assert report["session_providers"] == [CPU]
        assert report["findings"][0]["kind"] == "provider-not-in-build"
        assert any(CUDA in message for message in report["onnxruntime_messages"])

    @pytest.mark.cuda
    @gpu_machine
    def test_cuda_session_reads_cuda_tensors(self, capsys: pytest.CaptureFixture[str]) -> None:
        """On a GPU machine, cuda:0 stays and the IO-bound inference completes."""
        code = main(["doctor", "--device", "cuda:0", "--providers", CUDA, CPU, "--json"])
        report: dict[str, Any] = json.loads(capsys.readouterr().out)

        assert code == 0, report["diagnosis"]
        assert report["aligned_device"] == "cuda:0"
        assert report["inference"]["detail"].startswith("run_with_iobinding on cuda:0")


class TestParseProvider:
    def test_options_are_comma_separated_pairs(self) -> None:
        """NAME:K=V,K=V gives the name and a dict of string options."""
        assert parse_provider(f"{CUDA}:device_id=1, arena_extend_strategy=kSameAsRequested") == (
            CUDA,
            {"device_id": "1", "arena_extend_strategy": "kSameAsRequested"},
        )
