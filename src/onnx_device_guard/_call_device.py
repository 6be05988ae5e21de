"""The devices a factory call asks for: its own `device` argument, and the `device=` option.

Many loaders take the device as an argument (`load(path, device="cuda")`) or
a flag (`use_cuda=True`), and some keep no device on the model they return,
or one that already says `cpu`. So the guard checks what the call asked for
too: the call's `device` argument, bound through the factory's signature, and
the `device=` option, a fixed device or a function of the call's arguments.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from ._devices import as_device
from ._discovery import describe, factory_name
from ._errors import DeviceGuardError, ModelInputError
from ._messages import MISSING, error_text, logger, short_repr
from ._options import DeviceOption


@dataclass(frozen=True)
class Call:
    """A call of a factory: what returned the model, and with which arguments."""

    factory: object
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    signature: inspect.Signature | None = None
    """The factory's signature when the guard read it once, at decoration."""

    def device_argument(self) -> object:
        """The call's `device` argument, read off the signature without binding the rest.

        `None` when the call has none; `MISSING` when only binding can tell
        (no signature read at decoration).
        """
        if self.signature is None:
            return MISSING
        if "device" in self.kwargs:
            return self.kwargs["device"]
        parameter = self.signature.parameters.get("device")
        if parameter is None:
            return None
        position = list(self.signature.parameters).index("device")
        if parameter.kind <= parameter.POSITIONAL_OR_KEYWORD and position < len(self.args):
            return self.args[position]
        return None if parameter.default is parameter.empty else parameter.default


def call_arguments(call: Call, model: object) -> dict[str, Any]:
    """The call's arguments by parameter name, defaults included.

    Bound through the factory's signature. Keyword arguments collected by a
    `**kwargs` parameter are added under their own names too, where no
    parameter has that name: `use_cuda` passed through `**kwargs` reads as
    `arguments["use_cuda"]`.
    """
    factory = call.factory
    try:
        signature = call.signature or inspect.signature(factory)  # type: ignore[arg-type]
        bound = signature.bind(*call.args, **call.kwargs)
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
            for name, value in arguments.get(parameter.name, {}).items():
                arguments.setdefault(name, value)
    return arguments


Asked = list[tuple[torch.device, str]]
"""Devices asked for, each with where it came from, in the order they are checked."""


def asked_devices(option: DeviceOption, call: Call | None, model: object, *, strict: bool) -> Asked:
    """The devices the call asks for: its `device` argument, then the `device=` option.

    A `device` argument of `None` means "the package chooses" and is skipped.
    `strict` is for a model without a device attribute, which the call alone
    describes: a value that is no device is then an error; else such a value
    (a package's own `"auto"` or `0`) is left to the package, with a DEBUG record.
    """
    fixed: Asked = [(option, "the device= option")] if isinstance(option, torch.device) else []
    if call is None:
        if callable(option):
            raise ModelInputError(
                f"device={factory_name(option)} is a callable of a factory call's arguments, "
                "but there is no call here. Pass the device itself (device='cuda')."
            )
        return fixed
    value = call.device_argument()
    arguments: dict[str, Any] = {}
    if value is MISSING or callable(option):  # the whole call is needed
        try:
            arguments = call_arguments(call, model)
        except DeviceGuardError:
            if strict or callable(option):
                raise
        value = arguments.get("device")  # the model's attribute says what it uses
    source = "the call's device argument"
    device = None if value is None else _as_asked(value, source, model, call.factory, strict)
    asked: Asked = [] if device is None else [(device, source)]
    if callable(option):
        return [*asked, _from_callable(option, arguments, model, call.factory)]
    return asked + fixed


def _from_callable(
    option: Callable[[dict[str, Any]], object],
    arguments: dict[str, Any],
    model: object,
    factory: object,
) -> tuple[torch.device, str]:
    """The device the `device=` callable works out from the call's arguments."""
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
    """`value` as a device, or (when not `strict`) `None` for a value that is no device."""
    try:
        return as_device(value, "device")
    except ModelInputError:
        if strict and isinstance(value, torch.device | str):
            raise
        if strict:
            raise ModelInputError(
                f"{describe(model, factory)}, and {source} gave {type(value).__name__} "
                f"{short_repr(value)}, not a torch.device or a string such as 'cuda:0'."
            ) from None
    logger.debug(
        "%s; %s is %s, which is no device torch parses: left to the package.",
        describe(model, factory),
        source,
        short_repr(value),
    )
    return None
