"""wrapt wrappers that pickle as the functions they wrap do: by reference, or by value.

A wrapt proxy refuses to pickle ("object proxy must define __reduce__()"),
which would keep decorated factories out of process pools. These wrappers
pickle as a name to look up again on the other side, as wrapt's docs
("Serialising a Decorator") recommend, and as `pickle` treats plain
functions: only when that name holds the very wrapper being pickled, so an
unpickled factory is never the function without its guard.

cloudpickle (used by Ray, Dask and joblib) pickles functions it cannot find
by name (in `__main__`, defined locally, lambdas) by value. A wrapt proxy
forwards `__class__`, so cloudpickle's type dispatch would take the wrapper
for the plain function inside it and pickle only that, dropping the guard.
The wrappers here tell a pickler's `reducer_override` their true type;
cloudpickle then asks `__reduce_ex__`, which rebuilds the wrapper around the
wrapped function carried by value. Plain `pickle` cannot carry code by value
and gets a `PicklingError` that says what to do.
"""

from __future__ import annotations

import importlib
import pickle
import sys
import threading
from typing import TYPE_CHECKING, Any

import wrapt

from ._messages import short_repr

if TYPE_CHECKING:
    _FunctionWrapper = wrapt.FunctionWrapper[..., Any]
    _BoundFunctionWrapper = wrapt.BoundFunctionWrapper[..., Any]
else:  # wrapt's classes are generic in its stubs only
    _FunctionWrapper = wrapt.FunctionWrapper
    _BoundFunctionWrapper = wrapt.BoundFunctionWrapper

_FIX = (
    "Decorate the function where it is defined at module level (the decorator above its "
    "`def`), or bind the decorated object to a module-level name; to send functions "
    "defined in __main__, locally or as lambdas, use cloudpickle (as Ray, Dask and "
    "joblib do), which carries them by value, decorator included."
)

_asked = threading.local()
"""Which wrapper a pickler's `reducer_override` last asked about, in this thread."""


def _note_pickler_asks(wrapper: object) -> bool:
    """Return whether a pickler's `reducer_override` is asking for `wrapper`'s class.

    It is called from a `__class__` getter, so frame 1 is whoever asked.
    cloudpickle's `reducer_override` (also in the copies that Ray and joblib
    ship) checks `isinstance(obj, types.FunctionType)`; when it asks, the
    wrapper's `__reduce_ex__` runs right after, and is told so.
    """
    try:
        asker = sys._getframe(2)
    except ValueError:  # read from native code with no Python caller
        return False
    if asker.f_code.co_name != "reducer_override":
        return False
    _asked.wrapper_id = id(wrapper)
    return True


def _asked_by_value_pickler(wrapper: object) -> bool:
    """Return (and forget) whether a by-value pickler is pickling `wrapper` now."""
    asked = getattr(_asked, "wrapper_id", None) == id(wrapper)
    _asked.wrapper_id = None
    return asked


def _find(module: str, qualname: str) -> object:
    """Return what `module.qualname` holds, without binding its last step.

    A class's attribute is read from the class's own namespace, and a
    `classmethod` or `staticmethod` there is looked through, so a guarded
    method comes back as the wrapper itself rather than bound to the class.
    """
    target: object = importlib.import_module(module)
    *path, name = qualname.split(".")
    for part in path:
        target = getattr(target, part)
    if isinstance(target, type):
        for klass in target.__mro__:
            if name in vars(klass):
                found = vars(klass)[name]
                return found.__func__ if isinstance(found, classmethod | staticmethod) else found
    return getattr(target, name)


def _resolve_qualname(module: str, qualname: str) -> object:
    """Unpickle a wrapper pickled by reference: look its name up again."""
    return _find(module, qualname)


def _rebuild(cls: type[WrapperByReference], wrapped: Any, wrapper: Any) -> WrapperByReference:
    """Unpickle a wrapper pickled by value: wrap the same function with the same wrapper."""
    rebuilt = _FunctionWrapper.__new__(cls)
    _FunctionWrapper.__init__(rebuilt, wrapped, wrapper)
    return rebuilt


def _get_class(wrapper: Any) -> type:
    """The wrapped function's class, as wrapt forwards it, except to a pickler asking."""
    if _note_pickler_asks(wrapper):
        return type(wrapper)
    return wrapper.__wrapped__.__class__  # type: ignore[no-any-return]


def _set_class(wrapper: Any, value: type) -> None:
    wrapper.__wrapped__.__class__ = value


_class_for_picklers = property(_get_class, _set_class)
"""The `__class__` of both wrappers below: see `_note_pickler_asks`."""


class BoundWrapperByReference(_BoundFunctionWrapper):
    """A wrapper bound to a class or an instance; pickles as an attribute lookup on it."""

    __class__ = _class_for_picklers

    def __reduce_ex__(self, protocol: object) -> tuple[Any, ...]:
        owner = self._self_instance if self._self_instance is not None else self._self_owner
        if not _asked_by_value_pickler(self):
            cls = owner if isinstance(owner, type) else type(owner)
            module, qualname = cls.__module__, cls.__qualname__
            try:
                found = _find(module, qualname)
            except Exception:
                found = None
            if found is not cls:
                name = f"{qualname}.{self.__name__}"
                raise pickle.PicklingError(
                    f"Cannot pickle the method {name} of the class {module}.{qualname}: "
                    + (
                        "the class is defined inside a function, so another process cannot "
                        "find it by name. "
                        if "<locals>" in qualname
                        else "that name does not hold this class. "
                    )
                    + _FIX
                )
        return (getattr, (owner, self.__name__))

    def __copy__(self) -> BoundWrapperByReference:
        return self

    def __deepcopy__(self, memo: object) -> BoundWrapperByReference:
        return self


class WrapperByReference(_FunctionWrapper):
    """A function wrapper that pickles as its module and qualified name, or by value.

    By reference when the name it was defined under (or another module-level
    name) holds this very wrapper; by value under cloudpickle when cloudpickle
    would carry the function by value; else `pickle.PicklingError`.
    """

    __bound_function_wrapper__ = BoundWrapperByReference

    pickled_as = "function"
    """What the wrapper is called in the error raised when it cannot be pickled."""

    __class__ = _class_for_picklers

    def __reduce_ex__(self, protocol: object) -> tuple[Any, ...]:
        by_value = _asked_by_value_pickler(self)
        module, qualname = self.__module__, self.__qualname__
        if not (by_value and module == "__main__"):
            name, why = self._name_holding_self(module, qualname)
            if name is not None:
                return (_resolve_qualname, (module, name))
        else:
            why = "it is defined in __main__"
        if by_value:
            return (_rebuild, (type(self), self.__wrapped__, self._self_wrapper))
        raise pickle.PicklingError(
            f"Cannot pickle the {self.pickled_as} {module}.{qualname}: {why}. {_FIX}"
        )

    def _name_holding_self(self, module: str, qualname: str) -> tuple[str | None, str]:
        """Return a name in `module` that holds this wrapper, or `None` and why there is none."""
        if "<locals>" in qualname:
            return None, "it is defined inside a function, so another process cannot find it"
        try:
            found = _find(module, qualname)
        except Exception:
            found = _MISSING
        if found is self:
            return qualname, ""
        if "." not in qualname:  # `load = device_guard(_load)`: look for `load`
            namespace = getattr(sys.modules.get(module), "__dict__", {})
            for name, value in list(namespace.items()):
                if value is self:
                    return name, ""
        if found is _MISSING:
            return None, f"no name {qualname!r} in {module} holds it"
        return None, (
            f"the name {qualname!r} in {module} holds {short_repr(found)}, not this "
            f"{self.pickled_as}, so unpickling would bring back something else (such as the "
            "function without its decorator)"
        )

    # Functions are immutable as far as copy is concerned; so are wrapped ones.
    def __copy__(self) -> WrapperByReference:
        return self

    def __deepcopy__(self, memo: object) -> WrapperByReference:
        return self


_MISSING = object()
