"""Following a session's provider changes after load, so a model can be aligned again.

onnxruntime changes a live session's providers in `set_providers(...)`, which
`InferenceSession.run()` also calls when a GPU provider raises `EPFail`,
before retrying once. So `watch` puts a hook for `set_providers` on the
session instance, shadowing the class's method (which onnxruntime's fallback
calls through `self`); a call that changes the providers or their options
calls back the models watching the session. Runs are untouched. The watches
live in the hook, each model held weakly, never in a guard's options.

Limits: a model that cannot be weakly referenced, and a session whose
`set_providers` cannot be replaced on the instance, are not followed (one
WARNING per class says so). A pickled or deep-copied session comes back
unfollowed; a shallow `copy.copy` shares the hook.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any, NamedTuple, Protocol

from ._errors import DeviceGuardError, EnvironmentConfigurationError, ModelInputError
from ._messages import logger

Providers = tuple[str, ...] | None
"""A session's providers in order, or `None` when they could not be read."""

OnChange = Callable[[Any, str, Providers, Providers], object]
"""`on_change(model, session_name, old_providers, new_providers)`; its result is ignored."""

_METHOD = "set_providers"
_NOTHING: Any = object()
"""Marks "the session had no instance attribute `set_providers`"."""

_LOCK = threading.RLock()
"""Guards the watches; re-entrant, as attribute lookups and log handlers run user code."""
_HOLDING = threading.local()
_PENDING: list[tuple[_ProviderHook, Hashable, object]] = []
"""Watches of collected models that `forget` left to the next holder of `_LOCK`."""
_WARNED: dict[tuple[str, type], object] = {}
_AT_LOAD_ONLY = (
    "A model's device is aligned at load only; after set_providers (or onnxruntime's "
    "fallback after a GPU provider fails) call onnx_device_guard.realign(model)."
)
_REWRAPPED = (DeviceGuardError, ModelInputError, EnvironmentConfigurationError)
_CHANGE: ContextVar[tuple[str, str, Providers, Providers] | None] = ContextVar(
    "onnx_device_guard_provider_change", default=None
)
"""The change a callback in this context follows: its sentence, session, old and new providers."""


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Hold `_LOCK`; the outermost holder in a thread first drops the watches `forget` left."""
    with _LOCK:
        _HOLDING.depth = getattr(_HOLDING, "depth", 0) + 1
        try:
            if _HOLDING.depth == 1:
                _drop_pending()
            yield
        finally:
            _HOLDING.depth -= 1


def describe_change(
    model: object, session_name: str, old_providers: Providers, new_providers: Providers
) -> str:
    """Say in one sentence which session of which model changed providers, from what to what.

    Examples:
        >>> from onnx_device_guard._follow import describe_change
        >>> class Model: ...
        >>> describe_change(
        ...     Model(), "session", ("CUDAExecutionProvider", "CPUExecutionProvider"),
        ...     ("CPUExecutionProvider",),
        ... )
        "The session 'session' of a Model changed its providers from ['CUDAExecutionProvider', 'CPUExecutionProvider'] to ['CPUExecutionProvider']."
    """  # noqa: E501 - a doctest's expected output is one line

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


class _ProviderHook:
    """What stands in a followed session's instance attributes for its `set_providers`."""

    __slots__ = ("__weakref__", "_saved", "_session", "_watches")

    def __init__(self, session: object, saved: object) -> None:
        try:
            self._session: Callable[[], object] = weakref.ref(session)
        except TypeError:  # no __weakref__ slot: a cycle, which the collector breaks
            self._session = lambda: session
        self._saved = saved  # the instance attribute it replaced, or _NOTHING
        self._watches: dict[Hashable, _Watch] = {}  # by (id of model, key), oldest first

    def __repr__(self) -> str:
        return f"<set_providers of {self._session()!r}, followed by onnx-device-guard>"

    @property
    def __wrapped__(self) -> object:
        """The `set_providers` this hook calls."""
        return _original(self._live_session(), self._saved)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        session = self._live_session()
        original = _original(session, self._saved)
        if not self._watches:  # left inert under another wrapper
            return original(*args, **kwargs)
        handled = sys.exc_info()[1]  # onnxruntime's EPFail, during its fallback
        before = _snapshot(session)
        result = original(*args, **kwargs)
        after = _snapshot(session)
        if after != before or after[0] is None:
            _dispatch(self, before[0], after[0], handled)
        return result

    def _live_session(self) -> object:
        if (session := self._session()) is None:
            raise ReferenceError("the session of this set_providers no longer exists")
        return session

    def __reduce__(self) -> tuple[Any, ...]:
        # A pickled (or deep-copied) session comes back with its own set_providers.
        saved = () if self._saved is _NOTHING else (self._saved,)
        return (_original, (self._live_session(), *saved))


_HOOKS: weakref.WeakSet[_ProviderHook] = weakref.WeakSet()
"""Every hook in place, for `stop_following`."""


def watch(
    model: object,
    sessions: Iterable[tuple[str, object]],
    on_change: OnChange,
    *,
    key: Hashable = None,
    origin: Origin | None = None,
) -> int:
    """Follow `sessions` of `model`, calling `on_change` when one changes providers.

    Call it before reading the providers at load, so that a change meanwhile
    is not missed. Watching a model's session again with an equal `key` (a
    guard's) adds nothing; nor does a watch for an `origin` (a patch) that is
    `cancelled`, so a load racing `undo()` leaves no hook. What cannot be
    followed is logged, never raised. `on_change` runs in the thread that
    changed the providers, under its scopes: see `_dispatch`.

    Returns:
        How many of `sessions` are followed for this model now.

    Examples:
        >>> from onnx_device_guard._follow import is_followed, watch
        >>> class Session:
        ...     providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        ...     def get_providers(self):
        ...         return self.providers
        ...     def set_providers(self, providers):
        ...         self.providers = providers
        >>> class Model: ...
        >>> model, session = Model(), Session()
        >>> watch(model, [("session", session)], lambda *change: print(*change[1:]))
        1
        >>> session.set_providers(["CPUExecutionProvider"])
        session ('CUDAExecutionProvider', 'CPUExecutionProvider') ('CPUExecutionProvider',)
        >>> del model  # the last model gone, the session gets its method back
        >>> is_followed(session)
        False
    """
    try:
        weakref.ref(model)
    except TypeError:
        _warn_once(
            "model",
            type(model),
            "onnx-device-guard cannot follow the sessions of %s objects: the class cannot be "
            "weakly referenced (it has __slots__ without '__weakref__'), and a strong reference "
            "from the session would keep every model alive. Add '__weakref__' to __slots__. "
            + _AT_LOAD_ONLY,
        )
        return 0
    followed = 0
    with _locked():
        if origin is not None and origin.cancelled:
            return 0
        for session_name, session in sessions:
            if (hook := _hook_of(session)) is None:
                continue
            entry = (id(model), key)
            existing = hook._watches.get(entry)
            if existing is None or existing.model() is not model:  # new, or a dead model's id
                forget = functools.partial(_forget, weakref.ref(hook), entry)
                reference = weakref.ref(model, forget)
                hook._watches[entry] = _Watch(reference, session_name, on_change, origin)
            _HOOKS.add(hook)
            followed += 1
    return followed


def _forget(hook: weakref.ref[_ProviderHook], entry: Hashable, reference: object) -> None:
    """Drop `entry` from `hook` once its model is collected: a weak reference callback.

    The collector may run it in a thread holding a logging lock that the
    holder of `_LOCK` waits for, or in this thread's own work under the lock:
    then it leaves the entry to the lock's next holder instead of waiting.
    """
    if (found := hook()) is not None:
        _PENDING.append((found, entry, reference))
    if not getattr(_HOLDING, "depth", 0) and _LOCK.acquire(blocking=False):
        try:
            _drop_pending()
        finally:
            _LOCK.release()


def _drop_pending() -> None:
    """Drop the watches `forget` left; unhook sessions left unwatched. Under `_LOCK`."""
    while _PENDING:
        hook, entry, reference = _PENDING.pop()
        watched = hook._watches.get(entry)
        if watched is not None and watched.model is reference:
            del hook._watches[entry]
            if not hook._watches:
                _unhook(hook)


def stop_following(origin: Origin) -> None:
    """Forget every watch made with `origin`; give sessions nobody follows any more back."""
    with _locked():
        for hook in list(_HOOKS):
            hook._watches = {
                entry: watched
                for entry, watched in hook._watches.items()
                if watched.origin is not origin
            }
            if not hook._watches:
                _unhook(hook)


def is_followed(session: object) -> bool:
    """Whether `session`'s `set_providers` is currently hooked by this module.

    Examples:
        >>> from onnx_device_guard._follow import is_followed
        >>> is_followed(object())
        False
    """
    hook = _lookup(session)
    return isinstance(hook, _ProviderHook) and hook._session() is session


def _lookup(session: object) -> object:
    """`session.set_providers` as attribute lookup finds it, or `_NOTHING`; never raises.

    The hook is read, set and removed by attribute access only: on CPython
    3.11+, reading a session's `__dict__` would slow every lookup in its `run()`.
    """
    try:
        return getattr(session, _METHOD, _NOTHING)
    except Exception:
        return _NOTHING


def _hook_of(session: object) -> _ProviderHook | None:
    """`session`'s hook, installed if needed; `None` when it cannot be hooked. Under `_LOCK`."""
    current = _lookup(session)
    if isinstance(current, _ProviderHook) and current._session() is session:
        return current  # the common case after the first load
    defined = _class_method(type(session))
    if hasattr(type(defined), "__set__") or hasattr(type(defined), "__delete__"):
        _unhookable(session, "its set_providers is a property, not a method")
        return None
    if isinstance(current, _ProviderHook):
        saved = current._saved  # copied from another session: that hook is not ours to call
    elif defined is not None:
        saved = _NOTHING if _is_bound_from_class(current, session) else current
    elif current is _NOTHING:
        message = "Not following %s sessions: they have no set_providers to change their providers."
        _warn_once("session without set_providers", type(session), message, logging.DEBUG)
        return None
    elif hasattr(type(session), "__getattr__"):
        _unhookable(session, "its set_providers is forwarded, not defined by its class")
        return None
    else:
        saved = current  # an instance attribute, and nothing on the class
    hook = _ProviderHook(session, saved)
    try:
        object.__setattr__(session, _METHOD, hook)
    except (AttributeError, TypeError):
        _unhookable(session, "it has no instance __dict__ to put a hook in")
        return None
    if _lookup(session) is hook:
        return hook
    _put_back(session, hook)
    _unhookable(session, "a set_providers put on the instance is not the one called")
    return None


def _is_bound_from_class(current: object, session: object) -> bool:
    """Whether `current` is just the class's method bound to `session` (no override)."""
    try:
        return bool(current == _original(session))
    except Exception:
        return False


def _unhook(hook: _ProviderHook) -> None:
    """Put back what the session had instead of `hook`. Under `_LOCK`."""
    _HOOKS.discard(hook)
    if (session := hook._session()) is None:
        return
    if _lookup(session) is hook:
        _put_back(session, hook)
    else:  # someone wrapped our hook since: leave theirs in place; ours passes calls through
        logger.debug(
            "Left an inert onnx-device-guard hook under another wrapper of %s.set_providers.",
            type(session).__name__,
        )


def _put_back(session: object, hook: _ProviderHook) -> None:
    """Remove the instance attribute `hook`, or put back the one it replaced."""
    try:
        if hook._saved is _NOTHING:
            object.__delattr__(session, _METHOD)
        else:
            object.__setattr__(session, _METHOD, hook._saved)
    except (AttributeError, TypeError) as error:  # a session that changed under us
        logger.debug("Could not give %r its set_providers back: %r", session, error)


def _dispatch(
    hook: _ProviderHook, old: Providers, new: Providers, handled: BaseException | None
) -> None:
    """Call back each live model watching `hook`'s session, with no lock held.

    The records logged meanwhile name the change (`_name_the_change`). The
    first error propagates once every other model was called back, later ones
    logged at ERROR; a library error gets the change in front of its message
    (`_explained`) and is chained to `handled`, onnxruntime's `EPFail`, if any.
    A model watched through nested guards is called back innermost first, and
    no further once one of its callbacks raised, as at load.
    """
    with _locked():
        watches = list(hook._watches.values())
    errors: list[Exception] = []
    failed: list[object] = []  # models whose callback raised, compared by identity
    for watched in watches:
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
            errors.append(_explained(error, change))
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


def _explained(error: Exception, change: str) -> Exception:
    """A library error raised again with `change` in front of its message."""
    if not isinstance(error, DeviceGuardError) or type(error) not in _REWRAPPED:
        return error
    explained = type(error)(f"{change} {error.message}", help_url=error.help_url)
    explained.__cause__ = error
    return explained


def _snapshot(session: object) -> tuple[Providers, object]:
    """The session's providers and a copy of their options, read without raising."""
    try:
        providers: Providers = tuple(session.get_providers())  # type: ignore[attr-defined]
    except Exception as error:
        logger.debug("Could not read get_providers() of a followed session: %r", error)
        return None, None
    try:
        options = session.get_provider_options()  # type: ignore[attr-defined]
    except Exception:  # none, or unreadable: providers alone tell a change
        return providers, None
    if type(options) is dict:  # onnxruntime's: copied, as a session may change it in place
        options = {name: dict(v) if type(v) is dict else v for name, v in options.items()}
    return providers, options


def _class_method(cls: type) -> object | None:
    """The `set_providers` attribute that `cls` or a base defines, unbound."""
    for klass in cls.__mro__:
        if _METHOD in vars(klass):
            return vars(klass)[_METHOD]  # type: ignore[no-any-return]
    return None


def _original(session: object, saved: object = _NOTHING) -> Callable[..., Any]:
    """The `set_providers` a hook stands in front of: `saved`, else the class's, bound."""
    if saved is not _NOTHING:
        return saved  # type: ignore[return-value]
    defined = _class_method(type(session))
    get = getattr(type(defined), "__get__", None)
    return defined if get is None else get(defined, session, type(session))  # type: ignore[return-value]


def _unhookable(session: object, why: str) -> None:
    """Warn, once per class, that `session`'s provider changes cannot be followed, and why."""
    message = f"onnx-device-guard cannot follow provider changes of %s sessions: {why}. "
    _warn_once("session", type(session), message + _AT_LOAD_ONLY)


def _warn_once(what: str, cls: type, message: str, level: int = logging.WARNING) -> None:
    """Log `message` about `cls` (at WARNING unless `level` says otherwise) once per `what`."""
    first = object()
    if _WARNED.setdefault((what, cls), first) is first:  # atomic: one thread logs it
        logger.log(level, message, cls.__qualname__)
