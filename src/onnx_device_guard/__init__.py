"""Keep a model's torch device in line with what its onnxruntime session can read.

onnxruntime drops a GPU execution provider it cannot load without raising; the
session then runs on CPU and the model's CUDA tensors fail at the first IO
binding. This package aligns the device up front:

* `align_device_with_onnx_session`, the core;
* `device_guard`, a decorator for `from_pretrained`-style factories;
* `device_policy` and `aligned_device`, scopes for a block of code;
* `realign`, to align an existing model object again;
* `patch`, which guards another package's loader where it is defined;
* `onnx-device-guard doctor`, a command that explains a mismatch.

Documentation: https://onnx-device-guard.readthedocs.io/en/latest/
"""

from importlib.metadata import PackageNotFoundError, version

from ._alignment import align_device_with_onnx_session, aligned_device
from ._decorator import device_guard
from ._errors import DeviceGuardError, EnvironmentConfigurationError, ModelInputError
from ._model_alignment import realign
from ._patching import patch
from ._policy import DeviceMismatchResolutionMode, device_policy
from ._providers import GPU_CAPABLE_EXECUTION_PROVIDERS

try:
    __version__ = version("onnx-device-guard")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

# Errors show in tracebacks under the name users import them by.
for _error in (DeviceGuardError, ModelInputError, EnvironmentConfigurationError):
    _error.__module__ = __name__
del _error

__all__ = [
    "GPU_CAPABLE_EXECUTION_PROVIDERS",
    "DeviceGuardError",
    "DeviceMismatchResolutionMode",
    "EnvironmentConfigurationError",
    "ModelInputError",
    "__version__",
    "align_device_with_onnx_session",
    "aligned_device",
    "device_guard",
    "device_policy",
    "patch",
    "realign",
]
