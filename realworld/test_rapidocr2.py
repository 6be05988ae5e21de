"""rapidocr 2: three sessions, each inside the package's wrapper kept under `session`.

`RapidOCR(params=...)` keeps an `OrtInferSession` at `session` on each stage
(`text_det`, `text_cls`, `text_rec`); the real sessions are at
`text_det.session.session` and so on. The GPU request is
`EngineConfig.onnxruntime.use_cuda`; on a CPU-only build each wrapper logs a
notice and opens a CPU session. No device attribute: the guard is given
`device="cuda"`. The models ship in the wheel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from onnx_device_guard import EnvironmentConfigurationError, patch

from .conftest import changed, no_fallback, one_fallback, snapshot

rapidocr = pytest.importorskip("rapidocr")

TARGET = "rapidocr:RapidOCR"
CUDA = {"EngineConfig.onnxruntime.use_cuda": True}
SESSIONS = ("text_det.session.session", "text_cls.session.session", "text_rec.session.session")


class TestRapidOCR2:
    """patch() on rapidocr's RapidOCR pipeline."""

    def test_three_wrapped_sessions_one_fallback(
        self, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """The three sessions inside wrappers are found: one fallback for the pipeline."""
        with patch(TARGET, device="cuda"), one_fallback(__file__, warnings_logged):
            engine = rapidocr.RapidOCR(params=CUDA)
        for stage in (engine.text_det, engine.text_cls, engine.text_rec):
            assert type(stage.session).__name__ == "OrtInferSession"
            assert stage.session.session.get_providers() == ["CPUExecutionProvider"]

    def test_dotted_paths(self, warnings_logged: Callable[[], list[Any]]) -> None:
        """Naming the three dotted paths gives the same one fallback."""
        with (
            patch(TARGET, device="cuda", session_attr=SESSIONS),
            one_fallback(__file__, warnings_logged),
        ):
            rapidocr.RapidOCR(params=CUDA)

    def test_cpu_request_is_quiet(self, warnings_logged: Callable[[], list[Any]]) -> None:
        """device='cpu' matches the CPU sessions: nothing is reported."""
        with patch(TARGET, device="cpu"), no_fallback(warnings_logged):
            rapidocr.RapidOCR()

    def test_fail_mode_names_the_model(self) -> None:
        """resolution_mode='fail' raises naming RapidOCR."""
        with (
            patch(TARGET, device="cuda", resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="RapidOCR"),
        ):
            rapidocr.RapidOCR(params=CUDA)

    def test_undo_restores_the_package_exactly(self) -> None:
        """After undo() the class and every module of the package are as before."""
        before = snapshot("rapidocr", rapidocr.RapidOCR)
        with patch(TARGET, device="cuda"):
            rapidocr.RapidOCR()
        assert changed(before, "rapidocr", rapidocr.RapidOCR) == []
