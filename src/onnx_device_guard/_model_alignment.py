"""Aligning a model for `device_guard`, `patch` and `realign`: its sessions (born in the load,
or found on it) against the devices asked for; the aligned one written to its attribute."""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import types
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from ._alignment import Details, Fallback, find_mismatch, plan_alignment, report_fallback
from ._births import (
    Birth,
    await_births,
    birth_of,
    born_elsewhere,
    collecting,
    open_load,
    pass_on,
    reported_by_load,
    settle,
    to_watch,
)
from ._devices import DeviceLike, as_device, is_index
from ._discovery import (
    DEFAULT_DEVICE_ATTRS,
    DeviceAttribute,
    Found,
    Sessions,
    describe,
    discover_sessions,
    factory_name,
    find_device_attribute,
    find_sessions,
    instance_attributes,
    is_session,
    lacking,
)
from ._errors import DeviceGuardError, EnvironmentConfigurationError, ModelInputError, in_context
from ._follow import Origin, watch
from ._messages import MISSING, error_text, logger, short_repr
from ._options import (
    DeviceMismatchResolutionMode,
    GuardOptions,
    Resolved,
    SessionAttr,
    guard_options,
)
from ._policy import current_policy

_SEARCHED_SHOWN = 12
"""How many of the searched attribute paths an error lists."""


def align_model(
    model: object, load: Load, collected: collecting | None = None
) -> torch.device | None:
    """Align `model` with its sessions (`collected` in the `load`); `None` for one with none yet."""
    named = load.options.session_attr is not None
    born = None if collected is None else collected.born
    try:
        if born:  # held weakly from now: one the load made and let go of is not the model's
            refs, born[:] = tuple(map(weakref.ref, born)), ()
            born = [session for ref in refs if (session := ref()) is not None]
            if born and not named:
                load.born = refs  # a dead one among them is skipped where they are read
        if (around := collected or open_load()) is not None:  # `realign` in a load: part of it
            load.heard, load.since = around.heard, around.since
        aligned = load.align(model)
        if load.moved:  # a change's own alignment may have raced the load's write: again
            aligned = load.align(model, followed=True)
    except BaseException:
        if born:  # no model aligned: its sessions are the watch's (but those its error reports)
            to_watch(born, raising=False)
        raise
    else:
        if born:  # the load around it has them too; those it does not name go on their own
            pass_on(born, owned=not named, settings=load.made_with)
    finally:  # claimed: no longer in flight; the last one in flight reports, maybe unhooks
        settle(collected)
    return aligned


def call_and_align(load: Load) -> Any:
    """Make the `load`'s call, collecting the sessions born meanwhile, then align its model."""
    with collecting() as collected:  # which puts the hooks in place
        model = load.factory(*load.args, **load.kwargs)  # type: ignore[operator]
    align_model(model, load, collected)
    return model


async def call_and_align_async(load: Load) -> Any:
    """`call_and_align` for an `async def` factory: aligned once the coroutine has finished."""
    with collecting() as collected:  # which puts the hooks in place
        model = await load.factory(*load.args, **load.kwargs)  # type: ignore[operator]
    align_model(model, load, collected)
    return model


@dataclass(slots=True)
class Load:
    """A guarded call (or a `realign`): what it was told and made, to align its model again."""

    options: GuardOptions
    factory: object | None = None
    """What the call returned the model from; `None` for `realign`, which makes no call."""
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    signature: inspect.Signature | None = None
    """The factory's signature, read once when it was guarded (`None`: it has none to read)."""
    origin: Origin | None = None
    born: tuple[Callable[[], object], ...] = ()
    """The sessions born during the load, held weakly."""
    later: tuple[Callable[[], object], ...] = ()
    """The sessions its methods opened since, held weakly: checked beside the load's."""
    made_with: Resolved | None = None
    """The settings of the load, kept for its sessions born later and its providers' changes."""
    said: list[tuple[object, str]] | None = None
    """What the call asked for, read once (a `device=` callable runs once per load)."""
    heard: Collection[int] = ()
    """The ids of the sessions an inner load reported on during this one."""
    since: int | None = None
    """The births numbered after it were born during the load (a watch may have reported them)."""
    warned: tuple[object, ...] = ()
    """The last fallback warned about for a session born later: the same again is DEBUG."""
    moved: bool = False
    """Whether one of its sessions changed providers after it began to follow them."""

    def born_later(self, model: object, session: object) -> torch.device | None:
        """Align `model` again, with the session one of its methods opened (and all since)."""
        self.later = (*(ref for ref in self.later if ref() is not None), weakref.ref(session))
        return self.align(model, opened_later=True)

    def changed(self, model: object, *change: object) -> None:
        """Align `model` again after one of its sessions changed providers."""
        self.moved = True
        self.align(model, followed=True)

    def align(
        self, model: object, opened_later: bool = False, followed: bool = False
    ) -> torch.device | None:
        """Align `model` with its sessions, read now."""
        options, factory = self.options, self.factory
        if self.said is None:  # read once, then let go of the call: a method's `self` is in it
            self.said = said_devices(self, model)
            self.factory = factory = getattr(factory, "__func__", factory)  # unbound
            self.args, self.kwargs = (), {}
        sessions, searched, unreached = self._sessions(model)
        # The load's settings, for a session born later and a provider change too.
        used = self.made_with = self.made_with or options.settings.over(current_policy())
        if unreached:
            _unreached(model, factory, unreached, used.resolution_mode == "fail" and not sessions)
        if not sessions:
            self._wait(model, searched)
            return None
        attribute = find_device_attribute(model, options.device_attr, factory)
        devices, asking, dropped = self._devices(model, sessions, attribute)
        if options.follow and not followed:  # a change is not followed again, nor a new session
            watch(model, sessions, self.changed, key=id(options), origin=self.origin, settings=used)
            await_births(model, self.born_later, self.origin, self.since)  # its `.to()`'s, say
        if not devices:
            return None  # sessions that asked for the CPU only, and no device anywhere

        planned = asking or sessions
        aligned, report, source = self._plan(model, planned, devices, used, opened_later, dropped)
        if report is None:
            return aligned
        kept = attribute is not None and devices[-1][0] == aligned  # the attribute's own, checked
        # A provider change it survives, or a later session that repeats the warned fallback: DEBUG,
        # and a drop it survives is left for a watch to report.
        fallback = (report.requested, aligned, bool(dropped))
        survived = kept and (followed or (opened_later and self.warned == fallback))
        heard = self._heard(planned, [] if survived else dropped, report.requested, followed)
        outcome = (
            "" if attribute is None or kept else _write_back(model, factory, attribute, aligned)
        )
        warn = used.warn and not heard and not survived
        if warn and opened_later:
            self.warned = fallback
        if warn or logger.isEnabledFor(logging.DEBUG):  # else nothing is said
            # A patched loader the package calls itself, or a session opened later: the report
            # skips the package's frames.
            patched = self.origin is not None and (opened_later or open_load() is not None)
            module = getattr(factory, "__module__", None) if patched else None
            details = Details(
                applied=attribute is not None and not outcome,
                outcome=outcome,
                context=self._note(model, source, opened_later),
                factory=None if factory is None else factory_name(factory),
                device_attr=None if attribute is None else attribute.path,
                packages=(module.partition(".")[0],) if isinstance(module, str) else (),
            )
            report_fallback(report, warn, details)
        return aligned

    def _heard(
        self, planned: Sessions, dropped: list[Birth], requested: torch.device, followed: bool
    ) -> bool:
        """Whether a load inside this one reported this fallback (none of the rest cannot read
        `requested`; a provider change is news); marks it reported."""
        fresh = [s for _, s in planned if followed or not self._heard_of(s)]
        reported_by_load(planned, dropped)
        return len(fresh) < len(planned) and not any(
            find_mismatch(session, requested) for session in fresh
        )

    def _heard_of(self, session: object) -> bool:
        """Whether an inner load, or a watch during the load (in a worker thread), reported it."""
        if id(session) in self.heard:
            return True
        birth = birth_of(session)
        return birth is not None and birth.reported and birth.number > (self.since or birth.number)

    def _sessions(self, model: object) -> Found:
        """The sessions born in the load, else those on the model, and those opened since (each
        once); refuses a non-model."""
        born = [session for ref in self.born if (session := ref()) is not None] if self.born else []
        if not born:
            found, searched, left = find_sessions(model, self.options.session_attr, self.factory)
        elif born_elsewhere(self.since):  # in a worker thread, say: the model may hold it too
            found, searched, left = discover_sessions(model)
        else:  # no search: the sessions born in the load are its sessions
            found, searched, left = [], (), ()
        later = [s for ref in self.later if (s := ref()) is not None] if self.later else []
        if born or later:  # those its methods opened since, which it may not hold yet, last
            unique: dict[int, tuple[str, object]] = {}
            for pair in [*_named(model, born), *found, *_named(model, later)]:
                unique.setdefault(id(pair[1]), pair)
            found = list(unique.values())
        refuse = (born or not found) and self.options.require_session is not False
        if refuse and (isinstance(model, (*_NEVER, Awaitable)) or type(model) in _BARE):
            never = ", which is no model object: it can hold no session or device of its own."
            raise _unusable(model, self.factory, never + " Return the model object itself.")
        return found, searched, left

    def _devices(
        self, model: object, sessions: Sessions, attribute: DeviceAttribute | None
    ) -> tuple[Asked, Sessions, list[Birth]]:
        """The devices to check; the sessions that asked a GPU, and those it was dropped for."""
        births = [birth_of(session) for _, session in sessions]
        recorded = any(births)
        devices: Asked = []
        strict = attribute is None and not recorded  # nothing else explains the model
        for value, source in self.said or ():
            if (device := _as_asked(value, source, model, self.factory, strict)) is not None:
                devices.append((device, source))
        asking: Sessions = []
        heard: Sessions = []  # an inner load reported on them: planned last
        for pair, birth in zip(sessions, births, strict=True) if recorded else ():
            if birth is not None and not birth.asked:
                continue  # asked for the CPU alone: it runs there on purpose
            (heard if id(pair[1]) in self.heard else asking).append(pair)
            if birth is not None:  # else made before the call: what it asked for is unknown
                source = f"the providers session {pair[0]!r} asked for"
                devices.append((as_device(birth.device, "device"), source))
        if attribute is not None:
            source = f"its device attribute {attribute.path!r}"
            try:
                devices.append((as_device(attribute.value, "device"), source))
            except ModelInputError as error:
                raise self._in_context(error, model, sessions, source) from error
        elif not devices and (not recorded or self.factory is None):  # births excuse a call,
            tried = ", ".join(map(repr, DEFAULT_DEVICE_ATTRS))
            where = "" if self.factory is None else ", and the factory has no device parameter"
            raise _unusable(  # never a `realign`, which has none
                model,
                self.factory,
                f", which has none of the device attributes tried ({tried}){where}, so the guard "
                "cannot tell which device the model uses. Pass device= (a device such as 'cuda', "
                "or a callable that works it out from the call's arguments), or device_attr= "
                "naming the attribute that holds the model's device.",
            )
        dropped = [b for b in births if b is not None and b.dropped] if recorded else []
        if dropped:  # a new drop first: the one a report explains
            dropped.sort(key=lambda birth: birth.reported)
        return devices, asking + heard, dropped

    def _wait(self, model: object, searched: tuple[str, ...]) -> None:
        """Leave a model without a session to be checked when its sessions are born."""
        options, factory = self.options, self.factory
        explicit = options.session_attr is not None
        if options.require_session or (options.require_session is None and explicit):
            raise _no_session(model, factory, options, searched)
        if await_births(model, self.born_later, self.origin, self.since):
            logger.debug(
                "%s, which holds no onnxruntime session yet; its sessions are checked when born.",
                describe(model, factory),
            )
            return
        detail = (
            ", which holds no onnxruntime session, and its class takes no weak reference "
            "(a built-in type, or __slots__ without '__weakref__'), so no session it opens "
            "later is tied to it"
        )
        used = self.made_with
        if options.require_session is None and used and used.resolution_mode == "fail":
            raise _unusable(
                model,
                factory,
                f"{detail}: in 'fail' mode it cannot be let through unchecked. Add "
                "'__weakref__' to its __slots__, or pass require_session=False.",
            )
        logger.warning(
            "%s%s: its device is left as it is, and a drop is reported only as no model's, "
            "while watch_sessions() or a patch observes births. Add '__weakref__' to its "
            "__slots__.",
            describe(model, factory),
            detail,
        )

    def _plan(  # noqa: PLR0913 - and the settings `align` resolved
        self,
        model: object,
        sessions: Sessions,
        devices: Asked,
        settings: Resolved,
        opened_later: bool,
        dropped: list[Birth],
    ) -> tuple[torch.device, Fallback | None, str]:
        """Align each device once; the last aligned, the first fallback, its source."""
        first: tuple[Fallback | None, str] = (None, "")
        aligned: dict[torch.device, torch.device] = {}
        lost = dropped[0].asked[0] if dropped else None  # the fix says why
        for requested, source in devices:
            if requested in aligned:
                continue
            try:
                aligned[requested], planned = plan_alignment(sessions, requested, settings, lost)
            except ModelInputError as error:
                raise self._in_context(error, model, sessions, source) from error
            except EnvironmentConfigurationError as error:
                reported_by_load(sessions, dropped)  # the error is their report
                single = "" if len(sessions) > 1 else f"; session {sessions[0][0]!r}"
                note = self._note(model, source, opened_later, single)
                raise in_context(error, after=f" ({note})") from None
            if first[0] is None and planned is not None:
                first = (planned, source)
        return aligned[devices[-1][0]], *first

    def _note(self, model: object, source: str, opened_later: bool, single: str = "") -> str:
        """How a message names the model, and where its device came from."""
        named = f"model {type(model).__name__}"
        if self.factory is not None:
            named += f", returned by the factory {factory_name(self.factory)}"
        text = "; its session was opened after the load" if opened_later else ""
        return f"{named}{single}; device from {source}{text}"

    def _in_context(
        self, error: ModelInputError, model: object, sessions: Sessions, source: str
    ) -> ModelInputError:
        """`error`, its message naming the model, its sessions and where the device came from."""
        named = ", ".join(repr(name) for name, _ in sessions) or "none"
        return in_context(
            error, f"{describe(model, self.factory)}, with sessions {named} and {source}: "
        )


def _named(model: object, born: list[object]) -> Sessions:
    """Born sessions named by the attribute holding them, else by their file (`#n` if twice);
    then the sessions made before the call that the model holds in its own attributes."""
    if not born:
        return []
    places, names, before = {id(s): n for n, s in enumerate(born)}, [""] * len(born), []
    for name, value in instance_attributes(model):  # one pass: a load makes it every time
        if (place := places.get(id(value))) is not None:
            names[place] = names[place] or name
        elif is_session(value):
            before.append((name, value))
    for place, session in enumerate(born):
        if not names[place]:
            birth = birth_of(session)
            names[place] = os.path.basename(birth.file) if birth else "session"
    names = [name if names.count(name) == 1 else f"{name}#{n}" for n, name in enumerate(names)]
    return [*zip(names, born, strict=True), *before]


_NEVER: tuple[type, ...] = (type(None), tuple, str, bytes, int, float, types.GeneratorType)
# An async generator, and a `@contextmanager` factory's result, whose block gets the model.
_NEVER += (types.AsyncGeneratorType, contextlib._GeneratorContextManagerBase)
_BARE = (list, dict, set)  # a list of models, say; a subclass may be a model


def _unreached(
    model: object, factory: object | None, unreached: tuple[str, ...], fail: bool
) -> None:
    """Say what the attribute search could not reach: DEBUG, or an error in `"fail"` mode."""
    text = (
        f"{describe(model, factory)}; the search for its sessions stopped short of "
        f"{', '.join(unreached[:_SEARCHED_SHOWN])}. Pass session_attr= naming where its "
        "sessions are, or create them inside the guarded call."
    )
    if fail:
        raise DeviceGuardError(text)
    logger.debug(text)


def _write_back(
    model: object, factory: object | None, attribute: DeviceAttribute, aligned: torch.device
) -> str:
    """Write `aligned` to the device attribute; return "" or, read-only, the report's note."""
    current = attribute.value
    value: object = str(aligned) if isinstance(current, str) else aligned
    try:
        setattr(attribute.holder, attribute.name, value)
    except AttributeError:  # a property without a setter
        return (
            f"Its device attribute {attribute.path!r} is read-only, so it still says "
            f"{str(current)!r}: put the model's tensors on {str(aligned)!r}, or make the "
            "attribute writable."
        )
    except Exception as error:
        raise DeviceGuardError(
            f"{describe(model, factory)} whose device attribute {attribute.path!r} cannot "
            f"be set to {short_repr(value)} ({error_text(error)}). Make it writable, or pass "
            "device_attr= naming an attribute that is."
        ) from error
    try:
        now = getattr(attribute.holder, attribute.name, MISSING)
    except Exception:  # read back for the report only
        now = MISSING
    if now is not value and str(now) != str(value):  # a setter that ignored the write
        return (
            f"Its device attribute {attribute.path!r} did not take the write (it still says "
            f"{short_repr(str(now))}): put the model's tensors on {str(aligned)!r}, or make "
            "the attribute keep what is written."
        )
    return ""


def _no_session(
    model: object, factory: object | None, options: GuardOptions, searched: tuple[str, ...]
) -> DeviceGuardError:
    """The error for a model without a session, saying what was searched and what to change."""
    source = options.session_attr
    if isinstance(source, tuple):
        detail = lacking(source, source)
    elif source is not None:
        detail = (
            f", and session_attr={factory_name(source)} found no session on it. Make the "
            "callable return the model's session(s)."
        )
    else:
        shown = ", ".join(repr(path) for path in searched[:_SEARCHED_SHOWN])
        more = len(searched) - _SEARCHED_SHOWN
        detail = (
            f", which has none of the session attributes tried, and no object with "
            f"get_providers() and run() among its instance attributes (searched {shown}"
            f"{f' and {more} more' if more > 0 else ''}). Return the model object, or pass "
            "session_attr= naming the attribute (or dotted path) that holds its session."
        )
    if options.require_session:  # else session_attr alone refused it
        detail += (
            " For a model that opens its sessions later, leave require_session at its "
            "default (None): they are checked when they are born."
        )
    return _unusable(model, factory, detail)


def _unusable(model: object, factory: object | None, detail: str) -> DeviceGuardError:
    """The error for a model without what the guard needs."""
    if factory is not None and inspect.isawaitable(model):  # a plain def returning a coroutine
        close = getattr(model, "close", None)
        if callable(close):
            close()  # no "coroutine was never awaited" warning
        return DeviceGuardError(
            f"The factory {factory_name(factory)} returned an awaitable, but device_guard "
            "only treats `async def` factories as asynchronous. Make the factory an "
            "`async def`, or await inside it."
        )
    return DeviceGuardError(describe(model, factory) + detail)


Asked = list[tuple[torch.device, str]]
"""Devices asked for, each with where it came from, in the order they are checked."""


def said_devices(load: Load, model: object) -> list[tuple[object, str]]:
    """The `device=` option when given, else the call's `device` argument (`None` skipped)."""
    option, factory = load.options.device, load.factory
    if isinstance(option, torch.device):
        return [(option, "the device= option")]
    if callable(option):
        if factory is None:
            raise ModelInputError(
                f"device={factory_name(option)} is a callable of a factory call's arguments, "
                "but there is no call here. Pass the device itself (device='cuda')."
            )
        return [_from_callable(option, load, model)]
    args, parameters = load.args, {} if load.signature is None else load.signature.parameters
    if "device" in load.kwargs:  # the call's `device` argument, read without binding the rest
        value = load.kwargs["device"]
    elif (parameter := parameters.get("device")) is None:  # a `realign` has none: no call
        return []
    elif (
        args
        and parameter.kind <= parameter.POSITIONAL_OR_KEYWORD
        and (position := list(parameters).index("device")) < len(args)
    ):
        value = args[position]
    else:  # not given: the factory's default
        value = None if parameter.default is parameter.empty else parameter.default
        return [] if value is None else [(value, "the factory's default device argument")]
    return [] if value is None else [(value, "the call's device argument")]


def _from_callable(
    option: Callable[[dict[str, Any]], object], load: Load, model: object
) -> tuple[torch.device, str]:
    """The device the `device=` callable works out from the call's arguments, by name."""
    factory = load.factory
    try:
        signature = load.signature or inspect.signature(factory)  # type: ignore[arg-type]
        bound = signature.bind(*load.args, **load.kwargs)
    except (TypeError, ValueError) as error:
        raise DeviceGuardError(
            f"{describe(model, factory)} without a device attribute, and the guard cannot "
            f"bind the call's arguments to the factory's signature ({error_text(error)}). "
            "Pass device= to device_guard, or device_attr= naming the attribute that holds "
            "the model's device."
        ) from error
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            for name, item in arguments.get(parameter.name, {}).items():
                arguments.setdefault(name, item)
    source = f"the device= callable {factory_name(option)}"
    try:
        value = option(arguments)
    except Exception as error:
        raise DeviceGuardError(
            f"{describe(model, factory)}, and {source} raised {error_text(error)} on the "
            f"call's arguments {sorted(arguments)}."
        ) from error
    if value is None:
        raise DeviceGuardError(
            f"{describe(model, factory)}, and {source} gave None, which names no device "
            "(a loader's 'pick one for me'). Make it return the device the model really uses."
        )
    return cast(torch.device, _as_asked(value, source, model, factory, True)), source


def _as_asked(
    value: object, source: str, model: object, factory: object, strict: bool
) -> torch.device | None:
    """`value` as a device; not `strict` (something else explains the model), `None` for a
    package's own word (`"auto"`), which is left to the package."""
    try:
        return as_device(value, "device")
    except ModelInputError as error:
        if strict or not _a_word(value):  # a device torch would misread is always an error
            raise in_context(error, f"{describe(model, factory)}; {source}: ") from None
    logger.debug(
        "%s; %s is %s, which is no device torch parses: left to the package.",
        describe(model, factory),
        source,
        short_repr(value),
    )
    return None


def _a_word(value: object) -> bool:
    """Whether `value` is a package's own word (`"gpu"`), not an index or device torch misreads."""
    if not isinstance(value, str):
        return not is_index(value)
    try:
        torch.device(value)  # "cuda:256", which torch takes for cuda:0
    except (RuntimeError, ValueError, TypeError):
        return True
    return False


def realign(  # noqa: PLR0913 - one keyword per documented option
    model: object,
    *,
    resolution_mode: DeviceMismatchResolutionMode | None = None,
    fallback_device: DeviceLike | None = None,
    warn: bool | None = None,
    session_attr: SessionAttr | None = None,
    device_attr: str | None = None,
    device: DeviceLike | None = None,
    require_session: bool = True,
) -> torch.device | None:
    """Align an existing model's device with its sessions again.

    Finds the sessions and the device on `model` as
    [`device_guard`][onnx_device_guard.device_guard] does, for a model built
    elsewhere or after `set_providers`. A changed device is written back to
    the model's device attribute.

    Args:
        model: The model object.
        resolution_mode: As for `device_guard`; `None` takes the policy in force.
        fallback_device: As for `device_guard`; `None` takes the policy in force.
        warn: As for `device_guard`; `None` takes the policy in force.
        session_attr: As for `device_guard`.
        device_attr: As for `device_guard`.
        device: The device to check a model without a device attribute against.
        require_session: `False` returns `None` for a model without a session.

    Returns:
        The device the model's sessions can read (now on the model); `None`
        for a model without a session when `require_session` is `False`.

    Raises:
        ModelInputError: An option, the model's session or its device
            attribute holds an unusable value.
        DeviceGuardError: The model has no session or no device to check,
            or an attribute cannot be read or written.
        EnvironmentConfigurationError: In `"fail"` mode, a session cannot
            read the model's device.

    Examples:
        A model whose session lost its GPU provider after it was built:

        >>> from types import SimpleNamespace
        >>> from onnx_device_guard import realign
        >>> class Session:
        ...     providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        ...     def get_providers(self):
        ...         return self.providers
        >>> model = SimpleNamespace(session=Session(), device="cuda")
        >>> realign(model)
        device(type='cuda')
        >>> model.session.providers = ["CPUExecutionProvider"]
        >>> realign(model, fallback_device="cpu")
        device(type='cpu')
        >>> model.device
        'cpu'
    """
    return align_model(model, Load(guard_options(locals())))  # locals(): its parameters
