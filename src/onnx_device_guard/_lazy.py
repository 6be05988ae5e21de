"""Models that open their sessions later: checked when the sessions appear.

With `require_session=False`, a guarded model without a session at load
waits here: its class's public methods and `__call__` are wrapped, once per
class, and after each call of a waiting model (each item of a generator
method, once an `async def` one was awaited) its sessions are looked for
again. The first call after which they exist aligns the model as a load
would have (a `"fail"` error is raised from that call, which has run by
then). A model with its sessions (or gone) waits no more, and its calls cost
one dictionary lookup; one that never opens a session is never reported.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any

from ._messages import logger

_WAITING: dict[int, tuple[weakref.ref[Any], Callable[[Any], object]]] = {}
"""Models waiting for their sessions, by id: a weak reference and the check to run."""

_LOCK = threading.Lock()
_HOOKED: dict[type, dict[str, Any]] = {}
"""Classes whose methods are wrapped, with what each name held before (`None`: nothing)."""

_MARK = "__onnx_device_guard_waits__"
_CANNOT_WAIT = (
    "onnx-device-guard cannot wait for the sessions of %s objects (the class cannot be {}): "
    "sessions they open later are not checked. Call onnx_device_guard.realign(model) after "
    "the first call instead."
)


def await_sessions(model: object, check: Callable[[Any], object]) -> None:
    """Run `check(model)` after a call of `model`'s methods, until it stops waiting.

    `check` aligns the model and, when there is still no session, calls this
    function again. Only a weak reference to the model is kept here.
    """
    key, waits = id(model), _WAITING  # the callback may run at interpreter exit
    try:
        reference = weakref.ref(model, lambda _: waits.pop(key, None))
    except TypeError:
        logger.warning(_CANNOT_WAIT.format("weakly referenced"), type(model).__qualname__)
        return
    if _hook(type(model)):
        _WAITING[key] = (reference, check)


def waiting(model: object) -> bool:
    """Whether `model` still waits for its sessions."""
    entry = _WAITING.get(id(model))
    return entry is not None and entry[0]() is model


def _after_call(instance: object) -> None:
    """Check `instance` if it waits for its sessions (the check may wait again)."""
    if waiting(instance):
        _, check = _WAITING.pop(id(instance))
        check(instance)


def _hook(cls: type) -> bool:
    """Wrap `cls`'s public methods and `__call__` once; `False` if the class cannot be changed."""
    with _LOCK:
        if cls in _HOOKED:
            return True
        saved: dict[str, Any] = {}
        for name, function in _methods(cls).items():
            saved[name] = cls.__dict__.get(name)
            try:
                type.__setattr__(cls, name, _wrapped(function))
            except (TypeError, AttributeError):  # a built-in or extension type
                for saved_name, value in saved.items():
                    restore(cls, saved_name, value)
                logger.warning(_CANNOT_WAIT.format("changed"), cls.__qualname__)
                return False
        _HOOKED[cls] = saved
        return True


def stop_waiting(cls: type) -> None:
    """Give `cls` its methods back (a patch's `undo()`); its instances wait no more."""
    with _LOCK:
        saved = _HOOKED.pop(cls, None)
        for name, value in (saved or {}).items():
            restore(cls, name, value)


def restore(cls: type, name: str, value: Any) -> None:
    """Put `value` back as `cls`'s own `name`, or remove it when `value` is `None`."""
    if value is not None:
        type.__setattr__(cls, name, value)
    elif name in cls.__dict__:
        type.__delattr__(cls, name)


def _methods(cls: type) -> dict[str, Callable[..., Any]]:
    """The plain functions a model's calls go through: public methods and `__call__`."""
    found: dict[str, Callable[..., Any]] = {}
    for klass in reversed(cls.__mro__[:-1]):  # object last in the MRO: left out
        for name, value in vars(klass).items():
            if (name == "__call__" or not name.startswith("_")) and inspect.isfunction(value):
                found[name] = value
            elif name in found:  # overridden by something that is not a plain function
                del found[name]
    return {name: function for name, function in found.items() if not hasattr(function, _MARK)}


def _wrapped(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, checking its instance for sessions after each call, item or await."""
    generates = inspect.isgeneratorfunction(function)

    @functools.wraps(function)
    def method(self: object, *args: Any, **kwargs: Any) -> Any:
        result = function(self, *args, **kwargs)
        if not generates:
            _after_call(self)
        elif id(self) in _WAITING:
            return _checked_items(self, result)
        return result

    @functools.wraps(function)
    async def async_method(self: object, *args: Any, **kwargs: Any) -> Any:
        result = await function(self, *args, **kwargs)
        _after_call(self)
        return result

    wrapper = async_method if inspect.iscoroutinefunction(function) else method
    setattr(wrapper, _MARK, True)
    return wrapper


def _checked_items(instance: object, items: Iterator[Any]) -> Generator[Any, None, Any]:
    """Yield what a generator method yields, checking `instance` after each item."""
    while True:
        try:
            item = next(items)
        except StopIteration as stop:
            _after_call(instance)
            return stop.value
        _after_call(instance)
        yield item
