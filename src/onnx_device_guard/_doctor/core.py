"""The pieces of the library's core that the doctor uses, imported in this one place.

The doctor checks a device the way the library aligns one, so it calls the
core rather than copying it; a rename in the core touches this file only.
"""

from __future__ import annotations

from typing import cast

import torch

from .._alignment import Mismatch, align_device_with_onnx_session, find_mismatch
from .._devices import as_device, cuda_index
from .._environment import FALLBACK_DEVICE, RESOLUTION_MODE
from .._environment import read as _read
from .._errors import DeviceGuardError, ModelInputError
from .._policy import device_policy
from .._providers import GPU_CAPABLE_EXECUTION_PROVIDERS, first_gpu_provider

__all__ = [
    "FALLBACK_DEVICE",
    "GPU_CAPABLE_EXECUTION_PROVIDERS",
    "RESOLUTION_MODE",
    "DeviceGuardError",
    "Mismatch",
    "ModelInputError",
    "align_device_with_onnx_session",
    "as_device",
    "cuda_index",
    "device_policy",
    "find_mismatch",
    "first_gpu_provider",
    "read_environment",
]


def read_environment() -> tuple[str, torch.device]:
    """The resolution mode and fallback device the environment variables set, read now.

    Raises:
        ModelInputError: A variable holds a bad value (the library's message).
    """
    settings = _read()  # every field is filled in: the built-in defaults are beneath
    return str(settings.resolution_mode), cast(torch.device, settings.fallback_device)
