"""Defaults from environment variables, beneath every `device_policy` scope.

Operators switch a whole process without code changes:

* `ONNX_DEVICE_GUARD_RESOLUTION_MODE`: `fail` or `fallback`;
* `ONNX_DEVICE_GUARD_FALLBACK_DEVICE`: a device torch parses, such as `cpu`;
* `ONNX_DEVICE_GUARD_WARN`: `1` (fallbacks at WARNING) or `0` (at DEBUG).

The variables are read at first use (the first alignment or scope), not at
import, so a bad value cannot stop `import onnx_device_guard` before the
application has set up its logging; it raises `ModelInputError` naming the
variable from that first use on, at every use until it is fixed. Once read
without error they are kept (see `_policy.current_policy`): reading
`os.environ` on every call would cost more than the whole check.
"""

from __future__ import annotations

import os
from typing import Literal

import torch

from ._devices import as_device
from ._errors import ModelInputError
from ._messages import short_repr
from ._options import Settings

RESOLUTION_MODE = "ONNX_DEVICE_GUARD_RESOLUTION_MODE"
"""The variable that sets the default resolution mode."""

FALLBACK_DEVICE = "ONNX_DEVICE_GUARD_FALLBACK_DEVICE"
"""The variable that sets the default fallback device."""

WARN = "ONNX_DEVICE_GUARD_WARN"
"""The variable that sets whether fallbacks are logged at WARNING (`1`) or DEBUG (`0`)."""

VARIABLES = (RESOLUTION_MODE, FALLBACK_DEVICE, WARN)
"""Every variable this module reads, in the order it reads them."""


BUILT_IN = Settings(resolution_mode="fallback", fallback_device=torch.device("cpu"), warn=True)
"""The defaults when no variable is set."""


def read() -> Settings:
    """Return the defaults that the variables in `os.environ` set now.

    Raises:
        ModelInputError: A variable holds a value it cannot take.
    """
    return from_environment(os.environ)


def from_environment(environ: os._Environ[str] | dict[str, str]) -> Settings:
    """Return the defaults that the variables in `environ` set.

    An unset variable, an empty one and one of only whitespace (a shell
    quoting slip) all leave the built-in default; whitespace around a value
    is dropped.

    Raises:
        ModelInputError: A variable holds a value it cannot take.
    """
    mode = environ.get(RESOLUTION_MODE, "").strip()
    device = environ.get(FALLBACK_DEVICE, "").strip()
    warn = environ.get(WARN, "").strip()
    return Settings(
        resolution_mode=_mode(mode) if mode else None,
        fallback_device=_device(device) if device else None,
        warn=_warn(warn) if warn else None,
    ).over(BUILT_IN)


def _mode(raw: str) -> Literal["fail", "fallback"]:
    value = raw.strip()
    if value == "fail":
        return "fail"
    if value == "fallback":
        return "fallback"
    raise ModelInputError(
        f"The environment variable {RESOLUTION_MODE}={short_repr(raw)} must be 'fail' or "
        "'fallback' (or unset). Fix or unset it."
    )


def _device(raw: str) -> torch.device:
    try:
        return as_device(raw.strip(), FALLBACK_DEVICE)
    except ModelInputError as error:
        raise ModelInputError(
            f"The environment variable {error.message} Fix or unset it.",
            help_url=error.help_url,
        ) from None


def _warn(raw: str) -> bool:
    value = raw.strip()
    if value == "1":
        return True
    if value == "0":
        return False
    raise ModelInputError(
        f"The environment variable {WARN}={short_repr(raw)} must be '1' (log fallbacks at "
        "WARNING) or '0' (at DEBUG), or unset. Fix or unset it."
    )
