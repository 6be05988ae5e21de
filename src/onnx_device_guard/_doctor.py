"""What `onnx-device-guard doctor` found: the facts, what they mean, and the report.

Everything here is a pure function of a `Facts` record, so each cause
the doctor can name is testable with made-up environments. Gathering the facts
from the live machine is `_probe`'s job; parsing the
command line and choosing the exit status is `_cli`'s.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch

from ._alignment import Mismatch
from ._devices import cuda_index
from ._providers import GPU_CAPABLE_EXECUTION_PROVIDERS, first_gpu_provider

CUDA_REQUIREMENTS_URL = (
    "https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider.html#requirements"
)
"""onnxruntime's table of the CUDA and cuDNN versions each onnxruntime-gpu needs."""

_EP_DOCS = "https://onnxruntime.ai/docs/execution-providers/"
_INSTALL_URL = "https://onnxruntime.ai/docs/install/"

# The distribution that brings each execution provider, for "pip install ...".
_DISTRIBUTION_FOR_PROVIDER: Mapping[str, str] = {
    "CUDAExecutionProvider": "onnxruntime-gpu",
    "TensorrtExecutionProvider": "onnxruntime-gpu",
    "DmlExecutionProvider": "onnxruntime-directml",
    "OpenVINOExecutionProvider": "onnxruntime-openvino",
    "QNNExecutionProvider": "onnxruntime-qnn",
    "ROCMExecutionProvider": "onnxruntime-rocm",
    "MIGraphXExecutionProvider": "onnxruntime-migraphx",
    "CANNExecutionProvider": "onnxruntime-cann",
}

# Where onnxruntime lists what each GPU provider needs at run time.
_REQUIREMENTS_URL: Mapping[str, str] = {
    "CUDAExecutionProvider": CUDA_REQUIREMENTS_URL,
    "TensorrtExecutionProvider": f"{_EP_DOCS}TensorRT-ExecutionProvider.html#requirements",
    "ROCMExecutionProvider": f"{_EP_DOCS}ROCm-ExecutionProvider.html",
    "MIGraphXExecutionProvider": f"{_EP_DOCS}MIGraphX-ExecutionProvider.html",
}

InferenceStatus = Literal["ok", "failed", "skipped"]
"""How the test inference went: completed, raised, or could not be attempted."""

Verdict = Literal["ok", "fallback", "failed"]
"""The doctor's conclusion, as the first word of the report's verdict line says."""

FindingKind = Literal[
    "several-distributions",
    "provider-not-in-build",
    "provider-dropped",
    "no-gpu-provider-in-build",
    "no-gpu-provider-requested",
    "device-id-mismatch",
    "torch-sees-no-cuda",
    "torch-device-index",
    "device-not-checked",
    "inference-failed",
    "inference-skipped",
]
"""The causes and notes the doctor can report, as `Finding.kind` names them."""


@dataclass(frozen=True)
class InstalledDistribution:
    """An installed distribution whose name starts with `onnxruntime` (or `ort-nightly`).

    `provides_module` tells whether it installs the `onnxruntime` module
    itself (`onnxruntime`, `onnxruntime-gpu`, `onnxruntime-directml`...)
    rather than an add-on (`onnxruntime-extensions`, `onnxruntime-genai`).
    """

    name: str
    version: str
    provides_module: bool = True

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


@dataclass(frozen=True)
class InferenceCheck:
    """The outcome of the doctor's one test inference, and what it ran or why it failed."""

    status: InferenceStatus
    detail: str


@dataclass(frozen=True)
class Facts:
    """Everything the doctor learned about the machine, the session and the device.

    The diagnosis and both renderings are computed from this record alone.
    """

    model: str
    """The model file, or a description of the packaged tiny model."""
    onnx_device_guard_version: str
    python: str
    """Python's version and the platform, as one short string."""
    torch_version: str
    torch_gpu_build: str | None
    """`"CUDA 12.4"` or `"ROCm 6.2"` for a GPU build of torch, `None` for a CPU-only one."""
    torch_cuda_device_count: int
    """How many CUDA devices torch sees (0 where it sees none)."""
    onnxruntime_version: str
    installed_distributions: tuple[InstalledDistribution, ...]
    available_providers: tuple[str, ...]
    """`onnxruntime.get_available_providers()`: the providers in this build."""
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
    """What onnxruntime warned, printed or logged while creating the session."""
    session_retry: str | None = None
    """onnxruntime's error when the first try to create the session failed and it retried."""
    torch_messages: tuple[str, ...] = ()
    """What torch warned while looking for CUDA devices."""

    @property
    def fell_back(self) -> bool:
        """Whether the device had to be changed for the session to read it."""
        return self.aligned_device != self.requested_device

    @property
    def module_owners(self) -> tuple[InstalledDistribution, ...]:
        """The installed distributions that provide the `onnxruntime` module."""
        return tuple(dist for dist in self.installed_distributions if dist.provides_module)


@dataclass(frozen=True)
class Finding:
    """One cause or note in the diagnosis: what is wrong and what to do about it."""

    kind: FindingKind
    problem: str
    fix: str
    help_url: str | None = None

    def __str__(self) -> str:
        text = f"{self.problem} Fix: {self.fix}"
        return text if self.help_url is None else f"{text} See {self.help_url}"


def diagnose(facts: Facts) -> tuple[Finding, ...]:
    """Return the causes and notes that explain `facts`, most fundamental first.

    Examples:
        >>> import torch
        >>> from onnx_device_guard._doctor import Facts, InferenceCheck, diagnose
        >>> facts = Facts(
        ...     model="model.onnx", onnx_device_guard_version="0.1.0", python="3.11",
        ...     torch_version="2.4.0", torch_gpu_build="CUDA 12.4", torch_cuda_device_count=1,
        ...     onnxruntime_version="1.20.0", installed_distributions=(),
        ...     available_providers=("CPUExecutionProvider",),
        ...     requested_providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
        ...     session_providers=("CPUExecutionProvider",),
        ...     requested_device=torch.device("cuda"), aligned_device=torch.device("cpu"),
        ...     inference=InferenceCheck("ok", "..."),
        ... )
        >>> [finding.kind for finding in diagnose(facts)]
        ['provider-not-in-build']
    """
    return (
        *_distribution_findings(facts),
        *_provider_findings(facts),
        *_device_findings(facts),
        *_torch_findings(facts),
        *_inference_findings(facts),
    )


def verdict(facts: Facts) -> Verdict:
    """Return `"failed"` if the test inference raised, else `"fallback"` or `"ok"`."""
    if facts.inference.status == "failed":
        return "failed"
    return "fallback" if facts.fell_back else "ok"


def exit_code(facts: Facts, *, strict: bool) -> int:
    """Return the command's exit status for `facts` (2, bad input, is the CLI's own).

    0: the session reads the requested device, or the device was changed and
    `strict` is off; 1: `strict` and the device was changed; 3: the test
    inference did not complete.
    """
    if verdict(facts) == "failed":
        return 3
    return 1 if strict and facts.fell_back else 0


def headline(facts: Facts) -> str:
    """Return the verdict line: `OK: ...`, `FALLBACK: ...` or `FAILED: ...`."""
    requested, aligned = str(facts.requested_device), str(facts.aligned_device)
    result = verdict(facts)
    if result == "failed":
        moved = f" (moved there from {requested!r})" if facts.fell_back else ""
        return f"FAILED: the test inference on {aligned!r}{moved} did not complete."
    if result == "fallback":
        why = facts.mismatch.problem if facts.mismatch is not None else ""
        return f"FALLBACK: {requested!r} -> {aligned!r}. {why}".rstrip()
    provider = first_gpu_provider(facts.session_providers)
    if facts.aligned_device.type == "cuda" and provider is not None:
        return f"OK: the session runs {provider} and reads tensors on {aligned!r}."
    return f"OK: the session reads tensors on {aligned!r}."


def render_text(facts: Facts, findings: tuple[Finding, ...], *, strict: bool) -> str:
    """Return the report a person reads: aligned facts, the verdict, numbered fixes."""
    torch_line = facts.torch_version + (
        f" ({facts.torch_gpu_build})" if facts.torch_gpu_build else " (CPU-only build)"
    )
    torch_line += f", CUDA devices visible: {facts.torch_cuda_device_count}"
    owners = facts.module_owners
    installed = ", ".join(
        str(dist) if dist.provides_module else f"{dist} (add-on)"
        for dist in facts.installed_distributions
    )
    if len(owners) > 1:
        installed += "  <- more than one onnxruntime"
    dropped = set(facts.requested_providers) - set(facts.session_providers)
    rows = [
        ("model", facts.model),
        ("onnx-device-guard", f"{facts.onnx_device_guard_version}, Python {facts.python}"),
        ("torch", torch_line),
        ("onnxruntime", facts.onnxruntime_version),
        ("installed", installed or "(pip lists no onnxruntime distribution)"),
        ("available providers", ", ".join(facts.available_providers)),
        (
            "requested providers",
            _providers_line(
                facts.requested_providers, facts.requested_provider_options, "=", dropped
            ),
        ),
        (
            "session providers",
            _providers_line(facts.session_providers, facts.session_provider_options, " ", set()),
        ),
        ("requested device", str(facts.requested_device)),
        ("aligned device", str(facts.aligned_device)),
        ("inference", f"{facts.inference.status}: {facts.inference.detail}"),
    ]
    width = max(len(label) for label, _ in rows) + 2
    lines = [_wrap(value, indent=2 + width, first=f"  {label:<{width}}") for label, value in rows]
    messages = facts.onnxruntime_messages + facts.torch_messages
    if messages:
        lines += ["", "What onnxruntime and torch said:"]
        lines += [_wrap(one_line(message), indent=4, first="  - ") for message in messages]
    lines += ["", _wrap(headline(facts), indent=0)]
    if strict and facts.fell_back and verdict(facts) == "fallback":
        lines.append("--strict: the device had to be changed, so the exit status is 1.")
    if findings:
        lines += [
            "",
            "Diagnosis:" if verdict(facts) != "ok" else "Notes (the device needs no change):",
        ]
        for number, finding in enumerate(findings, start=1):
            lines.append(_wrap(finding.problem, indent=5, first=f"  {number}. "))
            lines.append(_wrap(f"Fix: {finding.fix}", indent=5, first="     "))
            if finding.help_url:
                lines.append(f"     See: {finding.help_url}")
    return "\n".join(lines)


def render_json(facts: Facts, findings: tuple[Finding, ...], *, strict: bool) -> dict[str, object]:
    """Return the report as one JSON-ready object with the same facts as the text."""
    return {
        "verdict": verdict(facts),
        "summary": headline(facts),
        "exit_code": exit_code(facts, strict=strict),
        "model": facts.model,
        "onnx_device_guard_version": facts.onnx_device_guard_version,
        "python": facts.python,
        "torch_version": facts.torch_version,
        "torch_gpu_build": facts.torch_gpu_build,
        "torch_cuda_device_count": facts.torch_cuda_device_count,
        "onnxruntime_version": facts.onnxruntime_version,
        "installed_distributions": [
            {"name": dist.name, "version": dist.version, "provides_module": dist.provides_module}
            for dist in facts.installed_distributions
        ],
        "available_providers": list(facts.available_providers),
        "requested_providers": list(facts.requested_providers),
        "requested_provider_options": _plain(facts.requested_provider_options),
        "session_providers": list(facts.session_providers),
        "session_provider_options": _plain(facts.session_provider_options),
        "requested_device": str(facts.requested_device),
        "aligned_device": str(facts.aligned_device),
        "fell_back": facts.fell_back,
        "inference_ok": facts.inference.status == "ok",
        "inference": {"status": facts.inference.status, "detail": facts.inference.detail},
        "diagnosis": [str(finding) for finding in findings],
        "findings": [
            {
                "kind": finding.kind,
                "problem": finding.problem,
                "fix": finding.fix,
                "help_url": finding.help_url,
            }
            for finding in findings
        ],
        "onnxruntime_messages": list(facts.onnxruntime_messages),
        "session_retry": facts.session_retry,
        "torch_messages": list(facts.torch_messages),
    }


# The causes, one group at a time.


def _distribution_findings(facts: Facts) -> list[Finding]:
    owners = facts.module_owners
    if len(owners) < 2:
        return []
    names = " ".join(dist.name for dist in owners)
    return [
        Finding(
            "several-distributions",
            problem=(
                f"Several installed distributions provide the onnxruntime module "
                f"({', '.join(map(str, owners))}). They overwrite each other's files, so "
                "which execution providers load depends on the order they were installed in."
            ),
            fix=(
                f"Uninstall all of them (`pip uninstall -y {names}`), then install exactly one: "
                "onnxruntime-gpu for CUDA, onnxruntime for CPU only."
            ),
            help_url=_INSTALL_URL,
        )
    ]


def _provider_findings(facts: Facts) -> list[Finding]:
    findings = []
    available, running = set(facts.available_providers), set(facts.session_providers)
    for name in dict.fromkeys(facts.requested_providers):
        if name in running:
            continue
        if name in available:
            findings.append(_dropped(name, facts))
        else:
            findings.append(_not_in_build(name, facts))
    return findings


def _not_in_build(name: str, facts: Facts) -> Finding:
    then = (
        f"Creating the session with it failed ({facts.session_retry}); onnxruntime retried "
        "with its fallback providers"
        if facts.session_retry is not None
        else "onnxruntime only warned"
    )
    problem = (
        f"{name} is not part of this onnxruntime build ({_build(facts)}), which offers only "
        f"{', '.join(facts.available_providers)}. {then}, and the session runs without it."
    )
    if name == "NvTensorRTRTXExecutionProvider":
        fix = (
            "It is a plugin provider: install onnxruntime-ep-nv-tensorrt-rtx and register it "
            "with onnxruntime.register_execution_provider_library() before creating the "
            "session (the doctor cannot register plugins)."
        )
    elif name in _DISTRIBUTION_FOR_PROVIDER:
        wanted = _DISTRIBUTION_FOR_PROVIDER[name]
        fix = f"pip install {wanted}"
        if facts.module_owners:
            owners = " ".join(dist.name for dist in facts.module_owners)
            fix = f"pip uninstall -y {owners} && {fix}"
        fix = f"Install the onnxruntime build that has it: `{fix}`"
        if wanted == "onnxruntime-gpu":
            fix += " (exactly one onnxruntime package, none beside it)"
        fix += "."
    else:
        fix = f"Install an onnxruntime build that includes {name}, or leave it out."
    return Finding("provider-not-in-build", problem, fix, _INSTALL_URL)


def _dropped(name: str, facts: Facts) -> Finding:
    said = [
        message
        for message in facts.onnxruntime_messages
        if name in message or "Failed to load library" in message
    ]
    if facts.session_retry is not None:
        problem = (
            f"{name} is in this onnxruntime build, but creating the session with it failed "
            f"({facts.session_retry}); onnxruntime retried with its fallback providers, and "
            "the session runs without it."
        )
    else:
        reason = f" It said: {one_line(said[0])}" if said else ""
        problem = (
            f"{name} is in this onnxruntime build, but onnxruntime dropped it when it "
            f"created the session.{reason}"
        )
    if name == "TensorrtExecutionProvider":
        fix = (
            "The TensorRT libraries it needs are missing or mismatched: install the TensorRT "
            "version this onnxruntime-gpu needs, or leave TensorrtExecutionProvider out "
            "(CUDAExecutionProvider alone reads CUDA tensors)."
        )
    elif name == "CUDAExecutionProvider":
        fix = (
            f"The CUDA or cuDNN libraries it needs are missing or of the wrong major "
            f"version. Install the ones onnxruntime {facts.onnxruntime_version} was built "
            "for (system-wide or as nvidia-* pip packages), and call "
            "onnxruntime.preload_dlls() before creating the session so that they are found."
        )
    elif name in GPU_CAPABLE_EXECUTION_PROVIDERS:
        fix = (
            f"The GPU libraries {name} needs are missing or mismatched: install the versions "
            f"onnxruntime {facts.onnxruntime_version} was built for."
        )
    else:
        fix = (
            f"Look at onnxruntime's messages for why {name} did not load, and install "
            "what it needs."
        )
    return Finding("provider-dropped", problem, fix, _REQUIREMENTS_URL.get(name))


def _device_findings(facts: Facts) -> list[Finding]:
    device = facts.requested_device
    mismatch = facts.mismatch
    if mismatch is None:
        if device.type in ("cpu", "cuda"):
            return []
        return [
            Finding(
                "device-not-checked",
                problem=(
                    f"onnx-device-guard checks only CUDA devices; {str(device)!r} is passed "
                    "through unchecked."
                ),
                fix=(
                    f"Make sure one of the session's providers reads {device.type!r} memory, "
                    "or use device 'cpu'."
                ),
            )
        ]
    if mismatch.session_device is not None:
        return [Finding("device-id-mismatch", mismatch.problem, mismatch.fix, mismatch.help_url)]
    if any(name in GPU_CAPABLE_EXECUTION_PROVIDERS for name in facts.requested_providers):
        # A GPU provider was asked for and lost: the provider findings say why.
        return []
    in_build = first_gpu_provider(facts.available_providers)
    if in_build is not None:
        return [
            Finding(
                "no-gpu-provider-requested",
                problem=(
                    f"The device is {str(device)!r}, but the session was created with "
                    f"{', '.join(facts.requested_providers)}, none of which reads CUDA tensors."
                ),
                fix=(
                    f"Put {in_build} first in the providers (`--providers {in_build} "
                    "CPUExecutionProvider`), or ask for device 'cpu'."
                ),
                help_url=mismatch.help_url,
            )
        ]
    owners = " ".join(dist.name for dist in facts.module_owners) or "onnxruntime"
    return [
        Finding(
            "no-gpu-provider-in-build",
            problem=(
                f"This onnxruntime build ({_build(facts)}) has no GPU-capable execution "
                f"provider; it offers only {', '.join(facts.available_providers)}."
            ),
            fix=(
                f"To run on the GPU: `pip uninstall -y {owners} && pip install onnxruntime-gpu`. "
                "Otherwise ask for device 'cpu'."
            ),
            help_url=_INSTALL_URL,
        )
    ]


def _torch_findings(facts: Facts) -> list[Finding]:
    device = facts.requested_device
    if device.type != "cuda":
        return []
    count = facts.torch_cuda_device_count
    said = f" torch said: {one_line(facts.torch_messages[0])}" if facts.torch_messages else ""
    if count == 0 and facts.torch_gpu_build is None:
        return [
            Finding(
                "torch-sees-no-cuda",
                problem=(
                    f"torch {facts.torch_version} is a CPU-only build, so it cannot put "
                    f"tensors on {str(device)!r} even where onnxruntime could read them."
                ),
                fix=(
                    "Install a CUDA build of torch (the selector on pytorch.org gives the "
                    "command), or ask for device 'cpu'."
                ),
            )
        ]
    if count == 0:
        return [
            Finding(
                "torch-sees-no-cuda",
                problem=(
                    f"torch {facts.torch_version} is built for {facts.torch_gpu_build} but "
                    f"sees no CUDA device.{said}"
                ),
                fix=(
                    "Check that the GPU driver works (nvidia-smi) and that "
                    "CUDA_VISIBLE_DEVICES does not hide the GPUs."
                ),
            )
        ]
    index = cuda_index(device)
    if index < count:
        return []
    return [
        Finding(
            "torch-device-index",
            problem=(
                f"{str(device)!r} does not exist: torch sees {count} CUDA device(s), "
                f"cuda:0 to cuda:{count - 1}."
            ),
            fix=(
                "Ask for one of those; CUDA_VISIBLE_DEVICES renumbers the GPUs a process "
                "sees from 0."
            ),
        )
    ]


def _inference_findings(facts: Facts) -> list[Finding]:
    check = facts.inference
    if check.status == "failed":
        return [
            Finding(
                "inference-failed",
                problem=f"The test inference did not complete: {check.detail}",
                fix=(
                    "If the error is about shapes or values, the model needs inputs the "
                    "doctor cannot guess (it feeds zeros, with every dynamic dimension set to "
                    "1), and the device check above still holds. Otherwise the session "
                    f"cannot run on {str(facts.aligned_device)!r}: fix the causes above, or "
                    "ask for device 'cpu'."
                ),
            )
        ]
    if check.status == "skipped":
        return [
            Finding(
                "inference-skipped",
                problem=f"The test inference was skipped: {check.detail}",
                fix=(
                    "Run one inference of your own on "
                    f"{str(facts.aligned_device)!r} to confirm the session works there."
                ),
            )
        ]
    return []


# Rendering helpers.


def _build(facts: Facts) -> str:
    owners = facts.module_owners
    return ", ".join(map(str, owners)) if owners else f"onnxruntime {facts.onnxruntime_version}"


def _providers_line(
    providers: tuple[str, ...],
    options: Mapping[str, Mapping[str, str]],
    separator: str,
    dropped: set[str],
) -> str:
    parts = []
    for name in providers:
        text = name
        device_id = options.get(name, {}).get("device_id")
        if separator == "=":
            shown = ",".join(f"{key}={value}" for key, value in options.get(name, {}).items())
            text += f" ({shown})" if shown else ""
        elif device_id is not None:
            text += f" (device_id {device_id})"
        if name in dropped:
            text += " [dropped]"
        parts.append(text)
    return ", ".join(parts)


def _plain(options: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    return {name: dict(values) for name, values in options.items()}


def one_line(value: object, limit: int = 400) -> str:
    """`str(value)` on one line, cut to `limit` characters with an ellipsis."""
    flat = " ".join(str(value).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _wrap(text: str, *, indent: int, first: str = "", width: int = 88) -> str:
    """Fill `text`, never breaking a `command` in backticks (textwrap keeps U+00A0)."""
    if not text.strip():
        return first.rstrip()
    text = re.sub(r"`[^`]+`", lambda span: span.group().replace(" ", "\u00a0"), text)
    filled = textwrap.fill(
        text,
        width=max(width, indent + 40),
        initial_indent=first,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return filled.replace("\u00a0", " ")
