"""Models that open their sessions later: checked when the sessions appear.

Some packages create their onnxruntime sessions at the model's first call,
not in its constructor. With `require_session=False`, a guarded model that
holds no session at load waits here: its class's public methods (and
`__call__`) are wrapped, once per class, so that after each call of a waiting
model the guard looks for its sessions again. The first call after which
they exist aligns the model, exactly as a load would have: in `"fallback"`
mode one report and the device attribute rewritten, in `"fail"` mode the
`EnvironmentConfigurationError` raised from that call. The call itself has
run by then, on whatever device its sessions got: the check comes at the
latest when the call that opened them returns. A generator method is checked
after each item it yields, an `async def` one once it has been awaited.

Once a model has its sessions (or is gone) it waits no more, and its calls
cost one dictionary lookup. A model that never opens a session is never
reported, as `require_session=False` promises.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any

from ._messages import MISSING, logger

_WAITING: dict[int, tuple[weakref.ref[Any], Callable[[], object]]] = {}
"""Models waiting for their sessions, by id: a weak reference and the check to run."""

_LOCK = threading.Lock()
_HOOKED: dict[type, dict[str, Any]] = {}
"""Classes whose methods are wrapped, with what each name held before (`MISSING`: nothing)."""

_MARK = "__onnx_device_guard_waits__"


def await_sessions(model: object, check: Callable[[], object]) -> None:
    """Run `check` after a call of `model`'s methods, until it stops waiting.

    `check` aligns the model and, when there is still no session, calls this
    function again.
    """
    key, waiting = id(model), _WAITING  # the callback may run at interpreter exit

    def forget(_: object) -> None:
        waiting.pop(key, None)

    try:
        reference = weakref.ref(model, forget)
    except TypeError:
        logger.warning(
            "onnx-device-guard cannot wait for the sessions of %s objects (the class cannot "
            "be weakly referenced): sessions they open later are not checked. Call "
            "onnx_device_guard.realign(model) after the first call instead.",
            type(model).__qualname__,
        )
        return
    if not _hook(type(model)):
        return
    _WAITING[key] = (reference, check)


def waiting(model: object) -> bool:
    """Whether `model` still waits for its sessions."""
    entry = _WAITING.get(id(model))
    return entry is not None and entry[0]() is model


def _after_call(instance: object) -> None:
    """Check `instance` if it waits for its sessions (the check may wait again)."""
    entry = _WAITING.get(id(instance))
    if entry is None or entry[0]() is not instance:
        return
    del _WAITING[id(instance)]
    entry[1]()


def _hook(cls: type) -> bool:
    """Wrap `cls`'s public methods and `__call__` once; `False` if the class cannot be changed."""
    with _LOCK:
        if cls in _HOOKED:
            return True
        saved: dict[str, Any] = {}
        for name, function in _methods(cls).items():
            saved[name] = cls.__dict__.get(name, MISSING)
            try:
                type.__setattr__(cls, name, _wrapped(function))
            except (TypeError, AttributeError):  # a built-in or extension type
                _restore(cls, saved)
                logger.warning(
                    "onnx-device-guard cannot wait for the sessions of %s objects (the class "
                    "cannot be changed): sessions they open later are not checked. Call "
                    "onnx_device_guard.realign(model) after the first call instead.",
                    cls.__qualname__,
                )
                return False
        _HOOKED[cls] = saved
        return True


def stop_waiting(cls: type) -> None:
    """Give `cls` its methods back (a patch's `undo()`); its instances wait no more."""
    with _LOCK:
        saved = _HOOKED.pop(cls, None)
        if saved is not None:
            _restore(cls, saved)


def _restore(cls: type, saved: dict[str, Any]) -> None:
    for name, value in saved.items():
        if value is MISSING:
            if name in cls.__dict__:
                type.__delattr__(cls, name)
        else:
            type.__setattr__(cls, name, value)


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
    """`function`, checking its instance for sessions after each call."""
    if inspect.isgeneratorfunction(function):

        @functools.wraps(function)
        def generator_method(self: object, *args: Any, **kwargs: Any) -> Any:
            items = function(self, *args, **kwargs)
            return _checked_items(self, items) if id(self) in _WAITING else items

        wrapper: Callable[..., Any] = generator_method
    elif inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def async_method(self: object, *args: Any, **kwargs: Any) -> Any:
            result = await function(self, *args, **kwargs)
            _after_call(self)
            return result

        wrapper = async_method
    else:

        @functools.wraps(function)
        def method(self: object, *args: Any, **kwargs: Any) -> Any:
            result = function(self, *args, **kwargs)
            _after_call(self)
            return result

        wrapper = method
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
