"""`device_guard`: align the device of every model a factory returns.

A guarded function is a plain closure made with `functools.wraps`, not a
proxy object: Python's own protocols then do the rest. `pickle` sends it by
reference, finding it under its module and qualified name and checking that
the name holds this very wrapper (so nothing can arrive without its guard);
cloudpickle (Ray, Dask, joblib) sends one it cannot find by name (`__main__`,
local, lambda) by value, closure and options included. A method binds like
any function, and `@classmethod` or `@staticmethod` under the guard is
handled by guarding the function inside and wrapping it again, so both
stacking orders behave alike on every Python. The closure holds only the
guard's options, which are plain configuration; what a model follows at run
time lives beside its sessions (`_follow`), so a factory that was used still
pickles. wrapt's proxies are kept for what they do best: patching another
package's code in place (`_patch`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from ._call_device import Call
from ._classes import guard_class
from ._devices import DeviceLike
from ._errors import ModelInputError
from ._messages import short_repr
from ._model_alignment import align_model
from ._options import (
    DeviceMismatchResolutionMode,
    DeviceSource,
    GuardOptions,
    SessionAttr,
    guard_options,
)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
C = TypeVar("C", bound=type)


class _Decorator(Protocol):
    """What `device_guard(...)` with options returns: a decorator keeping types."""

    @overload
    def __call__(self, wrapped: C, /) -> C: ...
    @overload
    def __call__(self, wrapped: classmethod[T, P, R], /) -> classmethod[T, P, R]: ...
    @overload
    def __call__(self, wrapped: staticmethod[P, R], /) -> staticmethod[P, R]: ...
    @overload
    def __call__(self, wrapped: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def device_guard(wrapped: C, /) -> C: ...
@overload
def device_guard(wrapped: classmethod[T, P, R], /) -> classmethod[T, P, R]: ...
@overload
def device_guard(wrapped: staticmethod[P, R], /) -> staticmethod[P, R]: ...
@overload
def device_guard(wrapped: Callable[P, R], /) -> Callable[P, R]: ...
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
    require_session: bool = True,
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
    require_session: bool = True,
    follow: bool = True,
) -> Any:
    """Align the device of the model that a `from_pretrained`-style factory returns.

    After the factory returns, the guard finds the sessions and the device on
    the model, aligns them with
    [`align_device_with_onnx_session`][onnx_device_guard.align_device_with_onnx_session]
    and, when the aligned device differs, writes it back to the attribute it
    came from (as a string if the model stored a string). It returns the same
    model object.

    The sessions: `session_attr` when given; otherwise `_session` or
    `session` when it holds a session, and failing those every object with
    callable `get_providers` and `run` found among the model's instance
    attributes (a package's own wrapper under `session` included), up to
    three levels down, through lists, tuples and dicts (no property or
    method is called to get there).

    The devices checked, in this order: the factory call's own `device`
    argument (positional, keyword or default; `None` leaves the choice to
    the package), the `device=` option, then the model's `_device` or
    `device` attribute (or `device_attr`). What the caller asked for comes
    first, so a model that reports `cpu` cannot hide a request for `cuda`.
    The model's attribute gets the aligned device written back (on the inner
    object it really lives on, when the model forwards it through
    `__getattr__`); a read-only one is left as it is and the report says
    so. `"fallback"` reports once (a `DeviceFallbackWarning` at the caller's
    line and a WARNING log record); `"fail"` raises, naming the device and
    where it came from.

    Use it bare (`@device_guard`) or with options (`@device_guard(...)`),
    on functions, methods, static methods, class methods (stacked either way
    round with `@classmethod`) and `async def` factories, whose model is
    aligned once the coroutine has finished. The guarded factory keeps its
    name, docstring, signature and types. It is a plain function: module-level
    functions and class methods pickle by reference, so they can be sent to
    process pools, and cloudpickle (Ray, Dask) carries local ones and those
    defined in `__main__` by value, guard and options included.

    Args:
        wrapped: The factory; given when the decorator is used bare.
        resolution_mode: `"fail"` or `"fallback"`; `None` takes the
            policy in force when the factory is called.
        fallback_device: Where to go when a session runs no GPU-capable
            provider; `None` takes the policy in force at call time.
        warn: `False` silences fallbacks (no warning, a DEBUG record);
            `None` takes the policy in force at call time.
        session_attr: Where the model keeps its session: an attribute name or
            a dotted path (`"detector.infer.session"`); a tuple of them, which
            must all exist and all accept the device (a model with several
            sessions); or a callable that takes the model and returns its
            session or an iterable of its sessions. By default `_session`,
            `session`, then discovery.
        device_attr: The attribute that holds the device; it must exist. By
            default the first of `_device` and `device` that the model has,
            so a public read-only `device` property over `_device` works.
        device: The device the call asks for, checked besides the call's own
            `device` argument and the model's attribute: a fixed device
            (`"cuda"`), or a callable that receives the call's arguments as a
            dict (by parameter name, defaults included) and returns one, for
            loaders that say it with flags (`use_gpu`, `device_id`).
        require_session: `False` lets a result that holds no session yet
            through: its sessions are checked when they appear, after each
            call of its public methods (and `__call__`) until they do, so a
            model that opens them at its first call is reported (or raises)
            from that call; one that never opens any is left alone. By
            default a result without a session is an error.
        follow: `True` (the default) keeps each model it returns in line with
            its sessions after load: when a session's providers change
            (`set_providers`, or onnxruntime's own fallback to CPU after a
            GPU provider fails in `run()`), the model is aligned again at
            once, with the mode and fallback device in force at load. In
            `"fallback"` mode its device is rewritten and one report names
            the old and new providers; in `"fail"` mode the call that changed
            the providers raises `EnvironmentConfigurationError`. Sessions
            hold the model only weakly. `False` aligns at load only.

    Returns:
        The guarded factory, or a decorator that guards one when called with
        options only.

    Raises:
        ModelInputError: At decoration, an option cannot be used or
            `wrapped` is not callable; at call time, the model's session or
            device holds an unusable value.
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
    try:  # read once here, not at every load
        signature: inspect.Signature | None = inspect.signature(factory)
    except (TypeError, ValueError):  # the load says so, if it needs the arguments
        signature = None
    if inspect.iscoroutinefunction(factory):

        @functools.wraps(factory)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            model = await factory(*args, **kwargs)
            align_model(model, options, Call(factory, args, kwargs, signature))
            return model

        return guarded_async

    @functools.wraps(factory)
    def guarded_factory(*args: Any, **kwargs: Any) -> Any:
        model = factory(*args, **kwargs)
        align_model(model, options, Call(factory, args, kwargs, signature))
        return model

    return guarded_factory
