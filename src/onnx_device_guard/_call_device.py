"""The device a factory call asks for, for a model that keeps no device attribute.

Many loaders take the device as an argument (`load(path, device="cuda")`),
or as a flag (`use_cuda=True`), and keep no device on the object they
return. The guard then reads the call: the `device=` option, a fixed device
or a function of the call's arguments, or else the call's own `device`
argument, bound through the factory's signature.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from ._devices import DeviceLike
from ._discovery import describe, factory_name
from ._errors import DeviceGuardError, ModelInputError
from ._messages import error_text, short_repr
from ._options import DeviceOption


def call_arguments(
    factory: object, args: tuple[Any, ...], kwargs: Mapping[str, Any], model: object
) -> dict[str, Any]:
    """The call's arguments by parameter name, defaults included.

    Bound through `inspect.signature(factory)` (for a bound method, without
    `self`/`cls`; for a class, its constructor's). Keyword arguments
    collected by a `**kwargs` parameter are added under their own names
    too, where no parameter has that name, so `use_cuda` passed through
    `**kwargs` reads as `arguments["use_cuda"]`.
    """
    try:
        signature = inspect.signature(factory)  # type: ignore[arg-type]
        bound = signature.bind(*args, **kwargs)
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


def requested_device(
    option: DeviceOption,
    factory: object | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    model: object,
) -> tuple[DeviceLike, str] | None:
    """The device the call asks for, and where it came from; `None` if it names none.

    The `device=` option wins over the call's own `device` argument. The
    value is returned as it is (a `torch.device` or a string); the core
    checks it.
    """
    if isinstance(option, torch.device):
        return option, "the device= option"
    if factory is None:
        if option is not None:
            raise ModelInputError(
                f"device={factory_name(option)} is a callable of a factory call's arguments, "
                "but there is no call here. Pass the device itself (device='cuda')."
            )
        return None
    arguments = call_arguments(factory, args, {} if kwargs is None else kwargs, model)
    if option is not None:
        try:
            value = option(arguments)
        except Exception as error:
            raise DeviceGuardError(
                f"{describe(model, factory)} without a device attribute, and the device= "
                f"callable {factory_name(option)} raised {error_text(error)} on the call's "
                f"arguments {sorted(arguments)}."
            ) from error
        source = f"the device= callable {factory_name(option)}"
    elif "device" in arguments:
        value, source = arguments["device"], "the call's device argument"
    else:
        return None
    if value is None:
        raise DeviceGuardError(
            f"{describe(model, factory)} without a device attribute, and {source} gave None, "
            "which names no device (a loader's 'pick one for me'). Pass device= to "
            "device_guard with the device the model really uses, or a callable that works "
            "it out from the call's arguments."
        )
    if not isinstance(value, torch.device | str):
        raise ModelInputError(
            f"{describe(model, factory)} without a device attribute, and {source} gave "
            f"{type(value).__name__} {short_repr(value)}, not a torch.device or a string such "
            "as 'cuda:0'."
        )
    return value, source
