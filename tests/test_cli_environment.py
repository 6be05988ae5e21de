"""The doctor reads the library's environment variables as the library does."""

from __future__ import annotations

import json

import onnxruntime
import pytest
import torch

from onnx_device_guard._cli import main

RESOLUTION_MODE = "ONNX_DEVICE_GUARD_RESOLUTION_MODE"
FALLBACK_DEVICE = "ONNX_DEVICE_GUARD_FALLBACK_DEVICE"

cpu_only_machine = pytest.mark.skipif(
    torch.cuda.is_available() or "CUDAExecutionProvider" in onnxruntime.get_available_providers(),
    reason="needs a machine where cuda falls back",
)


@cpu_only_machine
class TestResolutionMode:
    def test_fail_acts_like_strict(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """RESOLUTION_MODE=fail: a fallback exits 1, and the report names the variable."""
        monkeypatch.setenv(RESOLUTION_MODE, "fail")

        assert main(["doctor", "--device", "cuda"]) == 1
        out = capsys.readouterr().out
        assert (
            f"{RESOLUTION_MODE}=fail: the device had to be changed, so the exit status is 1."
            in (out)
        )

    def test_fail_in_json(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The JSON's exit_code follows the variable too."""
        monkeypatch.setenv(RESOLUTION_MODE, "fail")

        assert main(["doctor", "--device", "cuda", "--json"]) == 1
        report = json.loads(capsys.readouterr().out)
        assert (report["verdict"], report["exit_code"]) == ("fallback", 1)

    def test_fallback_is_the_default(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """RESOLUTION_MODE=fallback: a fallback exits 0, as without the variable."""
        monkeypatch.setenv(RESOLUTION_MODE, "fallback")

        assert main(["doctor", "--device", "cuda"]) == 0

    def test_the_fallback_device_is_where_a_fallback_goes(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """FALLBACK_DEVICE=meta: the aligned device is meta, not a hard-coded cpu."""
        monkeypatch.setenv(FALLBACK_DEVICE, "meta")

        main(["doctor", "--device", "cuda", "--json", "--no-inference"])
        report = json.loads(capsys.readouterr().out)
        assert report["aligned_device"] == "meta"


class TestBadValues:
    @pytest.mark.parametrize(
        ("variable", "value", "message"),
        [
            (RESOLUTION_MODE, "strict", f"{RESOLUTION_MODE} must be one of 'fail', 'fallback'"),
            (FALLBACK_DEVICE, "gpu", f"{FALLBACK_DEVICE}='gpu' is not a device torch"),
            (
                "ONNX_DEVICE_GUARD_WARN",
                "maybe",
                "ONNX_DEVICE_GUARD_WARN='maybe' must be a yes/no switch",
            ),
        ],
    )
    def test_a_bad_value_is_exit_2_with_the_librarys_message(
        self,
        variable: str,
        value: str,
        message: str,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A value the library refuses: one line with the library's own words, exit 2."""
        monkeypatch.setenv(variable, value)

        assert main(["doctor", "--device", "cpu"]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.count("\n") == 1
        assert captured.err.startswith(
            f"onnx-device-guard doctor: error: The environment variable {message}"
        ), captured.err

    def test_a_fallback_device_the_session_cannot_read_is_exit_2_naming_the_variable(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """FALLBACK_DEVICE=cuda:0 on a CPU session: one line naming the variable, exit 2."""
        monkeypatch.setenv(FALLBACK_DEVICE, "cuda:0")

        code = main(["doctor", "--device", "cuda", "--providers", "CPUExecutionProvider"])

        captured = capsys.readouterr()
        assert (code, captured.out, captured.err.count("\n")) == (2, "", 1)
        assert captured.err.startswith(
            f"onnx-device-guard doctor: error: {FALLBACK_DEVICE}: "
            "The session cannot read the fallback device 'cuda:0' either"
        ), captured.err
        assert captured.err.endswith("Fix or unset the variable.\n"), captured.err
