"""The test inference is bounded as a whole, and Ctrl-C is heard at any point."""

from __future__ import annotations

import _thread
import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from onnx_device_guard import _cli
from onnx_device_guard._cli import main
from onnx_device_guard._doctor import command, probe

from . import doctor_models
from .pseudo_terminal import run_on_terminal


@pytest.fixture
def endless(tmp_path: Path) -> Path:
    """A model whose Loop adds one 10^12 times to its input x float[1]: hours of work."""
    return doctor_models.endless_loop(tmp_path / "endless.onnx")


class TestTimeout:
    def test_an_endless_inference_is_stopped_and_inconclusive(
        self, endless: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--timeout 1: the run is stopped within moments, the verdict says why, exit 4."""
        started = time.monotonic()
        code = main(["doctor", str(endless), "--device", "cpu", "--timeout", "1", "--json"])
        took = time.monotonic() - started
        report = json.loads(capsys.readouterr().out)

        assert code == 4
        assert took < 10
        assert report["verdict"] == "inconclusive"
        assert report["inference"]["detail"] == (
            "the test inference did not end within 1 seconds and was stopped"
        )
        assert report["suggested_options"] == ["--timeout", "4"]
        assert not [thread for thread in threading.enumerate() if "inference" in thread.name]

    def test_the_text_report_says_so_too(
        self, endless: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The text report names the bound and the option that changes it."""
        assert main(["doctor", str(endless), "--device", "cpu", "--timeout", "0.5"]) == 4

        out = " ".join(capsys.readouterr().out.split())
        assert "did not end within 0.5 seconds and was stopped" in out
        assert "Fix: Allow it more time with `--timeout 2`" in out

    def test_a_quick_model_is_untouched_by_the_bound(
        self, tiny_model_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A model that runs in time is ok, whatever the bound."""
        code = main(["doctor", str(tiny_model_path), "--device", "cpu", "--timeout", "30"])

        assert code == 0
        assert "OK: " in capsys.readouterr().out

    @pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
    def test_the_bound_must_be_positive_seconds(
        self, value: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--timeout takes a number of seconds above 0; anything else is a usage error."""
        with pytest.raises(SystemExit) as exited:
            main(["doctor", "--timeout", value])

        assert exited.value.code == 2
        assert "is not a number of seconds above 0" in capsys.readouterr().err


@pytest.fixture(autouse=True)
def ctrl_c_heard() -> Iterator[None]:
    """Python's own Ctrl-C handler in place, as in a terminal.

    A runner started in the background (`cmd &` in a non-interactive shell)
    ignores SIGINT, and Python then installs no handler for it, so a
    simulated Ctrl-C would go unheard.
    """
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class TestInterrupt:
    def test_ctrl_c_during_an_endless_inference(
        self,
        endless: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Ctrl-C while onnxruntime runs: heard at once, one line, status 130."""
        timers: list[threading.Timer] = []
        run_inference = probe.run_inference

        def interrupted_once_running(*args: Any, **kwargs: Any) -> Any:
            # Ctrl-C half a second into the inference itself, however slow the
            # machine was to get there.
            timers.append(threading.Timer(0.5, _thread.interrupt_main))
            timers[-1].start()
            return run_inference(*args, **kwargs)

        monkeypatch.setattr(probe, "run_inference", interrupted_once_running)
        started = time.monotonic()
        try:
            code = main(["doctor", str(endless), "--device", "cpu", "--timeout", "120"])
        finally:
            for timer in timers:
                timer.cancel()
        took = time.monotonic() - started
        captured = capsys.readouterr()

        assert code == 130
        assert took < 15
        assert captured.err == "onnx-device-guard: interrupted\n"
        assert captured.out == ""

    def test_ctrl_c_while_torch_and_onnxruntime_load(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Ctrl-C during the imports (the machine's probe): one line, status 130."""

        def interrupted() -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(command, "environment", interrupted)

        assert main(["doctor"]) == 130
        assert capsys.readouterr().err == "onnx-device-guard: interrupted\n"

    def test_the_doctor_is_imported_inside_the_interrupt_guard(self) -> None:
        """The handler imports the doctor (and so torch), so Ctrl-C there is caught too."""
        source = Path(_cli.__file__).read_text()
        handler = source[source.index("def _doctor(") :]

        assert "from ._doctor.command import run" in handler
        assert "from ._doctor.command" not in source[: source.index("def _doctor(")]


class TestRealSigint:
    @pytest.mark.parametrize("run", range(6))
    def test_sigint_during_a_long_inference_exits_130_with_one_line(
        self, endless: Path, run: int
    ) -> None:
        """A real SIGINT mid-inference, on a terminal: status 130 and one line, never an abort."""
        session = run_on_terminal(
            ["doctor", str(endless), "--device", "cpu"],
            columns=100,
            interrupt_after="test inference, 2 s",
        )
        lines = [line for line in re.split(r"[\r\n]|\x1b\[2K", session.screen) if line.strip()]

        assert session.status == 130, session.screen
        assert lines[-1] == "onnx-device-guard: interrupted", session.screen
        assert "terminate called" not in session.screen
        assert "[E:onnxruntime" not in session.screen
