"""The doctor stays simple: small functions, one record per kind of fact, values as a table."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from onnx_device_guard._doctor import inputs as doctor_inputs
from onnx_device_guard._doctor.facts import Environment, Facts
from onnx_device_guard._doctor.inputs import ModelInput, default_value

SOURCES = Path(__file__).resolve().parents[1] / "src" / "onnx_device_guard"


class TestSmallFunctions:
    def test_complexity_and_arguments_stay_small(self) -> None:
        """ruff's C901 (complexity 10) and PLR0913 (5 arguments) pass on the CLI and doctor."""
        ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
        if ruff is None:
            pytest.skip("ruff is not installed")
        done = subprocess.run(
            [
                ruff,
                "check",
                "--isolated",
                "--select",
                "C901,PLR0913",
                str(SOURCES / "_cli.py"),
                str(SOURCES / "_doctor"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

        assert done.returncode == 0, done.stdout


class TestFactsRecord:
    def test_facts_hold_the_environment_instead_of_copying_it(self) -> None:
        """No field of Environment is repeated in Facts; Facts has one `environment`."""
        facts_fields = {field.name: field for field in dataclasses.fields(Facts)}
        machine_fields = {field.name for field in dataclasses.fields(Environment)}

        assert facts_fields["environment"].type in ("Environment", Environment)
        assert not machine_fields & set(facts_fields)


class TestHeuristicTables:
    def test_default_values_come_from_the_table(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A row added to DEFAULT_VALUES is what default_value gives; its order decides."""
        rows = (("any", r"temperature", 0.5), *doctor_inputs.DEFAULT_VALUES)
        monkeypatch.setattr(doctor_inputs, "DEFAULT_VALUES", rows)

        assert default_value(ModelInput("temperature", (), torch.float32)) == 0.5
        assert default_value(ModelInput("sr", (), torch.int64)) == 16000
