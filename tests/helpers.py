"""Helpers shared by the test files: scope checks and warning filters."""

from __future__ import annotations

import torch

from onnx_device_guard._policy import _innermost, current_policy


def no_scope_left() -> bool:
    """Whether this thread or task is outside every scope, on the built-in defaults."""
    policy = current_policy()
    return _innermost() is None and (
        policy.resolution_mode,
        policy.fallback_device,
        policy.warn,
    ) == ("fallback", torch.device("cpu"), True)
