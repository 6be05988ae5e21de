"""The errors this library raises, each with a link to the docs that explain it."""

from __future__ import annotations

from typing import TypeVar

_E = TypeVar("_E", bound="DeviceGuardError")

DOCS_URL = "https://onnx-device-guard.readthedocs.io/en/latest/"
"""Where the built documentation site lives; every `help_url` starts here."""


def help_url(page: str, anchor: str) -> str:
    """Return the address of `anchor` on `page` of the documentation site."""
    return f"{DOCS_URL}{page}/#{anchor}"


class DeviceGuardError(Exception):
    """Base class of every error that onnx-device-guard raises on purpose.

    `str(error)` shows its `message` and `help_url`; both survive pickling.

    Args:
        message: What went wrong and what to do about it.
        help_url: A link into the docs; each subclass has a sensible default.

    Examples:
        >>> from onnx_device_guard import DeviceGuardError
        >>> DeviceGuardError("Model.load returned None.").help_url
        'https://onnx-device-guard.readthedocs.io/en/latest/troubleshooting/#guarded-factories'
    """

    __module__ = "onnx_device_guard"  # shown in tracebacks: the name users import it by

    default_help_url = help_url("troubleshooting", "guarded-factories")
    """The `help_url` an error of this class gets when none is passed."""

    message: str
    """What went wrong and what to do about it."""

    help_url: str
    """A link to the part of the documentation that explains this error."""

    def __init__(self, message: str, *, help_url: str | None = None) -> None:
        super().__init__(message)  # pickled as (type, (message,), attributes)
        self.message = message
        self.help_url = help_url if help_url is not None else self.default_help_url

    def __str__(self) -> str:
        return f"{self.message} (see {self.help_url})"


def in_context(error: _E, before: str = "", after: str = "") -> _E:
    """`error` again, its message between `before` and `after`, its type and `help_url` kept."""
    return type(error)(f"{before}{error.message}{after}", help_url=error.help_url)


class ModelInputError(DeviceGuardError, ValueError):
    """An argument (or `ONNX_DEVICE_GUARD_*` variable) the library cannot use; a `ValueError`.

    Args:
        message: What went wrong (naming the bad value) and what to do about it.
        help_url: A link into the docs; by default the section on bad arguments.

    Examples:
        >>> from onnx_device_guard import ModelInputError, device_policy
        >>> try:
        ...     device_policy(warn="yes")
        ... except ModelInputError as error:
        ...     print(error.message)
        warn must be True or False; got str 'yes'.
    """

    __module__ = "onnx_device_guard"
    default_help_url = help_url("troubleshooting", "bad-arguments")


class EnvironmentConfigurationError(DeviceGuardError, RuntimeError):
    """The session cannot read tensors from the requested device; a `RuntimeError`.

    Raised in `"fail"` mode, and in either mode when a model's sessions run on
    different GPUs and cannot all read the fallback device.

    Args:
        message: What went wrong and what to do about it.
        help_url: A link into the docs; by default the "no data transfer registered" section.

    Examples:
        >>> from onnx_device_guard import EnvironmentConfigurationError
        >>> EnvironmentConfigurationError("No GPU provider.").help_url
        'https://onnx-device-guard.readthedocs.io/en/latest/troubleshooting/#no-data-transfer-registered'
    """

    __module__ = "onnx_device_guard"
    default_help_url = help_url("troubleshooting", "no-data-transfer-registered")


class DeviceFallbackWarning(UserWarning):
    """A model's device was changed because its session cannot read the device asked for.

    Issued in `"fallback"` mode at the caller's line, beside a WARNING record;
    `warn=False` silences both.

    Args:
        message: What was wrong, which device the model uses now, and the fix.

    Examples:
        >>> import warnings
        >>> from onnx_device_guard import DeviceFallbackWarning, align_device_with_onnx_session
        >>> class CPUSession:
        ...     def get_providers(self):
        ...         return ["CPUExecutionProvider"]
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     align_device_with_onnx_session(CPUSession(), "cuda")
        device(type='cpu')
        >>> [warning.category.__name__ for warning in caught]
        ['DeviceFallbackWarning']
    """

    __module__ = "onnx_device_guard"

    def __init__(self, message: str) -> None:
        super().__init__(message)
