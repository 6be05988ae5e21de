"""`example_model`: a tiny ONNX model to try the library on, with nothing to download."""

from __future__ import annotations

import shutil
import tempfile
from importlib.resources import files
from pathlib import Path

_copy: Path | None = None


def example_model() -> str:
    """Return the path of a tiny ONNX model shipped with the package: `y = x + 1`.

    Its one input `x` is a float tensor of shape `[batch, 4]`. It is what the
    documentation's examples (and `onnx-device-guard doctor` without a
    model) run on, so a first try needs no model of your own.

    Returns:
        The path of the model file, as a string onnxruntime takes.

    Raises:
        OSError: The package is installed inside a zip file and the model
            cannot be copied out of it to a temporary folder.

    Examples:
        >>> import onnxruntime
        >>> from onnx_device_guard import example_model
        >>> session = onnxruntime.InferenceSession(
        ...     example_model(), providers=["CPUExecutionProvider"]
        ... )
        >>> [(model_input.name, model_input.shape) for model_input in session.get_inputs()]
        [('x', ['batch', 4])]
    """
    global _copy
    shipped = files("onnx_device_guard") / "data" / "tiny.onnx"
    if isinstance(shipped, Path):  # installed as plain files, as pip does
        return str(shipped)
    if _copy is None:  # inside a zip: copy it out once
        folder = Path(tempfile.mkdtemp(prefix="onnx-device-guard-"))
        _copy = folder / "tiny.onnx"
        with shipped.open("rb") as source, _copy.open("wb") as target:
            shutil.copyfileobj(source, target)
    return str(_copy)
