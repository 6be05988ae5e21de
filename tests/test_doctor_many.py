"""``doctor PATH...``: several model files and folders in one run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import onnxruntime
import pytest
import torch

from onnx_device_guard._cli import main
from onnx_device_guard._doctor import command, probe

from . import doctor_models

CPU_ONLY = not torch.cuda.is_available() and "CUDAExecutionProvider" not in (
    onnxruntime.get_available_providers()
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Three models that need the input search, one nested, one broken, one not a model."""
    doctor_models.reflect_pad(tmp_path / "a_pad.onnx")
    doctor_models.sample_rate(tmp_path / "b_rate.onnx")
    (tmp_path / "c_broken.onnx").write_text("not a model\n")
    (tmp_path / "notes.txt").write_text("not looked at\n")
    (tmp_path / "nested").mkdir()
    doctor_models.two_pixel_concat(tmp_path / "nested" / "d_concat.ONNX")
    return tmp_path


def names(report: list[dict[str, Any]]) -> list[str]:
    return [Path(entry["model"]).name for entry in report]


class TestFolders:
    def test_json_is_a_list_one_object_per_model(
        self, folder: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Every *.onnx below the folder, sorted; the broken one is an error; exit is the worst."""
        code = main(["doctor", str(folder), "--device", "cpu", "--json"])
        report = json.loads(capsys.readouterr().out)

        assert names(report) == ["a_pad.onnx", "b_rate.onnx", "c_broken.onnx", "d_concat.ONNX"]
        assert [entry["verdict"] for entry in report] == ["ok", "ok", "error", "ok"]
        assert "is not an ONNX model" in report[2]["error"]
        assert report[2]["exit_code"] == 2
        assert all(isinstance(entry["seconds"], float) for entry in report)
        assert code == 2

    def test_text_has_a_section_per_model_and_a_summary(
        self, folder: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The machine once, then one section per model, then a table with each verdict."""
        code = main(["doctor", str(folder), "--device", "cpu"])
        text = capsys.readouterr().out

        assert code == 2
        assert text.count("  torch  ") == 1
        assert text.count("\n=== ") == 4
        assert "ERROR: " in text
        summary = text.split("\nSummary:\n")[1].splitlines()
        assert summary[0] == f"(models under {folder}{os.sep})"
        assert summary[1].split() == ["model", "verdict", "device", "inference", "exit", "seconds"]
        rows = {row.split()[0]: row.split()[1:5] for row in summary[3:]}
        assert set(rows) == {"a_pad.onnx", "b_rate.onnx", "c_broken.onnx", "nested/d_concat.ONNX"}
        assert rows["c_broken.onnx"] == ["error", "-", "-", "2"]
        assert rows["a_pad.onnx"] == ["ok", "cpu", "ok", "0"]

    @pytest.mark.skipif(not CPU_ONLY, reason="needs a machine where cuda falls back to cpu")
    def test_strict_1_is_not_hidden_by_a_broken_model(
        self, folder: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A fallback under --strict (1) outranks a broken model (2)."""
        assert main(["doctor", str(folder), "--device", "cuda", "--strict", "--json"]) == 1
        capsys.readouterr()

    def test_machine_facts_are_gathered_once(
        self, folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """torch and onnxruntime are probed once, however many models there are."""
        calls: list[int] = []
        real = probe.environment

        def counting() -> Any:
            calls.append(1)
            return real()

        monkeypatch.setattr(command, "environment", counting)

        main(["doctor", str(folder), "--device", "cpu", "--json"])

        assert len(json.loads(capsys.readouterr().out)) == 4
        assert calls == [1]


class TestSeveralPaths:
    def test_files_and_folders_mix(
        self, folder: Path, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        """A file and a folder: all their models, in the order given."""
        other = doctor_models.positive_scalar(tmp_path_factory.mktemp("other") / "n.onnx")
        nested = folder / "nested"

        assert main(["doctor", str(other), str(nested), "--device", "cpu"]) == 0

    def test_a_missing_path_among_others_is_reported_in_place(
        self, folder: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A path that does not exist is one error entry; the other models are still checked."""
        code = main(["doctor", str(folder / "gone.onnx"), str(folder / "a_pad.onnx"), "--json"])
        report = json.loads(capsys.readouterr().out)

        assert code == 2
        assert [entry["verdict"] for entry in report] == ["error", "ok"]
        assert report[0]["error"].endswith("gone.onnx' does not exist")

    def test_one_file_keeps_one_json_object(
        self, folder: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A single model file still prints one object, as before several were accepted."""
        assert main(["doctor", str(folder / "a_pad.onnx"), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)

        assert isinstance(report, dict)
        assert report["verdict"] == "ok"
        assert report["seconds"] >= 0

    def test_a_folder_with_one_model_gives_a_list(
        self, folder: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A folder always gives a list, so scripts need not guess from the count."""
        assert main(["doctor", str(folder / "nested"), "--json"]) == 0

        assert names(json.loads(capsys.readouterr().out)) == ["d_concat.ONNX"]
