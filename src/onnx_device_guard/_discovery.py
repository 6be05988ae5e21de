"""Finding a model's sessions made before the call, and its device attribute: instance
attributes and built-in containers within fixed limits, no property run, what is left out said."""

from __future__ import annotations

import collections
import contextlib
import enum
import inspect
import itertools
import logging
import pathlib
import types
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ._errors import DeviceGuardError
from ._messages import MISSING, error_text, logger, short_repr
from ._options import SessionSource

DEFAULT_SESSION_ATTRS = ("_session", "session")
"""The attributes tried for the session before discovery."""

DEFAULT_DEVICE_ATTRS = ("_device", "device")
"""The attributes tried for the device, in order."""

MAX_DEPTH = 3
"""How many attribute levels discovery goes down (`a.b.c` is three)."""

MAX_ITEMS = 64
"""How many items of one container discovery looks at (a session is in the first few)."""

MAX_ATTRIBUTES = 1024
"""How many instance attributes of one object discovery looks at."""

MAX_NESTING = 3
"""How many containers deep discovery goes within one attribute (`a[0][1][2]`)."""

MAX_VALUES = 4096
"""How many values one discovery looks at in all, whatever the model's shape."""

_SCALARS = (str, bytes, int, float, complex, type(None))
"""Skipped at once: the most common values in a model's attributes."""

_BUILT_IN = frozenset({*_SCALARS, bool, list, tuple, dict, set, frozenset})
"""Built-in types themselves, which take no new attributes: never a session's, one lookup."""

_SEQUENCES = (list, tuple, collections.deque, set, frozenset)
_CONTAINERS = (dict, *_SEQUENCES, weakref.ref, types.MethodType)
"""Read as the built-in types (a subclass's methods never run); a weak reference and a bound
method (`session.run`) hold one object."""

_LEAVES: tuple[type, ...] = (*_SCALARS, type, types.ModuleType, types.FunctionType, enum.Enum)
_LEAVES += (pathlib.PurePath, logging.Logger, logging.Handler)
"""Values whose attributes are never searched: they hold no model's session, or hold every
object of the program (a module, a logger). Objects without attributes need no entry."""


def factory_name(factory: object) -> str:
    """The factory's qualified name, for messages and log fields."""
    name = getattr(factory, "__qualname__", None)
    return name if isinstance(name, str) else short_repr(factory)


def describe(model: object, factory: object | None) -> str:
    """The start of a message about `model`: which factory returned it, if any."""
    if factory is None:
        return f"The model {type(model).__name__}"
    return f"The factory {factory_name(factory)} returned {type(model).__name__}"


def read_attribute(
    owner: object, name: str, model: object, factory: object | None, path: str | None = None
) -> Any:
    """`owner.<name>`, or `MISSING`; a lookup that raises is a `DeviceGuardError` naming `path`."""
    try:
        return getattr(owner, name, MISSING)
    except Exception as error:
        raise DeviceGuardError(
            f"{describe(model, factory)}, and reading its attribute {path or name!r} raised "
            f"{error_text(error)}. Make the attribute readable on the returned object, or "
            "pass session_attr=/device_attr= (or device=) so the guard does not need it."
        ) from error


Sessions = list[tuple[str, object]]
"""A model's sessions, each with the name messages give it."""

Found = tuple[Sessions, tuple[str, ...], tuple[str, ...]]
"""Sessions with their paths, the attribute paths searched, and what the search left out."""


def find_sessions(model: object, source: SessionSource, factory: object | None) -> Found:
    """The model's sessions with their paths, what was searched, what was not (`None` is none)."""
    if source is None:
        tried: list[str] = []
        for name in DEFAULT_SESSION_ATTRS:
            value = read_attribute(model, name, model, factory)
            if value is MISSING:
                tried.append(name)
                continue
            try:  # None has none; a lookup that raises may be one
                maybe = getattr(value, "get_providers", None) is not None
            except Exception:
                maybe = True
            if maybe:
                return [(where(model, name, value)[0], value)], (name,), ()
            # A package's own wrapper, say: discovery looks inside it.
            tried.append(f"{name} (a {type(value).__name__}, not a session)")
        found, searched, unreached = discover_sessions(model)
        if found and logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s: found onnxruntime sessions at %s.",
                describe(model, factory),
                ", ".join(repr(path) for path, _ in found),
            )
        return found, (*tried, *searched), unreached
    if isinstance(source, tuple):
        found, searched = _sessions_at_paths(model, source, factory), source
    else:
        found, searched = _sessions_from_callable(model, source, factory), ()
    return [(path, value) for path, value in found if value is not None], searched, ()


def _sessions_at_paths(model: object, paths: tuple[str, ...], factory: object | None) -> Sessions:
    found: Sessions = []
    missing: list[str] = []
    for path in paths:
        value = model
        parts = path.split(".")
        for number, part in enumerate(parts):
            value = read_attribute(value, part, model, factory, ".".join(parts[: number + 1]))
            if value is MISSING:  # a part is absent
                missing.append(path)
                break
        else:
            found.append((path, value))
    if missing and found:  # some there, some not: the model is not what session_attr says
        raise DeviceGuardError(describe(model, factory) + lacking(missing, paths))
    return found


def lacking(missing: Iterable[str], paths: tuple[str, ...]) -> str:
    """How an error says that the model lacks the `missing` ones of the `session_attr` paths."""
    return (
        f" without the session attribute(s) {', '.join(map(repr, missing))} named in "
        f"session_attr={paths!r}. Return a model that has them, or fix session_attr."
    )


def _sessions_from_callable(
    model: object, source: Callable[[Any], object], factory: object | None
) -> Sessions:
    name = f"session_attr={factory_name(source)}"
    try:
        result = source(model)  # None: no session, which find_sessions drops
        one = callable(getattr(result, "get_providers", None)) or isinstance(result, str | bytes)
        if one or not isinstance(result, Iterable):  # one session, or not sessions at all
            return [(f"{name}(model)", result)]
        return [(f"{name}(model)[{number}]", session) for number, session in enumerate(result)]
    except DeviceGuardError:
        raise
    except Exception as error:
        raise DeviceGuardError(
            f"{describe(model, factory)}, and {name} raised {error_text(error)} on it. "
            "Make the callable return the model's session, or an iterable of its sessions."
        ) from error


def where(model: object, name: str, value: object) -> tuple[str, object]:
    """The path of `model.<name>` and its holder: the model, or an inner object it forwards."""
    # Looked up on the model, not its class: a class's missing attribute costs Python 3.11 an error.
    if type(model).__getattribute__ is object.__getattribute__ and (
        getattr(model, "__getattr__", None) is None
    ):
        return name, model  # nothing forwards: the attribute is the model's own
    with contextlib.suppress(AttributeError):
        inspect.getattr_static(model, name)
        return name, model
    for child_name, child in instance_attributes(model):
        if isinstance(child, _LEAVES + _CONTAINERS):
            continue
        with contextlib.suppress(Exception):
            inspect.getattr_static(child, name)
            if getattr(child, name) is value:
                return f"{child_name}.{name}", child
    return name, model


def is_session(value: object) -> bool:
    """Whether `value`'s type has callable `get_providers` and `run`, as a session does."""
    try:
        if (cls := type(value)) in _BUILT_IN or isinstance(value, _SCALARS):  # the usual values
            return False
        return callable(getattr(cls, "get_providers", None)) and callable(getattr(cls, "run", None))
    except Exception:  # a dead weak proxy, a metaclass whose lookup raises: not a session
        return False


def discover_sessions(model: object) -> Found:
    """Find the sessions among `model`'s instance attributes, breadth first, each object once."""
    found: Sessions = []
    searched: list[str] = []
    unreached: list[str] = []
    seen, budget = {id(model)}, MAX_VALUES
    level: Sessions = [("", model)]
    for depth in range(1, MAX_DEPTH + 1):
        below: Sessions = []
        for owner_path, owner in level:
            for name, value in instance_attributes(owner):
                searched.append(path := f"{owner_path}.{name}" if owner_path else name)
                values = _values(path, value, unreached)
                budget -= 1 + len(values)  # each attribute and container item, as work done
                for item_path, item in values:
                    if isinstance(item, _LEAVES) or id(item) in seen:
                        continue
                    seen.add(id(item))
                    if is_session(item):
                        found.append((item_path, item))
                    elif depth < MAX_DEPTH:
                        below.append((item_path, item))
                    elif not all(isinstance(v, _SCALARS) for _, v in instance_attributes(item)):
                        unreached.append(f"{item_path} (past {MAX_DEPTH} levels)")
                if budget < 0:
                    unreached.append(f"the rest of the model (past {MAX_VALUES} values)")
                    return found, tuple(searched), tuple(unreached)
        level = below
    return found, tuple(searched), tuple(unreached)


def _values(path: str, value: object, unreached: list[str], nesting: int = 0) -> Sessions:
    """`value`, or the values within a container (paths with their keys), as far as
    `MAX_ITEMS` and `MAX_NESTING` reach: `unreached` names what past them could hold a session."""
    if not isinstance(value, _CONTAINERS):
        return [(path, value)]
    if isinstance(value, weakref.ref):  # what it refers to, while that lives
        return _values(f"{path}()", weakref.ref.__call__(value), unreached, nesting + 1)
    if isinstance(value, types.MethodType):
        return _values(f"{path}.__self__", value.__self__, unreached, nesting + 1)
    if isinstance(value, dict):
        items: list[tuple[object, object]] = list(dict.items(value))
    else:  # a set's items have no place to name: `[...]`
        kind = next(kind for kind in _SEQUENCES if isinstance(value, kind))
        children = kind.__iter__(value)  # type: ignore[arg-type]
        items = [(..., c) for c in children] if kind in (set, frozenset) else [*enumerate(children)]
    shown = items[:MAX_ITEMS] if nesting < MAX_NESTING else []
    if any(not isinstance(child, _SCALARS) for _, child in items[len(shown) :]):
        past = f"the first {MAX_ITEMS} items" if shown else f"{MAX_NESTING} nested containers"
        unreached.append(f"{path} (past {past})")
    values: Sessions = []
    for key, child in shown:
        item_path = f"{path}[{key!r}]" if type(key) in (str, int) else f"{path}[...]"
        values.extend(_values(item_path, child, unreached, nesting + 1))
    return values


def instance_attributes(owner: object) -> list[tuple[str, object]]:
    """The values in `owner`'s instance `__dict__` and slots; never runs a property."""
    try:
        cls = type(owner)
        dict_descriptor, slots = _layout(cls)
        values: list[tuple[str, object]] = []
        namespace = None if dict_descriptor is None else dict_descriptor.__get__(owner, cls)
        if isinstance(namespace, dict):
            items = itertools.islice(dict.items(namespace), MAX_ATTRIBUTES)
            values = [item for item in items if isinstance(item[0], str)]
        for name, descriptor in slots:
            with contextlib.suppress(AttributeError):  # a slot never set
                values.append((name, descriptor.__get__(owner, cls)))
        return values
    except Exception:  # an odd object: search the rest of the model
        return []


def _layout(cls: type) -> tuple[Any, tuple[tuple[str, Any], ...]]:
    """Where a class's instances keep their attributes, read off the class's own namespace."""
    dict_descriptor: Any = MISSING  # until the first class that names `__dict__`
    slots: list[tuple[str, Any]] = []
    for klass in cls.__mro__[:-1]:  # `object` has neither
        namespace = klass.__dict__
        if dict_descriptor is MISSING and "__dict__" in namespace:
            # A getset for Python classes; a member for some C types (SimpleNamespace).
            dict_descriptor = namespace["__dict__"]
        names = namespace.get("__slots__", ())
        for name in (names,) if isinstance(names, str) else names:
            if name.startswith("__") and not name.endswith("__"):  # stored name-mangled
                name = f"_{klass.__name__.lstrip('_')}{name}"
            if isinstance(descriptor := namespace.get(name), types.MemberDescriptorType):
                slots.append((name, descriptor))
    if not isinstance(dict_descriptor, types.GetSetDescriptorType | types.MemberDescriptorType):
        dict_descriptor = None
    return dict_descriptor, tuple(slots)


@dataclass(slots=True)
class DeviceAttribute:
    """The model's device attribute: its path, value, and the object to write it on."""

    path: str
    """How messages name it: `device`, or `backend.device` when the model forwards it."""
    value: object
    holder: object
    """The model, or the inner object it forwards the attribute from."""
    name: str


def find_device_attribute(
    model: object, device_attr: str | None, factory: object | None
) -> DeviceAttribute | None:
    """The model's device attribute, or `None`; an explicit `device_attr` must exist."""
    for name in DEFAULT_DEVICE_ATTRS if device_attr is None else (device_attr,):
        value = read_attribute(model, name, model, factory)
        if value is not MISSING:
            path, holder = where(model, name, value)
            return DeviceAttribute(path, value, holder, name)
    if device_attr is not None:
        raise DeviceGuardError(
            f"{describe(model, factory)} without the device attribute {device_attr!r} named in "
            "device_attr. Return a model that has it, or fix device_attr."
        )
    return None
