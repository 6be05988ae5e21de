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

_LAZY = {
    "._alignment": ("align_device_with_onnx_session", "aligned_device"),
    "._births": ("SessionWatch", "watch_sessions"),
    "._guard": ("device_guard",),
    "._model_alignment": ("realign",),
    "._options": ("DeviceMismatchResolutionMode",),
    "._patch": ("Patch", "patch"),
    "._policy": ("device_policy",),
    "._providers": ("GPU_CAPABLE_EXECUTION_PROVIDERS",),
    "._tiny": ("example_model",),
}


def __getattr__(name: str) -> Any:
    module = next((module for module, names in _LAZY.items() if name in names), None)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # found by plain lookup from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *(name for names in _LAZY.values() for name in names)})


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
