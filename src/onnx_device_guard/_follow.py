"""Following a session's provider changes after load, so a model can be aligned again.

onnxruntime can change the execution providers of a session that already
exists: `session.set_providers(...)` does, and so does
`InferenceSession.run()` (and `run_with_ort_values()`) when a GPU provider
raises `EPFail`: it prints two lines, calls
`self.set_providers(self._fallback_providers)` and retries once. A model
aligned at load still holds its old device afterwards.

This module hooks that one change, never a run: it puts a wrapper of
`set_providers` in the session's instance `__dict__` (where it shadows the
class's method, onnxruntime's own fallback included, since that calls
`self.set_providers`). The wrapper reads the session's providers and their
options before and after the call; when they differ it calls back every
model that watches the session. Inference itself is untouched.

The run-time state lives beside the session, in that hook: the models that
watch it, each held weakly, keyed by model, options and origin, so adding a
watch costs the same however many models share the session, and a dead
model's entry is dropped by its weak reference's callback. Nothing here is
kept in a guard's options, so a guarded factory pickles without it.

Internal API, for the guard (`device_guard`, `patch`):

* `watch(model, [(name, session), ...], on_change, key=..., origin=...)`:
  follow these sessions of `model`; returns how many are followed. Call it
  before reading the providers at load, so a change that lands meanwhile is
  not missed. Watching the same model with the same key again adds nothing.
  It never raises for a model or session it cannot follow: it logs and
  returns fewer.
* `on_change(model, session_name, old_providers, new_providers)` is called
  once per live watch and changed session, in the thread that changed the
  providers and under its scopes, so the guard fixes its settings at load.
  Providers are tuples of names, or `None` where they could not be read.
  While a callback runs, every record the library logs in that thread starts
  with `describe_change`'s sentence and carries `odg_changed_session`,
  `odg_old_providers` and `odg_new_providers`.
* An error raised by `on_change` propagates out of the call that changed the
  providers. A library error is raised again as the same type with the
  change in front of its message, chained to the error onnxruntime was
  handling (the `EPFail`), or else to the callback's error. Every other
  live model is still called back first; later errors are logged at ERROR.
  A model watched through nested guards is called back innermost first, and
  no further once one of its callbacks raised.
* `stop_following(origin)`: forget every watch made with `origin` (a
  patch); a session left with none gets its `set_providers` back exactly as
  it was. An origin whose `cancelled` is true is never watched for, so a
  load that races with a patch's `undo()` leaves no hook behind.
* `is_followed(session)`: whether a hook is installed on `session`.

Limits: a model that cannot be weakly referenced (`__slots__` without
`__weakref__`), and a session whose `set_providers` cannot be replaced on the
instance, are not followed (one WARNING per class says so and what to do).
A pickled or deep-copied session comes back unfollowed. A shallow
`copy.copy` of a followed session shares the hook: a known limit.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any, Protocol

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
"""Guards every hook's entries; re-entrant, as a session's attribute lookup or a log
handler may run code that watches while it is held. Taken through `_locked`."""
_HOLDING = threading.local()
"""How deep this thread is inside `_locked`."""


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with _LOCK:
        _HOLDING.depth = getattr(_HOLDING, "depth", 0) + 1
        try:
            yield
        finally:
            _HOLDING.depth -= 1


_WARN_LOCK = threading.Lock()
"""Separate from `_LOCK`, under which warnings are logged."""
_WARNED_CLASSES: set[tuple[str, type]] = set()
"""(what, class) pairs already warned about, so each WARNING is logged once."""

_REWRAPPED = (DeviceGuardError, ModelInputError, EnvironmentConfigurationError)


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


class _Watch:
    """One model following one session, for one guard (`key`) and `origin`."""

    __slots__ = ("model", "on_change", "origin", "session_name")

    def __init__(
        self,
        model: weakref.ref[Any],
        session_name: str,
        on_change: OnChange,
        origin: Origin | None,
    ) -> None:
        self.model = model
        self.session_name = session_name
        self.on_change = on_change
        self.origin = origin


class _ProviderHook:
    """What replaces `set_providers` in a followed session's instance `__dict__`."""

    __slots__ = ("__weakref__", "_installed", "_saved", "_session", "_watches")

    def __init__(self, session: object, saved: object) -> None:
        try:
            self._session: Callable[[], object] = weakref.ref(session)
        except TypeError:  # no __weakref__ slot: a cycle, which the collector breaks
            self._session = _StrongRef(session)
        self._saved = saved
        self._watches: dict[tuple[int, Hashable], _Watch] = {}
        """The models watching, in the order they started, by (id of model, key)."""
        self._installed = False

    def __repr__(self) -> str:
        return f"<set_providers of {self._session()!r}, followed by onnx-device-guard>"

    @property
    def __wrapped__(self) -> object:
        """The `set_providers` this hook calls."""
        return _original(self._live_session(), self._saved)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        session = self._live_session()
        original = _original(session, self._saved)
        if not self._watches:  # left inert by a stop that could not unhook it
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
        # A pickled (or deep-copied) session comes back unfollowed: its
        # set_providers is what it would be without the hook.
        saved = () if self._saved is _NOTHING else (self._saved,)
        return (_unfollowed, (self._live_session(), *saved))


def _unfollowed(session: object, *saved: object) -> object:
    """What an unpickled session gets instead of a hook: its own `set_providers`."""
    return saved[0] if saved else _original(session, _NOTHING)


class _StrongRef:
    """Quacks like `weakref.ref` for a session that cannot be weakly referenced."""

    __slots__ = ("_value",)

    def __init__(self, value: object) -> None:
        self._value = value

    def __call__(self) -> object:
        return self._value


_HOOKS: weakref.WeakSet[_ProviderHook] = weakref.WeakSet()
"""Every hook installed, for `stop_following`."""


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
        ...     def __init__(self):
        ...         self.providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
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
        _drop_pending()
        if origin is not None and origin.cancelled:  # undone while this load was running
            return 0
        for session_name, session in sessions:
            hook = _hook_of(session)
            if hook is None:
                continue
            entry = (id(model), key)
            existing = hook._watches.get(entry)
            if existing is None or existing.model() is not model:  # new, or a dead model's id
                hook._watches[entry] = _Watch(
                    weakref.ref(model, _forget(hook, entry)), session_name, on_change, origin
                )
            _HOOKS.add(hook)
            followed += 1
    return followed


def _forget(hook: _ProviderHook, entry: tuple[int, Hashable]) -> Callable[[object], None]:
    """The weak reference callback that drops `entry` once its model is collected.

    It runs wherever the collector runs, maybe in a thread that holds a
    logging lock that the holder of `_LOCK` waits for: so it never waits for
    `_LOCK`. When it cannot take it at once, the entry is dropped by the next
    `watch`, change or stop instead.
    """
    hook_reference = weakref.ref(hook)

    def forget(reference: object) -> None:
        found = hook_reference()
        if found is None:
            return
        # Never in the middle of this thread's own work under the lock (it may be
        # iterating over the very dict), and never waiting for another's.
        if getattr(_HOLDING, "depth", 0) or not _LOCK.acquire(blocking=False):
            _PENDING.append((found, entry, reference))
            return
        try:
            _drop(found, entry, reference)
        finally:
            _LOCK.release()

    return forget


_PENDING: list[tuple[_ProviderHook, tuple[int, Hashable], object]] = []
"""Entries of collected models that `forget` could not drop at once."""


def _drop(hook: _ProviderHook, entry: tuple[int, Hashable], reference: object) -> None:
    """Drop `entry` if it still holds `reference`; unhook a session left unwatched."""
    watched = hook._watches.get(entry)
    if watched is not None and watched.model is reference:
        del hook._watches[entry]
        if not hook._watches:  # the last model gone: give the session its method back
            _unhook(hook)


def _drop_pending() -> None:
    """Drop the entries left by `forget`. Called with `_LOCK` held."""
    while _PENDING:
        _drop(*_PENDING.pop())


def stop_following(origin: Origin) -> None:
    """Forget every watch made with `origin`; give sessions nobody follows any more back."""
    with _locked():
        _drop_pending()
        for hook in list(_HOOKS):
            hook._watches = {
                entry: watched
                for entry, watched in hook._watches.items()
                if watched.origin is not origin
            }
            if not hook._watches:
                _unhook(hook)
                _HOOKS.discard(hook)


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
# only, never through the session's `__dict__`: on CPython 3.11 and later,
# reading `__dict__` turns an instance's inline attribute values into a dict
# for good, and every attribute lookup in its `run()` gets slower.


def _lookup(session: object) -> Any:
    """`session.set_providers` as attribute lookup finds it, or `_NOTHING`; never raises."""
    try:
        return getattr(session, _METHOD, _NOTHING)
    except Exception:
        return _NOTHING


def _hook_of(session: object) -> _ProviderHook | None:
    """Return `session`'s hook, installing it if needed; `None` when it cannot be hooked.

    Called with `_LOCK` held.
    """
    current = _lookup(session)
    if type(current) is _ProviderHook and current._session() is session:
        # Already hooked, the common case after the first load. (A class-level
        # property would have answered the lookup instead of the hook.)
        current._installed = True  # found in place, whoever put it back
        return current
    defined = _class_method(type(session))
    if defined is not None and _is_data_descriptor(defined):
        _warn_unhookable(session, "its set_providers is a property, not a method")
        return None
    if isinstance(current, _ProviderHook):
        existing = current._saved  # copied from another session: not ours to call
    elif defined is None:
        if current is _NOTHING:
            _warn_once(
                "session without set_providers",
                type(session),
                "Not following %s sessions: they have no set_providers to change their providers.",
                logging.DEBUG,
            )
            return None
        if hasattr(type(session), "__getattr__"):
            _warn_unhookable(session, "its set_providers is forwarded, not defined by its class")
            return None
        existing = current  # an instance attribute, and nothing on the class
    elif _is_bound_from_class(current, defined, session):
        existing = _NOTHING
    else:
        existing = current  # an instance attribute over the class's method
    hook = _ProviderHook(session, existing)
    try:
        object.__setattr__(session, _METHOD, hook)
    except (AttributeError, TypeError):
        _warn_unhookable(session, "it has no instance __dict__ to put a hook in")
        return None
    found: object = _lookup(session)
    if found is not hook:
        _put_back(session, hook)
        _warn_unhookable(session, "a set_providers put on the instance is not the one called")
        return None
    hook._installed = True
    return hook


def _is_bound_from_class(current: object, defined: object, session: object) -> bool:
    """Whether `current` is just the class's `defined` bound to `session` (no override)."""
    try:
        return bool(current == _bind(defined, session))
    except Exception:
        return False


def _unhook(hook: _ProviderHook) -> None:
    """Put back what the session had instead of `hook`. Called with `_LOCK` held."""
    session = hook._session()
    if session is None or not hook._installed:
        return
    hook._installed = False
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
    hook: _ProviderHook,
    old_providers: Providers,
    new_providers: Providers,
    handled: BaseException | None,
) -> None:
    """Call back every live model watching `hook`'s session; no lock held while calling.

    A model watched through several guards (a guarded loader calling another)
    is called back in the order the guards watched it, innermost first, and
    no further once one of its callbacks raised, as at load, where the inner
    guard's error stops the outer one.
    """
    with _locked():
        _drop_pending()
        watches = list(hook._watches.values())
    errors: list[Exception] = []
    failed: list[object] = []  # models whose callback raised, compared by identity
    for watched in watches:
        model = watched.model()
        cancelled = watched.origin is not None and watched.origin.cancelled
        if model is None or cancelled or any(other is model for other in failed):
            continue
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s Aligning the model again.",
                describe_change(model, watched.session_name, old_providers, new_providers),
            )
        token = _CHANGE.set((model, watched.session_name, old_providers, new_providers))
        try:
            watched.on_change(model, watched.session_name, old_providers, new_providers)
        except Exception as error:
            failed.append(model)
            errors.append(
                _explained(error, model, watched.session_name, old_providers, new_providers)
            )
        finally:
            _CHANGE.reset(token)
    if not errors:
        return
    for later in errors[1:]:
        logger.error("Another model following the same session failed too: %s", later)
    first = errors[0]
    if handled is not None:
        raise first from handled
    raise first


_CHANGE: ContextVar[tuple[object, str, Providers, Providers] | None] = ContextVar(
    "onnx_device_guard_provider_change", default=None
)
"""The change being followed in this thread while a callback runs, for `_ChangeInRecords`."""


class _ChangeInRecords(logging.Filter):
    """Tells, in each record the library logs while a callback runs, which change caused it.

    The guard's re-alignment logs its usual fallback record; during a
    callback this puts `describe_change`'s sentence in front of the message
    and adds the fields `odg_changed_session`, `odg_old_providers` and
    `odg_new_providers`, so that one WARNING names the providers before and
    after.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        change = _CHANGE.get()
        if change is None:
            return True
        model, session_name, old, new = change
        text = describe_change(model, session_name, old, new)
        record.msg = f"{text.replace('%', '%%') if record.args else text} {record.msg}"
        record.odg_changed_session = session_name
        record.odg_old_providers = None if old is None else list(old)
        record.odg_new_providers = None if new is None else list(new)
        return True


logger.addFilter(_ChangeInRecords())


def _explained(
    error: Exception,
    model: object,
    session_name: str,
    old_providers: Providers,
    new_providers: Providers,
) -> Exception:
    """A library error raised again with the change in front of its message."""
    if not isinstance(error, DeviceGuardError) or type(error) not in _REWRAPPED:
        return error
    change = describe_change(model, session_name, old_providers, new_providers)
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
    if type(options) is dict:  # onnxruntime's; copied, as a session may change it in place
        return providers, {name: _copy(value) for name, value in options.items()}
    return providers, options


def _copy(value: object) -> object:
    return dict(value) if type(value) is dict else value


def _class_method(cls: type) -> object | None:
    """The `set_providers` attribute that `cls` or a base defines, unbound."""
    for klass in cls.__mro__:
        attribute = vars(klass).get(_METHOD, _NOTHING)
        if attribute is not _NOTHING:
            return attribute  # type: ignore[no-any-return]
    return None


def _is_data_descriptor(attribute: object) -> bool:
    return hasattr(type(attribute), "__set__") or hasattr(type(attribute), "__delete__")


def _original(session: object, saved: object) -> Callable[..., Any]:
    """The `set_providers` that the hook stands in front of, bound to `session`."""
    if saved is not _NOTHING:
        return saved  # type: ignore[return-value]
    return _bind(_class_method(type(session)), session)  # type: ignore[no-any-return]


def _bind(attribute: Any, session: object) -> Any:
    """`attribute`, found on the session's class, as `session.<name>` would give it."""
    get = getattr(type(attribute), "__get__", None)
    return attribute if get is None else get(attribute, session, type(session))


def _warn_unhookable(session: object, why: str) -> None:
    _warn_once(
        "session",
        type(session),
        "onnx-device-guard cannot follow provider changes of %s sessions: "
        + why
        + ". A model's device is aligned at load only; after set_providers (or onnxruntime's "
        "fallback after a GPU provider fails) call onnx_device_guard.realign(model).",
    )


def _warn_once(what: str, cls: type, message: str, level: int = logging.WARNING) -> None:
    """Log `message` (at WARNING unless `level` says otherwise) once per `what` and class."""
    with _WARN_LOCK:
        if (what, cls) in _WARNED_CLASSES:
            return
        _WARNED_CLASSES.add((what, cls))
    logger.log(level, message, cls.__qualname__)
