"""Following a session's provider changes after load, so a model can be aligned again: a
change in `set_providers` calls back the models (held weakly) watching that session, in turn."""

from __future__ import annotations

import functools
import logging
import sys
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ._errors import DeviceGuardError, EnvironmentConfigurationError, ModelInputError, in_context
from ._messages import ObjectTable, logger

if TYPE_CHECKING:
    from ._options import Resolved

Providers = tuple[str, ...] | None
"""A session's providers in order, or `None` when they could not be read."""

OnChange = Callable[[Any, str, Providers, Providers], object]
"""`on_change(model, session_name, old_providers, new_providers)`; its result is ignored."""

_AT_LOAD_ONLY = (
    "A model's device is aligned at load only; after set_providers (or onnxruntime's "
    "fallback after a GPU provider fails) call onnx_device_guard.realign(model)."
)
_REWRAPPED = (DeviceGuardError, ModelInputError, EnvironmentConfigurationError)
_CHANGE: ContextVar[tuple[str, str, Providers, Providers] | None] = ContextVar(
    "onnx_device_guard_provider_change", default=None
)
"""The change a callback in this context follows: its sentence, session, old and new providers."""


def describe_change(
    model: object, session_name: str, old_providers: Providers, new_providers: Providers
) -> str:
    """Say in one sentence which session of which model changed providers, from what to what."""

    def shown(providers: Providers) -> str:
        return "(unreadable)" if providers is None else repr(list(providers))

    where = f"The session {session_name!r} of a {type(model).__name__}"
    if old_providers == new_providers and new_providers is not None:
        return f"{where} changed the options of its providers {shown(new_providers)}."
    return f"{where} changed its providers from {shown(old_providers)} to {shown(new_providers)}."


class Origin(Protocol):
    """What made a watch (a patch), so that `stop_following` can forget its watches."""

    cancelled: bool


class _Watch(NamedTuple):
    """One model following one session, for one guard and origin."""

    model: weakref.ref[Any]
    session_name: str
    on_change: OnChange
    origin: Origin | None
    settings: Resolved | None = None
    """The settings of the model's load, for a drop in `set_providers` no change shows."""


class _Followers(NamedTuple):
    """The watches on one session, by (id of model, key), oldest first; and its lock."""

    lock: threading.RLock  # re-entrant: a callback may change the session again
    watches: dict[Hashable, _Watch]


_FOLLOWED: ObjectTable[_Followers] = ObjectTable()
"""The watches of each followed session."""
_LOCK = threading.Lock()
"""Guards `_FOLLOWED`; never held while user code runs."""
_WARNED: weakref.WeakSet[type] = weakref.WeakSet()
"""The model classes already warned about, held weakly."""
_NOT_SESSIONS: weakref.WeakSet[type] = weakref.WeakSet()
"""The session classes already logged as not followed, held weakly."""


def watch(  # noqa: PLR0913 - the model, its sessions, the callback, and three keywords
    model: object,
    sessions: Iterable[tuple[str, object]],
    on_change: OnChange,
    *,
    key: Hashable = None,
    origin: Origin | None = None,
    settings: Resolved | None = None,
) -> None:
    """Follow `sessions` of `model`, calling `on_change` when one changes providers.

    Call it before reading the providers at load, so that a change meanwhile
    is not missed. An equal `key`, or a `cancelled` `origin`, adds no watch;
    what cannot be followed is logged.
    """
    if not type(model).__weakrefoffset__:  # no weak reference to it: cheaper than trying one
        _warn_once(
            _WARNED,
            type(model),
            "onnx-device-guard cannot follow the sessions of %s objects: the class cannot be "
            "weakly referenced (a built-in type, or __slots__ without '__weakref__'), and a "
            "strong reference would keep every model alive. Use a class of your own, or add "
            "'__weakref__' to __slots__. ",
            logging.WARNING,
        )
        return
    session_class = getattr(sys.modules.get("onnxruntime"), "InferenceSession", None)
    for session_name, session in sessions:
        if not isinstance(session, session_class or ()):
            if type(session) not in _NOT_SESSIONS:  # logged once: no call on each load
                message = "Not following %s sessions: only an onnxruntime.InferenceSession is. "
                _warn_once(_NOT_SESSIONS, type(session), message, logging.DEBUG)
            continue
        # Followed already: nothing to add, so no lock (as if before a stop_following racing it).
        entry, followers = (id(model), key), _FOLLOWED.get(session)
        existing = None if followers is None else followers.watches.get(entry)
        if existing is not None and existing.model() is model:
            continue
        with _LOCK:  # against stop_following: a load racing undo() leaves no watch
            if origin is not None and origin.cancelled:
                return
            if (followers := _FOLLOWED.get(session)) is None:
                _FOLLOWED.set(session, followers := _Followers(threading.RLock(), {}))
            existing = followers.watches.get(entry)
            if existing is None or existing.model() is not model:  # new, or a dead model's id
                forget = functools.partial(_forget, followers.watches, entry)
                reference = weakref.ref(model, forget)
                watched = _Watch(reference, session_name, on_change, origin, settings)
                followers.watches[entry] = watched


followers_of = _FOLLOWED.get
"""`followers_of(session)`: the watches on it, if any model follows it."""


def following() -> bool:
    """Whether a live model follows any session, so that the hooks must stay in place."""
    # Read without the lock: a weak reference's callback may ask, in a thread that holds it.
    # A dead model's watch goes once its callback has run.
    watches = [followers.watches.copy().values() for followers in _FOLLOWED.values()]
    return any(watched.model() is not None for each in watches for watched in each)


def _forget(watches: dict[Hashable, _Watch], entry: Hashable, reference: object) -> None:
    """Drop `entry` once its model is collected: a weak reference callback, taking no lock."""
    watched = watches.get(entry)
    if watched is not None and watched.model is reference:
        watches.pop(entry, None)


def stop_following(origin: Origin) -> None:
    """Forget every watch made with `origin`."""
    with _LOCK:
        for followers in _FOLLOWED.values():
            for entry, watched in followers.watches.copy().items():
                if watched.origin is origin:
                    followers.watches.pop(entry, None)


def on_set_providers(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """`InferenceSession.set_providers`, wrapped: a change calls back its models, in turn."""
    followers = followers_of(instance)
    if followers is None or not followers.watches:
        return wrapped(*args, **kwargs)
    handled = sys.exc_info()[1]  # onnxruntime's EPFail, during its fallback
    with followers.lock:
        before = _snapshot(instance)
        result = wrapped(*args, **kwargs)
        after = _snapshot(instance)
        if after != before or after[0] is None:
            _dispatch(followers, before[0], after[0], handled)
    return result


def _dispatch(
    followers: _Followers, old: Providers, new: Providers, handled: BaseException | None
) -> None:
    """Call back each live model watching the session once; the first error raises after the
    rest, a library error with the change in front, chained to `handled` (an `EPFail`)."""
    errors: list[Exception] = []
    failed: list[object] = []  # models whose callback raised, compared by identity
    for watched in followers.watches.copy().values():
        model = watched.model()
        cancelled = watched.origin is not None and watched.origin.cancelled
        if model is None or cancelled or any(other is model for other in failed):
            continue
        change = describe_change(model, watched.session_name, old, new)
        logger.debug("%s Aligning the model again.", change)
        token = _CHANGE.set((change, watched.session_name, old, new))
        try:
            watched.on_change(model, watched.session_name, old, new)
        except Exception as error:
            failed.append(model)
            if isinstance(error, DeviceGuardError) and type(error) in _REWRAPPED:
                errors.append(in_context(error, f"{change} "))  # raised again, the change in front
                errors[-1].__cause__ = error
            else:
                errors.append(error)
        finally:
            _CHANGE.reset(token)
    for later in errors[1:]:
        logger.error("Another model following the same session failed too: %s", later)
    if errors and handled is not None:
        raise errors[0] from handled
    if errors:
        raise errors[0]


def _name_the_change(record: logging.LogRecord) -> bool:
    """Put the change a callback follows in front of `record`, with its `odg_*` fields."""
    if (change := _CHANGE.get()) is not None:
        text, record.odg_changed_session, old, new = change
        record.msg = f"{text.replace('%', '%%') if record.args else text} {record.msg}"
        record.odg_old_providers = None if old is None else list(old)
        record.odg_new_providers = None if new is None else list(new)
    return True


logger.addFilter(_name_the_change)


def _snapshot(session: Any) -> tuple[Providers, object]:
    """The session's providers and a copy of their options, read without raising."""
    try:
        providers: Providers = tuple(session.get_providers())
    except Exception as error:
        logger.debug("Could not read get_providers() of a followed session: %r", error)
        return None, None
    try:
        options = session.get_provider_options()
    except Exception:  # unreadable: providers alone tell a change
        return providers, None
    if type(options) is dict:  # onnxruntime's: copied, as a session may change it in place
        options = {name: dict(v) if type(v) is dict else v for name, v in options.items()}
    return providers, options


def _warn_once(seen: weakref.WeakSet[type], cls: type, message: str, level: int) -> None:
    """Log `message` + `_AT_LOAD_ONLY` about `cls` at `level`, once per class (twice in a race)."""
    if cls not in seen:
        seen.add(cls)
        logger.log(level, message + _AT_LOAD_ONLY, cls.__qualname__)
