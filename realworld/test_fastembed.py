"""fastembed: `TextEmbedding` with no device attribute, and sessions opened lazily.

`TextEmbedding(name, cuda=True, device_ids=[...])` asks for CUDA through its
arguments, which fastembed turns into the session's providers
(`("CUDAExecutionProvider", {"device_id": N})`); the class keeps no device
attribute, and the guard needs no option: the session born during the load
asked for `cuda:N`. Its backend (`model`) holds the session at `model.model`.
With `lazy_load=True` that session does not exist until the first `embed()`
opens it; the load is let through and the session is checked as it is born,
in that `embed()`. On a CPU-only build fastembed refuses `cuda=True` itself; on a GPU
build whose CUDA libraries do not load it passes, and onnxruntime falls back
to CPU: the tests reproduce that by listing CUDA among the available
providers. The model is a tiny BERT exported locally, registered with
`add_custom_model` and loaded from `specific_model_path`: nothing is downloaded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest

from onnx_device_guard import DeviceGuardError, EnvironmentConfigurationError, patch

from .conftest import no_fallback, one_fallback

fastembed = pytest.importorskip("fastembed")
from fastembed.common.model_description import ModelSource, PoolingType  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # onnxruntime's own fallback notice
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),  # fastembed's "failed to set CUDA"
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]

TARGET = "fastembed:TextEmbedding"
NAME = "local/tiny-bert"
TEXTS = ["hello world", "the cat sat on the mat"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny BERT, registered with fastembed under NAME."""
    from .tinybert import HIDDEN, tiny_bert_onnx

    path = tiny_bert_onnx(tmp_path_factory.mktemp("tinybert"))
    with contextlib.suppress(ValueError):  # already registered in this process
        fastembed.TextEmbedding.add_custom_model(
            NAME,
            pooling=PoolingType.MEAN,
            normalization=True,
            sources=ModelSource(hf=NAME),
            dim=HIDDEN,
            model_file="model.onnx",
        )
    return str(path)


@pytest.fixture
def cuda_libraries_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU build whose CUDA libraries do not load: CUDA is listed, sessions run on CPU."""
    real = onnxruntime.get_available_providers
    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", *real()]
    )


def load(model_dir: str, tmp_path: Path, **options: Any) -> Any:
    return fastembed.TextEmbedding(
        NAME, specific_model_path=model_dir, cache_dir=str(tmp_path), **options
    )


@pytest.fixture(scope="module")
def unguarded(model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The embeddings without any guard."""
    return np.stack(list(load(model_dir, tmp_path_factory.mktemp("cache")).embed(TEXTS)))


@pytest.mark.usefixtures("cuda_libraries_missing")
class TestEagerLoad:
    """patch(TARGET) alone on fastembed's TextEmbedding, the session opened in __init__."""

    def test_cuda_request_is_reported(
        self, model_dir: str, tmp_path: Path, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """cuda=True puts CUDA in the session's providers: one fallback for the CPU session."""
        with patch(TARGET), one_fallback(__file__, warnings_logged):
            embedder = load(model_dir, tmp_path, cuda=True)
        assert embedder.model.model.get_providers() == ["CPUExecutionProvider"]
        assert not hasattr(embedder, "device")  # checked, not given one

    def test_device_ids_name_the_gpu_asked_for(
        self, model_dir: str, tmp_path: Path, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """device_ids=[1] becomes the provider's device_id, a request for cuda:1."""
        with patch(TARGET), one_fallback(__file__, warnings_logged):
            load(model_dir, tmp_path, cuda=True, device_ids=[1])
        assert "'cuda:1'" in warnings_logged()[0].getMessage()

    def test_cpu_is_quiet_and_answers_the_same(
        self,
        model_dir: str,
        tmp_path: Path,
        unguarded: Any,
        warnings_logged: Callable[[], list[Any]],
    ) -> None:
        """cuda=False asks for the CPU: nothing reported, same embeddings."""
        with patch(TARGET), no_fallback(warnings_logged):
            embedder = load(model_dir, tmp_path, cuda=False)
        np.testing.assert_allclose(np.stack(list(embedder.embed(TEXTS))), unguarded)

    def test_fail_mode_names_the_model(self, model_dir: str, tmp_path: Path) -> None:
        """resolution_mode='fail' raises naming TextEmbedding."""
        with (
            patch(TARGET, resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="TextEmbedding"),
        ):
            load(model_dir, tmp_path, cuda=True)


@pytest.mark.usefixtures("cuda_libraries_missing")
class TestLazyLoad:
    """patch(TARGET) on TextEmbedding(lazy_load=True): the session is born at the first embed()."""

    def test_session_is_checked_when_it_is_born(
        self,
        model_dir: str,
        tmp_path: Path,
        unguarded: Any,
        warnings_logged: Callable[[], list[Any]],
    ) -> None:
        """Nothing at load; the first embedding pass reports one fallback; the next, none."""
        with patch(TARGET):
            with no_fallback(warnings_logged):
                embedder = load(model_dir, tmp_path, cuda=True, lazy_load=True)
            assert "model" not in vars(embedder.model)  # no session yet
            with one_fallback(__file__, warnings_logged):
                got = np.stack(list(embedder.embed(TEXTS)))
            assert embedder.model.model.get_providers() == ["CPUExecutionProvider"]
            np.testing.assert_allclose(got, unguarded)
            list(embedder.embed(TEXTS))  # the session is checked once, not again
            assert len(warnings_logged()) == 1

    def test_fail_mode_raises_from_the_first_embedding(
        self, model_dir: str, tmp_path: Path
    ) -> None:
        """resolution_mode='fail': the load passes; the first embedding pass raises."""
        with patch(TARGET, resolution_mode="fail"):
            embedder = load(model_dir, tmp_path, cuda=True, lazy_load=True)
            with pytest.raises(EnvironmentConfigurationError, match="TextEmbedding"):
                list(embedder.embed(TEXTS))

    def test_cpu_lazy_load_is_quiet(
        self, model_dir: str, tmp_path: Path, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """cuda=False, lazily: the session born asks for the CPU, nothing is reported."""
        with patch(TARGET), no_fallback(warnings_logged):
            embedder = load(model_dir, tmp_path, cuda=False, lazy_load=True)
            list(embedder.embed(TEXTS))
        assert embedder.model.model.get_providers() == ["CPUExecutionProvider"]

    def test_require_session_true_refuses_the_lazy_model(
        self, model_dir: str, tmp_path: Path
    ) -> None:
        """require_session=True keeps the old refusal, naming the paths searched."""
        with (
            patch(TARGET, require_session=True),
            pytest.raises(DeviceGuardError, match="session_attr=") as raised,
        ):
            load(model_dir, tmp_path, cuda=True, lazy_load=True)
        assert "'model'" in str(raised.value)  # the backend, searched
