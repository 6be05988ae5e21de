"""Stand-ins for onnxruntime sessions, for the GPU paths this machine cannot run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NoReturn


@dataclass
class FakeSession:
    """Anything with ``get_providers()`` and ``get_provider_options()`` is a session here.

    ``providers`` is the effective (post-fallback) list a real session reports;
    ``options`` maps a provider to its options, as onnxruntime reports them
    (all values are strings).
    """

    providers: Sequence[str]
    options: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    def get_providers(self) -> list[str]:
        return list(self.providers)

    def get_provider_options(self) -> dict[str, dict[str, object]]:
        return {name: dict(values) for name, values in self.options.items()}


def cuda_session(device_id: int | None = 0, provider: str = "CUDAExecutionProvider") -> FakeSession:
    """A session whose GPU provider loaded, on ``device_id`` (``None``: not reported)."""
    options: dict[str, dict[str, object]] = {"CPUExecutionProvider": {}}
    options[provider] = {} if device_id is None else {"device_id": str(device_id)}
    return FakeSession([provider, "CPUExecutionProvider"], options)


def cpu_session() -> FakeSession:
    """A session that runs on CPU only, as after onnxruntime dropped a CUDA provider."""
    return FakeSession(["CPUExecutionProvider"], {"CPUExecutionProvider": {}})


@dataclass
class ProvidersOnlySession:
    """A minimal duck-typed session: no ``get_provider_options()`` at all."""

    providers: Sequence[str]

    def get_providers(self) -> list[str]:
        return list(self.providers)


@dataclass
class ReturningSession:
    """``get_providers()`` and ``get_provider_options()`` return whatever they are given."""

    providers: object
    options: object = None

    def get_providers(self) -> object:
        return self.providers

    def get_provider_options(self) -> object:
        return self.options


class RaisingOptionsSession:
    """A CUDA session whose ``get_provider_options()`` raises."""

    def get_providers(self) -> list[str]:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]

    def get_provider_options(self) -> NoReturn:
        raise KeyError("CUDAExecutionProvider")
