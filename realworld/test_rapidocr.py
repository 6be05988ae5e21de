"""rapidocr_onnxruntime: a pipeline holding three sessions in nested helper objects.

`RapidOCR()` keeps its sessions at `text_det.infer.session`,
`text_cls.infer.session` and `text_rec.session.session`; the guard finds them by
discovery, or is told their dotted paths, and is asked for `cuda` through
`device="cuda"`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from onnx_device_guard import EnvironmentConfigurationError, patch

from .conftest import changed, snapshot

rapidocr = pytest.importorskip("rapidocr_onnxruntime")
cv2 = pytest.importorskip("cv2")

TARGET = "rapidocr_onnxruntime:RapidOCR"
SESSIONS = ("text_det.infer.session", "text_cls.infer.session", "text_rec.session.session")


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


class TestRapidOCR:
    """patch() on rapidocr_onnxruntime's RapidOCR pipeline."""

    def test_discovers_three_sessions_warns_once_and_answers_the_same(
        self,
        unguarded: list[tuple[str, list[list[float]]]],
        warnings_logged: Callable[[], list[object]],
    ) -> None:
        """One WARNING for the pipeline's CPU-only sessions, then the same texts and boxes."""
        with patch(TARGET, device="cuda"):
            engine = rapidocr.RapidOCR()
        assert len(warnings_logged()) == 1
        assert read(engine) == unguarded
        # The model reads the last letter of the first line in lower case.
        assert [text.upper() for text, _ in unguarded] == ["HELLO WORLD", "12345"]

    def test_dotted_session_paths(self, warnings_logged: Callable[[], list[object]]) -> None:
        """The three sessions named by dotted paths give the same one WARNING."""
        with patch(TARGET, device="cuda", session_attr=SESSIONS):
            rapidocr.RapidOCR()
        assert len(warnings_logged()) == 1

    def test_fail_mode_names_the_model(self) -> None:
        """resolution_mode='fail' raises EnvironmentConfigurationError naming RapidOCR."""
        with (
            patch(TARGET, device="cuda", resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="RapidOCR"),
        ):
            rapidocr.RapidOCR()

    # Restoring the class does not depend on the options: {} runs before device= exists.
    @pytest.mark.parametrize("options", [{}, {"device": "cuda"}], ids=["no-options", "cuda"])
    def test_undo_restores_the_package_exactly(self, options: dict[str, Any]) -> None:
        """After undo() the class and every module of the package are as before."""
        before = snapshot("rapidocr_onnxruntime", rapidocr.RapidOCR)
        with patch(TARGET, **options):
            if options:
                rapidocr.RapidOCR()
        assert changed(before, "rapidocr_onnxruntime", rapidocr.RapidOCR) == []
        assert rapidocr.RapidOCR is rapidocr.main.RapidOCR
