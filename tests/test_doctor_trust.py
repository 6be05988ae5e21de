"""Issue 24's wrong answers, crashes and forged lines: each gives the right status and line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import onnxruntime
import pytest
import torch
from onnx import TensorProto

import onnx_device_guard
from onnx_device_guard._cli import main
from onnx_device_guard._doctor.inputs import InputOverride
from onnx_device_guard._doctor.probe import InferenceOptions, run_inference

from . import doctor_models
from .sessions import cpu_session
from .test_doctor import (
    CPU,
    CPU_WHEEL,
    CUDA,
    CUDA_LOAD_FAILURE,
    GPU_WHEEL,
    TRT,
    fake_facts,
    only,
)

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


class TestVerdicts:
    def test_a_bfloat16_input_is_skipped_not_blamed_on_the_model(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """NumPy has no bfloat16: the doctor says it cannot hand it over, and the run is skipped."""
        model = doctor_models.static_input(tmp_path / "m.onnx", [1], TensorProto.BFLOAT16)

        code, report = doctor_json(capsys, str(model), "--device", "cpu")

        assert code == 0
        assert report["inference"]["status"] == "skipped"
        assert "NumPy has no such type" in report["inference"]["detail"]
        assert "own operators" not in json.dumps(report)

    @pytest.mark.skipif(CUDA in onnxruntime.get_available_providers(), reason="needs no CUDA")
    def test_an_operator_only_the_missing_gpu_provider_has_blames_the_provider(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """CUDA asked of the CPU build for a model whose operator only CUDA implements: no
        session can be created on this machine, so the inference failed (exit 3, --strict or
        not), the provider's finding and fix first; without a GPU provider asked for, or for
        the CPU, the model's error. Before: the model's error, then a fallback with exit 0."""
        model = str(doctor_models.gpu_only_operator(tmp_path / "m.onnx"))
        both = ["--device", "cuda", "--providers", CUDA, CPU]

        code, report = doctor_json(capsys, model, *both)

        assert (code, report["verdict"], report["inference"]["status"]) == (3, "failed", "failed")
        assert "no session could be created without the GPU provider" in (
            detail := report["inference"]["detail"]
        )
        assert "GroupNorm" in detail
        first, last = report["findings"][0], report["findings"][-1]
        assert first["kind"] == "provider-not-in-build"
        assert (
            "no session can be created without it: the rest lack an operator it may have"
            in (first["problem"])
        )
        assert "pip install onnxruntime-gpu" in first["fix"]
        assert "'cpu'" not in first["fix"]
        assert last["kind"] == "inference-failed"
        assert "its error above says why" in last["fix"]
        assert "ask for device 'cpu'" not in last["fix"]
        assert report["session_providers"] == [CPU]
        assert main(["doctor", model, *both, "--no-inference"]) == 3
        assert main(["doctor", model, *both, "--strict"]) == 3
        out = capsys.readouterr().out
        assert "FAILED: the test inference on 'cpu' (moved there from 'cuda')" in out
        assert "session providers      none: creating the session with" in out
        for options in (
            ["--device", "cuda", "--providers", CPU],
            ["--device", "cpu", "--providers", CUDA, CPU],
        ):
            assert main(["doctor", model, *options]) == 2
            assert "cannot create a session" in capsys.readouterr().err

    @pytest.mark.parametrize(
        "element",
        [TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64],
        ids=["u16", "u32", "u64"],
    )
    def test_unsigned_inputs_run(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], element: int
    ) -> None:
        """uint16, uint32 and uint64, which NumPy has, are built and run, given or searched."""
        model = doctor_models.static_input(tmp_path / "m.onnx", ["n", 3], element)
        name = TensorProto.DataType.Name(element).lower()

        code, given = doctor_json(capsys, str(model), "--device", "cpu", "--input", "x=1x3:1")
        searched = doctor_json(capsys, str(model), "--device", "cpu")[1]

        assert code == 0
        assert given["inference"] == {
            "status": "ok",
            "detail": f"InferenceSession.run on cpu with x {name}[1,3]=1",
            "inputs": [],
            "attempts": 1,
        }
        assert searched["inference"]["status"] == "ok"

    def test_an_unsigned_value_below_0_is_bad_input(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """-1 in a uint32 would wrap round to 4294967295: refused, exit 2."""
        model = doctor_models.static_input(tmp_path / "m.onnx", [1], TensorProto.UINT32)

        code = main(["doctor", str(model), "--device", "cpu", "--input", "x=1:-1"])

        assert code == 2
        assert "holds uint32, which cannot hold -1" in capsys.readouterr().err

    @pytest.mark.parametrize(
        ("element", "reason"),
        [
            (TensorProto.BFLOAT16, "NumPy has no such type"),
            (TensorProto.STRING, "it makes only real numbers and booleans"),
        ],
        ids=["bfloat16", "string"],
    )
    def test_an_input_that_cannot_be_made_says_the_true_reason(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], element: int, reason: str
    ) -> None:
        """NumPy lacks bfloat16 but has strings: the doctor says which is why it skips."""
        model = doctor_models.static_input(tmp_path / "m.onnx", [1], element)

        code, report = doctor_json(capsys, str(model), "--device", "cpu")

        assert code == 0
        assert report["inference"]["detail"].endswith(f"({reason}); the device answer stands")

    @pytest.mark.parametrize(
        ("element", "value"),
        [(TensorProto.FLOAT, "1e39"), (TensorProto.INT64, str(2**63)), (TensorProto.INT64, "0.5")],
        ids=["float32-overflow", "int64-overflow", "int64-fraction"],
    )
    def test_a_value_the_input_cannot_hold_is_bad_input(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], element: int, value: str
    ) -> None:
        """--input x=1:VALUE out of the input type's range: exit 2 and one line, not FAILED."""
        model = doctor_models.static_input(tmp_path / "m.onnx", [1], element)

        code = main(["doctor", str(model), "--device", "cpu", "--input", f"x=1:{value}"])
        captured = capsys.readouterr()

        assert code == 2
        assert captured.err.count("\n") == 1
        assert "holds float32, which cannot hold" in captured.err or "holds int64" in captured.err
        assert captured.out == ""

    @pytest.mark.parametrize("option", ["--dim", "--input"])
    def test_a_size_of_401_digits_is_bad_input(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
    ) -> None:
        """A dimension of 10**400: exit 2 and one line, no traceback and no timeout verdict."""
        model = doctor_models.static_input(tmp_path / "m.onnx", ["n"])
        value = "n=1" + "0" * 400 if option == "--dim" else "x=1" + "0" * 400

        code = main(["doctor", str(model), "--device", "cpu", option, value])
        captured = capsys.readouterr()

        assert code == 2
        assert captured.err.count("\n") == 1
        assert "from 0 to 2147483647" in captured.err
        assert captured.out == ""

    def test_meta_is_skipped_with_the_reason(
        self, tiny_model_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--device meta: the inference is skipped because meta tensors hold no data."""
        code, report = doctor_json(capsys, str(tiny_model_path), "--device", "meta")

        assert code == 0
        assert report["inference"]["detail"] == (
            "tensors on 'meta' hold no data, so nothing can run there"
        )
        assert report["inference"]["status"] == "skipped"
        # One note, with a fix that can be carried out. Before: also "make sure a provider
        # reads 'meta' memory" and "run one inference of your own on 'meta'".
        assert [finding["fix"] for finding in report["findings"]] == [
            "Ask for the device the model will run on: tensors on 'meta' hold no data."
        ]

    def test_a_meta_fallback_is_skipped_too(
        self,
        tiny_model_path: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """cuda on a CPU session with the fallback device meta: fallback, the inference skipped."""
        monkeypatch.setenv("ONNX_DEVICE_GUARD_FALLBACK_DEVICE", "meta")

        code, report = doctor_json(
            capsys, str(tiny_model_path), "--device", "cuda", "--providers", "CPUExecutionProvider"
        )

        assert code == 0
        assert report["aligned_device"] == "meta"
        assert report["verdict"] == "fallback"
        assert report["inference"]["status"] == "skipped"

    def test_an_input_the_doctor_cannot_make_is_never_a_device_failure(self) -> None:
        """A value torch refuses for the type is the doctor's, so the run is skipped, not failed."""
        session = onnxruntime.InferenceSession(
            onnx_device_guard.example_model(), providers=["CPUExecutionProvider"]
        )
        override = InputOverride("x", None, 1e39, "x=:1e39")

        check = run_inference(session, torch.device("cpu"), InferenceOptions({"x": override}))

        assert check.status == "skipped"
        assert "cannot make its test inputs" in check.detail


def doctor_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(["doctor", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


class TestBothPackagesInstalled:
    def test_the_cuda_item_quotes_cudas_own_error(self) -> None:
        """TensorRT's load failure first, CUDA's second: the CUDA item quotes CUDA's."""
        tensorrt = (
            "[E:onnxruntime:Default, provider_bridge_ort.cc:1 TryGetProviderInfo_TensorRT] Failed "
            "to load library libonnxruntime_providers_tensorrt.so with error: libnvinfer.so.10"
        )
        facts = fake_facts(
            cpu_session(),
            available=(TRT, CUDA, CPU),
            requested=(CUDA, CPU),
            distributions=(GPU_WHEEL, CPU_WHEEL),
            messages=[tensorrt, CUDA_LOAD_FAILURE],
        )

        finding = only(facts, "provider-dropped")

        assert "libcudnn.so.9: cannot open shared object file" in finding.problem
        assert "libnvinfer" not in finding.problem


class TestSchemaVersion:
    def test_every_json_object_has_a_schema_version(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A checked model and an error object both start with schema_version 1."""
        (tmp_path / "broken.onnx").write_text("not a model")
        doctor_models.static_input(tmp_path / "good.onnx", [1])

        main(["doctor", str(tmp_path), "--json", "--device", "cpu"])
        report = json.loads(capsys.readouterr().out)

        assert [next(iter(entry)) for entry in report] == ["schema_version"] * 2
        assert {entry["schema_version"] for entry in report} == {1}


class TestEmptySections:
    def test_no_messages_heading_without_messages(
        self, tiny_model_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A run where onnxruntime said nothing relevant has no messages heading, nor a count."""
        main(["doctor", str(tiny_model_path), "--device", "cpu"])
        out = capsys.readouterr().out

        assert "What onnxruntime and torch said" not in out
        assert "messages not about" not in out
