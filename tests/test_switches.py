"""Yes/no environment variables take the spellings people use, and name them when refused."""

from __future__ import annotations

import pytest

from onnx_device_guard import ModelInputError
from onnx_device_guard._policy import WARN, parse_switch, read_environment

YES = ["1", "true", "True", "YES", "on", " On "]
NO = ["0", "false", "False", "no", "NO", " off\t"]


class TestSpellings:
    @pytest.mark.parametrize("text", YES)
    def test_yes(self, text: str) -> None:
        """1, true, yes and on, in any case and with spaces around, are yes."""
        assert parse_switch(WARN, text) is True

    @pytest.mark.parametrize("text", NO)
    def test_no(self, text: str) -> None:
        """0, false, no and off, in any case and with spaces around, are no."""
        assert parse_switch(WARN, text) is False

    @pytest.mark.parametrize("text", ["", "   "])
    def test_unset(self, text: str) -> None:
        """Empty, or only spaces: unset, so the default holds."""
        assert parse_switch(WARN, text) is None


class TestRefused:
    @pytest.mark.parametrize("text", ["2", "maybe", "yess", "-1"])
    def test_a_bad_value_names_the_accepted_ones(self, text: str) -> None:
        """Anything else raises ModelInputError naming the variable and every spelling."""
        with pytest.raises(ModelInputError) as info:
            parse_switch("ONNX_DEVICE_GUARD_WATCH", text)

        assert "ONNX_DEVICE_GUARD_WATCH=" in info.value.message
        assert "1, true, yes or on" in info.value.message
        assert "0, false, no or off" in info.value.message


class TestWarnVariable:
    @pytest.mark.parametrize(("text", "warn"), [("false", False), ("No", False), ("on", True)])
    def test_warn_reads_through_the_rule(self, text: str, warn: bool) -> None:
        """ONNX_DEVICE_GUARD_WARN follows the same rule."""
        assert read_environment({WARN: text}).warn is warn

    def test_the_doctor_accepts_false(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """ONNX_DEVICE_GUARD_WARN=false no longer makes the doctor exit 2."""
        from onnx_device_guard._cli import main

        monkeypatch.setenv(WARN, "false")

        assert main(["doctor", "--device", "cpu", "--no-inference"]) == 0
