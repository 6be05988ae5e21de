"""Guarded factories at module level, for the process-boundary tests.

Workers started with ``spawn`` import this module by name to unpickle the
factories sent to them, so it must stay importable on its own: the test
directory is on ``sys.path`` in the test process, and ``multiprocessing``
passes that ``sys.path`` on to the workers it spawns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from onnx_device_guard import device_guard, device_policy
from onnx_device_guard._policy import current_policy

from .sessions import FakeSession, cpu_session, cuda_session


def session_for(kind: str) -> FakeSession:
    """``"cpu"``: CUDA was dropped; ``"gpu:N"``: the CUDA provider runs on device N."""
    if kind == "cpu":
        return cpu_session()
    return cuda_session(int(kind.removeprefix("gpu:")))


@dataclass
class Model:
    """A model that pickles: a picklable stand-in session, a device and where it was made."""

    session: FakeSession
    device: torch.device | str
    made_in: int = 0

    @classmethod
    @device_guard
    def from_pretrained(cls, session_kind: str, device: torch.device | str) -> Model:
        """Guarded inside ``@classmethod``."""
        return cls(session_for(session_kind), device, os.getpid())

    @device_guard
    @classmethod
    def from_pretrained_outer(cls, session_kind: str, device: torch.device | str) -> Model:
        """Guarded outside ``@classmethod``."""
        return cls(session_for(session_kind), device, os.getpid())

    @staticmethod
    @device_guard
    def build(session_kind: str, device: torch.device | str) -> Model:
        """A guarded static method."""
        return Model(session_for(session_kind), device, os.getpid())


@device_guard
def load_model(session_kind: str, device: torch.device | str) -> Model:
    """A guarded module-level factory; the policy in force where it runs decides."""
    return Model(session_for(session_kind), device, os.getpid())


@device_guard(resolution_mode="fail")
def load_model_strictly(session_kind: str, device: torch.device | str) -> Model:
    """A guarded factory that raises instead of falling back."""
    return Model(session_for(session_kind), device, os.getpid())


@device_guard
@device_policy(fallback_device="meta", warn=False)
def load_model_to_meta(session_kind: str, device: torch.device | str) -> Model:
    """Guard outside, scope inside: the scope travels with the function."""
    return Model(session_for(session_kind), device, os.getpid())


@device_policy(fallback_device="meta", warn=False)
@device_guard
def load_model_to_meta_outer(session_kind: str, device: torch.device | str) -> Model:
    """Scope outside, guard inside."""
    return Model(session_for(session_kind), device, os.getpid())


def policy_in_force() -> tuple[str, str, bool]:
    """The policy a worker runs with, as plain values."""
    policy = current_policy()
    return str(policy.resolution_mode), str(policy.fallback_device), bool(policy.warn)


def load_model_impl(session_kind: str, device: torch.device | str) -> Model:
    """The plain factory that ``load_model_alias`` guards under another name."""
    return Model(session_for(session_kind), device, os.getpid())


load_model_alias = device_guard(load_model_impl)
"""Guarded under a new name while the plain function keeps its own: pickles as the alias."""


def load_model_unbound_impl(session_kind: str, device: torch.device | str) -> Model:
    """A plain factory whose guarded versions are bound to no module-level name."""
    return Model(session_for(session_kind), device, os.getpid())


UNBOUND_GUARDS = {
    "held by a dict": device_guard(load_model_unbound_impl),
    "lambda": device_guard(lambda kind, device: Model(session_for(kind), device, os.getpid())),
}
"""Guarded objects no name in this module holds: pickle cannot find them again by name."""


def call_cloudpickled(blob: bytes, *args: object) -> object:
    """Run in a worker: load a cloudpickled callable and call it."""
    import cloudpickle

    return cloudpickle.loads(blob)(*args)


def device_of_cloudpickled(blob: bytes, *args: object) -> str:
    """Run in a worker: call a cloudpickled factory and return its model's device only.

    The model's class may exist by value only (defined in another ``__main__``),
    so the model itself could not travel back with ``pickle``.
    """
    import cloudpickle

    return str(cloudpickle.loads(blob)(*args).device)
