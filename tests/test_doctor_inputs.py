"""The doctor's test inputs: the search for sizes and values that fit, and the options."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnxruntime
import pytest
import torch

from onnx_device_guard import ModelInputError
from onnx_device_guard._cli import main
from onnx_device_guard._doctor.inputs import (
    SIZES,
    InputOverride,
    ModelInput,
    attempts,
    check_overrides,
    default_value,
    mentioned_inputs,
    parse_dim_option,
    parse_input_option,
)
from onnx_device_guard._doctor.probe import InferenceOptions, run_inference

from . import doctor_models

CPU = torch.device("cpu")


def session_for(path: Path) -> Any:
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def doctor_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    """Run ``doctor --json`` in-process; return the exit status and the parsed report."""
    code = main(["doctor", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


class TestSearchOnModelsThatRefuseSizeOne:
    @pytest.mark.parametrize(
        ("build", "fitted"),
        [
            (doctor_models.reflect_pad, "x float32[1,1,32,32]"),
            (doctor_models.two_pixel_concat, "x float32[1,3,1,32]"),
        ],
        ids=["reflect-pad", "two-pixel-concat"],
    )
    def test_larger_sizes_are_tried_until_one_fits(
        self, tmp_path: Path, build: Callable[[Path], Path], fitted: str
    ) -> None:
        """Size 1 fails in the model's operators; the next size runs, and the check is ok."""
        check = run_inference(session_for(build(tmp_path / "m.onnx")), CPU)

        assert check.status == "ok", check.detail
        assert check.detail == f"InferenceSession.run on cpu with {fitted}"
        assert check.attempts == 2

    def test_a_scalar_that_must_be_positive_gets_1(self, tmp_path: Path) -> None:
        """An integer scalar is fed 1, not 0, which a count or a length rejects."""
        check = run_inference(session_for(doctor_models.positive_scalar(tmp_path / "m.onnx")), CPU)

        assert check.status == "ok", check.detail
        assert "n int64[]=1" in check.detail

    def test_a_sample_rate_gets_16000(self, tmp_path: Path) -> None:
        """A scalar named like a sample rate is fed 16000, which speech models accept."""
        check = run_inference(session_for(doctor_models.sample_rate(tmp_path / "m.onnx")), CPU)

        assert check.status == "ok", check.detail
        assert "sr int64[]=16000" in check.detail

    def test_no_size_fits_is_inconclusive_naming_the_input(self, tmp_path: Path) -> None:
        """Every size refused: inconclusive, the dynamic input named, --no-inference offered."""
        check = run_inference(session_for(doctor_models.seven_samples(tmp_path / "m.onnx")), CPU)

        assert check.status == "inconclusive"
        assert check.culprits == ("x",)
        assert check.suggestion == ("--no-inference",)
        assert check.attempts == len(SIZES)
        assert check.hints == ("--input x=SHAPE",)
        assert "cannot be reshaped to the requested shape" in check.detail
        assert "onnxruntime::" not in check.detail  # the C++ signature is cut

    def test_a_fixed_shape_model_is_advised_only_what_it_takes(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """x float[4], which no run fits: the fix offers a value, never a shape or --dim, and
        a shape given is refused as fixed. Before: `--input NAME=SHAPE[:VALUE]` or `--dim
        NAME=N`, both refused, the refusal saying "(? is dynamic)" of a shape with no '?'."""
        model = str(doctor_models.seven_samples(tmp_path / "m.onnx", length=4))

        code, report = doctor_json(capsys, model, "--device", "cpu")

        assert (code, report["inference"]["inputs"]) == (4, ["x"])
        fix = report["findings"][-1]["fix"]
        assert "`--input x=:VALUE`" in fix
        assert "SHAPE" not in fix
        assert "--dim" not in fix
        assert main(["doctor", model, "--device", "cpu", "--input", "x=7"]) == 2
        assert capsys.readouterr().err.endswith("its input 'x' has shape 4 (fixed)\n")

    def test_a_wrong_scalar_value_is_inconclusive_naming_it(self, tmp_path: Path) -> None:
        """A scalar whose name gives no hint gets 1; refused, the report names that input."""
        model = doctor_models.sample_rate(tmp_path / "m.onnx", name="k")

        check = run_inference(session_for(model), CPU)

        assert check.status == "inconclusive"
        assert check.culprits == ("k",)


class TestSizeCap:
    def test_inputs_over_the_cap_are_not_allocated(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A tiny model with a static [20000, 20000] input: inconclusive, nothing allocated."""

        def refuse(*args: object) -> list[torch.Tensor]:
            raise AssertionError("the doctor allocated inputs over the cap")

        monkeypatch.setattr("onnx_device_guard._doctor.probe.make_tensors", refuse)
        model = doctor_models.static_input(tmp_path / "big.onnx", [20000, 20000])

        check = run_inference(session_for(model), CPU)

        assert model.stat().st_size < 100
        assert check.status == "inconclusive"
        assert check.detail.startswith("inputs too large: ")
        assert "1,526 MiB, over the 256 MiB limit; nothing was allocated" in check.detail
        assert check.suggestion == ("--max-input-mib", "1526")

    def test_the_cap_is_an_option(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--max-input-mib lowers (or raises) the cap: a 4 MiB input passes 256, not 1."""
        model = str(doctor_models.static_input(tmp_path / "m.onnx", [1024, 1024]))

        assert doctor_json(capsys, model)[1]["verdict"] == "ok"
        code, report = doctor_json(capsys, model, "--max-input-mib", "1")

        assert code == 4
        assert report["verdict"] == "inconclusive"
        assert report["suggested_options"] == ["--max-input-mib", "4"]

    def test_larger_sizes_stop_at_the_cap(self, tmp_path: Path) -> None:
        """No attempt over the cap is made; the sizes under it are all tried."""
        model = doctor_models.seven_samples(tmp_path / "m.onnx")

        check = run_inference(session_for(model), CPU, InferenceOptions(max_bytes=1000))

        assert check.status == "inconclusive"
        assert check.attempts == 3  # 1, 32 and 224 floats fit in 1000 bytes, 512 does not

    def test_a_tiny_model_with_a_huge_static_input(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A model of a few bytes with a [20000, 20000] input: inconclusive, exit 4."""
        model = doctor_models.static_input(tmp_path / "huge.onnx", [20000, 20000])

        assert main(["doctor", str(model)]) == 4
        text = capsys.readouterr().out
        assert "inconclusive: inputs too large" in text
        assert "--max-input-mib 1526" in text


class TestInputOption:
    def test_shape_and_value_are_parsed(self) -> None:
        """NAME=SHAPE:VALUE, [] for a scalar, an empty shape for the model's own."""
        assert parse_input_option("x=1x3x224x224:0.5") == InputOverride(
            "x", (1, 3, 224, 224), 0.5, "x=1x3x224x224:0.5"
        )
        assert parse_input_option("sr=[]:16000").shape == ()
        assert parse_input_option("flag=:true").value is True
        assert parse_input_option("x=2,3").shape == (2, 3)

    @pytest.mark.parametrize(
        "text", ["x", "=1x2", "x=", "x=1xA", "x=1x-1", "x=:nan", "x=:many", "x=1:"]
    )
    def test_malformed_is_bad_input(self, text: str) -> None:
        """Anything but NAME=SHAPE[:VALUE] raises ModelInputError quoting the option."""
        with pytest.raises(ModelInputError, match="--input"):
            parse_input_option(text)

    def test_fixes_an_inconclusive_model(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--input x=7 gives the shape no search would find: the verdict becomes ok."""
        model = str(doctor_models.seven_samples(tmp_path / "m.onnx"))

        code, report = doctor_json(capsys, model, "--input", "x=7")

        assert code == 0
        assert report["verdict"] == "ok"
        assert report["inference"]["detail"].endswith("with x float32[7]")

    def test_value_fixes_a_scalar(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--input k=:16000 gives a scalar the value the model needs."""
        model = str(doctor_models.sample_rate(tmp_path / "m.onnx", name="k"))

        code, report = doctor_json(capsys, model, "--input", "k=:16000")

        assert (code, report["verdict"]) == (0, "ok")

    def test_a_shape_that_does_not_fit_the_model_is_bad_input(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A rank or a static dimension other than the model's: exit 2 with the model's shape."""
        model = str(doctor_models.reflect_pad(tmp_path / "m.onnx"))

        assert main(["doctor", model, "--input", "x=2x1x8x8"]) == 2
        err = capsys.readouterr().err
        assert "its input 'x' has shape 1x1x?x?" in err
        assert err.count("\n") == 1

    def test_a_fraction_for_an_integer_input_is_bad_input(self) -> None:
        """1.5 cannot fill an int64 input."""
        inputs = [ModelInput("n", (), torch.int64)]

        with pytest.raises(ModelInputError, match=r"holds int64, which cannot hold 1\.5"):
            check_overrides(inputs, {"n": parse_input_option("n=:1.5")}, "m.onnx")

    @pytest.mark.parametrize(
        ("dtype", "value"), [(torch.uint8, "-1"), (torch.uint8, "256"), (torch.bool, "2")]
    )
    def test_a_value_torch_would_wrap_round_is_bad_input(
        self, dtype: torch.dtype, value: str
    ) -> None:
        """torch.full keeps -1 in a uint8 as 255 and 2 in a bool as True: the value is refused."""
        inputs = [ModelInput("a", (2,), dtype)]

        with pytest.raises(ModelInputError, match=f"which cannot hold {value} "):
            check_overrides(inputs, {"a": parse_input_option(f"a=:{value}")}, "m.onnx")

    def test_a_name_no_model_has_is_bad_input(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A misspelt --input: exit 2 before anything runs, one line naming the real inputs."""
        model = str(doctor_models.positive_scalar(tmp_path / "m.onnx"))

        assert main(["doctor", model, "--input", "count=:3"]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == (
            "onnx-device-guard doctor: error: --input 'count' matches no input of the model; "
            "it has x, n\n"
        )


class TestDimOption:
    def test_parsed(self) -> None:
        """NAME=N with N of 0 or more."""
        assert parse_dim_option("length=7") == ("length", 7)
        for text in ("length", "length=x", "=3", "length=-1"):
            with pytest.raises(ModelInputError, match="--dim"):
                parse_dim_option(text)

    def test_sizes_a_named_dimension(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--dim length=7 fixes the named dimension the search could not guess."""
        model = str(doctor_models.seven_samples(tmp_path / "m.onnx"))

        code, report = doctor_json(capsys, model, "--dim", "length=7")

        assert (code, report["verdict"]) == (0, "ok")

    def test_an_unknown_dimension_is_bad_input(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A --dim name that no model declares is reported, exit 2."""
        model = str(doctor_models.seven_samples(tmp_path / "m.onnx"))

        assert main(["doctor", model, "--dim", "width=7"]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.count("\n") == 1
        assert "--dim 'width' matches no named dimension of the model; it has length" in (
            captured.err
        )


class TestRepeatedOptions:
    @pytest.mark.parametrize(
        ("argv", "error"),
        [
            (["--input", "x=1x4", "--input", "x=2x4"], "--input gives 'x' two different values"),
            (["--dim", "length=3", "--dim", "length=4"], "--dim gives 'length' two"),
            (
                ["--providers", "CUDAExecutionProvider:device_id=1,device_id=2"],
                "--providers 'CUDAExecutionProvider:device_id=1,device_id=2' gives 'device_id' two",
            ),
            (["--device", "cuda"], "the command line gives '--device' two"),  # before: cuda won
        ],
        ids=["input", "dim", "provider-option", "device"],
    )
    def test_a_name_given_two_values_is_bad_input(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], error: str
    ) -> None:
        """Not the last one silently: exit 2 before anything runs, one line naming it."""
        model = str(doctor_models.seven_samples(tmp_path / "m.onnx"))

        assert main(["doctor", model, "--device", "cpu", *argv]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith(f"onnx-device-guard doctor: error: {error}")
        assert captured.err.endswith("; give it once\n")
        assert captured.err.count("\n") == 1

    def test_the_same_value_twice_is_taken_once(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--dim length=7 twice, and an --input written two ways with one meaning, are one."""
        model = str(doctor_models.seven_samples(tmp_path / "m.onnx"))

        code, report = doctor_json(
            capsys,
            model,
            "--dim",
            "length=7",
            "--dim",
            "length=7",
            "--input",
            "x=7",
            "--input",
            "x = 7",
        )

        assert (code, report["verdict"]) == (0, "ok")


class TestNoInference:
    def test_answers_the_device_question_alone(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--no-inference: no run, no inconclusive verdict, no finding; exit 0."""
        model = str(doctor_models.seven_samples(tmp_path / "m.onnx"))

        code, report = doctor_json(capsys, model, "--no-inference", "--device", "cpu")

        assert code == 0
        assert report["verdict"] == "ok"
        assert report["inference"]["status"] == "skipped"
        assert report["findings"] == []


class TestDefaults:
    @pytest.mark.parametrize(
        ("model_input", "value"),
        [
            (ModelInput("sr", (), torch.int64), 16000),
            (ModelInput("sample_rate", (1,), torch.int32), 16000),
            (ModelInput("k", (), torch.int64), 1),
            (ModelInput("input_ids", (None, None), torch.int64), 0),
            (ModelInput("attention_mask", ("batch", "sequence"), torch.int64), 1),
            (ModelInput("flag", (), torch.bool), False),
            (ModelInput("x", (1, 3, None, None), torch.float32), 0),
        ],
    )
    def test_values_models_accept(self, model_input: ModelInput, value: object) -> None:
        """Zeros, ones for masks, 16000 for a sample rate, 1 for other integer scalars."""
        assert default_value(model_input) == value

    def test_batch_stays_1_while_other_dimensions_grow(self) -> None:
        """A named batch dimension, or the first of three or more, stays at 1."""
        audio = ModelInput("input", ("batch", "sequence"), torch.float32)
        state = ModelInput("state", (2, "batch", 128), torch.float32)
        image = ModelInput("image", (None, 3, None, None), torch.float32)

        shapes = [
            [spec.shape for spec in specs] for specs in attempts([audio, state, image], {}, {})
        ]

        assert shapes[:2] == [
            [(1, 1), (2, 1, 128), (1, 3, 1, 1)],
            [(1, 32), (2, 1, 128), (1, 3, 32, 32)],
        ]

    def test_static_inputs_are_tried_once(self) -> None:
        """Nothing dynamic: one attempt only."""
        assert len(list(attempts([ModelInput("x", (1, 4), torch.float32)], {}, {}))) == 1

    def test_errors_name_their_input(self) -> None:
        """An onnxruntime error quoting an input names it; other words do not."""
        inputs = [ModelInput("x", (None,), torch.float32), ModelInput("sr", (), torch.int64)]

        assert mentioned_inputs("Invalid rank for input: x Got: 1", inputs) == ("x",)
        assert mentioned_inputs("Input shape:{1x3}, requested shape:{7}", inputs) == ()


class TestInputsThatCannotBeRead:
    def test_a_name_that_is_not_utf8_is_not_the_devices_fault(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """get_inputs() raising UnicodeDecodeError: skipped with the reason, never FAILED."""
        model = str(doctor_models.named_input(tmp_path / "m.onnx", b"x\xff\xfeabc"))

        code, report = doctor_json(capsys, model, "--device", "cpu")

        assert code == 0
        assert report["verdict"] == "ok"
        assert report["inference"]["status"] == "skipped"
        assert report["inference"]["detail"].startswith(
            "the model's inputs cannot be read: session.get_inputs() raised UnicodeDecodeError"
        )
        assert [finding["kind"] for finding in report["findings"]] == ["inference-skipped"]
        assert "cannot run this model" not in json.dumps(report)
