"""The options, each kind one immutable value checked in one place: they pickle, compare by value
and hold no run-time state."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import torch

from ._devices import DeviceLike, as_device, is_index
from ._errors import ModelInputError
from ._messages import short_repr, typed_repr

DeviceMismatchResolutionMode = Literal["fail", "fallback"]
"""How a device the session cannot read is resolved.

`"fallback"` reports the mismatch and returns a device the session reads;
`"fail"` raises
[`EnvironmentConfigurationError`][onnx_device_guard.EnvironmentConfigurationError].

Examples:
    >>> import typing
    >>> from onnx_device_guard import DeviceMismatchResolutionMode
    >>> typing.get_args(DeviceMismatchResolutionMode)
    ('fail', 'fallback')
"""

SessionAttr = str | tuple[str, ...] | Callable[[Any], object | Iterable[object]]
"""What `session_attr` takes: a name or dotted path, a tuple of them, or a callable."""

DeviceSource = DeviceLike | Callable[[dict[str, Any]], DeviceLike]
"""What `device` takes: a device, or a callable of the call's arguments returning one."""

SessionSource = tuple[str, ...] | Callable[[Any], object] | None
"""`session_attr` once checked: attribute paths, a callable, or `None` (the defaults)."""

DeviceOption = torch.device | Callable[[dict[str, Any]], object] | None
"""`device` once checked: a fixed device, a callable, or `None`."""


@dataclass(frozen=True)
class Settings:
    """Resolution mode, fallback device and `warn`; a `None` field inherits from the layer out."""

    resolution_mode: DeviceMismatchResolutionMode | None = None
    fallback_device: torch.device | None = None
    warn: bool | None = None

    def over(self, outer: Resolved) -> Resolved:
        """These settings, with the fields left at `None` taken from `outer`."""
        if self.resolution_mode is None and self.fallback_device is None and self.warn is None:
            return outer  # nothing given: a guard's usual options, kept cheap
        return Resolved(
            outer.resolution_mode if self.resolution_mode is None else self.resolution_mode,
            outer.fallback_device if self.fallback_device is None else self.fallback_device,
            outer.warn if self.warn is None else self.warn,
        )


@dataclass(frozen=True)
class Resolved:
    """The settings a call uses: `Settings` over the policy in force, every field filled in."""

    resolution_mode: DeviceMismatchResolutionMode
    fallback_device: torch.device
    warn: bool


def settings(
    resolution_mode: object = None, fallback_device: object = None, warn: object = None
) -> Settings:
    """The three settings a user passed, checked, as `Settings`."""
    return Settings(
        None if resolution_mode is None else check_mode(resolution_mode),
        None if fallback_device is None else as_device(fallback_device, "fallback_device"),
        None if warn is None else check_flag("warn", warn),
    )


@dataclass(frozen=True)
class GuardOptions:
    """How `device_guard`, `patch` and `realign` find, check and write a model's device."""

    settings: Settings = field(default_factory=Settings)
    session_attr: SessionSource = None
    device_attr: str | None = None
    device: DeviceOption = None
    require_session: bool | None = None
    """`True` refuses a model without a session; `None` only one that can never open one."""
    follow: bool = True

    def __str__(self) -> str:
        """The options that differ from the defaults, as keyword arguments."""
        defaults = {**vars(Settings()), **vars(GuardOptions())}
        given = [
            f"{name}={value!r}"
            for name, value in {**vars(self.settings), **vars(self)}.items()
            if name != "settings" and value != defaults[name]
        ]
        return ", ".join(given) if given else "no options"


def guard_options(given: Mapping[str, Any]) -> GuardOptions:
    """The guard's options in `given` (a caller's `locals()`: its parameters by name), checked."""
    required = given.get("require_session")
    return GuardOptions(
        settings=settings(given["resolution_mode"], given["fallback_device"], given["warn"]),
        session_attr=_session_source(given["session_attr"]),
        device_attr=None if given["device_attr"] is None else _device_attr(given["device_attr"]),
        device=_device_option(given["device"]),
        require_session=None if required is None else check_flag("require_session", required),
        follow=check_flag("follow", given.get("follow", False)),
    )


_MODES: tuple[DeviceMismatchResolutionMode, ...] = get_args(DeviceMismatchResolutionMode)


def check_mode(value: object, name: str = "resolution_mode") -> DeviceMismatchResolutionMode:
    """Return `value` if it is a resolution mode, else raise `ModelInputError` naming `name`."""
    for mode in _MODES:
        if isinstance(value, str) and str.__str__(value) == mode:  # a subclass's == plays no part
            return mode
    choices = ", ".join(map(repr, _MODES))
    raise ModelInputError(f"{name} must be one of {choices}; got {short_repr(value)}.")


def check_flag(name: str, value: object) -> bool:
    """`value` as a bool if it is one (numpy's `True_` and `False_` are), else `ModelInputError`."""
    if isinstance(value, bool):
        return value
    kind, module = type(value), type(value).__module__
    if module == "numpy" and kind.__name__ in ("bool", "bool_"):
        return bool(value)
    label = kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
    raise ModelInputError(f"{name} must be True or False; got {label} {short_repr(value)}.")


def _session_source(value: object) -> SessionSource:
    if value is None:
        return None
    if callable(value) and not isinstance(value, type):
        return value
    paths = (value,) if isinstance(value, str) else value
    if isinstance(paths, tuple | list) and paths and all(map(_is_path, paths)):
        return tuple(map(str.__str__, paths))  # plain strings, whatever subclass was given
    raise ModelInputError(
        "session_attr must be an attribute name or a dotted path ('detector.infer.session'), "
        "a tuple of them, or a callable that takes the model and returns its session or "
        f"sessions; got {typed_repr(value)}."
    )


def _is_path(path: object) -> bool:
    """Whether `path` is an attribute name, or a dotted path of them."""
    return isinstance(path, str) and all(part.isidentifier() for part in path.split("."))


def _device_attr(value: object) -> str:
    if isinstance(value, str) and value.isidentifier():
        return str.__str__(value)
    raise ModelInputError(f"device_attr must be one attribute name; got {short_repr(value)}.")


def _device_option(value: object) -> DeviceOption:
    if value is None:
        return None
    if isinstance(value, torch.device | str) or is_index(value):
        return as_device(value, "device")
    if callable(value) and not isinstance(value, type):
        return value
    raise ModelInputError(
        "device must be a torch.device, a string such as 'cuda', a CUDA index, or a callable "
        "that takes the factory call's arguments as a dict and returns one; "
        f"got {typed_repr(value)}."
    )
