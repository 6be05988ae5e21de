"""Stand-ins for onnxruntime sessions, for the GPU paths this machine cannot run."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import onnxruntime
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from onnx_device_guard import example_model

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
EPFail: type[Exception] = ort_state.EPFail


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


def real_session(providers: Sequence[Any] = (CPU,)) -> Any:
    """A real session of the tiny model; asked for CUDA, this CPU build silently runs the CPU."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Specified provider", UserWarning)
        return onnxruntime.InferenceSession(example_model(), providers=list(providers))


class GPUSession(onnxruntime.InferenceSession):  # type: ignore[misc]
    """A real CPU session of the tiny model that reports the providers last asked of it.

    `get_providers()` and `get_provider_options()` answer what it was made
    with, or last given through the base class's `set_providers` (which
    onnxruntime's own fallback in `run()` calls), as a GPU machine's session
    would; it runs on the CPU throughout. `fail_next_run` makes its next run
    raise onnxruntime's real `EPFail`, so `run()` takes its fallback path.
    """

    def __init__(
        self,
        providers: Sequence[str] = (CUDA, CPU),
        device_id: int = 0,
        *,
        fail_next_run: bool = False,
    ) -> None:
        super().__init__(example_model(), providers=[CPU])
        self._report(providers, [{"device_id": device_id} if p == CUDA else {} for p in providers])
        if fail_next_run:
            fail_next_run_of(self)

    def _reset_session(self, providers: Any, provider_options: Any) -> None:
        super()._reset_session([CPU], None)
        self._report(providers or [CPU], provider_options)

    def _report(
        self, providers: Sequence[Any], options: Sequence[Mapping[str, Any]] | None
    ) -> None:
        names, reported = [], {}
        for number, provider in enumerate(providers):
            name, given = provider if isinstance(provider, tuple) else (provider, {})
            given = given or (options[number] if options else {})
            names.append(name)
            reported[name] = {key: str(value) for key, value in given.items()}
        self._providers, self._provider_options = names, reported


class GPUBuildSession(onnxruntime.InferenceSession):  # type: ignore[misc]
    """A real CPU session of the tiny model made as on a GPU build: asked for providers, it
    reports those of `LOADS` (and the CPU) as loaded, at birth and after `set_providers`.

    Its birth record is what a GPU build's would be: the GPU it asked for, and got.
    """

    LOADS = frozenset({CUDA})
    _providers: list[str]
    _provider_options: dict[str, Any]

    def __init__(self, providers: Sequence[Any] = (CUDA, CPU)) -> None:
        super().__init__(example_model(), providers=list(providers))

    def _create_inference_session(
        self, providers: Any, provider_options: Any, disabled_optimizers: Any = None
    ) -> None:
        super()._create_inference_session([CPU], None, disabled_optimizers)
        GPUSession._report(self, providers, provider_options)
        reported = self._provider_options
        kept = [name for name in reported if name in self.LOADS or name == CPU]
        self._providers, self._provider_options = kept, {name: reported[name] for name in kept}


def fail_next_run_of(session: Any) -> None:
    """Make a real session's next `run()` or `run_with_ort_values()` raise a real `EPFail`.

    What happens then is onnxruntime's own code: `run()` catches it, prints,
    calls `self.set_providers(self._fallback_providers)` and retries once.
    """

    class FailsOnce:
        def __init__(self, real: Any) -> None:
            self.real, self.failed = real, False

        def fail_once(self) -> None:
            if not self.failed:
                self.failed = True
                raise EPFail("CUDA failure 700: an illegal memory access was encountered")

        def run(self, *args: Any) -> Any:
            self.fail_once()
            return self.real.run(*args)

        def run_with_ort_values(self, *args: Any) -> Any:
            self.fail_once()
            return self.real.run_with_ort_values(*args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

    session._sess = FailsOnce(session._sess)


def gpu_session_failing_once(session: Any) -> type[Exception]:
    """Make a real session report CUDA on device 0 and fail its next run with a real `EPFail`."""
    fail_next_run_of(session)
    session._providers = [CUDA, CPU]
    session._provider_options = {CUDA: {"device_id": "0"}, CPU: {}}
    return EPFail
