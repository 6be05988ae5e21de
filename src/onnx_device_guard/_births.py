"""Sessions observed where they are born: what each asked for, and what it got.

While anything needs them, onnxruntime's constructors are wrapped on the class; each birth goes
to a guarded model's method on the stack, else the load open here, else a watch. No torch
until a report.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._errors import EnvironmentConfigurationError
from ._follow import followers_of, following, on_set_providers
from ._messages import MISSING, ObjectTable, error_text, logger, short_repr
from ._providers import GPU_CAPABLE_EXECUTION_PROVIDERS, RESETTING, parse_device_id, why_dropped

if TYPE_CHECKING:
    from ._options import Resolved, Settings


@dataclass(eq=False, slots=True)
class Birth:
    """What one session was asked for when it was created, and what it got."""

    file: str
    """The model it was made from: its path, or the size of the bytes it was given."""
    asked: tuple[str, ...]
    """The GPU-capable providers it was asked for, in order (empty: the CPU only)."""
    device_id: int
    """The `device_id` asked of the first of them (0 when none was given)."""
    got: tuple[str, ...]
    reported: bool = False
    """Whether its fallback was reported already, so that no watch reports it again."""
    number: int = 0
    """Its place in the order of births, to tell a load which sessions were born during it."""

    @property
    def device(self) -> str | None:
        """The torch device its providers ask for (`cuda:<device_id>`), or `None`."""
        return f"cuda:{self.device_id}" if self.asked else None

    @property
    def dropped(self) -> bool:
        """Whether it asked for a GPU and runs none of the GPU providers it asked for."""
        return bool(self.asked) and not any(name in self.got for name in self.asked)

    def get_providers(self) -> list[str]:
        """What it got: a birth stands for its session where the core checks a device."""
        return list(self.got)


_NUMBERS = itertools.count(1)
_ELSEWHERE: list[tuple[int, weakref.ref[Any]]] = []
"""The sessions born outside every load while one was in flight (a worker thread's, or an
unrelated thread's: nothing tells them apart) until the last ends, with their birth numbers."""
_RECORDS: ObjectTable[Birth] = ObjectTable()
"""The birth of each observed session alive."""
_ADDED: weakref.WeakKeyDictionary[Any, list[tuple[Any, Any]]] = weakref.WeakKeyDictionary()
"""The providers each `SessionOptions` was given with `add_provider`."""


birth_of = _RECORDS.get
"""`birth_of(session)`: its birth record, if it was born while observed (a load calls it often)."""


_LOAD: ContextVar[collecting | None] = ContextVar("onnx_device_guard_load", default=None)


class collecting:  # noqa: N801 - a context manager, named for what its block does
    """Collect the sessions born in this context during the block; an outer load gets them too."""

    __slots__ = ("_outer", "_token", "born", "frame", "heard", "in_flight", "since")

    def __enter__(self) -> collecting:
        _LOADS.append(None)  # before `use`: an unhook from now on waits for this load
        self.in_flight = True  # until `settle(self)`, once its model has claimed its sessions
        if not (_permanent and (_hooks or _waiting_for_import)):
            use(permanent=True)
        self.born: list[object] = []
        self.heard: set[int] = set()  # ids of the sessions an inner load has reported on
        self.since = next(_NUMBERS)  # the births numbered after it were born during the block
        self.frame: types.FrameType | None = sys._getframe(1)  # the load's, for _pending_owner
        self._outer = _LOAD.get()
        self._token = _LOAD.set(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:  # noqa: SIM105 - `contextlib.suppress` costs a load 0.2 us
            _LOAD.reset(self._token)
        except ValueError:  # a coroutine closed elsewhere: not this context's
            pass
        self.frame = None  # finished: a task it started still sees it, and `open_load` skips it
        if exc_info[1] is not None:  # no model to align: its sessions are no model's
            to_watch(self.born, raising=False)
            settle(self)


def open_load() -> collecting | None:
    """The guarded load open in this context (a `realign` in it is part of it), if any: the
    nearest still open, as a task may outlive the load that started it."""
    load = _LOAD.get()
    while load is not None and load.frame is None:
        load = load._outer
    return load


_Check = tuple[Callable[[Any, object], object], object, int]
_PENDING: dict[int, tuple[weakref.ref[Any], list[_Check]]] = {}
"""Guarded models whose methods may open sessions, by id: a weak reference, and the checks of
the guards around it, the nearest first, each with its origin and when it was set (those
without a session yet, and those that follow theirs)."""


def await_births(
    model: object, check: Callable[[Any, object], object], origin: object, since: int | None
) -> bool:
    """Check each session a method of `model` opens with `check` (until `origin`'s undo), after
    the checks that guards inside the load that began at the birth number `since` left (a
    guarded class's, built by a patched loader); `False` if it takes no weak reference."""
    if not type(model).__weakrefoffset__:  # no weak reference to it: cheaper than trying one
        return False
    key, held = id(model), _PENDING.get(id(model))
    if held is None or held[0]() is not model:  # none yet, or a dead model's id
        reference = weakref.ref(model, functools.partial(_forget, _PENDING, key))
        held = _PENDING[key] = (reference, [])
    inner = [c for c in held[1] if since is not None and c[2] > since and c[0] != check]
    held[1][:] = [*inner, (check, origin, next(_NUMBERS))]  # an earlier load's go: taken over
    if not (_permanent and (_hooks or _waiting_for_import)):
        use(permanent=True)
    return True


def _check_all(checks: list[_Check], model: object, session: object) -> None:
    """Check a session `model` opened with each guard's check, the nearest first (the others,
    hearing it reported, say no more, but raise in "fail" mode), as its load did."""
    for check, _, _ in list(checks):
        check(model, session)


def _forget(
    pending: dict[int, Any], key: int, _: object, finalizing: Callable[[], bool] = sys.is_finalizing
) -> None:
    """Drop a collected model that waited (the last may unhook); bound: globals die at exit."""
    if pending.pop(key, None) is not None and not pending and not finalizing():
        _unhook_if_unused()


def stop_waiting(origin: object) -> None:
    """Forget the models the patch `origin` left waiting; the last of them may unhook."""
    for key, (_, checks) in list(_PENDING.items()):
        checks[:] = [entry for entry in checks if entry[1] is not origin]
        if not checks:  # no guard left around it
            _forget(_PENDING, key, None)


def reported_by_load(sessions: list[tuple[str, object]], dropped: list[Birth]) -> None:
    """A load reported on `sessions` (or raised): no watch reports their `dropped` births
    again, and the load open around it, if any, says no more about them."""
    for birth in dropped:
        birth.reported = True
    if (outer := open_load()) is not None:
        outer.heard.update(id(session) for _, session in sessions)


def pass_on(sessions: list[object], owned: bool, settings: Resolved | None = None) -> None:
    """Sessions a load has aligned: the load around it has them too; else those it does not
    own (`session_attr` names others) are the watch's, or without one reported with the load's
    `settings`."""
    if (outer := open_load()) is not None:
        outer.born.extend(sessions)
    elif not owned:
        to_watch(sessions, settings=None if _WATCHES else settings)


def to_watch(
    sessions: list[object], raising: bool = True, settings: Resolved | None = None
) -> None:
    """Report the drops of sessions no model is known to hold, even inside another load, with the
    `settings` of the load they were born in, else the watch's; raised only with either, and
    not for a load that raised (`raising=False`), so its own error propagates."""
    for birth in filter(None, map(birth_of, sessions)):
        if birth.dropped and not birth.reported:
            report_birth(birth, raising and bool(_WATCHES or settings), settings)


def _pending_owner(load: collecting | None) -> Callable[[object], object] | None:
    """The check of the pending model a calling method (`self` first) runs on, nearer than `load`
    (only methods' `f_locals` are read: before 3.13 that keeps a copy until the frame returns)."""
    frame: types.FrameType | None = sys._getframe(2)  # past the wrapper and wrapt
    while frame is not None and (load is None or frame is not load.frame):
        code = frame.f_code
        if code.co_argcount and code.co_varnames[0] == "self":
            entry = _PENDING.get(id(frame.f_locals.get("self")))
            if entry is not None and (model := entry[0]()) is not None:
                return functools.partial(_check_all, entry[1], model)
        frame = frame.f_back
    return None


_WATCHES: list[SessionWatch] = []
"""The watches in force, oldest first: each option is the oldest's given it (`run`'s takes none)."""


class SessionWatch(contextlib.AbstractContextManager["SessionWatch"]):
    """A handle on one [`watch_sessions`][onnx_device_guard.watch_sessions]: `undo()` or `with`.

    Args:
        settings: The options the watch was given, checked (made by `watch_sessions`).

    Raises:
        ModelInputError: Never here: `watch_sessions` checks its options first.

    Examples:
        >>> from onnx_device_guard import watch_sessions
        >>> with watch_sessions(warn=False) as watch:
        ...     watch.active
        True
        >>> watch.active
        False
    """

    def __init__(self, settings: Settings | None) -> None:
        self._settings = settings

    @property
    def active(self) -> bool:
        """Whether this watch is still in force."""
        return self in _WATCHES

    def undo(self) -> None:
        """End this watch (once; again does nothing); the last to end puts onnxruntime back.

        Returns:
            None.

        Raises:
            ModelInputError: Never.

        Examples:
            >>> from onnx_device_guard import watch_sessions
            >>> watch = watch_sessions()
            >>> watch.undo(); watch.undo()
            >>> watch.active
            False
        """
        with _LOCK:
            if self in _WATCHES:
                _WATCHES.remove(self)
                release()

    def __exit__(self, *exc_info: object) -> None:
        self.undo()

    def __repr__(self) -> str:
        return f"<onnx_device_guard session watch ({'active' if self.active else 'undone'})>"


def watch_sessions(
    resolution_mode: object = None, fallback_device: object = None, warn: object = None
) -> SessionWatch:
    """Check every onnxruntime session this process creates, from now until `undo()`.

    A session that asked for a GPU-capable provider and runs none of them
    is reported once (a `DeviceFallbackWarning` and a WARNING record), or
    raises in `"fail"` mode; a session born in a guarded load is the load's
    to report. Each option is that of the oldest watch in force that was
    given it (so a program's own watch counts under `onnx-device-guard
    run`); one no watch gives takes the policy in force where the session
    is created.
    The guide's "Watching every session of a process" has the details.

    Args:
        resolution_mode: `"fail"` or `"fallback"`.
        fallback_device: Where a fallback's tensors belong, for the report.
        warn: `False` logs fallbacks at DEBUG only.

    Returns:
        A [`SessionWatch`][onnx_device_guard.SessionWatch]: `undo()` it, or
        use it as a `with` block.

    Raises:
        ModelInputError: An option has a value it cannot take.

    Examples:
        >>> import onnxruntime
        >>> from onnx_device_guard import example_model, watch_sessions
        >>> with watch_sessions(resolution_mode="fail"):
        ...     onnxruntime.InferenceSession(
        ...         example_model(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
        ...     )
        Traceback (most recent call last):
        onnx_device_guard.EnvironmentConfigurationError: onnxruntime dropped ...
    """
    settings = None
    if not (resolution_mode is None and fallback_device is None and warn is None):
        from ._options import settings as check_settings

        settings = check_settings(resolution_mode, fallback_device, warn)
    watch = SessionWatch(settings)
    with _LOCK:
        _WATCHES.append(watch)
    use()
    return watch


_LOCK = threading.RLock()
_LOADS: list[None] = []
"""One entry per guarded load in flight, in any thread or task (append and pop are atomic)."""
_users = 0
"""How many watches and patches need the hooks."""
_permanent = False
"""Whether a guarded load or a pending model needs them until the last `release()`."""
_hooks: dict[object, tuple[Any, str, Any, bool, object]] = {}
"""The hooks in place, by their token: (class, attribute, the wrapper put there, whether the
class inherited what it wrapped, the token); `InferenceSession`'s first. A wrapper whose token
is gone (left inside someone else's) passes calls through."""
_waiting_for_import = False
_MADE: dict[tuple[Any, str], tuple[Any, str, Any, bool, object]] = {}
"""The last hook made on each class and attribute, as in `_hooks`, to put back cheaply."""
_ORIGINAL: Any = None
"""onnxruntime's `InferenceSession`, whose own `get_providers` a record reads."""


def use(*, permanent: bool = False) -> None:
    """Put the hooks in place (now, or when onnxruntime is imported); count a user."""
    global _users, _permanent, _waiting_for_import
    with _LOCK:
        if permanent:
            _permanent = True
        else:
            _users += 1
        if _hooks or _waiting_for_import:
            return
        _waiting_for_import = True
        if (onnxruntime := sys.modules.get("onnxruntime")) is not None:
            _install(onnxruntime)  # as wrapt's hook would, at once
        else:
            import wrapt

            wrapt.register_post_import_hook(_install, "onnxruntime")


def release() -> None:
    """Count a user less; the last one puts onnxruntime's originals back (by identity)."""
    global _users
    with _LOCK:
        _users -= 1
        _unhook_if_unused()


def settle(collected: collecting | None = None) -> None:
    """A load is over (`collected`'s, once its model claimed its sessions): the last one in
    flight reports what no load claimed (as `report_unclaimed`), and unhooks if nothing needs
    the hooks."""
    if collected is not None and collected.in_flight:
        collected.in_flight = False
        _LOADS.pop()
    if _ELSEWHERE:  # the usual case, none, read without the lock (no call)
        report_unclaimed()
    if not (_LOADS or _users or _PENDING):  # read without the lock, and again under it
        _unhook_if_unused()


def _unhook_if_unused() -> None:
    global _permanent
    with _LOCK:
        # Cleared first: a model that starts waiting meanwhile (unlocked) then sees it cleared.
        needed, _permanent = _permanent, False
        if _users > 0 or _PENDING or following() or _LOADS:  # in flight: the last one unhooks
            _permanent = needed  # following(): a guarded model still follows its sessions
            return
        while _hooks:
            owner, name, wrapper, inherited, _ = _hooks.popitem()[1]  # now passes calls through
            if vars(owner).get(name) is not wrapper:  # wrapped since by someone: spliced out
                import wrapt  # of their wrapt chain if it can be

                with contextlib.suppress(wrapt.WrapperNotOutermostError):
                    wrapt.unwrap_object(owner, name, wrapper, missing_ok=True)
                continue
            # Inherited before (`set_providers`, onnxruntime's Session's) or inheriting just
            # what it wraps now (whoever it wrapped left from under it): the class's own goes.
            bases = (vars(base) for base in owner.__mro__[1:])
            if (
                inherited
                or next((v[name] for v in bases if name in v), None) is wrapper.__wrapped__
            ):
                delattr(owner, name)
            else:  # what it wraps now
                setattr(owner, name, wrapper.__wrapped__)


def _install(onnxruntime: Any) -> None:
    global _waiting_for_import, _ORIGINAL
    import wrapt

    with _LOCK:
        _waiting_for_import = False
        if _hooks or not (_users or _permanent or _LOADS or _PENDING):
            return
        _ORIGINAL = onnxruntime.InferenceSession
        for owner, name, hook in (
            (onnxruntime.InferenceSession, "__init__", _on_init),
            (onnxruntime.InferenceSession, "set_providers", _on_set_providers),
            (getattr(onnxruntime, "SessionOptions", None), "add_provider", _on_add_provider),
        ):
            if not hasattr(owner, name):
                continue
            # The hook made before goes back cheaply if it is in place still, or if the class
            # holds (or inherits) and serves what it wrapped again.
            now, made = vars(owner).get(name, MISSING), _MADE.get((owner, name))
            if made is None or not (
                now is made[2]
                or ((now is MISSING) == made[3] and getattr(owner, name) is made[2].__wrapped__)
            ):
                token = object()
                live = functools.partial(_hooks.__contains__, token)  # a left-over one is off
                wrapper = wrapt.wrap_object(owner, name, wrapt.FunctionWrapper, (hook, live))
                made = _MADE[owner, name] = (owner, name, wrapper, now is MISSING, token)
            elif now is not made[2]:
                setattr(owner, name, made[2])
            _hooks[made[4]] = made


def _on_add_provider(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    with contextlib.suppress(Exception):  # never break the user's call over a record
        name, options = [*args, kwargs.get("provider_options", {})][:2]
        _ADDED.setdefault(instance, []).append((name, options))
    return result


def _on_init(wrapped: Any, session: Any, args: Any, kwargs: Any) -> None:
    """`InferenceSession.__init__`, wrapped: record the birth, hand the session to its owner."""
    source, sess_options, providers, options = (*args, None, None, None, None)[:4]
    if kwargs:  # read one by one: a dict of them costs a birth 1.4 us more
        source = kwargs.get("path_or_bytes", source)
        sess_options = kwargs.get("sess_options", sess_options)
        providers = kwargs.get("providers", providers)
        options = kwargs.get("provider_options", options)
    if len(args) > 2 and isinstance(args[2], Iterator):  # which onnxruntime refuses, on the CPU
        providers = list(args[2])  # read as a list; onnxruntime gets an iterator over it again,
        args = (*args[:2], iter(providers), *args[3:])  # so its answer is left as it was
    elif kwargs and isinstance(providers, Iterator):  # given by name
        providers = list(providers)
        kwargs = {**kwargs, "providers": iter(providers)}
    wrapped(*args, **kwargs)
    try:
        birth = _record(session, source, sess_options, providers, options)
        _RECORDS.set(session, birth)
    except Exception as error:  # its constructor's result stands, unchecked: say so
        logger.warning(
            f"Could not read what this {type(session).__qualname__} was asked for or runs "
            f"({error_text(error)}), so it is not checked: a GPU provider onnxruntime dropped "
            "goes unreported. Check its model with realign(model) once it is built."
        )
        return
    load = open_load()
    check = _pending_owner(load) if _PENDING else None  # a `self` it is opened in, nearer
    if check is not None:
        check(session)
    elif load is not None:
        load.born.append(session)
    else:
        _born_outside(birth, session)


def _born_outside(birth: Birth, session: object) -> None:
    """A session born outside every load: kept for the loads in flight (a worker thread's is
    theirs, if anyone's), else reported as no model's (raised under a watch only)."""
    with _LOCK:
        if loads := len(_LOADS):
            if len(_ELSEWHERE) > 64:  # while loads overlap: the dead go
                _ELSEWHERE[:] = [entry for entry in _ELSEWHERE if entry[1]() is not None]
            _ELSEWHERE.append((birth.number, weakref.ref(session)))
    if birth.dropped and (_WATCHES or not loads) and not birth.reported:
        report_birth(birth, raising=bool(_WATCHES))
    elif loads:  # the last load may have ended meanwhile, finding nothing to report
        report_unclaimed()


def _record(session: Any, source: Any, sess_options: Any, providers: Any, options: Any) -> Birth:
    """Read what `session` was asked for (by the constructor's arguments), and what it got."""
    if isinstance(source, bytes):
        file = f"<a model of {len(source)} bytes>"
    else:  # escaped where it is shown
        file = str(os.fspath(source)) if source is not None else "<no model>"
    if not providers and sess_options is not None:  # those added to its SessionOptions
        providers = _ADDED.get(sess_options, providers)
    got = tuple(_ORIGINAL.get_providers(session))  # onnxruntime's own, never an override
    return Birth(file, *_asked(file, providers, options, got), got, number=next(_NUMBERS))


def report_unclaimed() -> None:
    """Once no load is in flight, report the drops of the sessions born outside every load
    meanwhile that none claimed, with the settings in force: never a load's, as an unrelated
    thread may have made one (a quiet load must not silence it)."""
    if _LOADS or not _ELSEWHERE:  # the usual case, read without the lock
        return
    with _LOCK:
        if _LOADS:
            return
        left, _ELSEWHERE[:] = list(_ELSEWHERE), []
    to_watch([session for _, ref in left if (session := ref()) is not None], raising=False)


def born_elsewhere(since: int | None) -> list[object]:
    """The sessions alive that were born outside every load since the birth number `since`."""
    if since is None or not _ELSEWHERE:
        return []
    return [s for number, ref in list(_ELSEWHERE) if number > since and (s := ref()) is not None]


def _asked(
    file: str, providers: Any, options: Any, got: tuple[str, ...]
) -> tuple[tuple[str, ...], int]:
    """The GPU-capable providers asked for, and the `device_id` (0 if none) of the first of
    them the session `got` (TensorRT dropped, CUDA's), else of the first."""
    listed = list(options or ())  # onnxruntime takes a list shorter than the providers too
    asked: list[tuple[Any, Any]] = [
        (provider, listed[n] if n < len(listed) else None)
        if isinstance(provider, str)
        else (*provider, None)[:2]
        for n, provider in enumerate(providers or ())
    ]
    gpu = [  # options it cannot use (`None`, say) onnxruntime leaves at their defaults
        (name, option if isinstance(option, Mapping) else {})
        for name, option in asked
        if isinstance(name, str) and name in GPU_CAPABLE_EXECUTION_PROVIDERS
    ]
    name, chosen = next((pair for pair in gpu if pair[0] in got), gpu[0]) if gpu else ("", {})
    raw = chosen.get("device_id", 0)
    if (device_id := parse_device_id(raw)) is None:
        logger.warning(
            f"The session of {short_repr(file, 200)} asked {name} for device_id="
            f"{short_repr(raw)}, which is no GPU index torch addresses: it is taken as GPU 0."
        )
    return tuple(name for name, _ in gpu), device_id or 0


def _on_set_providers(wrapped: Any, session: Any, args: Any, kwargs: Any) -> Any:
    """`InferenceSession.set_providers`, wrapped: its birth record says what it asks for now,
    before the models following it are aligned again; a drop no model reports is the watch's."""
    birth = birth_of(session)
    # onnxruntime's own fallback in run(), handling an EPFail: what was asked for stands.
    falling_back = type(sys.exc_info()[1]).__name__ == "EPFail"

    def set_providers(*args: Any, **kwargs: Any) -> Any:
        if (lock := RESETTING.get(session)) is None:  # readers of its providers wait for it
            RESETTING.set(session, lock := threading.RLock())  # its own thread never waits
        with lock:
            result = wrapped(*args, **kwargs)  # onnxruntime's own errors for arguments it refuses
        with contextlib.suppress(Exception):  # never break the user's call over a record
            providers = args[0] if args else kwargs.get("providers")
            options = args[1] if len(args) > 1 else kwargs.get("provider_options")
            if birth is None and not falling_back:  # born unobserved: recorded from now on
                source = getattr(session, "_model_path", None) or session._model_bytes
                _RECORDS.set(session, _record(session, source, None, providers, options))
            elif birth is not None:
                birth.got, birth.reported = tuple(_ORIGINAL.get_providers(session)), False
                if not falling_back:
                    birth.asked, birth.device_id = _asked(birth.file, providers, options, birth.got)
        return result

    result = on_set_providers(set_providers, session, args, kwargs)
    # A drop no follower reported (the providers did not change, or the model survives it) is
    # reported with the settings of the load of a model that follows it, else by the load in
    # flight here (with its own), else as no model's.
    followers = followers_of(session)
    watches = followers.watches.values() if followers is not None else ()
    settings = next((w.settings for w in watches if w.model()), None)
    if settings is None and (load := open_load()) is not None:
        if not any(born is session for born in load.born):
            load.born.append(session)
    else:
        to_watch([session], settings=settings)
    return result


def report_birth(birth: Birth, raising: bool = True, settings: Resolved | None = None) -> None:
    """Report a session that dropped its GPU providers: warn and log, or raise in `"fail"`;
    with the `settings` of the load that follows it, else of the watch."""
    from ._alignment import plan_alignment, warn_at_caller
    from ._devices import as_device
    from ._options import Resolved, Settings
    from ._policy import current_policy

    # Else each option is the oldest watch's that was given it, over the policy in force.
    used = settings or current_policy()
    for watch in () if settings else reversed(list(_WATCHES)):
        used = (watch._settings or Settings()).over(used)
    provider = birth.asked[0]
    problem = (
        f"onnxruntime dropped {provider} for the session of {short_repr(birth.file, 200)}: "
        f"it asked for {list(birth.asked)} and runs only {short_repr(list(birth.got), 200)}, "
        f"so it cannot read tensors on {birth.device!r}. {why_dropped(provider)}"
    )
    birth.reported = True
    if used.resolution_mode == "fail" and raising:
        raise EnvironmentConfigurationError(problem)  # its help: no data transfer registered
    # The core's check: a fallback device the session cannot read either raises, in its words
    # (only said, where the report must not raise: the user's own error, or no model's session).
    resolved = Resolved("fallback", used.fallback_device, used.warn)  # the error raised above
    try:
        fallback: str | None = str(
            plan_alignment([("", birth)], as_device(birth.device, "device"), resolved)[0]
        )
        text = f"{problem} Its tensors belong on {fallback!r}."
    except EnvironmentConfigurationError as error:
        if raising:
            raise
        fallback, text = None, f"{problem} {error.message}"
    if used.warn:
        with contextlib.nullcontext() if raising else contextlib.suppress(Warning):
            warn_at_caller(text)  # under "error" filters, a user's own error stands
    logger.log(
        logging.WARNING if used.warn else logging.DEBUG,
        text,
        extra={
            "odg_event": "fallback",
            "odg_reason": "provider_dropped",
            "odg_model_file": short_repr(birth.file, 400)[1:-1],
            "odg_asked_providers": list(birth.asked),
            "odg_providers": list(birth.got),
            "odg_requested_device": birth.device,
            "odg_aligned_device": fallback,
            "odg_help_url": EnvironmentConfigurationError.default_help_url,
        },
    )
