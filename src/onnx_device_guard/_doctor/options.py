"""The doctor's options, checked: the device, the providers, the inputs, the run's bounds.

Everything here raises `ModelInputError` with a one-line message for a
value the doctor cannot use, before any model is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .core import ModelInputError, as_device
from .inputs import DEFAULT_MAX_INPUT_MIB, InputOverride, parse_dim_option, parse_input_option
from .probe import MIB, InferenceOptions, ProviderSpec

DEFAULT_TIMEOUT = 60.0
"""The default bound, in seconds, on one model's test inference (`--timeout`)."""

CPU_ONLY_PROVIDERS = frozenset(
    {"CPUExecutionProvider", "AzureExecutionProvider", "XnnpackExecutionProvider"}
)
"""Providers that run on no device of their own, so a `device_id` option means a mistake."""


@dataclass(frozen=True)
class Request:
    """The doctor's command line as typed, before any of it is checked."""

    models: tuple[Path, ...] = ()
    device: str | None = None
    providers: tuple[str, ...] | None = None
    inputs: tuple[str, ...] = ()
    dims: tuple[str, ...] = ()
    run: bool = True
    max_input_mib: int | None = None
    timeout: float = DEFAULT_TIMEOUT
    json: bool = False
    strict: bool = False


def parse_device(text: str) -> torch.device:
    """Return `--device`'s value as a `device`, or raise `ModelInputError`.

    The value goes through the library's `as_device`, so the doctor refuses
    exactly what the core refuses.

    Examples:
        >>> from onnx_device_guard._doctor.options import parse_device
        >>> parse_device("cuda:1")
        device(type='cuda', index=1)
        >>> parse_device("gpu")
        Traceback (most recent call last):
        onnx_device_guard.ModelInputError: --device 'gpu' is not a device torch understands; ...
        >>> parse_device("cuda:999")
        Traceback (most recent call last):
        onnx_device_guard.ModelInputError: --device='cuda:999' has device index 999, which ...
    """
    try:
        return as_device(text, "--device")
    except ModelInputError as error:
        if "understands" in error.message:  # torch could not parse it
            raise ModelInputError(
                f"--device {text!r} is not a device torch understands; "
                "use a device such as 'cpu', 'cuda' or 'cuda:1'"
            ) from None
        raise ModelInputError(error.message.rstrip(".")) from None


def parse_provider(text: str) -> tuple[str, dict[str, str]]:
    """Return `--providers`' `NAME[:KEY=VALUE,...]` as a name and its options.

    Examples:
        >>> from onnx_device_guard._doctor.options import parse_provider
        >>> parse_provider("CUDAExecutionProvider:device_id=1")
        ('CUDAExecutionProvider', {'device_id': '1'})
        >>> parse_provider("CPUExecutionProvider")
        ('CPUExecutionProvider', {})
    """
    name, _, rest = text.partition(":")
    name = name.strip()
    if not text.strip():
        raise ModelInputError(
            "--providers got an empty name; give execution provider names such as "
            "CUDAExecutionProvider CPUExecutionProvider, or leave --providers out for all "
            "that onnxruntime offers"
        )
    if name.lower().endswith((".onnx", ".ort")) or "/" in name or "\\" in name:
        raise ModelInputError(
            f"{text!r} was read as an execution provider; put the models before --providers"
        )
    if not name:
        raise ModelInputError(f"--providers {text!r} has no provider name before ':'")
    options: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in rest.split(","))):
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise ModelInputError(
                f"--providers {text!r}: provider options must be KEY=VALUE pairs separated "
                "by commas, as in CUDAExecutionProvider:device_id=1"
            )
        options[key.strip()] = value.strip()
    return name, options


def parse_providers(texts: Sequence[str]) -> list[ProviderSpec]:
    """Return `--providers`' values, refusing a `device_id` on a provider without a device.

    Other options go to onnxruntime as they are.

    Examples:
        >>> from onnx_device_guard._doctor.options import parse_providers
        >>> parse_providers(["CPUExecutionProvider:device_id=1"])
        Traceback (most recent call last):
        onnx_device_guard.ModelInputError: --providers 'CPUExecutionProvider:device_id=1': ...
    """
    providers: list[ProviderSpec] = []
    for text in texts:
        name, options = parse_provider(text)
        if "device_id" in options and name in CPU_ONLY_PROVIDERS:
            raise ModelInputError(
                f"--providers {text!r}: {name} runs on no device of its own and takes no "
                "device_id; give device_id to a GPU provider, as in "
                "CUDAExecutionProvider:device_id=1"
            )
        providers.append((name, options))
    return providers


def inference_options(request: Request) -> InferenceOptions:
    """Return `--input`, `--dim`, `--max-input-mib`, `--no-inference` and `--timeout`, checked."""
    overrides: dict[str, InputOverride] = {}
    for text in request.inputs:
        override = parse_input_option(text)
        overrides[override.name] = override
    dims: Mapping[str, int] = dict(parse_dim_option(text) for text in request.dims)
    return InferenceOptions(
        overrides=overrides,
        dims=dims,
        max_bytes=(request.max_input_mib or DEFAULT_MAX_INPUT_MIB) * MIB,
        run=request.run,
        timeout=request.timeout,
    )
