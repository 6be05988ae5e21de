"""scripts/gpu_proof.py: skips cleanly without CUDA; its CPU-side steps work here."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_proof.py"


@pytest.fixture(scope="module")
def gpu_proof() -> ModuleType:
    """The script, imported as a module."""
    spec = importlib.util.spec_from_file_location("gpu_proof", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_proof"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cpu_onnxruntime(gpu_proof: ModuleType) -> None:
    """Skip where onnxruntime reads CUDA: the expectations below are the CPU build's."""
    if gpu_proof.onnxruntime_reads_cuda():
        pytest.skip("this onnxruntime has a GPU provider")


class TestWithoutCUDA:
    def test_skips_cleanly(self, tmp_path: Path) -> None:
        """With no CUDA device visible it says so, writes the skip and exits 0."""
        output = tmp_path / "proof" / "gpu-proof.json"
        result = subprocess.run(
            [sys.executable, str(SCRIPT), "--output", str(output)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "skipped: torch sees no CUDA device" in result.stdout
        recorded = json.loads(output.read_text(encoding="utf-8"))
        assert recorded["status"] == "skipped"
        assert recorded["reason"] == "torch sees no CUDA device"
        assert recorded["environment"]["cuda_available"] is False
        text = output.with_suffix(".txt").read_text(encoding="utf-8")
        assert "skipped: torch sees no CUDA device" in text


@pytest.mark.usefixtures("cpu_onnxruntime")
class TestCPUSteps:
    def test_guarded_factory_falls_back_and_runs(
        self, gpu_proof: ModuleType, tiny_model_path: Path
    ) -> None:
        """Step 2 on this machine: cuda falls back to cpu with one WARNING, and the model runs."""
        check = gpu_proof.check_guarded_factory(tiny_model_path, reads_cuda=False)
        assert check.facts["device"] == "cpu"
        assert len(check.facts["warnings"]) == 1
        assert check.facts["output_correct"] is True
        assert check.passed

    def test_doctor_step_reads_the_verdict(self, gpu_proof: ModuleType) -> None:
        """Step 3 reads the doctor's JSON: a fallback for want of a GPU provider."""
        check = gpu_proof.check_doctor(reads_cuda=False)
        assert check.facts["exit_code"] == 0
        assert check.facts["verdict"] == "fallback"
        assert check.facts["aligned_device"] == "cpu"
        assert "no-gpu-provider-in-build" in check.facts["finding_kinds"]
        # Here torch has no CUDA either, which the proof requires the doctor not to report.
        assert check.passed is ("torch-sees-no-cuda" not in check.facts["finding_kinds"])

    def test_run_step_sees_the_constructor_raise(self, gpu_proof: ModuleType) -> None:
        """Step 4 here: the watched program's CUDA session raises under --strict."""
        check = gpu_proof.check_run_command(reads_cuda=False)
        assert check.facts["exit_code"] == 1
        assert check.facts["raised"] is True
        assert check.passed

    def test_this_onnxruntime_says_no_data_transfer(
        self, gpu_proof: ModuleType, real_cpu_session: Any
    ) -> None:
        """The message step 1 expects is what this onnxruntime raises for memory said to be CUDA.

        Host memory declared as CUDA stands in for a CUDA tensor: onnxruntime
        refuses it when binding, before it reads any memory.
        """
        x = np.ones((2, 4), dtype=np.float32)
        binding = real_cpu_session.io_binding()
        with pytest.raises(RuntimeError) as caught:
            binding.bind_input("x", "cuda", 0, np.float32, x.shape, x.ctypes.data)
        assert gpu_proof.EXPECTED_BINDING_ERROR in str(caught.value).lower()

    def test_render_names_each_check(self, gpu_proof: ModuleType) -> None:
        """The text report numbers each check with PASS or FAIL and its facts."""
        check = gpu_proof.Check("a step", "something", "something else", False, {"key": 1})
        results = {
            "status": "failed",
            "environment": gpu_proof.environment(),
            "checks": [gpu_proof.asdict(check)],
            "seconds": 0.1,
        }
        text = gpu_proof.render(results)
        assert "FAILED" in text
        assert "1. FAIL a step" in text
        assert "   key: 1" in text
