"""Issue 24's wrong answers, crashes and forged lines: each gives the right status and line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from onnx_device_guard._cli import main

from . import doctor_models

FORGED = "m\nOK: the session reads tensors on 'cuda'.\n.onnx"


class TestForgedNames:
    def test_a_name_cannot_forge_a_verdict_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A file name holding a newline and a verdict stays on its header and summary row."""
        folder = tmp_path / "models"
        folder.mkdir()
        doctor_models.static_input(folder / FORGED, [1])
        doctor_models.static_input(folder / "plain.onnx", [1])

        code = main(["doctor", str(folder), "--device", "cpu", "--no-inference"])
        lines = capsys.readouterr().out.splitlines()

        assert code == 0
        assert not [
            line for line in lines if line.startswith("OK: the session reads tensors on 'cuda'")
        ]
        assert sum("m\\x0aOK: the session" in line for line in lines) == 2  # header and row


class TestHugeFile:
    def test_a_file_over_2_gib_is_refused_unread(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A sparse 3 GiB file: exit 2 and one line, at once, without reading it."""
        huge = tmp_path / "huge.onnx"
        with huge.open("wb") as file:
            file.truncate(3 * 2**30)

        code = main(["doctor", str(huge), "--device", "cpu"])
        captured = capsys.readouterr()

        assert code == 2
        assert captured.err.count("\n") == 1
        assert "3.0 GiB, over the 2 GiB an ONNX model file (a protobuf) can hold" in captured.err
        assert os.stat(huge).st_blocks == 0  # still sparse: nothing was written or read into it


class TestJsonShape:
    def test_an_empty_folder_gives_a_list(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A folder with no model: a list holding the one error object."""
        code = main(["doctor", str(tmp_path), "--json"])
        report = json.loads(capsys.readouterr().out)

        assert code == 2
        assert isinstance(report, list)
        assert report[0]["verdict"] == "error"

    def test_a_folder_with_one_broken_model_gives_a_list(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """One broken model in a folder: still a list."""
        (tmp_path / "broken.onnx").write_text("not a model")

        code = main(["doctor", str(tmp_path), "--json"])
        report = json.loads(capsys.readouterr().out)

        assert code == 2
        assert [entry["verdict"] for entry in report] == ["error"]
