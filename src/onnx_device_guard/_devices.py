"""Turning what users pass as a device into a `torch.device`."""

from __future__ import annotations

import functools

import torch

from ._errors import ModelInputError

DeviceLike = torch.device | str
"""A `torch.device`, or a string torch parses into one (`"cuda:1"`)."""


def as_device(value: object, name: str) -> torch.device:
    """Return `value` as a `torch.device`, or raise `ModelInputError`.

    `name` is the argument's name, used in the message.
    """
    if isinstance(value, torch.device):
        return value
    if isinstance(value, str):
        try:
            return torch.device(value)
        except (RuntimeError, ValueError, TypeError):
            raise ModelInputError(
                f"{name}={value!r} is not a device torch understands; "
                "pass a torch.device or a string such as 'cpu', 'cuda' or 'cuda:1'."
            ) from None
    raise ModelInputError(
        f"{name} must be a torch.device or a string such as 'cuda:0'; "
        f"got {type(value).__name__} {value!r}."
    )


@functools.cache
def is_cuda(device: torch.device) -> bool:
    """Return whether `device` is a CUDA device.

    Reading `device.type` builds a new string each time (about a quarter of
    a microsecond), so the answer is kept per device; there are only as many
    as device types times the indices torch can address.
    """
    return device.type == "cuda"


def cuda_index(device: torch.device) -> int:
    """Return the CUDA device index that torch uses for `device`.

    `torch.device("cuda")` means torch's current CUDA device. Before CUDA is
    initialised (and on machines without CUDA) that is device 0; this function
    never initialises CUDA itself.
    """
    index: int | None = device.index  # torch's stubs omit the None
    if index is not None:
        return index
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return torch.cuda.current_device()
    return 0


def cuda_device(index: int) -> torch.device | None:
    """Return `cuda:<index>`, or `None` when torch cannot address that index.

    torch keeps a device index in a small integer: `torch.device("cuda", 128)`
    wraps round to `cuda:-128`, and larger values overflow.
    """
    try:
        device = torch.device("cuda", index)
    except (RuntimeError, ValueError, OverflowError):
        return None
    return device if device.index == index else None
