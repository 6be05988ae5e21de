"""rapidocr 2: three sessions, each inside the package's wrapper kept under `session`.

`RapidOCR(params=...)` keeps an `OrtInferSession` at `session` on each stage
(`text_det`, `text_cls`, `text_rec`); the real sessions are at
`text_det.session.session` and so on. The GPU request is
`EngineConfig.onnxruntime.use_cuda`, which puts CUDA in each session's
providers, so the guard needs no option. The package asks for CUDA only where
onnxruntime lists it: the tests list it, as a GPU build whose CUDA libraries
do not load does. On this CPU-only build each wrapper logs a notice and opens
a CPU session without asking, and only `device="cuda"` hears the request. The
models ship in the wheel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from onnx_device_guard import EnvironmentConfigurationError, patch

from .conftest import changed, cuda_listed, no_fallback, one_fallback, snapshot

rapidocr = pytest.importorskip("rapidocr")
engine_module = pytest.importorskip("rapidocr.inference_engine.onnxruntime")

TARGET = "rapidocr:RapidOCR"
CUDA = {"EngineConfig.onnxruntime.use_cuda": True}
SESSIONS = ("text_det.session.session", "text_cls.session.session", "text_rec.session.session")
Logged = Callable[[], list[logging.LogRecord]]


@pytest.fixture
def cuda_libraries_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU build whose CUDA libraries do not load: the package asks for CUDA, gets CPU."""
    cuda_listed(monkeypatch, engine_module)


@pytest.mark.usefixtures("cuda_libraries_missing")
class TestNoOptions:
    """patch(TARGET) alone, the GPU asked for with the package's own `use_cuda`."""

    def test_three_wrapped_sessions_one_fallback(self, warnings_logged: Logged) -> None:
        """The three sessions born inside wrappers asked for CUDA: one fallback for the pipeline."""
        with patch(TARGET), one_fallback(__file__, warnings_logged):
            engine = rapidocr.RapidOCR(params=CUDA)
        for stage in (engine.text_det, engine.text_cls, engine.text_rec):
            assert type(stage.session).__name__ == "OrtInferSession"
            assert stage.session.session.get_providers() == ["CPUExecutionProvider"]

    def test_dotted_paths(self, warnings_logged: Logged) -> None:
        """Naming the three dotted paths gives the same one fallback."""
        with patch(TARGET, session_attr=SESSIONS), one_fallback(__file__, warnings_logged):
            rapidocr.RapidOCR(params=CUDA)

    def test_cpu_request_is_quiet(self, warnings_logged: Logged) -> None:
        """The default config asks for the CPU: nothing is reported."""
        with patch(TARGET), no_fallback(warnings_logged):
            rapidocr.RapidOCR()

    def test_fail_mode_names_the_model(self) -> None:
        """resolution_mode='fail' raises naming RapidOCR."""
        with (
            patch(TARGET, resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="RapidOCR"),
        ):
            rapidocr.RapidOCR(params=CUDA)


class TestCpuOnlyBuild:
    """On a CPU-only build the package opens CPU sessions without asking for CUDA."""

    def test_no_options_hear_nothing(self, warnings_logged: Logged) -> None:
        """No session asked for CUDA, so patch(TARGET) alone has nothing to report."""
        with patch(TARGET), no_fallback(warnings_logged):
            rapidocr.RapidOCR(params=CUDA)

    def test_device_option_is_reported(self, warnings_logged: Logged) -> None:
        """device='cuda' speaks for the request: one fallback for the pipeline."""
        with patch(TARGET, device="cuda"), one_fallback(__file__, warnings_logged):
            rapidocr.RapidOCR(params=CUDA)

    def test_cpu_device_option_is_quiet(self, warnings_logged: Logged) -> None:
        """device='cpu' matches the CPU sessions: nothing is reported."""
        with patch(TARGET, device="cpu"), no_fallback(warnings_logged):
            rapidocr.RapidOCR()


class TestUndo:
    """undo() after a guarded load."""

    def test_undo_restores_the_package_exactly(self) -> None:
        """After undo() the class and every module of the package are as before."""
        before = snapshot("rapidocr", rapidocr.RapidOCR)
        with patch(TARGET):
            rapidocr.RapidOCR()
        assert changed(before, "rapidocr", rapidocr.RapidOCR) == []
