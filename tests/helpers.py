"""Helpers shared by the test files: scope checks, warning filters and what a session follows."""

from __future__ import annotations

import torch

from onnx_device_guard._births import _on_set_providers
from onnx_device_guard._follow import followers_of
from onnx_device_guard._policy import _innermost, current_policy


def no_scope_left() -> bool:
    """Whether this thread or task is outside every scope, on the built-in defaults."""
    policy = current_policy()
    return _innermost() is None and (
        policy.resolution_mode,
        policy.fallback_device,
        policy.warn,
    ) == ("fallback", torch.device("cpu"), True)


def is_followed(session: object) -> bool:
    """Whether a change of `session`'s providers would call back a model now."""
    followers = followers_of(session)
    if followers is None or not _hooked(type(session)):
        return False
    return any(
        watched.model() is not None and not (watched.origin and watched.origin.cancelled)
        for watched in followers.watches.copy().values()
    )


def _hooked(cls: type) -> bool:
    """Whether `cls.set_providers` reaches the hook (under other wrappers, maybe)."""
    method = next(
        (vars(k)["set_providers"] for k in cls.__mro__ if "set_providers" in vars(k)), None
    )
    for _ in range(16):
        if method is None or getattr(method, "_self_wrapper", None) is _on_set_providers:
            return method is not None
        method = getattr(method, "__wrapped__", None)
    return False
