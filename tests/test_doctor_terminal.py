"""On a real terminal the report fits its width and progress keeps the file name in view."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from . import doctor_models
from .pseudo_terminal import run_on_terminal

FALLBACK = ["doctor", "--device", "cuda", "--providers", "CPUExecutionProvider"]


def report_lines(screen: str) -> list[str]:
    """The report's lines, progress writes (carriage return and line clear) taken out."""
    return [line for line in re.sub(r"\r|\x1b\[2K", "\n", screen).split("\n") if line.strip()]


class TestWidth:
    def test_a_60_column_pane_gets_60_column_lines(self) -> None:
        """Every line fits 60 columns, but a word or a `command` (kept whole to be copied)."""
        session = run_on_terminal(FALLBACK, columns=60)
        lines = report_lines(session.screen)

        assert session.status == 0, session.screen
        breakable = [re.sub(r"`[^`]*`", "", line).strip() for line in lines if len(line) > 60]
        too_long = [line for line in breakable if " " in line]
        assert not too_long
        assert "FALLBACK: 'cuda' -> 'cpu'." in session.screen

    def test_a_120_column_terminal_is_used_to_its_width(self) -> None:
        """At 120 columns the text runs past the old fixed 88."""
        session = run_on_terminal(FALLBACK, columns=120)
        lines = report_lines(session.screen)

        assert max(len(line) for line in lines) > 88
        assert all(len(line) <= 120 or " " not in line.strip() for line in lines)


class TestProgress:
    def test_the_file_name_stays_in_view(self, tmp_path: Path) -> None:
        """A long folder on a 50-column terminal: the progress line ends with the file's name."""
        folder = tmp_path / ("deep_folder_name_" * 4)
        folder.mkdir()
        for name in ("alpha_model.onnx", "omega_model.onnx"):
            doctor_models.static_input(folder / name, [1])

        session = run_on_terminal(["doctor", str(folder), "--device", "cpu"], columns=50)
        progress = re.findall(r"\x1b\[2K(\[\d/2\] checking [^\r\n\x1b]*)", session.screen)

        assert session.status == 0, session.screen
        assert progress, session.screen
        assert all(len(line) <= 49 for line in progress)
        assert [line.endswith(("alpha_model.onnx", "omega_model.onnx")) for line in progress] == [
            True
        ] * len(progress)
        assert all("..." in line for line in progress)


@pytest.fixture(autouse=True)
def _posix_only() -> None:
    pytest.importorskip("pty")
