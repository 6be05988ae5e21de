"""ultralytics: a backend that forwards `device` and `session` through `__getattr__`.

`AutoBackend("model.onnx", device=torch.device("cuda"))` keeps an
`ONNXBackend` at `backend` and forwards every attribute it lacks to it, so
`model.device` and `model.session` are really `model.backend.device` and
`model.backend.session`. Where torch sees no CUDA device (this machine),
`ONNXBackend` opens a CPU session yet keeps the `cuda` device it was given:
the model says `cuda`, nothing is reported, and its first inference fails
moving the picture to CUDA. The guard needs
no option: the session born during the load asked for the CPU only (the
package checks torch's CUDA first), so the call's `device` argument is what
is checked; the fallback is written to `backend.device`, where every view of
it reads it, and messages name the session by its model file.

ultralytics needs torchvision, whose PyPI build does not import beside the CPU
build of torch 2.13 that the other realworld tests use, so this file runs in a
session of its own: `nox -s realworld_ultralytics`. The model is a one-node
ONNX graph built here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from onnx_device_guard import EnvironmentConfigurationError, patch

from .conftest import changed, no_fallback, one_fallback, snapshot

os.environ.setdefault("YOLO_OFFLINE", "true")  # no update or hub checks
onnx = pytest.importorskip("onnx")
autobackend = pytest.importorskip("ultralytics.nn.autobackend")
AutoBackend = autobackend.AutoBackend

TARGET = "ultralytics.nn.autobackend:AutoBackend"
CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A one-node detector-shaped graph: a 1x3x32x32 image in, the same out."""
    from onnx import TensorProto, helper

    image = helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])
    output = helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 3, 32, 32])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["images"], ["output0"])], "tiny", [image], [output]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("ultralytics") / "tiny.onnx"
    onnx.save(model, str(path))
    return str(path)


def picture() -> torch.Tensor:
    return torch.linspace(0, 1, 3 * 32 * 32).reshape(1, 3, 32, 32)


def load(path: str, device: torch.device = CUDA) -> Any:
    return AutoBackend(path, device=device, verbose=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
class TestUltralytics:
    """patch() on ultralytics' AutoBackend, asked for CUDA on a machine without it."""

    def test_unguarded_says_cuda_and_fails_at_the_first_inference(self, model_file: str) -> None:
        """The failure this library exists for, as the package gives it."""
        model = load(model_file)
        assert model.session.get_providers() == ["CPUExecutionProvider"]
        assert model.device == CUDA
        assert model.backend.device == CUDA
        with pytest.raises(RuntimeError):  # torch: no NVIDIA driver / CUDA not available
            model(picture())

    def test_fallback_is_written_where_the_attribute_lives(
        self, model_file: str, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """One fallback; `backend.device` is written, not shadowed on the outer object."""
        with patch(TARGET), one_fallback(__file__, warnings_logged):
            model = load(model_file)
        assert model.device == torch.device("cpu")
        assert model.backend.device == torch.device("cpu")
        assert "device" not in vars(model)
        assert torch.equal(model(picture()), picture())  # the graph is an Identity

    def test_fail_mode_names_the_session_and_the_request(self, model_file: str) -> None:
        """The message names the born session by its file, and the call's device argument."""
        with (
            patch(TARGET, resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError) as raised,
        ):
            load(model_file)
        assert "session 'tiny.onnx'" in raised.value.message
        assert "the call's device argument" in raised.value.message

    def test_cpu_request_is_quiet(
        self, model_file: str, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """device=cpu matches the CPU session: nothing is reported."""
        with patch(TARGET), no_fallback(warnings_logged):
            model = load(model_file, torch.device("cpu"))
        assert model.device == torch.device("cpu")

    def test_undo_restores_the_package_exactly(self, model_file: str) -> None:
        """After undo() the class and every module of the package are as before."""
        before = snapshot("ultralytics", AutoBackend)
        with patch(TARGET):
            load(model_file)
        assert changed(before, "ultralytics", AutoBackend) == []
        assert Path(autobackend.__file__).is_file()
