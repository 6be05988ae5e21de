"""kokoro-onnx: an alternative constructor that builds the instance with `cls.__new__`.

`Kokoro(model_path, voices_path)` opens its own session at `sess` (providers
from the `ONNX_PROVIDER` environment variable, else CPU);
`Kokoro.from_session(session, voices_path)` takes a session the caller made
and builds the instance with `cls.__new__(cls)`, so `__init__` never runs and
a guard on the class does not see it: patch the classmethod too. Neither keeps
a device attribute, so the guard is given `device=`. The model is a tiny ONNX
graph with Kokoro's inputs and a one-voice voices.npz written by the test;
espeak-ng comes inside espeakng-loader's wheel, so `create()` runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime
import pytest

from onnx_device_guard import EnvironmentConfigurationError, patch

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


def from_environment(arguments: dict[str, Any]) -> str:
    """The device Kokoro's ONNX_PROVIDER environment variable asks for."""
    return "cuda" if "CUDA" in os.environ.get("ONNX_PROVIDER", "") else "cpu"


class TestKokoro:
    """patch() on kokoro-onnx's Kokoro class and its from_session classmethod."""

    def test_patching_from_session_reports_and_speaks(
        self, files: tuple[str, str], warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """Patching from_session itself: one fallback, and create() still speaks."""
        model_path, voices = files
        with patch(FROM_SESSION, device="cuda"), one_fallback(__file__, warnings_logged):
            tts = kokoro_onnx.Kokoro.from_session(cuda_session(model_path), voices)
        assert tts.sess.get_providers() == ["CPUExecutionProvider"]
        audio, rate = tts.create("hello world", voice="af_test")
        assert rate == 24000
        assert np.allclose(audio, 0.5)

    def test_class_and_classmethod_patched_together(
        self, files: tuple[str, str], warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """Both patches at once: each constructor reports its own fallback once."""
        model_path, voices = files
        with (
            patch(CLASS, device="cuda"),
            patch(FROM_SESSION, device="cuda"),
            one_fallback(__file__, warnings_logged, count=2),
        ):
            kokoro_onnx.Kokoro.from_session(cuda_session(model_path), voices)
            kokoro_onnx.Kokoro(model_path, voices)

    def test_init_reads_the_provider_variable(
        self,
        files: tuple[str, str],
        monkeypatch: pytest.MonkeyPatch,
        warnings_logged: Callable[[], list[Any]],
    ) -> None:
        """ONNX_PROVIDER=CUDAExecutionProvider read through device=: one fallback."""
        model_path, voices = files
        monkeypatch.setenv("ONNX_PROVIDER", "CUDAExecutionProvider")
        with patch(CLASS, device=from_environment), one_fallback(__file__, warnings_logged):
            kokoro_onnx.Kokoro(model_path, voices)

    def test_cpu_is_quiet(
        self, files: tuple[str, str], warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """Without ONNX_PROVIDER the CPU session matches: nothing is reported."""
        model_path, voices = files
        with patch(CLASS, device=from_environment), no_fallback(warnings_logged):
            kokoro_onnx.Kokoro(model_path, voices)

    def test_fail_mode_on_from_session(self, files: tuple[str, str]) -> None:
        """resolution_mode='fail' raises out of from_session, naming Kokoro."""
        model_path, voices = files
        with (
            patch(FROM_SESSION, device="cuda", resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="Kokoro"),
        ):
            kokoro_onnx.Kokoro.from_session(cuda_session(model_path), voices)

    def test_undo_restores_the_class_and_the_classmethod(self) -> None:
        """After undo() Kokoro holds its own __init__ and from_session again."""
        before = dict(vars(kokoro_onnx.Kokoro))
        with patch(CLASS, device="cuda"), patch(FROM_SESSION, device="cuda"):
            pass
        assert {k: vars(kokoro_onnx.Kokoro).get(k) for k in before} == before
