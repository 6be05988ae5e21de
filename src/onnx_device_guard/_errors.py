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

    Catch this one to handle all of them. Each carries a
    [`message`][onnx_device_guard.DeviceGuardError.message] saying what went
    wrong and what to do, and a
    [`help_url`][onnx_device_guard.DeviceGuardError.help_url] into the docs;
    `str(error)` shows both. Both survive pickling, so an error raised in a
    process pool reaches the parent intact.

    Args:
        message: What went wrong and what to do about it.
        help_url: A link into the docs; each subclass has a sensible default.

    Examples:
        >>> from onnx_device_guard import DeviceGuardError
        >>> error = DeviceGuardError("Model.load returned None.")
        >>> error.message
        'Model.load returned None.'
        >>> error.help_url
        'https://onnx-device-guard.readthedocs.io/en/latest/troubleshooting/#guarded-factories'

        Every error the library raises is one:

        >>> from onnx_device_guard import align_device_with_onnx_session
        >>> try:
        ...     align_device_with_onnx_session(object(), "cpu")
        ... except DeviceGuardError as error:
        ...     print(type(error).__name__)
        ModelInputError
    """

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

    def in_context(self: _E, before: str = "", after: str = "") -> _E:
        """This error again, its message between `before` and `after`: same type and `help_url`.

        Args:
            before: Text put in front of the message.
            after: Text put after it.

        Returns:
            A new error of the same class, with the same `help_url`.

        Raises:
            ModelInputError: Never: it returns the error, for the caller to raise.

        Examples:
            >>> from onnx_device_guard import ModelInputError
            >>> error = ModelInputError("bad device.").in_context("Loading m: ")
            >>> type(error).__name__, error.message
            ('ModelInputError', 'Loading m: bad device.')
        """
        return type(self)(f"{before}{self.message}{after}", help_url=self.help_url)


class ModelInputError(DeviceGuardError, ValueError):
    """A model input or an argument passed to onnx-device-guard is not one it can work with.

    Despite its name (kept from the first release), it covers every bad
    argument: an unknown `resolution_mode`, a device torch cannot parse or
    address, a session without a working `get_providers()`, an option of the
    wrong type, a loader `patch` cannot find, or a bad `ONNX_DEVICE_GUARD_*`
    variable. The message names the bad value. It is also a `ValueError`.

    Args:
        message: What went wrong and what to do about it.
        help_url: A link into the docs; by default the section on bad
            arguments.

    Examples:
        >>> import torch
        >>> from onnx_device_guard import ModelInputError, align_device_with_onnx_session
        >>> class Session:
        ...     def get_providers(self):
        ...         return ["CPUExecutionProvider"]
        >>> try:
        ...     align_device_with_onnx_session(
        ...         Session(), torch.device("cpu"), resolution_mode="retry"
        ...     )
        ... except ModelInputError as error:
        ...     print(error.message)
        resolution_mode must be one of 'fail', 'fallback'; got 'retry'.
    """

    default_help_url = help_url("troubleshooting", "bad-arguments")


class EnvironmentConfigurationError(DeviceGuardError, RuntimeError):
    """The session cannot read tensors from the requested device.

    Raised in `"fail"` mode when the device is CUDA but the session runs no
    GPU-capable execution provider, or runs it on another GPU; and in either
    mode when a model's sessions run on different GPUs and cannot all read
    the fallback device. The message names the device, the session's
    providers and what to change. It is also a `RuntimeError`.

    Args:
        message: What went wrong and what to do about it.
        help_url: A link into the docs; by default the section on the
            "no data transfer registered" error.

    Examples:
        >>> from onnx_device_guard import (
        ...     EnvironmentConfigurationError,
        ...     align_device_with_onnx_session,
        ... )
        >>> class CPUSession:
        ...     def get_providers(self):
        ...         return ["CPUExecutionProvider"]
        >>> try:
        ...     align_device_with_onnx_session(CPUSession(), "cuda:0", resolution_mode="fail")
        ... except EnvironmentConfigurationError as error:
        ...     print(error.help_url)
        https://onnx-device-guard.readthedocs.io/en/latest/troubleshooting/#no-data-transfer-registered
    """

    default_help_url = help_url("troubleshooting", "no-data-transfer-registered")


class DeviceFallbackWarning(UserWarning):
    """A model's device was changed because its session cannot read the device asked for.

    Issued in `"fallback"` mode at the line that called the library, so a
    script with no logging set up shows it; the same fallback is logged as a
    WARNING record with structured fields on the `onnx_device_guard` logger.
    `warn=False` (or `ONNX_DEVICE_GUARD_WARN=0`) silences both. The warning
    filters apply: pytest's
    `filterwarnings = ["error::onnx_device_guard.DeviceFallbackWarning"]`, or
    `warnings.simplefilter("error", DeviceFallbackWarning)`, turns every
    silent fallback into an error (`python -W error::UserWarning` on the
    command line, where Python reads `-W` before the library is importable).

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

    def __init__(self, message: str) -> None:
        super().__init__(message)
