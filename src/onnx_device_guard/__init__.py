"""Keep a model's torch device in line with what its onnxruntime session can read.

Names are imported on first use, so `import onnx_device_guard` (and the command
line's `--help`) does not import torch. CONTRIBUTING.md shows the modules' layers.

Documentation: https://onnx-device-guard.readthedocs.io/en/latest/
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from ._errors import (
    DeviceFallbackWarning,
    DeviceGuardError,
    EnvironmentConfigurationError,
    ModelInputError,
)

if TYPE_CHECKING:
    from ._alignment import align_device_with_onnx_session, aligned_device
    from ._births import SessionWatch, watch_sessions
    from ._guard import device_guard
    from ._model_alignment import realign
    from ._options import DeviceMismatchResolutionMode
    from ._patch import Patch, patch
    from ._policy import device_policy
    from ._providers import GPU_CAPABLE_EXECUTION_PROVIDERS
    from ._tiny import example_model

try:
    __version__ = version("onnx-device-guard")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

# Errors and warnings show in tracebacks under the name users import them by.
for _error in (
    DeviceGuardError,
    ModelInputError,
    EnvironmentConfigurationError,
    DeviceFallbackWarning,
):
    _error.__module__ = __name__
del _error

_LAZY = {
    "GPU_CAPABLE_EXECUTION_PROVIDERS": "._providers",
    "DeviceMismatchResolutionMode": "._options",
    "Patch": "._patch",
    "SessionWatch": "._births",
    "align_device_with_onnx_session": "._alignment",
    "aligned_device": "._alignment",
    "device_guard": "._guard",
    "device_policy": "._policy",
    "example_model": "._tiny",
    "patch": "._patch",
    "realign": "._model_alignment",
    "watch_sessions": "._births",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # found by plain lookup from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "GPU_CAPABLE_EXECUTION_PROVIDERS",
    "DeviceFallbackWarning",
    "DeviceGuardError",
    "DeviceMismatchResolutionMode",
    "EnvironmentConfigurationError",
    "ModelInputError",
    "Patch",
    "SessionWatch",
    "__version__",
    "align_device_with_onnx_session",
    "aligned_device",
    "device_guard",
    "device_policy",
    "example_model",
    "patch",
    "realign",
    "watch_sessions",
]
