"""`device_guard`: align the device of every model a factory returns.

A guarded function is a plain closure made with `functools.wraps`, not a
proxy: `pickle` sends it by reference (its module-level name must hold this
very wrapper, so nothing arrives unguarded), cloudpickle sends a local,
lambda or `__main__` one by value, options included. A `@classmethod` or
`@staticmethod` has its function guarded and is wrapped again, so both
stacking orders behave alike on every Python.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, overload

from ._classes import guard_class, read_signature
from ._devices import DeviceLike
from ._errors import ModelInputError
from ._messages import short_repr
from ._model_alignment import Call, call_and_align, call_and_align_async
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

    After the factory returns, the guard finds the model's sessions and
    device, aligns them with
    [`align_device_with_onnx_session`][onnx_device_guard.align_device_with_onnx_session],
    writes a changed device back to the attribute it came from (a string if
    it was one) and returns the same model.

    The sessions: `session_attr` when given; else `_session` or `session`
    when it holds one; else every object with callable `get_providers` and
    `run` among the model's instance attributes (a package's own wrapper
    under `session` included), up to three levels down through lists, tuples
    and dicts, calling no property or method.

    The devices checked, in order: the call's own `device` argument
    (positional, keyword or default; `None` leaves the choice to the
    package), the `device=` option, then the model's `_device` or `device`
    (or `device_attr`), so a model that reports `cpu` cannot hide a request
    for `cuda`. The model's attribute gets the aligned device (on the inner
    object, when the model forwards it through `__getattr__`); a read-only
    one is left as it is and the report says so. `"fallback"` reports once
    (a `DeviceFallbackWarning` at the caller's line and a WARNING record);
    `"fail"` raises, naming the device and where it came from.

    Use it bare or with options on functions, methods, static methods, class
    methods (stacked either way round) and `async def` factories (aligned
    once the coroutine has finished). The guarded factory keeps its name,
    docstring, signature and types. It is a plain function: module-level ones
    and class methods pickle by reference (process pools), and cloudpickle
    (Ray, Dask) carries local and `__main__` ones by value, guard included.

    Args:
        wrapped: The factory; given when the decorator is used bare.
        resolution_mode: `"fail"` or `"fallback"`; `None` takes the policy in
            force when the factory is called.
        fallback_device: Where to go when a session runs no GPU-capable
            provider; `None` takes the policy in force at call time.
        warn: `False` silences fallbacks (no warning, a DEBUG record); `None`
            takes the policy in force at call time.
        session_attr: Where the model keeps its session: an attribute name or
            dotted path (`"detector.infer.session"`); a tuple of them, which
            must all exist and accept the device; or a callable that takes
            the model and returns its session or an iterable of sessions.
        device_attr: The attribute that holds the device; it must exist. By
            default the first of `_device` and `device` the model has, so a
            read-only `device` property over `_device` works.
        device: The device the call asks for, checked besides the call's
            `device` argument and the model's attribute: a device (`"cuda"`),
            or a callable that receives the call's arguments as a dict (by
            name, defaults included) and returns one, for loaders that say it
            with flags (`use_gpu`, `device_id`).
        require_session: `False` lets a result without a session through: its
            sessions are checked when they appear, after each call of its
            public methods (and `__call__`), so a model that opens them at its
            first call is reported (or raises) from that call. By default a
            result without a session is an error.
        follow: `True` (the default) keeps each model in line with its
            sessions after load: when a session's providers change
            (`set_providers`, or onnxruntime's own fallback to CPU after a
            GPU provider fails in `run()`), the model is aligned again at
            once, with the mode and fallback device in force at load: in
            `"fallback"` mode its device is rewritten and one report names the
            old and new providers; in `"fail"` mode the call that changed them
            raises `EnvironmentConfigurationError`. Sessions hold the model
            only weakly. `False` aligns at load only.

    Returns:
        The guarded factory, or, given options only, a decorator that guards one.

    Raises:
        ModelInputError: At decoration, an option cannot be used or `wrapped`
            is not callable; at call time, the model's session or device holds
            an unusable value.
        DeviceGuardError: At call time, the model has no session (and
            `require_session` is on) or no device to check, one of its
            attributes raises when read, or its device attribute cannot be
            written.
        EnvironmentConfigurationError: At call time, in `"fail"` mode, a
            session cannot read the model's device.

    Examples:
        Bare, on a class method whose session onnxruntime left on CPU:

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

        With options, a model holding two sessions:

        >>> class TwoTower:
        ...     def __init__(self):
        ...         self.vision, self.text, self.device = CPUSession(), CPUSession(), "cuda"
        >>> @device_guard(session_attr=("vision", "text"), fallback_device="cpu")
        ... def load_two_tower():
        ...     return TwoTower()
        >>> load_two_tower().device
        'cpu'

        A loader whose result keeps its session deep inside and no device;
        the guard finds the session and checks the call's `device` argument:

        >>> class Inner:
        ...     def __init__(self):
        ...         self.session = CPUSession()
        >>> class Pipeline:
        ...     def __init__(self):
        ...         self.stages = [Inner()]
        >>> @device_guard(resolution_mode="fail")
        ... def load_pipeline(device="cuda"):
        ...     return Pipeline()
        >>> load_pipeline("cpu").stages[0].session.get_providers()
        ['CPUExecutionProvider']
        >>> load_pipeline()
        Traceback (most recent call last):
        onnx_device_guard.EnvironmentConfigurationError: The model asks for device 'cuda', ...
    """
    options = guard_options(
        resolution_mode=resolution_mode,
        fallback_device=fallback_device,
        warn=warn,
        session_attr=session_attr,
        device_attr=device_attr,
        device=device,
        require_session=require_session,
        follow=follow,
    )
    if wrapped is None:
        return functools.partial(guarded, options=options)
    return guarded(wrapped, options=options)


def guarded(wrapped: Any, *, options: GuardOptions) -> Any:
    """Return `wrapped` (a factory, a method descriptor or a class) guarded with `options`."""
    if isinstance(wrapped, classmethod | staticmethod):
        return type(wrapped)(guarded(wrapped.__func__, options=options))
    if isinstance(wrapped, type):
        return guard_class(wrapped, options)
    if not callable(wrapped):
        raise ModelInputError(
            "device_guard decorates a factory function or method; "
            f"got {type(wrapped).__name__} {short_repr(wrapped)}."
        )
    factory: Callable[..., Any] = wrapped
    signature = read_signature(factory)  # once here, not at every load
    if inspect.iscoroutinefunction(factory):

        @functools.wraps(factory)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            call = Call(factory, args, kwargs, signature)
            return await call_and_align_async(factory, args, kwargs, options, call)

        return guarded_async

    @functools.wraps(factory)
    def guarded_factory(*args: Any, **kwargs: Any) -> Any:
        call = Call(factory, args, kwargs, signature)
        return call_and_align(factory, args, kwargs, options, call)

    return guarded_factory
