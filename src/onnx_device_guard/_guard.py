"""`device_guard`: align each model a factory returns, or each instance of a class guarded in
place (its and its subclasses' `__init__`; a class cloudpickled by value arrives guarded)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, overload

from ._births import collecting, pass_on, settle
from ._devices import DeviceLike
from ._errors import DeviceGuardError, ModelInputError
from ._messages import typed_repr
from ._model_alignment import Load, align_model, call_and_align, call_and_align_async
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
    when the factory runs (an `async def` one's, when it is awaited).

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


_GUARD = "__onnx_device_guard_class__"
"""The attribute, in a guarded class's own `__dict__`, that holds its `_ClassGuard`."""

_WRAPPER_MARK = "__onnx_device_guard_init__"
"""Set on every `__init__` this module makes, so none is wrapped twice: `True` on one that
runs its class's own `__init__`, `False` on one that runs the inherited one."""

_constructing = threading.local()
"""Its `calls`: for each instance whose `__init__` runs in this thread (by id), the call each
wrapped `__init__` got, by the class whose own it is, the outermost first."""


@dataclass
class _ClassGuard:
    """A guarded class's options, and what guarding it replaced, for `unguard_class`."""

    options: GuardOptions
    origin: Any = None
    replaced: list[tuple[type, str, Any]] = field(default_factory=list)
    """`(class, name, its own value before)`, in order; `None`: it had no own value."""


def class_guard(cls: type) -> _ClassGuard | None:
    """The guard of `cls` itself (not of a base), or `None`."""
    guard = cls.__dict__.get(_GUARD)
    return guard if isinstance(guard, _ClassGuard) else None


def guard_class(cls: type, options: GuardOptions, origin: object = None) -> None:
    """Guard the construction of `cls` in place; again, only with equal options."""
    existing = class_guard(cls)
    if existing is not None:
        if existing.options == options:
            if origin is None:  # device_guard too: the guard outlives the patch that made it
                existing.origin = None
            return
        raise ModelInputError(
            f"The class {cls.__qualname__} is already guarded with other options "
            f"({existing.options}), so it cannot also be guarded with "
            f"{options}. Guard it once, with the options it needs."
        )
    for meta in inspect.getmro(type(cls)):
        if meta is not type and meta is not object and "__call__" in vars(meta):
            raise ModelInputError(
                f"Cannot guard the class {cls.__qualname__}: its metaclass {meta.__qualname__} "
                "defines __call__, which may change the instance after __init__ has returned. "
                "Guard the function that creates its instances instead."
            )
    guard = _ClassGuard(options, origin)
    try:
        setattr(cls, _GUARD, guard)
    except (TypeError, AttributeError) as error:
        raise ModelInputError(
            f"Cannot guard the class {cls.__qualname__}: its attributes cannot be set ({error}). "
            "Guard the function that creates its instances instead."
        ) from error
    if cls.__dict__.get("__init__") is None:  # it runs the inherited one, then aligns
        _replace(guard, cls, "__init__", _init_wrapper(cls, None))
    # A __new__ (of the class or a base) may return another type: then no __init__ runs.
    if any("__new__" in vars(klass) for klass in cls.__mro__[:-1]):
        _replace(guard, cls, "__new__", _new_wrapper(cls, cls.__dict__.get("__new__")))
    own = cls.__dict__.get("__init_subclass__")

    def __init_subclass__(subclass: type[Any], /, **kwargs: Any) -> None:  # noqa: N807
        _own_or_inherited(cls, own, "__init_subclass__", subclass)(**kwargs)
        _wrap_inits(subclass, guard)  # a new class: it has no subclasses yet

    __init_subclass__.__qualname__ = f"{cls.__qualname__}.__init_subclass__"
    _replace(guard, cls, "__init_subclass__", classmethod(__init_subclass__))
    _wrap_inits(cls, guard)


def unguard_class(cls: type, origin: object = None) -> None:
    """Restore `cls` (and the subclasses its guard wrapped) as before, if `origin` guarded it."""
    guard = class_guard(cls)
    if guard is None or guard.origin is not origin:
        return
    type.__delattr__(cls, _GUARD)
    for owner, name, value in reversed(guard.replaced):
        keeper = owner is not cls and next(filter(None, map(class_guard, owner.__mro__)), None)
        if keeper:  # a subclass still guarded (by itself or a base) keeps the wrapper for it
            keeper.replaced.append((owner, name, value))
        elif value is not None:
            type.__setattr__(owner, name, value)
        elif name in owner.__dict__:
            type.__delattr__(owner, name)


def _replace(guard: _ClassGuard, owner: type, name: str, value: Any) -> None:
    """Set `owner`'s own `name` to `value`, recording in `guard` what to put back."""
    own = owner.__dict__.get(name)
    type.__setattr__(owner, name, value)
    guard.replaced.append((owner, name, own))


_SIGNATURES: weakref.WeakKeyDictionary[type, inspect.Signature | None] = weakref.WeakKeyDictionary()
"""What each class's `__init__` takes, read once: reading it costs more than the check."""


def read_signature(factory: Callable[..., Any]) -> inspect.Signature | None:
    """`factory`'s signature; `None` if it has none to read (the load says so if it needs it)."""
    try:
        return inspect.signature(factory)
    except (TypeError, ValueError):
        return None


def _align(instance: object, cls: type, calls: dict[type, Any], collected: collecting) -> None:
    """Align a new `instance` of `cls` with the nearest guarded class's options, reading the call
    that class's own `__init__` got (`super().__init__(path, "cuda")`), else the outermost."""
    for klass in cls.__mro__:
        guard = class_guard(klass)
        if guard is not None:
            called = klass if klass in calls else next(iter(calls))  # else the outermost call
            args, kwargs = calls[called]
            if called not in _SIGNATURES:
                _SIGNATURES[called] = _init_signature(called)
            load = Load(guard.options, cls, args, kwargs, _SIGNATURES[called], guard.origin)
            align_model(instance, load, collected)
            return
    pass_on(collected.born, owned=False)  # unguarded while it was built: its sessions are not lost
    settle(collected)


def _init_signature(cls: type) -> inspect.Signature | None:
    """What the `__init__` that `cls` runs takes, but `self`; the class's own signature when
    that is object's. `inspect.signature(cls)` shows an own `__new__(*args, **kwargs)` first."""
    inits = (vars(klass).get("__init__") for klass in cls.__mro__)
    init = next(i for i in inits if i is not None and getattr(i, _WRAPPER_MARK, True))
    if init is object.__init__:
        return read_signature(cls)
    signature = read_signature(init)
    return signature and signature.replace(parameters=[*signature.parameters.values()][1:])


def _new_wrapper(cls: type, new: Any) -> Any:
    """A `__new__` that aligns what it returns when no `__init__` will: another type."""
    signature = read_signature(cls)  # what the class is called with, read before the change

    def __new__(klass: type, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
        with collecting() as collected:
            instance = _own_or_inherited(cls, new, "__new__", klass)(klass, *args, **kwargs)
        if not isinstance(instance, klass):
            _align(instance, klass, {klass: (args, kwargs)}, collected)
        else:  # its __init__ runs next, in a load of its own (none, when pickle calls it)
            pass_on(collected.born, owned=False)
            settle(collected)
        return instance

    __new__.__qualname__ = f"{cls.__qualname__}.__new__"
    if signature is not None:  # inspect prefers a class's `__new__`, and drops its first parameter
        first = inspect.Parameter("__new_cls", inspect.Parameter.POSITIONAL_ONLY)
        parameters = [first, *signature.parameters.values()]
        __new__.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return staticmethod(__new__)


def _own_or_inherited(cls: type, own: Any, name: str, klass: type) -> Any:
    """`cls`'s `own` method `name` bound for `klass`, or without one, the next in `klass`'s MRO."""
    return getattr(super(cls, klass), name) if own is None else own.__get__(None, klass)


def _wrap_inits(cls: type, guard: _ClassGuard) -> None:
    """Wrap each own `__init__` not wrapped yet, of `cls` and its subclasses at any depth."""
    init = cls.__dict__.get("__init__")
    if init is not None and not hasattr(init, _WRAPPER_MARK):
        with contextlib.suppress(TypeError, AttributeError):  # an extension type: nothing to wrap
            _replace(guard, cls, "__init__", _init_wrapper(cls, init))
    subclasses: list[type] = type.__subclasses__(cls)
    for subclass in subclasses:  # in a diamond, the second visit finds the wrapper
        _wrap_inits(subclass, guard)


def _init_wrapper(cls: type, init: Any) -> Callable[..., None]:
    """An `__init__` that runs `init` (or the inherited one) and then aligns, if outermost."""
    original = init if init is not None else _inherited_init(cls)
    if isinstance(original, functools.partialmethod):  # not callable itself: bind it per call
        method = original

        def original(self: object, *args: Any, **kwargs: Any) -> None:
            method.__get__(self, type(self))(*args, **kwargs)

    @functools.wraps(original)
    def __init__(self: object, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        _construct(cls, original, self, args, kwargs)  # by name: no thread-local to cloudpickle

    setattr(__init__, _WRAPPER_MARK, init is not None)
    return __init__


def _construct(
    cls: type, init: Callable[..., None], instance: object, args: tuple[Any, ...], kwargs: Any
) -> None:
    """Run `init`, the `__init__` of `cls`; align `instance` after its outermost `__init__`."""
    key = id(instance)
    constructing: dict[int, dict[type, Any]] = _constructing.__dict__.setdefault("calls", {})
    if key in constructing:  # an inner call: super().__init__() from a subclass
        constructing[key].setdefault(cls, (args, kwargs))
        init(instance, *args, **kwargs)
        return
    calls = constructing[key] = {cls: (args, kwargs)}
    try:
        with collecting() as collected:
            init(instance, *args, **kwargs)
    finally:
        del constructing[key]
    _align(instance, type(instance), calls, collected)


def _inherited_init(cls: type) -> Callable[..., None]:
    """The `__init__` a class without its own runs: the next one in the instance's MRO."""

    def __init__(self: object, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        if getattr(cls.__dict__.get("__dataclass_params__"), "init", False):
            # @dataclass ran after the guard and kept the guard's __init__
            # instead of writing its own: the fields would never be set.
            raise DeviceGuardError(
                f"{cls.__qualname__} was guarded before @dataclass could write its "
                "__init__. Put @device_guard above @dataclass, so that it guards the "
                "finished class."
            )
        mro = type(self).__mro__
        owner = next(k for k in mro[mro.index(cls) + 1 :] if "__init__" in k.__dict__)
        if owner is not object:
            super(cls, self).__init__(*args, **kwargs)  # type: ignore[arg-type]
        elif (args or kwargs) and type(self).__new__ is object.__new__:
            # What object() says when a class without __init__ gets arguments.
            raise TypeError(f"{type(self).__qualname__}() takes no arguments")

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    # The signature is the inherited __init__'s: the call's arguments bind to it.
    inherited = next(k.__dict__["__init__"] for k in cls.__mro__[1:] if "__init__" in k.__dict__)
    if inherited is not object.__init__:
        __init__.__wrapped__ = inherited  # type: ignore[attr-defined]
    return __init__
