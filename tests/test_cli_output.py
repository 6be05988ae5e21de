"""What the text report prints: escaped control characters, colour, progress, short rows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from onnx_device_guard._cli import main
from onnx_device_guard._doctor.terminal import Progress, colour_wanted, paint, printable

from . import doctor_models

TRICK = b"x\x1b[2J\x1b[1A\x1b[2KOK\x07"
"""An input name that would clear the screen, move up, and ring the bell."""

GREEN_OK = "\x1b[32mOK\x1b[0m:"


@pytest.fixture
def no_colour_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither NO_COLOR nor FORCE_COLOR, whatever the shell running the tests sets."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


class TestControlCharacters:
    def test_an_input_name_cannot_drive_the_terminal(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_colour_settings: None
    ) -> None:
        """ESC and BEL in a model's input name reach the report escaped, as in the JSON."""
        model = doctor_models.named_input(tmp_path / "m.onnx", TRICK)

        code = main(["doctor", str(model), "--device", "cpu", "--input", "q=:1"])
        captured = capsys.readouterr()

        assert code == 2  # the name q is not the model's; the real one is listed, escaped
        assert "\x1b" not in captured.err
        assert "\x07" not in captured.err
        assert "x\\x1b[2J\\x1b[1A\\x1b[2KOK\\x07" in captured.err

    def test_the_text_report_escapes_what_onnxruntime_gives(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_colour_settings: None
    ) -> None:
        """The inference row names the input: escaped in the text, as the JSON escapes it."""
        model = doctor_models.named_input(tmp_path / "m.onnx", TRICK)

        assert main(["doctor", str(model), "--device", "cpu"]) == 0
        out = capsys.readouterr().out
        assert not set(out) & {"\x1b", "\x07"}
        assert "with x\\x1b[2J\\x1b[1A\\x1b[2KOK\\x07 float32[1]" in " ".join(out.split())

        assert main(["doctor", str(model), "--device", "cpu", "--json"]) == 0
        raw = capsys.readouterr().out
        assert "\x1b" not in raw
        assert "\\u001b[2J" in raw
        assert "x\x1b[2J" in json.loads(raw)["inference"]["detail"]

    def test_a_path_with_a_newline_and_an_escape(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A file name with ESC and a newline in it: one line on stderr, escaped."""
        code = main(["doctor", str(tmp_path / "a\x1b[31m\nb.onnx")])
        err = capsys.readouterr().err

        assert code == 2
        assert err.count("\n") == 1
        assert "a\\x1b[31m\\x0ab.onnx" in err

    def test_printable_keeps_newlines_and_text(self) -> None:
        """Only control characters change; newlines and non-ASCII letters stay."""
        assert printable("é\nü\t\r\x9b") == "é\nü\\x09\\x0d\\x9b"


class TestLongRows:
    def test_a_model_with_5000_inputs_gives_short_rows(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The inference row names a few inputs and says how many more, not 120 kB."""
        model = doctor_models.many_inputs(tmp_path / "m.onnx", 5000)

        assert main(["doctor", str(model), "--device", "cpu"]) == 0
        out = capsys.readouterr().out
        assert max(map(len, out.splitlines())) <= 100
        assert len(out) < 4000
        assert "with x0 float32[1], x1 float32[1], x2" in " ".join(out.split())
        assert "x7 float32[1] and 4992 more" in " ".join(out.split())


class TestColour:
    def test_forced_colour_paints_the_verdict(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """FORCE_COLOR: the verdict word is green even though stdout is not a terminal."""
        monkeypatch.delenv("NO_COLOR", raising=False)
        monkeypatch.setenv("FORCE_COLOR", "1")

        assert main(["doctor", "--device", "cpu"]) == 0
        out = capsys.readouterr().out
        assert f"\n{GREEN_OK} the session reads tensors on 'cpu'." in out
        assert out.count("\x1b[") == 2  # the verdict word only

    def test_no_colour_wins(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """NO_COLOR (any non-empty value) turns colour off, even with FORCE_COLOR."""
        monkeypatch.setenv("NO_COLOR", "yes")
        monkeypatch.setenv("FORCE_COLOR", "1")

        assert main(["doctor", "--device", "cpu"]) == 0
        assert "\x1b" not in capsys.readouterr().out

    def test_never_in_json(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """--json is never coloured."""
        monkeypatch.delenv("NO_COLOR", raising=False)
        monkeypatch.setenv("FORCE_COLOR", "1")

        assert main(["doctor", "--device", "cpu", "--json"]) == 0
        assert "\x1b" not in capsys.readouterr().out

    def test_a_pipe_is_plain(
        self, capsys: pytest.CaptureFixture[str], no_colour_settings: None
    ) -> None:
        """stdout that is not a terminal (capsys, a pipe): no colour."""
        assert main(["doctor", "--device", "cpu"]) == 0
        assert "\x1b" not in capsys.readouterr().out

    def test_rules(self) -> None:
        """NO_COLOR first, then FORCE_COLOR, then whether stdout is a terminal."""
        assert colour_wanted(True, {}) is True
        assert colour_wanted(False, {}) is False
        assert colour_wanted(False, {"FORCE_COLOR": "1"}) is True
        assert colour_wanted(True, {"NO_COLOR": "1"}) is False
        assert colour_wanted(True, {"NO_COLOR": ""}) is True  # empty means unset

    @pytest.mark.parametrize(
        ("word", "code"),
        [
            ("OK", "32"),
            ("FALLBACK", "33"),
            ("INCONCLUSIVE", "33"),
            ("FAILED", "31"),
            ("ERROR", "31"),
        ],
    )
    def test_each_verdict_has_its_colour(self, word: str, code: str) -> None:
        """OK green, FALLBACK and INCONCLUSIVE yellow, FAILED and ERROR red; indented text not."""
        assert paint(f"{word}: why.\n  {word}: quoted") == (
            f"\x1b[{code}m{word}\x1b[0m: why.\n  {word}: quoted"
        )


class TestProgress:
    def test_shown_on_a_terminal_and_cleared(self) -> None:
        """Progress rewrites one line and clears it; nothing else is written."""
        read, write = os.pipe()
        progress = Progress(write)
        progress.show("[1/3] checking a.onnx")
        progress.show("[2/3] checking b\x1b.onnx")
        progress.close()
        text = os.read(read, 1000).decode()
        os.close(read)

        assert text == (
            "\r\x1b[2K[1/3] checking a.onnx\r\x1b[2K[2/3] checking b\\x1b.onnx\r\x1b[2K"
        )

    def test_silent_when_stderr_is_not_a_terminal(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Several models with stderr captured (not a terminal): stderr stays empty."""
        doctor_models.reflect_pad(tmp_path / "a.onnx")
        doctor_models.sample_rate(tmp_path / "b.onnx")

        assert main(["doctor", str(tmp_path), "--device", "cpu"]) == 0
        assert capsys.readouterr().err == ""
