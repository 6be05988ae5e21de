"""Models and guarded factories at module level, so that they pickle by reference."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from onnx_device_guard import device_guard

from .sessions import FakeSession, cpu_session


@dataclass
class Model:
    """The usual shape: a session and a device, both public."""

    session: FakeSession
    device: torch.device | str

    @classmethod
    @device_guard
    def from_pretrained(cls, device: str = "cuda:0") -> Model:
        """Load a model (classmethod outside the guard)."""
        return cls(cpu_session(), torch.device(device))

    @device_guard
    @classmethod
    def from_config(cls, device: str = "cuda:0") -> Model:
        """Load a model (guard outside the classmethod)."""
        return cls(cpu_session(), torch.device(device))


class SubModel(Model):
    """A subclass: its factories must return SubModel instances."""


@device_guard
def load_model(device: str = "cuda:0") -> Model:
    """Load a model (module-level function)."""
    return Model(cpu_session(), torch.device(device))
