"""A fallback is heard in a plain script: a DeviceFallbackWarning at the caller's line."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from onnx_device_guard import (
    DeviceFallbackWarning,
    align_device_with_onnx_session,
    aligned_device,
    device_guard,
    device_policy,
)

from .logs import recorded_logs
from .sessions import cpu_session, cuda_session


class Model:
    def __init__(self, device: str = "cuda") -> None:
        self.session, self.device = cpu_session(), device


def plain_python(code: str, *options: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter with no logging and no warning filters set up."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ONNX_DEVICE_GUARD_", "PYTHONWARNINGS"))
    }
    return subprocess.run(
        [sys.executable, *options, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )


SCRIPT = """
    from onnx_device_guard import align_device_with_onnx_session

    class CPUSession:
        def get_providers(self):
            return ["CPUExecutionProvider"]

    print(align_device_with_onnx_session(CPUSession(), "cuda"))
"""


class TestHeardWithoutLogging:
    """Nothing set up: the fallback still shows, as onnxruntime's own warnings do."""

    def test_plain_interpreter_shows_it_on_stderr(self) -> None:
        """A script with no logging configuration prints the warning, attributed to its line."""
        result = plain_python(SCRIPT)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "cpu"
        assert "DeviceFallbackWarning" in result.stderr
        assert "<string>:8" in result.stderr, "pointed at the user's call"
        assert "onnx_device_guard" not in result.stderr.split("DeviceFallbackWarning")[0]

    def test_warnings_as_errors_make_the_call_raise(self) -> None:
        """`python -W error::UserWarning` turns a silent fallback into an error.

        (Python reads -W before site-packages can be imported, so it cannot name
        the library's own category there; pytest's -W and filterwarnings can.)
        """
        result = plain_python(SCRIPT, "-W", "error::UserWarning")
        assert result.returncode == 1
        assert "DeviceFallbackWarning" in result.stderr
        assert result.stdout == ""

    def test_pytest_filterwarnings_names_the_category(self, tmp_path: Path) -> None:
        """A test suite forbids silent fallbacks with the category's own name."""
        (tmp_path / "test_loads.py").write_text(textwrap.dedent(SCRIPT).replace("print", "x = "))
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-W",
                "error::onnx_device_guard.DeviceFallbackWarning",
                str(tmp_path / "test_loads.py"),
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        assert result.returncode != 0
        assert "DeviceFallbackWarning" in result.stdout

    def test_simplefilter_error_makes_a_guarded_call_raise(self) -> None:
        """warnings.simplefilter("error") in the script: the guarded factory raises."""
        result = plain_python(
            """
            import warnings
            warnings.simplefilter("error")
            from onnx_device_guard import DeviceFallbackWarning, device_guard

            class CPUSession:
                def get_providers(self):
                    return ["CPUExecutionProvider"]

            class Model:
                def __init__(self):
                    self.session, self.device = CPUSession(), "cuda"

            try:
                device_guard(Model)()
            except DeviceFallbackWarning as warning:
                print("raised", type(warning).__name__)
            """
        )
        assert result.stdout.strip() == "raised DeviceFallbackWarning", result.stderr

    def test_silenced_by_the_environment(self) -> None:
        """ONNX_DEVICE_GUARD_WARN=0 silences it exactly as it silences the record."""
        environment = {**os.environ, "ONNX_DEVICE_GUARD_WARN": "0"}
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(SCRIPT)],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
            check=False,
        )
        assert result.stdout.strip() == "cpu"
        assert "DeviceFallbackWarning" not in result.stderr


class TestTheWarning:
    """What the warning is, where it points, and what silences it."""

    def test_category_is_a_public_user_warning(self) -> None:
        """It is a UserWarning, filterable by its own category."""
        assert issubclass(DeviceFallbackWarning, UserWarning)
        assert DeviceFallbackWarning.__module__ == "onnx_device_guard"

    def test_points_at_the_callers_line_for_each_entry_point(self) -> None:
        """The core, a guarded factory, a guarded class and aligned_device: this file's lines."""

        @device_guard
        def load() -> Model:
            return Model()

        calls = [
            lambda: align_device_with_onnx_session(cpu_session(), "cuda"),
            load,
            device_guard(Model),
        ]
        for call in calls:
            with pytest.warns(DeviceFallbackWarning) as caught:
                call()
            assert Path(caught[0].filename) == Path(__file__)
        with pytest.warns(DeviceFallbackWarning) as caught, aligned_device(cpu_session(), "cuda"):
            pass
        assert Path(caught[0].filename) == Path(__file__)

    def test_warn_false_silences_it_and_keeps_a_debug_record(self) -> None:
        """warn=False: no warning; the record at DEBUG, as before."""
        with (
            warnings.catch_warnings(),
            recorded_logs() as records,
            device_policy(warn=False),
        ):
            warnings.simplefilter("error")
            align_device_with_onnx_session(cpu_session(), "cuda")
        assert [record.levelno for record in records] == [logging.DEBUG]

    def test_no_warning_when_the_session_reads_the_device(self) -> None:
        """A compatible device says nothing at all."""
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            align_device_with_onnx_session(cuda_session(0), "cuda:0")

    def test_the_record_stays_as_it_was(self) -> None:
        """Handlers still get one WARNING record with the odg_* fields, beside the warning."""
        with recorded_logs() as records, pytest.warns(DeviceFallbackWarning) as caught:
            align_device_with_onnx_session(cpu_session(), "cuda")
        (record,) = records
        assert record.levelno == logging.WARNING
        assert getattr(record, "odg_reason", None) == "no_gpu_provider"
        assert record.getMessage() == str(caught[0].message)
