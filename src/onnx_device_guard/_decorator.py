"""`device_guard`: align the device of every model a factory returns."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar, overload

import torch

from ._alignment import align_device_with_onnx_session, align_device_with_onnx_sessions
from ._classes import guard_class
from ._devices import DeviceLike, as_device
from ._errors import DeviceGuardError, ModelInputError
from ._pickling import WrapperByReference
from ._policy import DeviceMismatchResolutionMode, check_mode

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
C = TypeVar("C", bound=type)

_SESSION_ATTRS = ("_session", "session")
_DEVICE_ATTRS = ("_device", "device")


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
    session_attr: str | tuple[str, ...] | None = None,
    device_attr: str | None = None,
) -> _Decorator: ...


def device_guard(
    wrapped: Any = None,
    /,
    *,
    resolution_mode: DeviceMismatchResolutionMode | None = None,
    fallback_device: DeviceLike | None = None,
    session_attr: str | tuple[str, ...] | None = None,
    device_attr: str | None = None,
) -> Any:
    """Align the device of the model that a `from_pretrained`-style factory returns.

    After the factory returns, the guard reads the session and the device off
    the model, aligns them with
    [`align_device_with_onnx_session`][onnx_device_guard.align_device_with_onnx_session]
    and, when the aligned device differs, writes it back to the attribute it
    came from (as a string if the model stored a string). It returns the same
    model object.

    Use it bare (`@device_guard`) or with options (`@device_guard(...)`),
    on functions, methods, static methods, class methods (stacked either way
    round with `@classmethod`) and `async def` factories, whose model is
    aligned once the coroutine has finished. The guarded factory keeps its
    name, docstring, signature and types, and module-level functions and class
    methods pickle by reference, so they can be sent to process pools.

    Args:
        wrapped: The factory; given when the decorator is used bare.
        resolution_mode: `"fail"` or `"fallback"`; `None` takes the
            policy in force when the factory is called.
        fallback_device: Where to go when a session runs no GPU-capable
            provider; `None` takes the policy in force at call time.
        session_attr: The attribute that holds the session, or a tuple of
            attributes that must all exist and all accept the device (a model
            with several sessions). By default the first of `_session` and
            `session` that the model has.
        device_attr: The attribute that holds the device. By default the first
            of `_device` and `device` that the model has, so a public
            read-only `device` property over `_device` works.

    Returns:
        The guarded factory, or a decorator that guards one when called with
        options only.

    Raises:
        ModelInputError: At decoration, an option cannot be used or
            `wrapped` is not callable; at call time, the model's session or
            device attribute holds an unusable value.
        DeviceGuardError: At call time, the model has none of the attributes
            tried, or the device attribute cannot be written.
        EnvironmentConfigurationError: At call time, in `"fail"` mode, a
            session cannot read the model's device.

    Examples:
        Bare, on a class method whose session onnxruntime left on CPU:

        >>> import torch
        >>> from onnx_device_guard import device_guard
        >>> class CPUSession:
        ...     def get_providers(self):
        ...         return ["CPUExecutionProvider"]
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
    """
    guard = _GuardOptions.build(resolution_mode, fallback_device, session_attr, device_attr)
    if wrapped is None:
        return guard.decorate
    return guard.decorate(wrapped)


@dataclass(frozen=True)
class _GuardOptions:
    """The options of one `device_guard`, validated when the decorator is applied."""

    resolution_mode: DeviceMismatchResolutionMode | None
    fallback_device: torch.device | None
    session_attrs: tuple[str, ...] | None
    device_attr: str | None

    @classmethod
    def build(
        cls,
        resolution_mode: object,
        fallback_device: object,
        session_attr: object,
        device_attr: object,
    ) -> _GuardOptions:
        return cls(
            resolution_mode=None if resolution_mode is None else check_mode(resolution_mode),
            fallback_device=(
                None if fallback_device is None else as_device(fallback_device, "fallback_device")
            ),
            session_attrs=None if session_attr is None else _attribute_names(session_attr),
            device_attr=(
                None if device_attr is None else _attribute_names(device_attr, "device_attr")[0]
            ),
        )

    def decorate(self, wrapped: Any) -> Any:
        if not (callable(wrapped) or isinstance(wrapped, classmethod | staticmethod)):
            raise ModelInputError(
                "device_guard decorates a factory function or method; "
                f"got {type(wrapped).__name__} {wrapped!r}."
            )
        if isinstance(wrapped, type):
            return guard_class(wrapped, self)
        return _GuardedFactory(wrapped, self)

    def align(self, model: object, factory: object) -> None:
        """Align `model`'s device with its sessions, writing it back if it changes."""
        session_names, sessions = self._read_sessions(model, factory)
        device_name, current = self._read_device(model, factory)
        try:
            if len(sessions) == 1:  # the common case, without the multi-session steps
                aligned = align_device_with_onnx_session(
                    sessions[0], current, self.resolution_mode, self.fallback_device
                )
            else:
                aligned = align_device_with_onnx_sessions(
                    sessions, current, self.resolution_mode, self.fallback_device
                )
        except ModelInputError as error:
            raise ModelInputError(
                f"{_describe(factory, model)}, with session attribute(s) "
                f"{_names(session_names)} and device attribute {device_name!r}: {error.message}",
                help_url=error.help_url,
            ) from error
        if aligned == current or (isinstance(current, str) and aligned == torch.device(current)):
            return
        value: object = str(aligned) if isinstance(current, str) else aligned
        try:
            setattr(model, device_name, value)
        except Exception as error:
            raise DeviceGuardError(
                f"{_describe(factory, model)} whose device attribute {device_name!r} cannot "
                f"be set to {value!r} ({type(error).__name__}: {error}). Make it writable, "
                "or pass device_attr= naming an attribute that is."
            ) from error

    def _read_sessions(
        self, model: object, factory: object
    ) -> tuple[tuple[str, ...], list[object]]:
        if self.session_attrs is None:
            name, session = _first_present(model, _SESSION_ATTRS, factory, "session")
            return (name,), [session]
        sessions = [getattr(model, name, _MISSING) for name in self.session_attrs]
        missing = tuple(
            name
            for name, session in zip(self.session_attrs, sessions, strict=True)
            if session is _MISSING
        )
        if missing:
            raise _unusable(
                factory,
                model,
                f" without the session attribute(s) {_names(missing)} named in "
                f"session_attr={self.session_attrs!r}. Return a model that has them, "
                "or fix session_attr.",
            )
        return self.session_attrs, sessions

    def _read_device(self, model: object, factory: object) -> tuple[str, Any]:
        if self.device_attr is None:
            return _first_present(model, _DEVICE_ATTRS, factory, "device")
        device = getattr(model, self.device_attr, _MISSING)
        if device is _MISSING:
            raise _unusable(
                factory,
                model,
                f" without the device attribute {self.device_attr!r} named in device_attr. "
                "Return a model that has it, or fix device_attr.",
            )
        return self.device_attr, device


_MISSING = object()


def _first_present(
    model: object, names: tuple[str, ...], factory: object, what: str
) -> tuple[str, Any]:
    """Return the first of `names` that `model` has, with its value."""
    for name in names:
        value = getattr(model, name, _MISSING)
        if value is not _MISSING:
            return name, value
    raise _unusable(
        factory,
        model,
        f", which has none of the {what} attributes tried ({_names(names)}). Return the "
        f"model object, or pass {what}_attr= naming the attribute that holds its {what}.",
    )


def _unusable(factory: object, model: object, detail: str) -> DeviceGuardError:
    """The error for a model without the attributes the guard needs."""
    if inspect.isawaitable(model):  # a plain def that returned a coroutine, most likely
        close = getattr(model, "close", None)
        if callable(close):
            close()  # no "coroutine was never awaited" warning
        return DeviceGuardError(
            f"The factory {_factory_name(factory)} returned an awaitable, but device_guard "
            "only treats `async def` factories as asynchronous. Make the factory an "
            "`async def`, or await inside it."
        )
    return DeviceGuardError(_describe(factory, model) + detail)


def _attribute_names(value: object, option: str = "session_attr") -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else value
    if (
        isinstance(names, tuple | list)
        and names
        and all(isinstance(name, str) and name.isidentifier() for name in names)
    ):
        if option == "device_attr" and len(names) != 1:
            raise ModelInputError(f"device_attr must be one attribute name; got {value!r}.")
        return tuple(names)
    raise ModelInputError(
        f"{option} must be an attribute name or a tuple of attribute names; got {value!r}."
    )


def _factory_name(factory: object) -> str:
    return getattr(factory, "__qualname__", None) or repr(factory)


def _describe(factory: object, model: object) -> str:
    return f"The factory {_factory_name(factory)} returned {type(model).__name__}"


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(repr(name) for name in names)


def _is_coroutine_factory(wrapped: object) -> bool:
    function = wrapped.__func__ if isinstance(wrapped, classmethod | staticmethod) else wrapped
    return inspect.iscoroutinefunction(function)


class _GuardedFactory(WrapperByReference):
    """A factory wrapped by `device_guard`; pickles by reference."""

    pickled_as = "guarded factory"

    def __init__(self, wrapped: Any, options: _GuardOptions) -> None:
        align = options.align
        if _is_coroutine_factory(wrapped):

            async def guard(
                wrapped: Callable[..., Any], instance: object, args: Any, kwargs: Any
            ) -> Any:
                model = await wrapped(*args, **kwargs)
                align(model, wrapped)
                return model

        else:

            def guard(  # type: ignore[misc]
                wrapped: Callable[..., Any], instance: object, args: Any, kwargs: Any
            ) -> Any:
                model = wrapped(*args, **kwargs)
                align(model, wrapped)
                return model

        # The instance is never passed on: wrapt has already bound `wrapped`.
        super().__init__(wrapped, guard)
