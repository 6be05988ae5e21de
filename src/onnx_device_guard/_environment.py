"""Defaults from environment variables, beneath every `device_policy` scope.

Operators switch a whole process without code changes:

* `ONNX_DEVICE_GUARD_RESOLUTION_MODE`: `fail` or `fallback`;
* `ONNX_DEVICE_GUARD_FALLBACK_DEVICE`: a device torch parses, such as `cpu`;
* `ONNX_DEVICE_GUARD_WARN`: a yes/no switch (`parse_switch`): yes logs fallbacks at
  WARNING, no at DEBUG.

They are read at first use, not at import, so a bad value cannot stop
`import onnx_device_guard`; it raises `ModelInputError` naming the variable
at every use until fixed. Once read without error they are kept
(`_policy.current_policy`): reading `os.environ` per call costs more than the check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

from ._devices import as_device
from ._errors import ModelInputError, in_context
from ._messages import short_repr
from ._options import Resolved, Settings, check_mode

VARIABLES = RESOLUTION_MODE, FALLBACK_DEVICE, WARN = (
    "ONNX_DEVICE_GUARD_RESOLUTION_MODE",
    "ONNX_DEVICE_GUARD_FALLBACK_DEVICE",
    "ONNX_DEVICE_GUARD_WARN",
)
"""Every variable this module reads, in the order it reads them."""

BUILT_IN = Resolved(resolution_mode="fallback", fallback_device=torch.device("cpu"), warn=True)
"""The defaults when no variable is set."""


def read(environ: Mapping[str, str] = os.environ) -> Resolved:
    """Return the defaults that the variables in `environ` set.

    An unset variable, an empty one and one of only whitespace (a shell
    quoting slip) all leave the built-in default; whitespace around a value
    is dropped.

    Raises:
        ModelInputError: A variable holds a value it cannot take.
    """
    mode, device, warn = (environ.get(name, "").strip() for name in VARIABLES)
    try:
        resolution_mode = check_mode(mode, RESOLUTION_MODE) if mode else None
        fallback = as_device(device, FALLBACK_DEVICE) if device else None
        switch = parse_switch(WARN, warn)
    except ModelInputError as error:
        raise in_context(error, "The environment variable ", " Fix or unset it.") from None
    return Settings(resolution_mode, fallback, switch).over(BUILT_IN)


SWITCH_WORDS = {"1": True, "true": True, "yes": True, "on": True}
SWITCH_WORDS |= {"0": False, "false": False, "no": False, "off": False}
"""The spellings a yes/no variable takes, in any case, with spaces around."""


def parse_switch(name: str, text: str) -> bool | None:
    """Read the yes/no variable `name` holding `text`: `None` when it is empty.

    Raises:
        ModelInputError: `text` is none of `SWITCH_WORDS`; the message names them.

    Examples:
        >>> from onnx_device_guard._environment import parse_switch
        >>> parse_switch("ONNX_DEVICE_GUARD_WARN", " Off "), parse_switch("X", "")
        (False, None)
        >>> parse_switch("ONNX_DEVICE_GUARD_WARN", "maybe")
        Traceback (most recent call last):
        onnx_device_guard.ModelInputError: ONNX_DEVICE_GUARD_WARN='maybe' must be a yes/no ...
    """
    word = text.strip().lower()
    if word and word not in SWITCH_WORDS:
        raise ModelInputError(
            f"{name}={short_repr(text.strip())} must be a yes/no switch: 1, true, yes or on for "
            "yes; 0, false, no or off for no (any case), or unset."
        )
    return SWITCH_WORDS.get(word)
