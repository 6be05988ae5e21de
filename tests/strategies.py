"""Hypothesis strategies and settings profiles shared by the property-based tests.

Profiles: ``dev`` (the default) and ``ci`` (derandomized, no example database),
chosen with ``HYPOTHESIS_PROFILE``, or ``ci`` whenever ``CI`` is set. Both turn
the deadline off: the machines that run the suite are shared and noisy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from onnx_device_guard import GPU_CAPABLE_EXECUTION_PROVIDERS

from .sessions import FakeSession, ProvidersOnlySession

settings.register_profile(
    "dev",
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

GPU_PROVIDERS = sorted(GPU_CAPABLE_EXECUTION_PROVIDERS)
"""Providers that read CUDA memory, as the library lists them."""

CPU_ONLY_PROVIDERS = [
    "CPUExecutionProvider",
    "DmlExecutionProvider",
    "CoreMLExecutionProvider",
    "OpenVINOExecutionProvider",
    "XnnpackExecutionProvider",
    "QNNExecutionProvider",
    "AzureExecutionProvider",
    "WebGpuExecutionProvider",
]
"""Real onnxruntime providers that cannot read torch's CUDA memory."""

KNOWN_PROVIDERS = frozenset(GPU_PROVIDERS) | frozenset(CPU_ONLY_PROVIDERS)

unknown_provider_names = st.one_of(
    # Near misses of GPU-capable names: case and spelling matter.
    st.sampled_from(
        [
            "cudaexecutionprovider",
            "CUDAExecutionProvider ",
            "CUDA",
            "CudaExecutionProvider",
            "TensorRTExecutionProvider",
        ]
    ),
    st.text(max_size=12),
).filter(lambda name: name not in KNOWN_PROVIDERS)

provider_names = st.one_of(
    st.sampled_from(GPU_PROVIDERS), st.sampled_from(CPU_ONLY_PROVIDERS), unknown_provider_names
)

provider_lists = st.lists(provider_names, max_size=5)

valid_device_ids = st.integers(min_value=0, max_value=7).flatmap(
    lambda index: st.sampled_from([index, str(index)])
)
"""``device_id`` values as onnxruntime reports them (strings) or as users write them."""

garbage_device_ids = st.one_of(
    st.sampled_from(
        [
            "",
            "-1",
            "abc",
            "1.0",
            "0x1",
            "cuda:0",
            "\u0663",
            "+1",
            "1e3",
            "128",
            "99999999999999999999",
        ]
    ),
    st.integers(max_value=-1),
    st.integers(min_value=128),
    st.floats(allow_nan=True),
    st.booleans(),
    st.lists(st.integers(0, 3), max_size=2),
)
"""Values a ``device_id`` cannot take: not a non-negative integer torch can address."""

device_ids = st.one_of(valid_device_ids, garbage_device_ids)


@st.composite
def provider_options(draw: st.DrawFn, providers: list[str]) -> dict[str, dict[str, object]]:
    """Options for some of ``providers`` (and maybe others), some with a ``device_id``."""
    extra = draw(st.lists(provider_names, max_size=2))
    options: dict[str, dict[str, object]] = {}
    for name in [*providers, *extra]:
        if draw(st.integers(0, 3)):
            other: dict[str, object] = draw(
                st.dictionaries(
                    st.sampled_from(["gpu_mem_limit", "arena_extend_strategy"]),
                    st.text(max_size=4),
                    max_size=1,
                )
            )
            device_id = draw(st.one_of(st.none(), device_ids))
            options[name] = other if device_id is None else {**other, "device_id": device_id}
    return options


@st.composite
def sessions(draw: st.DrawFn) -> FakeSession | ProvidersOnlySession:
    """A stand-in session: effective providers, and usually ``get_provider_options()``."""
    providers = draw(provider_lists)
    if not draw(st.integers(0, 4)):
        return ProvidersOnlySession(providers)
    options = draw(provider_options(providers)) if providers else {}
    return FakeSession(providers, options)


valid_device_strings = st.one_of(
    st.sampled_from(["cpu", "cuda", "mps", "meta"]),
    st.integers(min_value=0, max_value=7).map(lambda index: f"cuda:{index}"),
)

valid_devices = st.one_of(
    valid_device_strings.flatmap(lambda text: st.sampled_from([text, torch.device(text)])),
    st.integers(min_value=0, max_value=3),
)
"""Devices as strings and as :class:`torch.device` objects."""

bad_devices = st.one_of(
    st.sampled_from(["", "gpu", "CUDA", "cuda:-1", "cuda:0 ", "cuda:x", "cuda:1:2", "tpu:0"]),
    st.sampled_from([None, True, -1, 128, 1.5, b"cuda", ("cuda", 0), ["cuda"]]),
    st.sampled_from(["cuda:128", "cuda:256", "cpu:300", "meta:999"]),
    st.integers(min_value=128, max_value=255).map(lambda index: torch.device("cuda", index)),
)
"""Values that are not devices: unparsable strings, wrong types, indices torch wraps round."""

devices = st.one_of(valid_devices, valid_devices, valid_devices, bad_devices)

valid_modes = st.sampled_from(["fail", "fallback"])
bad_modes = st.sampled_from(["", "retry", "FAIL", "Fallback", " fail", 0, True, b"fail", ["fail"]])
modes = st.one_of(st.none(), valid_modes, valid_modes, bad_modes)
fallback_devices = st.one_of(st.none(), valid_devices, bad_devices)


@dataclass(frozen=True)
class Scope:
    """Arguments of one ``device_policy``; ``None`` keeps the enclosing scope's value."""

    resolution_mode: str | None
    fallback_device: torch.device | str | None
    warn: bool | None


scopes = st.builds(
    Scope,
    resolution_mode=st.one_of(st.none(), valid_modes),
    fallback_device=st.one_of(st.none(), valid_devices),
    warn=st.one_of(st.none(), st.booleans()),
)

scope_stacks = st.lists(scopes, max_size=4)
