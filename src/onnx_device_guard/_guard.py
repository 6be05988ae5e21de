"""`device_guard`: align the device of each model a factory returns, with closures that pickle."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, overload

from ._classes import guard_class, read_signature
from ._devices import DeviceLike
from ._errors import ModelInputError
from ._messages import typed_repr
from ._model_alignment import Load, call_and_align, call_and_align_async
from ._options import (
    DeviceMismatchResolutionMode,
    DeviceSource,
    GuardOptions,
    SessionAttr,
    guard_options,
)

W = TypeVar("W", bound="Callable[..., Any] | classmethod[Any, Any, Any] | staticmethod[Any, Any]")
"""A factory, a class or a method descriptor: the guard gives back the same type."""


class _Decorator(Protocol):
    """What `device_guard(...)` with options returns: a decorator keeping types."""

    def __call__(self, wrapped: W, /) -> W: ...


@overload
def device_guard(wrapped: W, /) -> W: ...
@overload
def device_guard(
    wrapped: None = None,
    /,
    *,
    resolution_mode: DeviceMismatchResolutionMode | None = None,
    fallback_device: DeviceLike | None = None,
    warn: bool | None = None,
    session_attr: SessionAttr | None = None,
    device_attr: str | None = None,
    device: DeviceSource | None = None,
    require_session: bool | None = None,
    follow: bool = True,
) -> _Decorator: ...


def device_guard(  # noqa: PLR0913 - one keyword per documented option
    wrapped: Any = None,
    /,
    *,
    resolution_mode: DeviceMismatchResolutionMode | None = None,
    fallback_device: DeviceLike | None = None,
    warn: bool | None = None,
    session_attr: SessionAttr | None = None,
    device_attr: str | None = None,
    device: DeviceSource | None = None,
    require_session: bool | None = None,
    follow: bool = True,
) -> Any:
    """Align the device of the model that a `from_pretrained`-style factory returns.

    After the factory returns, the guard finds the model's sessions and the
    devices it was asked for (the guide says where it looks), aligns them with
    [`align_device_with_onnx_session`][onnx_device_guard.align_device_with_onnx_session]
    and writes a changed device back. It guards functions, methods, class and
    static methods, `async def` factories and classes, keeping their name,
    signature and types. Settings left at `None` take the policy in force
    when the factory is called.

    Args:
        wrapped: The factory; given when the decorator is used bare.
        resolution_mode: `"fail"` or `"fallback"`.
        fallback_device: Where to go when a session runs no GPU-capable provider.
        warn: `False` silences fallbacks (no warning, a DEBUG record).
        session_attr: Where the model keeps its session: an attribute name or
            dotted path (`"detector.infer.session"`), a tuple of them, or a
            callable that takes the model and returns its session or sessions.
        device_attr: The attribute that holds the device; it must exist.
        device: The device the call asks for: a device (`"cuda"`), or a
            callable that receives the call's arguments as a dict (by name,
            defaults included) and returns one.
        require_session: `True` refuses a result without a session, `False`
            lets any through; by default only a result that can never hold
            one is refused, and the others are checked as sessions appear.
        follow: `False` aligns at load only; by default the model is aligned
            again whenever a session's providers change.

    Returns:
        The guarded factory, or, given options only, a decorator that guards one.

    Raises:
        ModelInputError: At decoration, an option cannot be used or `wrapped`
            is not callable; at call time, the model's session or device holds
            an unusable value.
        DeviceGuardError: At call time, the model's sessions or device cannot
            be found or read, or its device attribute cannot be written.
        EnvironmentConfigurationError: At call time, in `"fail"` mode, a
            session cannot read the model's device.

    Examples:
        Bare, on a class method whose session onnxruntime left on the CPU:

        >>> import torch
        >>> from onnx_device_guard import device_guard
        >>> class CPUSession:
        ...     def get_providers(self):
        ...         return ["CPUExecutionProvider"]
        ...     def run(self, output_names, feeds):
        ...         return []
        >>> class Model:
        ...     def __init__(self, session, device):
        ...         self.session, self.device = session, device
        ...     @classmethod
        ...     @device_guard
        ...     def from_pretrained(cls, device="cuda:0"):
        ...         return cls(CPUSession(), torch.device(device))
        >>> Model.from_pretrained().device
        device(type='cpu')

        With options, on a function:

        >>> @device_guard(resolution_mode="fail")
        ... def load(device="cuda"):
        ...     return Model(CPUSession(), torch.device(device))
        >>> load()
        Traceback (most recent call last):
        onnx_device_guard.EnvironmentConfigurationError: The model asks for device 'cuda', ...
    """
    options = guard_options(locals())  # its parameters, by name
    if wrapped is None:
        return functools.partial(guarded, options=options)
    return guarded(wrapped, options=options)


def guarded(wrapped: Any, *, options: GuardOptions) -> Any:
    """Return `wrapped` (a factory, a method descriptor or a class) guarded with `options`."""
    if isinstance(wrapped, classmethod | staticmethod):
        return type(wrapped)(guarded(wrapped.__func__, options=options))
    if isinstance(wrapped, type):
        guard_class(wrapped, options)
        return wrapped
    if not callable(wrapped):
        raise ModelInputError(
            f"device_guard decorates a factory function or method; got {typed_repr(wrapped)}."
        )
    signature = read_signature(wrapped)  # once here, not at every load
    if inspect.iscoroutinefunction(wrapped):

        @functools.wraps(wrapped)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            return await call_and_align_async(Load(options, wrapped, args, kwargs, signature))

        return guarded_async

    @functools.wraps(wrapped)
    def guarded_factory(*args: Any, **kwargs: Any) -> Any:
        return call_and_align(Load(options, wrapped, args, kwargs, signature))

    return guarded_factory
