"""rapidocr_onnxruntime: a pipeline holding three sessions in nested helper objects.

`RapidOCR(det_use_cuda=True, cls_use_cuda=True, rec_use_cuda=True)` asks for
CUDA through each session's providers, and keeps the sessions at
`text_det.infer.session`, `text_cls.infer.session` and
`text_rec.session.session`. The guard needs no option: it takes the three
sessions born during the load and the CUDA their providers asked for. The
package asks for CUDA only where onnxruntime lists it, so the tests list it
as a GPU build whose CUDA libraries do not load does; on this CPU-only build
the package gives up on CUDA before asking, and only `device="cuda"` hears
the request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from onnx_device_guard import EnvironmentConfigurationError, patch

from .conftest import changed, cuda_listed, no_fallback, one_fallback, snapshot

rapidocr = pytest.importorskip("rapidocr_onnxruntime")
cv2 = pytest.importorskip("cv2")

TARGET = "rapidocr_onnxruntime:RapidOCR"
SESSIONS = ("text_det.infer.session", "text_cls.infer.session", "text_rec.session.session")
USE_CUDA = {"det_use_cuda": True, "cls_use_cuda": True, "rec_use_cuda": True}
Logged = Callable[[], list[logging.LogRecord]]


def image() -> np.ndarray[Any, Any]:
    """A small white image with two lines of black printed text."""
    canvas = np.full((120, 420, 3), 255, dtype=np.uint8)
    font = cv2.FONT_HERSHEY_SIMPLEX
    cv2.putText(canvas, "HELLO WORLD", (10, 50), font, 1.4, (0, 0, 0), 3, cv2.LINE_AA)
    cv2.putText(canvas, "12345", (10, 105), font, 1.4, (0, 0, 0), 3, cv2.LINE_AA)
    return canvas


def read(engine: Any) -> list[tuple[str, list[list[float]]]]:
    """The texts the engine reads, with their boxes."""
    result, _ = engine(image())
    return [(text, np.asarray(box).tolist()) for box, text, _score in result or []]


@pytest.fixture(scope="module")
def unguarded() -> list[tuple[str, list[list[float]]]]:
    """RapidOCR's answer without any guard."""
    return read(rapidocr.RapidOCR())


@pytest.fixture
def cuda_libraries_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU build whose CUDA libraries do not load: the package asks for CUDA, gets CPU."""
    cuda_listed(monkeypatch, rapidocr.utils.infer_engine)


def providers(engine: Any) -> list[list[str]]:
    """The providers each of the pipeline's three sessions runs."""
    return [
        stage.get_providers()
        for stage in (engine.text_det.infer.session, engine.text_cls.infer.session)
    ] + [engine.text_rec.session.session.get_providers()]


@pytest.mark.usefixtures("cuda_libraries_missing")
class TestNoOptions:
    """patch(TARGET) alone, the GPU asked for with the package's own `*_use_cuda`."""

    def test_three_sessions_warn_once_and_answer_the_same(
        self, unguarded: list[tuple[str, list[list[float]]]], warnings_logged: Logged
    ) -> None:
        """One fallback for the pipeline's three CPU sessions, then the same texts and boxes."""
        with patch(TARGET), one_fallback(__file__, warnings_logged):
            engine = rapidocr.RapidOCR(**USE_CUDA)
        assert providers(engine) == [["CPUExecutionProvider"]] * 3
        assert read(engine) == unguarded
        # The model reads the last letter of the first line in lower case.
        assert [text.upper() for text, _ in unguarded] == ["HELLO WORLD", "12345"]

    def test_dotted_session_paths(self, warnings_logged: Logged) -> None:
        """The three sessions named by dotted paths give the same one fallback."""
        with patch(TARGET, session_attr=SESSIONS), one_fallback(__file__, warnings_logged):
            rapidocr.RapidOCR(**USE_CUDA)

    def test_cpu_request_is_quiet(self, warnings_logged: Logged) -> None:
        """The default config asks for the CPU: nothing is reported."""
        with patch(TARGET), no_fallback(warnings_logged):
            rapidocr.RapidOCR()

    def test_fail_mode_names_the_model(self) -> None:
        """resolution_mode='fail' raises EnvironmentConfigurationError naming RapidOCR."""
        with (
            patch(TARGET, resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="RapidOCR"),
        ):
            rapidocr.RapidOCR(**USE_CUDA)


class TestCpuOnlyBuild:
    """On a CPU-only build the package opens CPU sessions without asking for CUDA."""

    def test_no_options_hear_nothing(self, warnings_logged: Logged) -> None:
        """No session asked for CUDA, so patch(TARGET) alone has nothing to report."""
        with patch(TARGET), no_fallback(warnings_logged):
            engine = rapidocr.RapidOCR(**USE_CUDA)
        assert providers(engine) == [["CPUExecutionProvider"]] * 3

    def test_device_option_is_reported(self, warnings_logged: Logged) -> None:
        """device='cuda' speaks for the request: one fallback for the pipeline."""
        with patch(TARGET, device="cuda"), one_fallback(__file__, warnings_logged):
            rapidocr.RapidOCR(**USE_CUDA)

    def test_fail_mode_with_the_device_option(self) -> None:
        """device='cuda' in resolution_mode='fail' raises naming RapidOCR."""
        with (
            patch(TARGET, device="cuda", resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="RapidOCR"),
        ):
            rapidocr.RapidOCR()


class TestUndo:
    """undo() after a guarded load."""

    @pytest.mark.parametrize("options", [{}, {"device": "cuda"}], ids=["no-options", "cuda"])
    def test_undo_restores_the_package_exactly(self, options: dict[str, Any]) -> None:
        """After undo() the class and every module of the package are as before."""
        before = snapshot("rapidocr_onnxruntime", rapidocr.RapidOCR)
        with patch(TARGET, **options):
            rapidocr.RapidOCR()
        assert changed(before, "rapidocr_onnxruntime", rapidocr.RapidOCR) == []
        assert rapidocr.RapidOCR is rapidocr.main.RapidOCR
