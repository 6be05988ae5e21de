"""silero-vad: a loader function imported under several names, with a non-ONNX default path.

`load_silero_vad()` returns a TorchScript module (no session) by default and
an `OnnxWrapper` holding `session` with `onnx=True`. The package pins that
session to the CPU (`providers=['CPUExecutionProvider']`) and takes no device,
so with no options the guard has no GPU request to check and stays quiet on
both paths; `device="cuda"` is the one option, for a service that wants the
GPU. The TorchScript result passes through without `require_session=False`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from onnx_device_guard import EnvironmentConfigurationError, patch

from .conftest import changed, no_fallback, one_fallback, snapshot

silero_vad = pytest.importorskip("silero_vad")
silero_vad_model = pytest.importorskip("silero_vad.model")

pytestmark = [
    # silero-vad's default path loads TorchScript, which this torch deprecates.
    pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning"),
    # It finds its model file with importlib.resources.path (pytest.warns shows it again).
    pytest.mark.filterwarnings("ignore:path is deprecated:DeprecationWarning"),
]

TARGET = "silero_vad.model:load_silero_vad"
OPTIONS = {"device": "cuda"}
SAMPLE_RATE = 16000
CHUNK = 512


def synthetic_audio() -> torch.Tensor:
    """Half a second of silence, then a second of a voice-like tone, then silence."""
    t = torch.arange(SAMPLE_RATE, dtype=torch.float32) / SAMPLE_RATE
    tone = 0.5 * torch.sin(2 * math.pi * 220 * t) * (1 + 0.5 * torch.sin(2 * math.pi * 3 * t))
    tone += 0.2 * torch.sin(2 * math.pi * 660 * t)
    silence = torch.zeros(SAMPLE_RATE // 2)
    return torch.cat([silence, tone, silence])


def probabilities(model: Callable[..., torch.Tensor]) -> list[float]:
    """The model's speech probability for each 512-sample chunk of the synthetic audio."""
    audio = synthetic_audio()
    reset = getattr(model, "reset_states", None)
    if callable(reset):
        reset()
    chunks = audio[: len(audio) // CHUNK * CHUNK].split(CHUNK)
    with torch.no_grad():
        return [float(model(chunk, SAMPLE_RATE)) for chunk in chunks]


@pytest.fixture(scope="module")
def unguarded_onnx() -> list[float]:
    """The ONNX path's answer without any guard."""
    return probabilities(silero_vad.load_silero_vad(onnx=True))


@pytest.fixture(scope="module")
def unguarded_jit() -> list[float]:
    """The default (TorchScript) path's answer without any guard."""
    return probabilities(silero_vad.load_silero_vad())


class TestSileroVad:
    """patch() on silero-vad's own loader."""

    # Restoring names does not depend on the options: {} runs before device= exists.
    @pytest.mark.parametrize("options", [{}, OPTIONS], ids=["no-options", "cuda"])
    def test_every_alias_is_guarded(self, options: dict[str, Any]) -> None:
        """The package's re-export and the defining module both hold the guarded loader."""
        original = silero_vad_model.load_silero_vad
        with patch(TARGET, **options):
            assert silero_vad.load_silero_vad is silero_vad_model.load_silero_vad
            assert silero_vad.load_silero_vad is not original

    @pytest.mark.parametrize("options", [{}, OPTIONS], ids=["no-options", "cuda"])
    def test_undo_restores_the_package_exactly(self, options: dict[str, Any]) -> None:
        """After undo() every module of the package holds exactly what it held before."""
        original = silero_vad_model.load_silero_vad
        before = snapshot("silero_vad")
        with patch(TARGET, **options):
            silero_vad.load_silero_vad(onnx=True)
        assert changed(before, "silero_vad") == []
        assert silero_vad.load_silero_vad is original
        assert silero_vad_model.load_silero_vad is original


class TestNoOptions:
    """patch(TARGET) alone: the package asks for the CPU only, so nothing is reported."""

    def test_onnx_path_is_quiet_and_answers_the_same(
        self, unguarded_onnx: list[float], warnings_logged: Callable[[], list[logging.LogRecord]]
    ) -> None:
        """onnx=True: the CPU session was asked for on purpose; the same probabilities."""
        with patch(TARGET), no_fallback(warnings_logged):
            model = silero_vad.load_silero_vad(onnx=True)
        assert model.session.get_providers() == ["CPUExecutionProvider"]
        assert probabilities(model) == unguarded_onnx
        assert max(unguarded_onnx) > min(unguarded_onnx)  # the input is not degenerate

    def test_default_path_passes_through(
        self, unguarded_jit: list[float], warnings_logged: Callable[[], list[logging.LogRecord]]
    ) -> None:
        """The TorchScript result, with no session, passes unchanged and silently."""
        with patch(TARGET), no_fallback(warnings_logged):
            model = silero_vad.load_silero_vad()
        assert isinstance(model, torch.jit.ScriptModule)
        assert probabilities(model) == pytest.approx(unguarded_jit)

    def test_fail_mode_loads(self) -> None:
        """resolution_mode='fail' with nothing asked of a GPU loads the ONNX model."""
        with patch(TARGET, resolution_mode="fail"):
            model = silero_vad.load_silero_vad(onnx=True)
        assert model.session.get_providers() == ["CPUExecutionProvider"]


class TestDeviceOption:
    """patch(TARGET, device="cuda"): the one option, for a service that wants the GPU."""

    def test_onnx_path_warns_once_and_answers_the_same(
        self, unguarded_onnx: list[float], warnings_logged: Callable[[], list[logging.LogRecord]]
    ) -> None:
        """onnx=True: one fallback for the CPU-only session, then the same probabilities."""
        with patch(TARGET, **OPTIONS), one_fallback(__file__, warnings_logged):
            model = silero_vad.load_silero_vad(onnx=True)
        assert probabilities(model) == unguarded_onnx

    def test_default_path_passes_through_without_require_session(
        self, unguarded_jit: list[float], warnings_logged: Callable[[], list[logging.LogRecord]]
    ) -> None:
        """The TorchScript result has no session: not refused, nothing reported."""
        with patch(TARGET, **OPTIONS), no_fallback(warnings_logged):
            model = silero_vad.load_silero_vad()
        assert isinstance(model, torch.jit.ScriptModule)
        assert probabilities(model) == pytest.approx(unguarded_jit)

    def test_fail_mode_names_the_model(self) -> None:
        """resolution_mode='fail' raises EnvironmentConfigurationError naming the model."""
        with (
            patch(TARGET, **OPTIONS, resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="OnnxWrapper"),
        ):
            silero_vad.load_silero_vad(onnx=True)
