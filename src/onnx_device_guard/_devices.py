"""Turning what users pass as a device into a `torch.device` torch really addresses."""

from __future__ import annotations

import functools
import numbers
from typing import TypeGuard

import torch

from ._errors import ModelInputError
from ._messages import error_text, short_repr, typed_repr
from ._providers import INDICES, MAX_DEVICE_INDEX

DeviceLike = torch.device | str | int
"""A `torch.device`, a string torch parses into one (`"cuda:1"`), or a CUDA index (`1`)."""


def as_device(value: object, name: str) -> torch.device:
    """`value` (argument `name`) as a `torch.device` whose index torch keeps; an int is CUDA's."""
    if isinstance(value, torch.device):
        index: int | None = value.index  # torch's stubs omit the None
        if index is None or 0 <= index <= MAX_DEVICE_INDEX:
            return value
        raise _unaddressable(name, value, index)
    if not isinstance(value, str):
        if is_index(value):
            try:
                index = int(value)
            except Exception as error:  # an int subclass whose own conversion raises
                raise ModelInputError(
                    f"{name}={short_repr(value)} cannot be read as an index: "
                    f"{error_text(error)}. Pass a plain int or a string."
                ) from None
            if 0 <= index <= MAX_DEVICE_INDEX:  # torch reads 0 as cuda:0
                return torch.device("cuda", index)
            raise _unaddressable(name, value, short_repr(value, 20))
        raise ModelInputError(
            f"{name} must be a torch.device, a string such as 'cuda:0' or a CUDA index; "
            f"got {typed_repr(value)}."
        )
    return _parse(str.__str__(value), name)  # a subclass's own comparison and hash play no part


def is_index(value: object) -> TypeGuard[numbers.Integral]:
    """Whether `value` is an integer torch reads as a CUDA index: numpy's too, never a bool."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


@functools.lru_cache(maxsize=256)  # bounded: a program may walk through many indices
def _parse(value: str, name: str) -> torch.device:
    # torch parses the index into a byte and wraps large numbers round (or
    # overflows on larger ones still): read the digits after the colon first.
    _, colon, written = value.rpartition(":")
    if colon and written.isascii() and written.isdigit() and written not in INDICES:
        if written.startswith("0"):
            raise ModelInputError(
                f"{name}={short_repr(value)} is malformed: a device index is written "
                "without leading zeros, as in 'cuda:1'."
            )
        raise _unaddressable(name, value, short_repr(written).strip("'"))
    try:
        return torch.device(value)
    except (RuntimeError, ValueError, TypeError):
        raise ModelInputError(
            f"{name}={short_repr(value)} is not a device torch understands; "
            "pass a torch.device or a string such as 'cpu', 'cuda' or 'cuda:1'."
        ) from None


def _unaddressable(name: str, value: object, index: object) -> ModelInputError:
    return ModelInputError(
        f"{name}={short_repr(value)} has device index {index}, which torch cannot address "
        f"(it keeps indices 0 to {MAX_DEVICE_INDEX} and silently changes larger ones); "
        "pass the index of a GPU this machine has, such as 'cuda:0'."
    )


def cuda_index(device: torch.device) -> int:
    """The CUDA index torch uses for `device` (`cuda`: the current one); CUDA is not initialised."""
    index: int | None = device.index  # torch's stubs omit the None
    if index is not None:
        return index
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return torch.cuda.current_device()
    return 0


@functools.lru_cache(maxsize=256)  # torch builds `device.type` anew at each read (slow)
def is_cuda(device: torch.device) -> bool:
    """Whether `device` is a CUDA device."""
    return device.type == "cuda"
