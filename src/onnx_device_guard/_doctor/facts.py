"""The records the doctor fills in: the machine, each model's session and its inference."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from .._alignment import Mismatch

InferenceStatus = Literal["ok", "failed", "inconclusive", "skipped"]
"""How the test inference went (docs/doctor.md says what each means)."""

NO_SESSION = "no session could be created without the GPU provider"
"""How a failed inference's detail starts when onnxruntime could not create the session."""

Verdict = Literal["ok", "fallback", "inconclusive", "failed"]
"""The doctor's conclusion for one model, as the report's verdict line starts."""


@dataclass(frozen=True)
class InstalledDistribution:
    """An installed distribution whose name starts with `onnxruntime` (or `ort-nightly`)."""

    name: str
    version: str
    provides_module: bool = True
    """It installs the `onnxruntime` module itself, not an add-on (`onnxruntime-genai`)."""

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


@dataclass(frozen=True)
class InferenceCheck:
    """The outcome of the doctor's test inference, and what it ran or why it failed."""

    status: InferenceStatus
    detail: str
    culprits: tuple[str, ...] = ()
    """The model inputs the failure points at (for an inconclusive run)."""
    suggestion: tuple[str, ...] = ()
    """Command-line options that should make an inconclusive run conclusive."""
    attempts: int = 0
    """How many input sets were tried."""
    hints: tuple[str, ...] = ()
    """Options with placeholders that would give the culprits inputs that fit."""


@dataclass(frozen=True)
class Environment:
    """What the doctor learns once per run about Python, torch and onnxruntime."""

    onnx_device_guard_version: str
    python: str
    """Python's version and the platform, as one short string."""
    torch_version: str
    torch_gpu_build: str | None
    """`"CUDA 12.4"` or `"ROCm 6.2"` for a GPU build of torch, `None` for a CPU-only one."""
    torch_cuda_device_count: int
    onnxruntime_version: str
    installed_distributions: tuple[InstalledDistribution, ...]
    available_providers: tuple[str, ...]
    torch_messages: tuple[str, ...] = ()
    """What torch warned while looking for CUDA devices."""
    import_messages: tuple[str, ...] = ()
    """What onnxruntime said while it was imported."""
    gpus: tuple[str, ...] = ()
    cuda_visible_devices: str | None = None
    torch_cudnn: str | None = None
    onnxruntime_build: str | None = None
    """The GPU facts (`machine.gpu_facts`)."""
    cuda_libraries_loaded: tuple[str, ...] = ()
    """The CUDA libraries loaded once the models were checked (`machine.loaded_cuda_libraries`)."""

    @property
    def module_owners(self) -> tuple[InstalledDistribution, ...]:
        """The installed distributions that provide the `onnxruntime` module."""
        return tuple(dist for dist in self.installed_distributions if dist.provides_module)


@dataclass(frozen=True)
class Facts:
    """Everything the doctor learned about the machine, one model's session and the device."""

    model: str
    """The model file, or a description of the packaged tiny model."""
    environment: Environment
    """The machine's facts, the same for every model of a run."""
    requested_providers: tuple[str, ...]
    session_providers: tuple[str, ...]
    """`session.get_providers()`: the providers the session really runs."""
    requested_device: torch.device
    aligned_device: torch.device
    """What `align_device_with_onnx_session` chose."""
    inference: InferenceCheck
    mismatch: Mismatch | None = None
    """The core's explanation, when the aligned device differs from the requested one."""
    requested_provider_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    session_provider_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    onnxruntime_messages: tuple[str, ...] = ()
    """What onnxruntime said about providers, devices and the failure, each once."""
    omitted_messages: int = 0
    """How many other things onnxruntime said (graph optimiser notes and the like)."""
    session_retry: str | None = None
    """onnxruntime's error when the first try to create the session failed and it retried."""
    seconds: float = 0.0
    """How long checking this model took, session and inference included."""
    device_chosen: bool = False
    """Whether the doctor chose the device, `--device` being left out."""

    @property
    def fell_back(self) -> bool:
        """Whether the device had to be changed for the session to read it."""
        return self.aligned_device != self.requested_device


@dataclass(frozen=True)
class ModelError:
    """A model the doctor could not check: bad input, with the one-line reason."""

    model: str
    message: str
    seconds: float = 0.0


# onnxruntime's errors quote where in its C++ sources they were raised, with the
# function's whole signature: "/onnxruntime_src/.../reshape_helper.h:91 onnxruntime::
# ReshapeHelper::ReshapeHelper(const onnxruntime::TensorShape&, ...) " and its status prefix.
_CPP_LOCATION = re.compile(
    r"(?:/\S+)?\b\w+\.(?:h|hpp|cc|cpp|cu):\d+\s+"  # the file and line
    r"(?:[\w:<>,*&~ ]+?\s)?[\w:~<>]+\((?:[^()]|\([^()]*\))*\)(?:\s*const)?\s*"  # the function
)
_STATUS_PREFIX = re.compile(r"\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")


def tidy_error(text: str) -> str:
    """Drop the C++ source locations, signatures and status prefix from onnxruntime's errors.

    Examples:
        >>> from onnx_device_guard._doctor.facts import tidy_error
        >>> tidy_error("[ONNXRuntimeError] : 1 : FAIL : Status Message: /src/reshape_helper.h:91 "
        ...            "onnxruntime::Reshape::Reshape(const Shape&, bool) Cannot be reshaped.")
        'Status Message: Cannot be reshaped.'
    """
    return _STATUS_PREFIX.sub("", _CPP_LOCATION.sub("", text))


def one_line(value: object, limit: int = 400) -> str:
    """`str(value)` on one line, cut to `limit` characters with an ellipsis.

    Examples:
        >>> from onnx_device_guard._doctor.facts import one_line
        >>> one_line("two\\n  lines")
        'two lines'
        >>> one_line("x" * 10, limit=6)
        'xxx...'
    """
    try:
        text = str(value)
    except Exception as error:  # a __str__ that raises must not end the report
        text = f"<{type(value).__name__} whose str() raised {type(error).__name__}>"
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def listed(items: Sequence[str], limit: int = 10, separator: str = ", ") -> str:
    """`items` joined by commas, the first `limit` of them, saying how many more there are.

    Examples:
        >>> from onnx_device_guard._doctor.facts import listed
        >>> listed(["a", "b"])
        'a, b'
        >>> listed([f"x{number}" for number in range(5000)], limit=2)
        'x0, x1 and 4998 more'
    """
    if len(items) <= limit:
        return separator.join(items)
    return f"{separator.join(items[:limit])} and {len(items) - limit} more"
