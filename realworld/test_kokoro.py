"""kokoro-onnx: an alternative constructor that builds the instance with `cls.__new__`.

`Kokoro(model_path, voices_path)` opens its own session at `sess` (providers
from the `ONNX_PROVIDER` environment variable, else CPU), so
`patch("kokoro_onnx:Kokoro")` needs no option: the session born during the
load asked for what `ONNX_PROVIDER` says. `Kokoro.from_session(session,
voices_path)` takes a session the caller made and builds the instance with
`cls.__new__(cls)`, so `__init__` never runs and a guard on the class does
not see it: patch the classmethod too. Its session was born before the call
and is found on the instance; what it asked for is known when a patch was in
force as it was made. A session made before any patch is unknown, and
Kokoro keeps no device attribute, so that one needs `device=`. The model is a
tiny ONNX graph with Kokoro's inputs and a one-voice voices.npz written by the
test; espeak-ng comes inside espeakng-loader's wheel, so `create()` runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime
import pytest

from onnx_device_guard import DeviceGuardError, EnvironmentConfigurationError, patch

from .conftest import no_fallback, one_fallback
from .tinykokoro import tiny_kokoro_files

kokoro_onnx = pytest.importorskip("kokoro_onnx")
pytest.importorskip("onnx")

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # onnxruntime's own fallback notice
]

CLASS = "kokoro_onnx:Kokoro"
FROM_SESSION = "kokoro_onnx:Kokoro.from_session"
CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A tiny model with Kokoro's inputs (audio = style) and a voices.npz with one voice."""
    return tiny_kokoro_files(tmp_path_factory.mktemp("kokoro"))


def cuda_session(path: str) -> Any:
    """A session asked for CUDA: on a CPU-only build onnxruntime falls back to CPU."""
    return onnxruntime.InferenceSession(path, providers=CUDA)


@pytest.fixture
def cuda_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX_PROVIDER=CUDAExecutionProvider, Kokoro's own way to ask for the GPU."""
    monkeypatch.setenv("ONNX_PROVIDER", "CUDAExecutionProvider")


class TestInit:
    """patch(CLASS) alone: Kokoro(...) opens its session from ONNX_PROVIDER."""

    @pytest.mark.usefixtures("cuda_provider")
    def test_provider_variable_is_reported_and_speaks(
        self, files: tuple[str, str], warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """ONNX_PROVIDER=CUDAExecutionProvider: one fallback, and create() still speaks."""
        model_path, voices = files
        with patch(CLASS), one_fallback(__file__, warnings_logged):
            tts = kokoro_onnx.Kokoro(model_path, voices)
        assert tts.sess.get_providers() == ["CPUExecutionProvider"]
        audio, rate = tts.create("hello world", voice="af_test")
        assert rate == 24000
        assert np.allclose(audio, 0.5)

    def test_cpu_is_quiet(
        self, files: tuple[str, str], warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """Without ONNX_PROVIDER the session asks for the CPU: nothing is reported."""
        model_path, voices = files
        assert "ONNX_PROVIDER" not in os.environ
        with patch(CLASS), no_fallback(warnings_logged):
            kokoro_onnx.Kokoro(model_path, voices)

    @pytest.mark.usefixtures("cuda_provider")
    def test_fail_mode_names_the_model(self, files: tuple[str, str]) -> None:
        """resolution_mode='fail' raises out of Kokoro(...), naming Kokoro."""
        model_path, voices = files
        with (
            patch(CLASS, resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="Kokoro"),
        ):
            kokoro_onnx.Kokoro(model_path, voices)


class TestFromSession:
    """patch(FROM_SESSION): the instance is built around a session the caller made."""

    def test_session_made_under_the_patch_needs_no_option(
        self, files: tuple[str, str], warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """The session asked for CUDA while the patch was in force: its drop is reported at
        birth (no load owns it yet), and the model's fallback at the load."""
        model_path, voices = files
        with patch(FROM_SESSION), one_fallback(__file__, warnings_logged, count=2):
            session = cuda_session(model_path)
            tts = kokoro_onnx.Kokoro.from_session(session, voices)
        assert tts.sess.get_providers() == ["CPUExecutionProvider"]
        audio, _ = tts.create("hello world", voice="af_test")
        assert np.allclose(audio, 0.5)

    def test_session_made_before_any_patch_needs_the_device_option(
        self, files: tuple[str, str], warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """What an earlier session asked for is unknown: device='cuda' says it, one fallback."""
        model_path, voices = files
        session = cuda_session(model_path)
        with patch(FROM_SESSION, device="cuda"), one_fallback(__file__, warnings_logged):
            kokoro_onnx.Kokoro.from_session(session, voices)

    def test_session_made_before_any_patch_without_an_option_is_refused(
        self, files: tuple[str, str]
    ) -> None:
        """No option and no record of the session: a DeviceGuardError suggesting device=."""
        model_path, voices = files
        session = cuda_session(model_path)
        with patch(FROM_SESSION), pytest.raises(DeviceGuardError, match="device="):
            kokoro_onnx.Kokoro.from_session(session, voices)

    def test_fail_mode_names_the_model(self, files: tuple[str, str]) -> None:
        """resolution_mode='fail' raises out of from_session, naming Kokoro."""
        model_path, voices = files
        with patch(FROM_SESSION, resolution_mode="fail"):
            session = cuda_session(model_path)
            with pytest.raises(EnvironmentConfigurationError, match="Kokoro"):
                kokoro_onnx.Kokoro.from_session(session, voices)


class TestBothPatches:
    """patch(CLASS) and patch(FROM_SESSION) together, with no options."""

    @pytest.mark.usefixtures("cuda_provider")
    def test_each_constructor_reports_its_own_fallback_once(
        self, files: tuple[str, str], warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """from_session and Kokoro(...) each report one fallback; the session made for the
        first, outside both loads, reports its own drop at birth."""
        model_path, voices = files
        with (
            patch(CLASS),
            patch(FROM_SESSION),
            one_fallback(__file__, warnings_logged, count=3),
        ):
            kokoro_onnx.Kokoro.from_session(cuda_session(model_path), voices)
            kokoro_onnx.Kokoro(model_path, voices)

    def test_undo_restores_the_class_and_the_classmethod(self, files: tuple[str, str]) -> None:
        """After undo() Kokoro holds its own __init__ and from_session again."""
        model_path, voices = files
        before = dict(vars(kokoro_onnx.Kokoro))
        with patch(CLASS), patch(FROM_SESSION):
            kokoro_onnx.Kokoro(model_path, voices)
        assert {k: vars(kokoro_onnx.Kokoro).get(k) for k in before} == before
