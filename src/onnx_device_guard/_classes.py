"""Guarding a class: align each instance once its outermost `__init__` has returned.

`guard_class` modifies the class in place, so the class object users hold,
`isinstance`, `issubclass` and pickling by reference all keep working. It
wraps the class's own `__init__` and, through `__init_subclass__`, the
`__init__` of every subclass (those that exist already and those defined
later), so a subclass that calls `super().__init__()` and then sets its own
session is aligned after its own `__init__` returns, not halfway through.

Which `__init__` call is the outermost one is tracked per instance and per
thread: a set of the ids of the instances whose construction is under way in
this thread. An `__init__` that builds another instance of the same class
(recursion) aligns that one on its own.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import DeviceGuardError, ModelInputError

if TYPE_CHECKING:
    from ._decorator import _GuardOptions

C = TypeVar("C", bound=type)

_GUARD = "__onnx_device_guard_class__"
"""The attribute, in a guarded class's own `__dict__`, that holds its `_ClassGuard`."""

_WRAPPER_MARK = "__onnx_device_guard_init__"
"""Set on every `__init__` wrapper this module makes, so none is wrapped twice."""

_MISSING: Any = object()


class _Constructing(threading.local):
    """The ids of the instances whose `__init__` is running in this thread."""

    def __init__(self) -> None:
        self.ids: set[int] = set()


_constructing = _Constructing()


@dataclass
class _ClassGuard:
    """What guarding one class changed, so that `unguard_class` can put it back."""

    options: _GuardOptions
    init: Any
    """The class's own `__init__` before guarding (`_MISSING`: it had none)."""
    init_subclass: Any
    """The class's own `__init_subclass__` before guarding (`_MISSING`: none)."""
    subclass_inits: list[tuple[type, Any]] = field(default_factory=list)
    """Subclasses whose own `__init__` this guard wrapped, with the original."""


def describe_options(options: _GuardOptions) -> str:
    """The options that were set, as keyword arguments, for error messages."""
    given = [
        f"{item.name}={getattr(options, item.name)!r}"
        for item in fields(options)
        if item.compare and getattr(options, item.name) is not None
    ]
    return ", ".join(given) if given else "no options"


def guarded_options(cls: type) -> _GuardOptions | None:
    """The options of the nearest guarded class in `cls`'s MRO, or `None`."""
    for klass in cls.__mro__:
        guard = klass.__dict__.get(_GUARD)
        if isinstance(guard, _ClassGuard):
            return guard.options
    return None


def is_guarded(cls: type) -> bool:
    """Whether `cls` itself (not only a base) was guarded."""
    return isinstance(cls.__dict__.get(_GUARD), _ClassGuard)


def guard_class(cls: C, options: _GuardOptions) -> C:
    """Guard the construction of `cls` in place and return `cls` itself.

    Guarding a class that is already guarded with equal options changes
    nothing; with different options it raises `ModelInputError`, as neither
    set of options could be honoured silently.
    """
    existing = cls.__dict__.get(_GUARD)
    if isinstance(existing, _ClassGuard):
        if existing.options == options:
            return cls
        raise ModelInputError(
            f"The class {cls.__qualname__} is already guarded with other options "
            f"({describe_options(existing.options)}), so it cannot also be guarded with "
            f"{describe_options(options)}. Guard it once, with the options it needs."
        )
    guard = _ClassGuard(
        options=options,
        init=cls.__dict__.get("__init__", _MISSING),
        init_subclass=cls.__dict__.get("__init_subclass__", _MISSING),
    )
    try:
        setattr(cls, _GUARD, guard)
    except (TypeError, AttributeError) as error:
        raise ModelInputError(
            f"Cannot guard the class {cls.__qualname__}: its attributes cannot be set "
            f"({type(error).__name__}: {error}). Guard the function that creates its "
            "instances instead."
        ) from error
    if not _is_wrapper(guard.init):
        type.__setattr__(cls, "__init__", _init_wrapper(cls, guard.init))
    type.__setattr__(cls, "__init_subclass__", _init_subclass_hook(cls, guard))
    for subclass in _all_subclasses(cls):
        _wrap_own_init(subclass, guard)
    return cls


def unguard_class(cls: type) -> None:
    """Restore `cls` (and the subclasses its guard wrapped) exactly as before guarding.

    A class that is not guarded is left alone.
    """
    guard = cls.__dict__.get(_GUARD)
    if not isinstance(guard, _ClassGuard):
        return
    for subclass, init in reversed(guard.subclass_inits):
        _restore(subclass, "__init__", init)
    _restore(cls, "__init_subclass__", guard.init_subclass)
    _restore(cls, "__init__", guard.init)
    type.__delattr__(cls, _GUARD)


def _restore(cls: type, name: str, value: Any) -> None:
    if value is _MISSING:
        if name in cls.__dict__:
            type.__delattr__(cls, name)
    else:
        type.__setattr__(cls, name, value)


def _is_wrapper(init: object) -> bool:
    return getattr(init, _WRAPPER_MARK, False) is True


def _all_subclasses(cls: type) -> list[type]:
    found: list[type] = []
    stack: list[type] = list(type.__subclasses__(cls))
    while stack:
        subclass = stack.pop()
        if subclass not in found:
            found.append(subclass)
            stack.extend(type.__subclasses__(subclass))
    return found


def _wrap_own_init(subclass: type, guard: _ClassGuard) -> None:
    """Wrap `subclass`'s own `__init__`, if it defines one we have not wrapped yet."""
    init = subclass.__dict__.get("__init__", _MISSING)
    if init is _MISSING or _is_wrapper(init):
        return
    try:
        type.__setattr__(subclass, "__init__", _init_wrapper(subclass, init))
    except (TypeError, AttributeError):  # an extension type: nothing to wrap
        return
    guard.subclass_inits.append((subclass, init))


def _init_wrapper(cls: type, init: Any) -> Callable[..., None]:
    """An `__init__` that runs `init` and aligns the instance if it was the outermost call."""
    if init is _MISSING:

        def original(self: object, *args: Any, **kwargs: Any) -> None:
            params = cls.__dict__.get("__dataclass_params__")
            if params is not None and getattr(params, "init", False):
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
                # What object() says when a class without __init__ gets arguments;
                # the wrapper must not make such a call pass silently.
                raise TypeError(f"{type(self).__qualname__}() takes no arguments")

        original.__name__ = "__init__"
        original.__qualname__ = f"{cls.__qualname__}.__init__"
    else:
        original = init

    def __init__(self: object, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        key = id(self)
        ids = _constructing.ids
        if key in ids:  # an inner call: super().__init__() from a subclass
            original(self, *args, **kwargs)
            return
        ids.add(key)
        try:
            original(self, *args, **kwargs)
        finally:
            ids.discard(key)
        options = guarded_options(type(self))
        if options is not None:
            options.align(self, type(self), args, kwargs)

    if init is not _MISSING:
        functools.update_wrapper(__init__, init)
    else:
        __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    setattr(__init__, _WRAPPER_MARK, True)
    return __init__


def _init_subclass_hook(cls: type, guard: _ClassGuard) -> classmethod[Any, Any, None]:
    """An `__init_subclass__` for `cls` that wraps each new subclass's own `__init__`."""
    own = guard.init_subclass

    def __init_subclass__(subclass: type[Any], /, **kwargs: Any) -> None:  # noqa: N807
        if own is _MISSING:
            super(cls, subclass).__init_subclass__(**kwargs)  # type: ignore[arg-type]
        else:
            own.__get__(None, subclass)(**kwargs)
        _wrap_own_init(subclass, guard)

    __init_subclass__.__qualname__ = f"{cls.__qualname__}.__init_subclass__"
    return classmethod(__init_subclass__)
