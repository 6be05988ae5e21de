"""Following a session's provider changes after load, so a model can be aligned again.

onnxruntime changes the execution providers of a live session in
`session.set_providers(...)`, which `InferenceSession.run()` (and
`run_with_ort_values()`) also calls when a GPU provider raises `EPFail`: it
prints two lines, calls `self.set_providers(self._fallback_providers)` and
retries once. A model aligned at load still holds its old device afterwards.

This module hooks that one method, never a run: a wrapper of `set_providers`
put on the session instance shadows the class's method (onnxruntime's
fallback included, as it calls `self.set_providers`). When the providers or
their options differ after a call, it calls back every model watching the
session. The watches live in that hook, each model held weakly, by model and
key, so a watch costs the same however many models share the session, and
nothing of it is kept in a guard's options: a guarded factory pickles
without it.

Internal API, for the guard (`device_guard`, `patch`):

* `watch(model, [(name, session), ...], on_change, key=..., origin=...)`
  follows these sessions of `model` and returns how many are followed. Call
  it before reading the providers at load, so that a change meanwhile is
  not missed. The same model and key watched again adds nothing. It never
  raises for what it cannot follow: it logs and returns fewer.
* `on_change(model, session_name, old_providers, new_providers)` runs once
  per live watch and changed session, in the thread that changed the
  providers and under its scopes (so the guard fixes its settings at load).
  Providers are tuples of names, or `None` where unreadable. Meanwhile each
  record the library logs in that thread starts with `describe_change`'s
  sentence and carries `odg_changed_session`, `odg_old_providers` and
  `odg_new_providers`.
* An error raised by `on_change` propagates out of the call that changed the
  providers, once every other live model was called back (later errors are
  logged at ERROR). A library error is raised again as the same type with
  the change in front of its message, chained to the error onnxruntime was
  handling (the `EPFail`), else to the callback's error. A model watched
  through nested guards is called back innermost first, and no further once
  one of its callbacks raised.
* `stop_following(origin)` forgets the watches made for `origin` (a patch);
  a session left unwatched gets its `set_providers` back as it was. An
  origin whose `cancelled` is true is never watched for, so a load racing a
  patch's `undo()` leaves no hook. `is_followed(session)` says whether a
  hook is on `session`.

Limits: a model that cannot be weakly referenced, and a session whose
`set_providers` cannot be replaced on the instance, are not followed (one
WARNING per class says so and what to do). A pickled or deep-copied session
comes back unfollowed; a shallow `copy.copy` shares the hook (a known limit).
"""

from __future__ import annotations

import contextlib
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
"""Guards every hook's watches; re-entrant, as attribute lookups and log handlers run user code."""
_HOLDING = threading.local()
"""How deep this thread is inside `_locked`."""
_PENDING: list[tuple[_ProviderHook, Hashable, object]] = []
"""Watches of collected models that `forget` could not drop at once."""
_WARNED: dict[tuple[str, type], object] = {}
"""The (what, class) pairs `_warn_once` has logged about."""
_REWRAPPED = (DeviceGuardError, ModelInputError, EnvironmentConfigurationError)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Hold `_LOCK`; the outermost holder first drops the watches `forget` left."""
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
    """What replaces `set_providers` in a followed session's instance attributes."""

    __slots__ = ("__weakref__", "_saved", "_session", "_watches")

    def __init__(self, session: object, saved: object) -> None:
        try:
            self._session: Callable[[], object] = weakref.ref(session)
        except TypeError:  # no __weakref__ slot: a cycle, which the collector breaks
            self._session = lambda: session
        self._saved = saved
        """The instance attribute it replaced, or `_NOTHING`."""
        self._watches: dict[Hashable, _Watch] = {}
        """The models watching, in the order they started, by (id of model, key)."""

    def __repr__(self) -> str:
        return f"<set_providers of {self._session()!r}, followed by onnx-device-guard>"

    @property
    def __wrapped__(self) -> object:
        """The `set_providers` this hook calls."""
        return _original(self._live_session(), self._saved)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        session = self._live_session()
        original = _original(session, self._saved)
        if not self._watches:  # left inert under another wrapper by a stop
            return original(*args, **kwargs)
        handled = sys.exc_info()[1]  # onnxruntime's EPFail, during its fallback
        before = _snapshot(session)
        result = original(*args, **kwargs)
        after = _snapshot(session)
        if after != before or after[0] is None:
            _dispatch(self, before[0], after[0], handled)
        return result

    def _live_session(self) -> object:
        session = self._session()
        if session is None:
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

    `key` tells guards apart: watching the same model and session again with
    an equal `key` adds nothing (a cached model returned twice).

    Returns:
        How many of `sessions` are followed for this model now.

    Examples:
        >>> import torch
        >>> from onnx_device_guard import align_device_with_onnx_session
        >>> from onnx_device_guard._follow import is_followed, watch
        >>> class Session:
        ...     providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        ...     def get_providers(self):
        ...         return self.providers
        ...     def set_providers(self, providers):
        ...         self.providers = list(providers)
        >>> class Model:
        ...     def __init__(self):
        ...         self.session, self.device = Session(), torch.device("cuda")
        >>> def realign(model, session_name, old, new):
        ...     model.device = align_device_with_onnx_session(
        ...         getattr(model, session_name), model.device, "fallback"
        ...     )
        >>> model = Model()
        >>> watch(model, [("session", model.session)], realign)
        1
        >>> model.session.set_providers(["CPUExecutionProvider"])
        >>> model.device
        device(type='cpu')
        >>> session = model.session
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
            "onnx-device-guard cannot follow the sessions of %s objects: the class cannot "
            "be weakly referenced (it has __slots__ without '__weakref__'), and a strong "
            "reference from the session would keep every model alive. Their device is "
            "aligned at load only; a later change of a session's providers (set_providers, "
            "or onnxruntime's fallback after a GPU provider fails) leaves it as it is. Add "
            "'__weakref__' to __slots__, or call onnx_device_guard.realign(model) after "
            "changing providers.",
        )
        return 0
    followed = 0
    with _locked():
        if origin is not None and origin.cancelled:  # undone while this load was running
            return 0
        for session_name, session in sessions:
            hook = _hook_of(session)
            if hook is None:
                continue
            entry = (id(model), key)
            existing = hook._watches.get(entry)
            if existing is None or existing.model() is not model:  # new, or a dead model's id
                reference = weakref.ref(model, _forget(hook, entry))
                hook._watches[entry] = _Watch(reference, session_name, on_change, origin)
            _HOOKS.add(hook)
            followed += 1
    return followed


def _forget(hook: _ProviderHook, entry: Hashable) -> Callable[[object], None]:
    """The weak reference callback that drops `entry` once its model is collected.

    The collector may run it in a thread holding a logging lock that the
    holder of `_LOCK` waits for, so it never waits for `_LOCK`; nor does it
    drop anything in the middle of this thread's own work under the lock.
    Then the next holder of the lock drops the entry instead.
    """
    hook_reference = weakref.ref(hook)

    def forget(reference: object) -> None:
        found = hook_reference()
        if found is None:
            return
        _PENDING.append((found, entry, reference))
        if not getattr(_HOLDING, "depth", 0) and _LOCK.acquire(blocking=False):
            try:
                _drop_pending()
            finally:
                _LOCK.release()

    return forget


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


# The instance attribute is read, written and removed through attribute access
# only: on CPython 3.11+, reading a session's `__dict__` turns its inline
# attribute values into a dict for good, and slows every lookup in its `run()`.


def _lookup(session: object) -> object:
    """`session.set_providers` as attribute lookup finds it, or `_NOTHING`; never raises."""
    try:
        return getattr(session, _METHOD, _NOTHING)
    except Exception:
        return _NOTHING


def _hook_of(session: object) -> _ProviderHook | None:
    """`session`'s hook, installed if needed; `None` when it cannot be hooked. Under `_LOCK`."""
    current = _lookup(session)
    if isinstance(current, _ProviderHook) and current._session() is session:
        return current  # the common case after the first load (a class property would hide it)
    defined = _class_method(type(session))
    if hasattr(type(defined), "__set__") or hasattr(type(defined), "__delete__"):
        return _unhookable(session, "its set_providers is a property, not a method")
    if isinstance(current, _ProviderHook):
        saved = current._saved  # copied from another session: that hook is not ours to call
    elif defined is not None:
        saved = _NOTHING if _is_bound_from_class(current, session) else current
    elif current is _NOTHING:
        _warn_once(
            "session without set_providers",
            type(session),
            "Not following %s sessions: they have no set_providers to change their providers.",
            logging.DEBUG,
        )
        return None
    elif hasattr(type(session), "__getattr__"):
        return _unhookable(session, "its set_providers is forwarded, not defined by its class")
    else:
        saved = current  # an instance attribute, and nothing on the class
    hook = _ProviderHook(session, saved)
    try:
        object.__setattr__(session, _METHOD, hook)
    except (AttributeError, TypeError):
        return _unhookable(session, "it has no instance __dict__ to put a hook in")
    if _lookup(session) is not hook:
        _put_back(session, hook)
        return _unhookable(session, "a set_providers put on the instance is not the one called")
    return hook


def _is_bound_from_class(current: object, session: object) -> bool:
    """Whether `current` is just the class's method bound to `session` (no override)."""
    try:
        return bool(current == _original(session))
    except Exception:
        return False


def _unhook(hook: _ProviderHook) -> None:
    """Put back what the session had instead of `hook`. Under `_LOCK`."""
    _HOOKS.discard(hook)
    session = hook._session()
    if session is None:
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
    """Call back every live model watching `hook`'s session; no lock held while calling.

    A model watched through nested guards is called back in the order they
    watched it, innermost first, and no further once one of its callbacks
    raised, as at load, where the inner guard's error stops the outer one.
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


_CHANGE: ContextVar[tuple[str, str, Providers, Providers] | None] = ContextVar(
    "onnx_device_guard_provider_change", default=None
)
"""The change a callback in this thread follows: its sentence, session name, old and new."""


class _ChangeInRecords(logging.Filter):
    """Puts the change a callback follows in front of each record the library logs meanwhile.

    It also adds the fields `odg_changed_session`, `odg_old_providers` and
    `odg_new_providers`, so that the re-alignment's one fallback WARNING names
    the providers before and after.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        change = _CHANGE.get()
        if change is None:
            return True
        text, session_name, old, new = change
        record.msg = f"{text.replace('%', '%%') if record.args else text} {record.msg}"
        record.odg_changed_session = session_name
        record.odg_old_providers = None if old is None else list(old)
        record.odg_new_providers = None if new is None else list(new)
        return True


logger.addFilter(_ChangeInRecords())


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


def _unhookable(session: object, why: str) -> _ProviderHook | None:
    """Warn, once per class, that `session` cannot be followed, and why; `None`, its hook."""
    _warn_once(
        "session",
        type(session),
        "onnx-device-guard cannot follow provider changes of %s sessions: "
        + why
        + ". A model's device is aligned at load only; after set_providers (or onnxruntime's "
        "fallback after a GPU provider fails) call onnx_device_guard.realign(model).",
    )
    return None


def _warn_once(what: str, cls: type, message: str, level: int = logging.WARNING) -> None:
    """Log `message` about `cls` (at WARNING unless `level` says otherwise) once per `what`."""
    first = object()
    if _WARNED.setdefault((what, cls), first) is first:  # atomic: one thread logs it
        logger.log(level, message, cls.__qualname__)
