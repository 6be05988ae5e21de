"""`example_model`: a tiny ONNX model to try the library on, with nothing to download."""

from __future__ import annotations

import atexit
from contextlib import ExitStack
from importlib.resources import as_file, files

_extracted = ExitStack()
"""A model copied out of a zip install, removed when the interpreter exits."""
atexit.register(_extracted.close)
_path: str | None = None


def example_model() -> str:
    """Return the path of a tiny ONNX model shipped with the package: `y = x + 1`.

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
    global _path
    if _path is None:  # as_file copies the model out of a zip install, once
        shipped = files("onnx_device_guard") / "data" / "tiny.onnx"
        _path = str(_extracted.enter_context(as_file(shipped)))
    return _path
