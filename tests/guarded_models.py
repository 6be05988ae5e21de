"""Models, discoverable fake sessions and module-level guarded factories (they pickle)."""

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


@dataclass
class RunnableSession(FakeSession):
    """A fake session that discovery recognises: it also has ``run``."""

    def run(self, output_names: object, feeds: object) -> list[object]:
        return []


def runnable_cpu_session() -> RunnableSession:
    """A discoverable session that runs on CPU only."""
    return RunnableSession(["CPUExecutionProvider"], {"CPUExecutionProvider": {}})


def runnable_cuda_session(device_id: int = 0) -> RunnableSession:
    """A discoverable session whose CUDA provider runs on ``device_id``."""
    return RunnableSession(
        ["CUDAExecutionProvider", "CPUExecutionProvider"],
        {"CUDAExecutionProvider": {"device_id": str(device_id)}, "CPUExecutionProvider": {}},
    )
