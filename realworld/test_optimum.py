"""optimum-onnx: a hub-style `from_pretrained` classmethod, on a tiny BERT made locally.

`ORTModelForFeatureExtraction.from_pretrained(path, provider=...)` opens the
session at `session` with that provider and sets `_device` from the
session's first provider. On a CPU-only build optimum refuses
`provider="CUDAExecutionProvider"` itself; on a GPU build whose CUDA
libraries do not load, its availability check passes and the session
silently runs on CPU, which the tests reproduce by disabling that check. The
model then says `cpu`, but the session born during the call asked for CUDA,
so the guard needs no option. The model is a one-layer BERT built from a
`BertConfig` and exported once per module.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from onnx_device_guard import EnvironmentConfigurationError, patch

from .conftest import no_fallback, one_fallback

pytest.importorskip("optimum.onnxruntime")
import optimum.onnxruntime.utils as ort_utils
from optimum.onnxruntime import ORTModelForFeatureExtraction

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # onnxruntime's own fallback notice
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]

TARGET = "optimum.onnxruntime:ORTModelForFeatureExtraction.from_pretrained"
CUDA = "CUDAExecutionProvider"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT's ONNX export."""
    from .tinybert import tiny_bert_onnx

    return tiny_bert_onnx(tmp_path_factory.mktemp("tinybert"))


@pytest.fixture
def cuda_libraries_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU build whose CUDA libraries do not load: optimum's check passes."""
    monkeypatch.setattr(ort_utils, "validate_provider_availability", lambda provider: None)


@pytest.mark.usefixtures("cuda_libraries_missing")
class TestFromPretrained:
    """patch() on optimum's ORTModelForFeatureExtraction.from_pretrained."""

    def test_package_says_cpu_after_a_cuda_request(self, model_dir: Path) -> None:
        """Unguarded, a CUDA request gives a CPU session and a model that says cpu."""
        model = ORTModelForFeatureExtraction.from_pretrained(model_dir, provider=CUDA)
        assert model.providers == ["CPUExecutionProvider"]
        assert str(model.device) == "cpu"

    def test_provider_asked_for_is_reported(
        self, model_dir: Path, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """No option: the CUDA the session asked for is checked although the model says cpu."""
        with patch(TARGET), one_fallback(__file__, warnings_logged):
            model = ORTModelForFeatureExtraction.from_pretrained(model_dir, provider=CUDA)
        assert str(model.device) == "cpu"
        assert "'cuda:0'" in warnings_logged()[0].getMessage()

    def test_device_id_names_the_gpu_asked_for(
        self, model_dir: Path, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """provider_options={'device_id': 1} is a request for cuda:1."""
        with patch(TARGET), one_fallback(__file__, warnings_logged):
            ORTModelForFeatureExtraction.from_pretrained(
                model_dir, provider=CUDA, provider_options={"device_id": 1}
            )
        assert "'cuda:1'" in warnings_logged()[0].getMessage()

    def test_outputs_match_the_unguarded_model(self, model_dir: Path) -> None:
        """The guarded model gives the same hidden states as an unguarded one."""
        import numpy as np

        feeds = {
            "input_ids": np.array([[2, 5, 6, 3]], dtype=np.int64),
            "attention_mask": np.ones((1, 4), dtype=np.int64),
            "token_type_ids": np.zeros((1, 4), dtype=np.int64),
        }
        bare = ORTModelForFeatureExtraction.from_pretrained(model_dir)
        with patch(TARGET, warn=False):
            guarded = ORTModelForFeatureExtraction.from_pretrained(model_dir, provider=CUDA)
        expected = bare.session.run(None, feeds)[0]
        assert (guarded.session.run(None, feeds)[0] == expected).all()

    def test_cpu_load_is_quiet(
        self, model_dir: Path, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """The default CPU provider matches: nothing is reported."""
        with patch(TARGET), no_fallback(warnings_logged):
            ORTModelForFeatureExtraction.from_pretrained(model_dir)

    def test_fail_mode_raises(self, model_dir: Path) -> None:
        """resolution_mode='fail' raises out of from_pretrained, naming the cuda it was asked."""
        with (
            patch(TARGET, resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="cuda"),
        ):
            ORTModelForFeatureExtraction.from_pretrained(model_dir, provider=CUDA)

    def test_fixed_device_option_is_reported(
        self, model_dir: Path, warnings_logged: Callable[[], list[Any]]
    ) -> None:
        """A fixed device='cuda' option still checks a load that asked for the CPU."""
        with patch(TARGET, device="cuda"), one_fallback(__file__, warnings_logged):
            ORTModelForFeatureExtraction.from_pretrained(model_dir)

    def test_undo_restores_the_classmethod(self, model_dir: Path) -> None:
        """After undo() the class holds the very classmethod object it had."""
        before = vars(ORTModelForFeatureExtraction).get("from_pretrained")
        with patch(TARGET, warn=False):
            ORTModelForFeatureExtraction.from_pretrained(model_dir, provider=CUDA)
        assert vars(ORTModelForFeatureExtraction).get("from_pretrained") is before


def test_patched_before_optimum_is_imported(model_dir: Path) -> None:
    """`patch` above the imports: optimum.onnxruntime is a lazy module (`_LazyModule`).

    Before, the patch looked for the class in the module object that ran the
    package's code, which holds none of the lazy names, and the import failed
    with "has no attribute 'ORTModelForFeatureExtraction'".
    """
    script = f"""
import warnings
warnings.simplefilter("ignore")
from onnx_device_guard import patch
handle = patch({TARGET!r}, device="cuda", warn=False)
from optimum.onnxruntime import ORTModelForFeatureExtraction
model = ORTModelForFeatureExtraction.from_pretrained({str(model_dir)!r})
print(handle.active, type(vars(ORTModelForFeatureExtraction)["from_pretrained"]).__name__)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "PatchedFunction"]
