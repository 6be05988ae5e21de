"""Aligning a model object: find its sessions and device, align, write back, report.

One function, `align_model`, does the whole job for `device_guard`, for
`realign` and for anything else that aligns a model it did not build.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from ._alignment import Mismatch, _arguments, find_mismatch, plan_alignment, report_fallback
from ._call_device import DeviceOption, device_option, requested_device
from ._devices import DeviceLike, as_device
from ._discovery import (
    DEFAULT_DEVICE_ATTRS,
    MISSING,
    SessionSource,
    context,
    describe,
    error_text,
    factory_name,
    find_device_attribute,
    find_sessions,
    session_source,
)
from ._errors import DeviceGuardError, EnvironmentConfigurationError, ModelInputError
from ._following import Follower
from ._messages import short_repr
from ._policy import DeviceMismatchResolutionMode, check_mode, current_policy, device_policy

logger = logging.getLogger("onnx_device_guard")

SessionAttr = str | tuple[str, ...] | Callable[[Any], object | Iterable[object]]
"""What `session_attr` takes: a name or dotted path, a tuple of them, or a callable."""

DeviceSource = DeviceLike | Callable[[dict[str, Any]], DeviceLike]
"""What `device` takes: a device, or a callable of the call's arguments returning one."""

_Options = TypeVar("_Options", bound="AlignOptions")

_SEARCHED_SHOWN = 12
"""How many of the searched attribute paths an error lists."""


@dataclass(frozen=True)
class AlignOptions:
    """How to align a model: the options of `device_guard` and `realign`, checked once."""

    resolution_mode: DeviceMismatchResolutionMode | None
    fallback_device: torch.device | None
    session_source: SessionSource
    device_attr: str | None
    device: DeviceOption = None
    require_session: bool = True
    follow: bool = True

    @classmethod
    def build(
        cls: type[_Options],
        resolution_mode: object = None,
        fallback_device: object = None,
        session_attr: object = None,
        device_attr: object = None,
        *,
        device: object = None,
        require_session: object = True,
        follow: object = True,
    ) -> _Options:
        """Check every option, raising `ModelInputError` for one that cannot be used."""
        if device_attr is not None and device is not None:
            raise ModelInputError(
                f"Pass device_attr={device_attr!r} or device={short_repr(device)}, not both: "
                "device_attr names the model's own device attribute, which the guard reads "
                "and writes; device= is for models that have none."
            )
        if not isinstance(require_session, bool):
            raise ModelInputError(
                "require_session must be True or False; "
                f"got {type(require_session).__name__} {short_repr(require_session)}."
            )
        return cls(
            resolution_mode=None if resolution_mode is None else check_mode(resolution_mode),
            fallback_device=(
                None if fallback_device is None else as_device(fallback_device, "fallback_device")
            ),
            session_source=session_source(session_attr),
            device_attr=None if device_attr is None else _device_attr(device_attr),
            device=device_option(device),
            require_session=require_session,
            follow=_follow(follow),
        )


def _follow(value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise ModelInputError(
        f"follow must be True or False; got {type(value).__name__} {short_repr(value)}."
    )


def follow_model(
    model: object,
    options: AlignOptions,
    follower: Follower,
    factory: object | None,
    sessions: list[tuple[str, object]],
    requested: torch.device | None,
) -> None:
    """Align `model` again whenever one of `sessions` changes providers.

    Called once the model has been aligned at load. A change may come in
    another thread under other scopes, so the options are fixed now: the
    mode, fallback device and warnings in force at load, and, for a model
    without a device attribute, the device the call asked for (`requested`).
    """
    if not follower.enabled:
        return
    policy = current_policy()  # only read here; the options are built on a change

    def on_change(
        model: object,
        session_name: str,
        old: tuple[str, ...] | None,
        new: tuple[str, ...] | None,
    ) -> None:
        fixed = AlignOptions(
            resolution_mode=options.resolution_mode or policy.resolution_mode,
            fallback_device=options.fallback_device or policy.fallback_device,
            session_source=options.session_source,
            device_attr=options.device_attr,
            device=options.device if requested is None else requested,
            require_session=options.require_session,
        )
        with device_policy(warn=policy.warn):
            align_model(model, fixed, factory)

    follower.watch(model, sessions, on_change)


def _device_attr(value: object) -> str:
    if isinstance(value, str) and value.isidentifier():
        return value
    raise ModelInputError(f"device_attr must be one attribute name; got {short_repr(value)}.")


def align_model(
    model: object,
    options: AlignOptions,
    factory: object | None = None,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    follower: Follower | None = None,
) -> torch.device | None:
    """Align `model`'s device with its sessions; return the device they read.

    The sessions come from `options.session_source` (by default `_session`,
    `session`, then discovery). The device comes from the model's device
    attribute, which gets the aligned device written back; a model without
    one is only checked, with the device from `options.device` or from the
    `device` argument of the call of `factory` with `args` and `kwargs`.
    A fallback is logged only after the write-back succeeded.

    Returns `None`, and leaves the model as it is, when it holds no session
    and `options.require_session` is off.
    """
    if options.session_source is None and options.device_attr is None:
        # The usual shape, a session and a device under the default names, kept
        # as fast as a bare check when they agree. On a mismatch the full path
        # below goes on from what was read here, so the session is asked once;
        # anything unusual takes the full path from the start, which reads the
        # attributes again and reports properly.
        known = None
        try:
            session_name = "_session"
            session = getattr(model, session_name, MISSING)
            if session is MISSING:
                session_name = "session"
                session = getattr(model, session_name, MISSING)
            device_name = "_device"
            current = getattr(model, device_name, MISSING)
            if current is MISSING:
                device_name = "device"
                current = getattr(model, device_name, MISSING)
            if session is not MISSING and current is not MISSING:
                requested = _arguments(options.resolution_mode, current, options.fallback_device)[2]
                mismatch = find_mismatch(session, requested)
                if mismatch is None:
                    if follower is not None:
                        follow_model(
                            model, options, follower, factory, [(session_name, session)], None
                        )
                    return requested
                known = ([(session_name, session)], (device_name, current), mismatch)
        except Exception:  # the full path reads again and raises the right error
            pass
        if known is not None:  # the full path's last step, from what was read here
            return _finish(model, options, factory, args, kwargs, follower, *known)
    return _align_model(model, options, factory, args, kwargs, follower)


def _align_model(
    model: object,
    options: AlignOptions,
    factory: object | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    follower: Follower | None,
) -> torch.device | None:
    """The full path of `align_model`: find the sessions and the device, then finish."""
    sessions, searched = find_sessions(model, options.session_source, factory)
    if not options.require_session:
        sessions = [(path, session) for path, session in sessions if session is not None]
    if not sessions:
        if options.require_session:
            raise _no_session(model, factory, options.session_source, searched)
        logger.debug(
            "%s, which holds no onnxruntime session; left as it is (require_session=False).",
            describe(model, factory),
        )
        return None
    attribute = find_device_attribute(model, options.device_attr, factory)
    return _finish(model, options, factory, args, kwargs, follower, sessions, attribute, None)


def _finish(
    model: object,
    options: AlignOptions,
    factory: object | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    follower: Follower | None,
    sessions: list[tuple[str, object]],
    attribute: tuple[str, Any] | None,
    mismatch: Mismatch | None,
) -> torch.device | None:
    """Align with `sessions` the device from `attribute` (or the call), write back, log.

    `mismatch` is the first session's, when a quick check already found it.
    With a `follower`, the model then follows its sessions' provider changes.
    """
    if attribute is not None:
        device_name: str | None = attribute[0]
        current: Any = attribute[1]
        source = f"its device attribute {device_name!r}"
    else:
        device_name = None
        found = requested_device(options.device, factory, args, kwargs, model)
        if found is None:
            raise _no_device(model, factory)
        current, source = found
    names = [path for path, _ in sessions]
    try:
        policy, mode, requested, fallback = _arguments(
            options.resolution_mode, current, options.fallback_device
        )
        aligned, report = plan_alignment(
            [session for _, session in sessions], names, requested, mode, fallback, mismatch
        )
    except ModelInputError as error:
        raise ModelInputError(
            f"{describe(model, factory)}, with session attribute(s) "
            f"{', '.join(repr(name) for name in names)} and {source}: {error.message}",
            help_url=error.help_url,
        ) from error
    except EnvironmentConfigurationError as error:
        single = "" if len(names) > 1 else f"; session {names[0]!r}"
        raise EnvironmentConfigurationError(
            f"{error.message} ({context(model, factory)}{single}; device from {source})",
            help_url=error.help_url,
        ) from None
    if follower is not None:
        follow_model(
            model, options, follower, factory, sessions, requested if device_name is None else None
        )
    if report is None:
        return aligned
    if device_name is not None and aligned != requested:
        value: object = str(aligned) if isinstance(current, str) else aligned
        try:
            setattr(model, device_name, value)
        except Exception as error:
            raise DeviceGuardError(
                f"{describe(model, factory)} whose device attribute {device_name!r} cannot "
                f"be set to {short_repr(value)} ({error_text(error)}). Make it writable, or pass "
                "device_attr= naming an attribute that is."
            ) from error
    report_fallback(
        report,
        policy.warn,
        applied=device_name is not None,
        context=f"{context(model, factory)}; device from {source}",
        factory=None if factory is None else factory_name(factory),
        device_attr=device_name,
    )
    return aligned


def _no_session(
    model: object, factory: object | None, source: SessionSource, searched: tuple[str, ...]
) -> DeviceGuardError:
    if isinstance(source, tuple):
        detail = (
            f" without the session attribute(s) {', '.join(repr(path) for path in source)} "
            f"named in session_attr={source!r}. Return a model that has them, fix "
            "session_attr, or pass require_session=False to let results without a session "
            "through."
        )
    elif source is not None:
        detail = (
            f", and session_attr={factory_name(source)} found no session on it. Make the "
            "callable return the model's session(s), or pass require_session=False to let "
            "results without a session through."
        )
    else:
        shown = ", ".join(repr(path) for path in searched[:_SEARCHED_SHOWN])
        more = len(searched) - _SEARCHED_SHOWN
        detail = (
            f", which has none of the session attributes tried, and no object with "
            f"get_providers() and run() among its instance attributes (searched {shown}"
            f"{f' and {more} more' if more > 0 else ''}). Return the model object, pass "
            "session_attr= naming the attribute (or dotted path) that holds its session, or "
            "require_session=False to let results without a session through."
        )
    return _unusable(model, factory, detail)


def _no_device(model: object, factory: object | None) -> DeviceGuardError:
    tried = ", ".join(repr(name) for name in DEFAULT_DEVICE_ATTRS)
    where = "" if factory is None else ", and the factory has no device parameter"
    return _unusable(
        model,
        factory,
        f", which has none of the device attributes tried ({tried}){where}, so the guard "
        "cannot tell which device the model uses. Pass device= (a device such as 'cuda', or "
        "a callable that works it out from the call's arguments), or device_attr= naming "
        "the attribute that holds the model's device.",
    )


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


def realign(
    model: object,
    *,
    resolution_mode: DeviceMismatchResolutionMode | None = None,
    fallback_device: DeviceLike | None = None,
    session_attr: SessionAttr | None = None,
    device_attr: str | None = None,
    device: DeviceLike | None = None,
    require_session: bool = True,
) -> torch.device | None:
    """Align an existing model's device with its sessions again.

    Finds the sessions and the device on `model` the way
    [`device_guard`][onnx_device_guard.device_guard] does and aligns them:
    for code that changes a session's providers itself
    (`session.set_providers(...)`) or receives a model built elsewhere. A
    changed device is written back to the model's device attribute, and a
    fallback is logged after that; a model without a device attribute is
    checked against `device=` and left as it is.

    Args:
        model: The model object.
        resolution_mode: `"fail"` or `"fallback"`; `None` takes the policy
            in force.
        fallback_device: Where to go when a session runs no GPU-capable
            provider; `None` takes the policy in force.
        session_attr: As for `device_guard`: an attribute name or dotted
            path, a tuple of them, or a callable returning the session(s).
        device_attr: As for `device_guard`: the attribute that holds the
            device.
        device: The device to check a model without a device attribute
            against (there is no factory call to read one from).
        require_session: `False` returns `None` for a model that holds no
            session instead of raising.

    Returns:
        The device the model's sessions can read (now on the model, if it
        has a device attribute); `None` for a model without a session when
        `require_session` is `False`.

    Raises:
        ModelInputError: An option cannot be used, or the model's session or
            device attribute holds an unusable value.
        DeviceGuardError: The model has no session or no device to check,
            an attribute cannot be read, or the device attribute cannot be
            written.
        EnvironmentConfigurationError: In `"fail"` mode, a session cannot
            read the model's device.

    Examples:
        A model whose session lost its GPU provider after it was built:

        >>> from onnx_device_guard import realign
        >>> class Session:
        ...     def __init__(self):
        ...         self.providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        ...     def get_providers(self):
        ...         return self.providers
        ...     def set_providers(self, providers):
        ...         self.providers = providers
        ...     def run(self, output_names, feeds):
        ...         return []
        >>> class Model:
        ...     def __init__(self):
        ...         self.session, self.device = Session(), "cuda"
        >>> model = Model()
        >>> realign(model)
        device(type='cuda')
        >>> model.session.set_providers(["CPUExecutionProvider"])
        >>> realign(model, fallback_device="cpu")
        device(type='cpu')
        >>> model.device
        'cpu'
    """
    options = AlignOptions.build(
        resolution_mode,
        fallback_device,
        session_attr,
        device_attr,
        device=device,
        require_session=require_session,
    )
    return align_model(model, options)
