"""Device indices torch cannot address are errors everywhere a device is passed.

torch keeps a device index in a signed byte and changes larger ones without a
word: ``"cuda:256"`` parses as ``cuda:0``, ``"cuda:128"`` as index 65408, and
``torch.device("cuda", 128)`` as ``cuda:-128``. Every device a user passes,
as a string or a ``torch.device``, must have an index torch really
addresses, or raise ``ModelInputError`` naming it: in the core, the guard,
the scopes and the doctor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from onnx_device_guard import (
    EnvironmentConfigurationError,
    ModelInputError,
    align_device_with_onnx_session,
    aligned_device,
    device_guard,
    device_policy,
)
from onnx_device_guard._cli import main

from .sessions import cpu_session, cuda_session

BAD_STRINGS = ["cuda:128", "cuda:256", "cuda:65536", "cuda:4294967296", "cpu:300", "meta:999"]
BAD_DEVICES = [torch.device("cuda", 128), torch.device("cuda", 200), torch.device("meta", 250)]
BAD = [*BAD_STRINGS, *BAD_DEVICES]
CUDA1 = torch.device("cuda", 1)
bad = pytest.mark.parametrize("device", BAD, ids=[str(d) for d in BAD])


@dataclass
class Model:
    session: Any
    device: Any


class TestCore:
    """align_device_with_onnx_session checks the device and the fallback device."""

    @bad
    @pytest.mark.parametrize("session", [cpu_session(), cuda_session(0)], ids=["cpu", "gpu"])
    def test_device(self, device: Any, session: Any) -> None:
        """Before: cuda:256 was aligned as cuda:0 (kept on a GPU session, silently)."""
        with pytest.raises(ModelInputError, match="cannot address") as info:
            align_device_with_onnx_session(session, device)
        assert "device=" in info.value.message

    @bad
    def test_fallback_device(self, device: Any) -> None:
        """Before: fallback_device='cuda:128' returned a device with index 65408."""
        with pytest.raises(ModelInputError, match="fallback_device="):
            align_device_with_onnx_session(cpu_session(), "cuda:0", None, device)

    def test_string_names_the_index_as_written(self) -> None:
        """The message names the index the user wrote, not the one torch made of it."""
        with pytest.raises(ModelInputError, match="'cuda:256' has device index 256"):
            align_device_with_onnx_session(cpu_session(), "cuda:256")

    @pytest.mark.parametrize("device", ["cuda:127", torch.device("cuda", 127), "cuda:0", "cuda"])
    def test_addressable_indices_are_kept(self, device: Any) -> None:
        """Up to 127, and no index at all, are devices as before."""
        expected = torch.device(device) if isinstance(device, str) else device
        assert align_device_with_onnx_session(cuda_session(None), device) == expected


class TestNumpyIntegers:
    """numpy's integers are CUDA indices, as torch reads them, wherever an int is."""

    @pytest.mark.parametrize("kind", ["int64", "uint8", "intc"])
    def test_the_core_reads_them_as_an_int(self, kind: str) -> None:
        """np.int64(1) is cuda:1 (before: refused as no device)."""
        assert align_device_with_onnx_session(cuda_session(1), getattr(np, kind)(1)) == CUDA1

    def test_an_index_torch_cannot_address_is_refused(self) -> None:
        with pytest.raises(ModelInputError, match="cannot address"):
            align_device_with_onnx_session(cuda_session(0), np.int64(200))

    def test_numpy_bools_are_no_index(self) -> None:
        with pytest.raises(ModelInputError, match="CUDA index"):
            align_device_with_onnx_session(cuda_session(0), np.True_)  # type: ignore[arg-type]

    def test_the_device_option_takes_them(self) -> None:
        """device=np.int64(1) is cuda:1, as device=1 is (before: refused as no CUDA index)."""

        @device_guard(device=np.int64(1), resolution_mode="fail")
        def load() -> Model:
            return Model(cpu_session(), "cpu")

        with pytest.raises(EnvironmentConfigurationError, match="'cuda:1'"):
            load()

    def test_a_calls_numpy_index_is_checked(self) -> None:
        """Before: a call's np.int64(1) was left to the package without a word, in "fail"."""

        @device_guard(resolution_mode="fail")
        def load(device: Any = "cpu") -> Model:
            return Model(cpu_session(), "cpu")

        with pytest.raises(EnvironmentConfigurationError, match="'cuda:1'"):
            load(device=np.int64(1))


class TestGuard:
    """device_guard checks its fallback_device at decoration and the model's device at call."""

    @bad
    def test_model_device(self, device: Any) -> None:
        """A model holding such a device: ModelInputError naming it, the model untouched."""
        model = Model(cuda_session(0), device)

        @device_guard
        def load() -> Model:
            return model

        with pytest.raises(ModelInputError, match="cannot address"):
            load()
        assert model.device is device

    @bad
    def test_fallback_option(self, device: Any) -> None:
        """device_guard(fallback_device=...) is refused when applied."""
        with pytest.raises(ModelInputError, match="fallback_device="):
            device_guard(fallback_device=device)


class TestScopes:
    """device_policy and aligned_device check the devices they are given."""

    @bad
    def test_device_policy(self, device: Any) -> None:
        """device_policy(fallback_device=...) is refused on construction."""
        with pytest.raises(ModelInputError, match="fallback_device="):
            device_policy(fallback_device=device)

    @bad
    def test_aligned_device(self, device: Any) -> None:
        """aligned_device refuses the device and the fallback device alike."""
        with (
            pytest.raises(ModelInputError, match="cannot address"),
            aligned_device(cuda_session(0), device),
        ):
            raise AssertionError("not reached")
        with (
            pytest.raises(ModelInputError, match="fallback_device="),
            aligned_device(cpu_session(), "cuda:0", fallback_device=device),
        ):
            raise AssertionError("not reached")


class TestDoctor:
    """The doctor's --device: exit 2 with one line naming the device."""

    @pytest.mark.parametrize("device", BAD_STRINGS)
    def test_exit_2_one_line(self, device: str, capsys: pytest.CaptureFixture[str]) -> None:
        """Before: --device cuda:256 was reported as cuda:0."""
        assert main(["doctor", "--device", device]) == 2
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        assert len(lines) == 1
        assert repr(device) in lines[0]
        assert captured.out == ""


class TestMalformedIndices:
    """An index written with leading zeros is malformed, not unaddressable."""

    @pytest.mark.parametrize("text", ["cuda:01", "cuda:00000000000000000001", "cuda:007"])
    def test_leading_zeros_are_called_malformed(self, text: str) -> None:
        """Before: 'cuda:00000000000000000001' was said to have an index torch cannot address."""
        with pytest.raises(ModelInputError, match="malformed") as info:
            align_device_with_onnx_session(cpu_session(), text)
        assert "cannot address" not in info.value.message
