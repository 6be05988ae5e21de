"""The report fits its reader: machine facts once, what went unchecked, the GPU facts."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from onnx_device_guard._cli import main
from onnx_device_guard._doctor.machine import gpu_facts, loaded_cuda_libraries

from . import doctor_models

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs torch seeing no GPU")


def doctor_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(["doctor", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def six(tmp_path: Path) -> Path:
    """A folder of six small models."""
    for number in range(6):
        doctor_models.static_input(tmp_path / f"model_{number}.onnx", [1])
    return tmp_path


class TestMachineOnce:
    def test_what_holds_for_every_model_is_said_once(
        self, six: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Six models falling back alike: the machine's causes once, not six times."""
        code = main(["doctor", str(six), "--device", "cuda", "--providers", "CPUExecutionProvider"])
        out = capsys.readouterr().out

        assert code == 0
        assert out.count("onnx-device-guard      ") == 1
        assert out.count("What holds for every model checked:") == 1
        assert out.count("=== ") == 6
        assert "Diagnosis:" not in out
        assert len(out.splitlines()) < 120

    def test_what_differs_stays_in_its_section(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A finding only one model has is in that model's section."""
        doctor_models.static_input(tmp_path / "a.onnx", [1])
        doctor_models.static_input(tmp_path / "b.onnx", [1], 16)  # bfloat16: skipped

        main(["doctor", str(tmp_path), "--device", "cpu"])
        out = capsys.readouterr().out
        section_b = out[out.index("b.onnx ===") : out.index("Summary:")]

        assert "The test inference was skipped" in section_b
        assert out.count("The test inference was skipped") == 1


@needs_no_cuda
class TestBareDoctor:
    def test_says_cuda_was_not_checked(self, capsys: pytest.CaptureFixture[str]) -> None:
        """No --device and no GPU seen: OK on cpu, with a note that CUDA went unchecked."""
        code, report = doctor_json(capsys)

        assert code == 0
        assert report["verdict"] == "ok"
        [note] = report["findings"]
        assert note["kind"] == "cuda-not-checked"
        assert "--device cuda" in note["fix"]

    def test_an_explicit_cpu_needs_no_note(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--device cpu asked for: nothing to add."""
        _, report = doctor_json(capsys, "--device", "cpu")

        assert report["findings"] == []


class TestGpuFacts:
    def test_nvidia_smi_gpus_and_visible_devices(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """GPU names and driver from nvidia-smi, CUDA_VISIBLE_DEVICES as set, in text and JSON."""
        smi = tmp_path / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 550.54.15'\necho 'NVIDIA A10, 550.54.15'\n")
        smi.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")

        _, report = doctor_json(capsys, "--device", "cpu")
        main(["doctor", "--device", "cpu"])
        out = capsys.readouterr().out

        assert report["gpus"] == [
            "NVIDIA H200 (driver 550.54.15)",
            "NVIDIA A10 (driver 550.54.15)",
        ]
        assert report["cuda_visible_devices"] == "1"
        assert "NVIDIA H200 (driver 550.54.15), NVIDIA A10" in out
        assert "CUDA_VISIBLE_DEVICES   '1'" in out

    def test_no_nvidia_smi_means_no_gpus(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without nvidia-smi on the PATH: no GPUs listed, nothing raised."""
        import onnxruntime

        monkeypatch.setenv("PATH", "/nonexistent")

        assert gpu_facts(onnxruntime)["gpus"] == ()

    def test_onnxruntimes_cuda_build_is_read_from_its_build_info(self) -> None:
        """onnxruntime's build info gives the CUDA and cuDNN it was built with."""

        class Build:
            cuda_version = "12.4"
            cudnn_version = "9.1"

        class Capi:
            build_and_package_info = Build

        class Ort:
            capi = Capi

        assert gpu_facts(Ort)["onnxruntime_build"] == "CUDA 12.4, cuDNN 9.1"

    def test_loaded_libraries_are_read_from_the_process_maps(self, tmp_path: Path) -> None:
        """The CUDA libraries mapped into the process, each once, by file name."""
        maps = tmp_path / "maps"
        maps.write_text(
            "7f00-7f01 r-xp 0 08:01 1 /usr/lib/libcudart.so.12.4.127\n"
            "7f01-7f02 r-xp 0 08:01 1 /usr/lib/libcudart.so.12.4.127\n"
            "7f02-7f03 r-xp 0 08:01 2 /venv/nvidia/cudnn/lib/libcudnn.so.9\n"
            "7f03-7f04 r-xp 0 08:01 3 /usr/lib/libc.so.6\n"
        )

        assert loaded_cuda_libraries(str(maps)) == ("libcudart.so.12.4.127", "libcudnn.so.9")
        assert loaded_cuda_libraries(str(tmp_path / "none")) == ()
