"""magika: a plain class that opens `_onnx_session` in `__init__` and has no device.

The guard goes on the class itself (`patch("magika:Magika")`). Magika asks
onnxruntime for the CPU only and takes no device, so with no options there is
no GPU request to check and nothing is reported; `device="cuda"` is the one
option, for a service that wants the GPU, and `session_attr` names the
session instead of taking the one born during the load.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from onnx_device_guard import EnvironmentConfigurationError, patch

from .conftest import changed, no_fallback, one_fallback, snapshot

magika = pytest.importorskip("magika")

TARGET = "magika:Magika"
SAMPLES = {
    "python": b"import os\n\ndef main():\n    print(os.getcwd())\n\nif __name__ == '__main__':\n"
    b"    main()\n" * 4,
    "json": b'{"name": "onnx-device-guard", "tags": ["torch", "onnxruntime"], "count": 3}\n' * 4,
    "html": b"<!DOCTYPE html><html><head><title>t</title></head><body><p>hi</p></body></html>\n"
    * 4,
}


def labels(identifier: object) -> dict[str, str]:
    """The content type the identifier finds for each sample."""
    return {
        name: str(identifier.identify_bytes(content).output.label)  # type: ignore[attr-defined]
        for name, content in SAMPLES.items()
    }


@pytest.fixture(scope="module")
def unguarded() -> dict[str, str]:
    """Magika's answers without any guard."""
    return labels(magika.Magika())


class TestMagika:
    """patch() on magika's Magika class."""

    def test_no_options_is_quiet_and_answers_the_same(
        self, unguarded: dict[str, str], warnings_logged: Callable[[], list[logging.LogRecord]]
    ) -> None:
        """The session Magika asked for the CPU runs there: nothing reported, the same labels."""
        with patch(TARGET), no_fallback(warnings_logged):
            identifier = magika.Magika()
        assert isinstance(identifier, magika.Magika)
        assert labels(identifier) == unguarded
        assert unguarded["python"] == "python"  # the samples are what they claim

    def test_device_option_warns_once_and_answers_the_same(
        self, unguarded: dict[str, str], warnings_logged: Callable[[], list[logging.LogRecord]]
    ) -> None:
        """device='cuda': one fallback for the CPU-only session, then the same labels."""
        with patch(TARGET, device="cuda"), one_fallback(__file__, warnings_logged):
            identifier = magika.Magika()
        assert labels(identifier) == unguarded

    def test_explicit_session_attr(
        self, warnings_logged: Callable[[], list[logging.LogRecord]]
    ) -> None:
        """Naming `_onnx_session` instead of taking the born session gives the same fallback."""
        with (
            patch(TARGET, device="cuda", session_attr="_onnx_session"),
            one_fallback(__file__, warnings_logged),
        ):
            magika.Magika()

    def test_fail_mode_names_the_model(self) -> None:
        """resolution_mode='fail' raises EnvironmentConfigurationError naming Magika."""
        with (
            patch(TARGET, device="cuda", resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="Magika"),
        ):
            magika.Magika()

    @pytest.mark.parametrize("options", [{}, {"device": "cuda"}], ids=["no-options", "cuda"])
    def test_undo_restores_the_package_exactly(self, options: dict[str, Any]) -> None:
        """After undo() the class and every module of the package are as before."""
        before = snapshot("magika", magika.Magika)
        with patch(TARGET, **options):
            magika.Magika()
        assert changed(before, "magika", magika.Magika) == []
        assert magika.Magika is magika.magika.Magika
