"""Defaults from environment variables, beneath every `device_policy` scope.

Operators switch a whole process without code changes:

* `ONNX_DEVICE_GUARD_RESOLUTION_MODE`: `fail` or `fallback`;
* `ONNX_DEVICE_GUARD_FALLBACK_DEVICE`: a device torch parses, such as `cpu`;
* `ONNX_DEVICE_GUARD_WARN`: `1` (fallbacks at WARNING) or `0` (at DEBUG).

They are read at first use, not at import, so a bad value cannot stop
`import onnx_device_guard`; it raises `ModelInputError` naming the variable
at every use until fixed. Once read without error they are kept
(`_policy.current_policy`): reading `os.environ` per call costs more than the check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import cast

import torch

from ._devices import as_device
from ._errors import ModelInputError
from ._messages import short_repr
from ._options import DeviceMismatchResolutionMode, Settings

VARIABLES = RESOLUTION_MODE, FALLBACK_DEVICE, WARN = (
    "ONNX_DEVICE_GUARD_RESOLUTION_MODE",
    "ONNX_DEVICE_GUARD_FALLBACK_DEVICE",
    "ONNX_DEVICE_GUARD_WARN",
)
"""Every variable this module reads, in the order it reads them."""

BUILT_IN = Settings(resolution_mode="fallback", fallback_device=torch.device("cpu"), warn=True)
"""The defaults when no variable is set."""


def read(environ: Mapping[str, str] = os.environ) -> Settings:
    """Return the defaults that the variables in `environ` set.

    An unset variable, an empty one and one of only whitespace (a shell
    quoting slip) all leave the built-in default; whitespace around a value
    is dropped.

    Raises:
        ModelInputError: A variable holds a value it cannot take.
    """
    mode, device, warn = (environ.get(name, "").strip() for name in VARIABLES)
    if mode not in ("", "fail", "fallback"):
        raise ModelInputError(
            f"The environment variable {RESOLUTION_MODE}={short_repr(mode)} must be 'fail' or "
            "'fallback' (or unset). Fix or unset it."
        )
    try:
        fallback = as_device(device, FALLBACK_DEVICE) if device else None
    except ModelInputError as error:
        raise ModelInputError(
            f"The environment variable {error.message} Fix or unset it.",
            help_url=error.help_url,
        ) from None
    if warn not in ("", "1", "0"):
        raise ModelInputError(
            f"The environment variable {WARN}={short_repr(warn)} must be '1' (log fallbacks at "
            "WARNING) or '0' (at DEBUG), or unset. Fix or unset it."
        )
    resolution_mode = cast("DeviceMismatchResolutionMode | None", mode or None)
    return Settings(resolution_mode, fallback, {"1": True, "0": False}.get(warn)).over(BUILT_IN)
