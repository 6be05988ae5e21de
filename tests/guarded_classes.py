"""Guarded classes at module level, so that they and their instances pickle by reference."""

from __future__ import annotations

import torch

from onnx_device_guard import device_guard

from .sessions import FakeSession, cpu_session


@device_guard
class GuardedModel:
    """A model whose constructor opens a CPU-only session and asks for cuda:0."""

    def __init__(self, device: str = "cuda:0") -> None:
        self.session: FakeSession = cpu_session()
        self.device: torch.device | str = torch.device(device)


class LateSessionModel(GuardedModel):
    """A subclass that calls super().__init__() and then sets its own session."""

    def __init__(self, device: str = "cuda:0") -> None:
        super().__init__(device)
        self.session = cpu_session()
        self.extra = "set after super().__init__()"
