"""Turning what users pass as a device into a `torch.device`."""

from __future__ import annotations

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
