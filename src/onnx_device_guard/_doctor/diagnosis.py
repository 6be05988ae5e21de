"""What the doctor's facts mean: the causes with their fixes, the verdict, the exit status.

Everything here is a pure function of a `Facts` record, so each cause the
doctor can name is testable with made-up environments. Gathering the facts
from the live machine is `probe`'s job; writing the report is `render`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from .core import GPU_CAPABLE_EXECUTION_PROVIDERS, cuda_index, first_gpu_provider
from .facts import Facts, ModelError, Verdict, listed, one_line

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
    "inference-inconclusive",
    "inference-skipped",
]
"""The causes and notes the doctor can report, as `Finding.kind` names them."""


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
        >>> from onnx_device_guard._doctor import Environment, Facts, InferenceCheck, diagnose
        >>> machine = Environment(
        ...     onnx_device_guard_version="0.1.0", python="3.11", torch_version="2.4.0",
        ...     torch_gpu_build="CUDA 12.4", torch_cuda_device_count=1,
        ...     onnxruntime_version="1.20.0", installed_distributions=(),
        ...     available_providers=("CPUExecutionProvider",),
        ... )
        >>> facts = Facts(
        ...     model="model.onnx", environment=machine,
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


EXIT_OK = 0
"""The session reads the requested device, or the device changed and `--strict` is off."""
EXIT_STRICT = 1
"""`--strict` was given and the device had to change."""
EXIT_BAD_INPUT = 2
"""Bad input: a model or option the doctor cannot use, or a report it cannot write."""
EXIT_FAILED = 3
"""The test inference failed on the device."""
EXIT_INCONCLUSIVE = 4
"""The test inference could not run with the inputs tried; the device answer stands."""

EXIT_PRECEDENCE = (EXIT_FAILED, EXIT_STRICT, EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, EXIT_OK)
"""Exit statuses from the most to the least severe; several models give the first that applies.

An input problem (2 or 4) never hides `--strict`'s 1, and a failure on the
device (3) is never hidden by anything.
"""


def verdict(facts: Facts) -> Verdict:
    """Return the model's verdict: `failed`, `inconclusive`, `fallback` or `ok`, in that order.

    `failed`: the test inference failed on the device. `inconclusive`: it
    could not run with the inputs tried (the device answer, `fell_back`,
    still holds). `fallback`: the device had to change. `ok`: none of these.
    """
    if facts.inference.status == "failed":
        return "failed"
    if facts.inference.status == "inconclusive":
        return "inconclusive"
    return "fallback" if facts.fell_back else "ok"


def exit_code(facts: Facts, *, strict: bool) -> int:
    """Return the command's exit status for `facts`.

    3 when the inference failed on the device; else 1 when `strict` and the
    device had to change; else 4 when the inference was inconclusive; else 0.
    So `--strict`'s 1 is never hidden by an input problem.

    Examples:
        >>> from onnx_device_guard._doctor.diagnosis import EXIT_PRECEDENCE
        >>> EXIT_PRECEDENCE
        (3, 1, 2, 4, 0)
    """
    if facts.inference.status == "failed":
        return EXIT_FAILED
    if strict and facts.fell_back:
        return EXIT_STRICT
    if facts.inference.status == "inconclusive":
        return EXIT_INCONCLUSIVE
    return EXIT_OK


def worst(statuses: Iterable[int]) -> int:
    """Return the most severe of `statuses` by `EXIT_PRECEDENCE` (0 for none).

    Examples:
        >>> from onnx_device_guard._doctor.diagnosis import worst
        >>> worst([0, 4, 1, 2])
        1
        >>> worst([])
        0
    """
    found = set(statuses)
    return next((status for status in EXIT_PRECEDENCE if status in found), EXIT_OK)


def status_of(result: Facts | ModelError, *, strict: bool) -> int:
    """The exit status one model contributes: `exit_code`, or 2 for a model that is bad input."""
    return EXIT_BAD_INPUT if isinstance(result, ModelError) else exit_code(result, strict=strict)


def headline(facts: Facts) -> str:
    """Return the verdict line: `OK: ...`, `FALLBACK: ...`, `INCONCLUSIVE: ...` or `FAILED: ...`."""
    requested, aligned = str(facts.requested_device), str(facts.aligned_device)
    result = verdict(facts)
    if result == "failed":
        moved = f" (moved there from {requested!r})" if facts.fell_back else ""
        return f"FAILED: the test inference on {aligned!r}{moved} did not complete."
    device_answer = _device_answer(facts)
    if result == "inconclusive":
        named = listed([repr(name) for name in facts.inference.culprits])
        about = (
            f" (input {named})"
            if len(facts.inference.culprits) == 1
            else (f" (inputs {named})" if named else "")
        )
        return (
            f"INCONCLUSIVE: {device_answer} But the test inference could not run with the "
            f"inputs the doctor tried{about}."
        )
    if result == "fallback":
        return f"FALLBACK: {device_answer}"
    return f"OK: {device_answer}"


def _device_answer(facts: Facts) -> str:
    requested, aligned = str(facts.requested_device), str(facts.aligned_device)
    if facts.fell_back:
        why = facts.mismatch.problem if facts.mismatch is not None else ""
        return f"{requested!r} -> {aligned!r}. {why}".rstrip()
    provider = first_gpu_provider(facts.session_providers)
    if facts.aligned_device.type == "cuda" and provider is not None:
        return f"the session runs {provider} and reads tensors on {aligned!r}."
    return f"the session reads tensors on {aligned!r}."


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
    available, running = set(facts.environment.available_providers), set(facts.session_providers)
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
        f"{', '.join(facts.environment.available_providers)}. {then}, and the session runs "
        "without it."
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
            f"version. Install the ones onnxruntime {facts.environment.onnxruntime_version} "
            "was built for (system-wide or as nvidia-* pip packages), and call "
            "onnxruntime.preload_dlls() before creating the session so that they are found."
        )
    elif name in GPU_CAPABLE_EXECUTION_PROVIDERS:
        fix = (
            f"The GPU libraries {name} needs are missing or mismatched: install the versions "
            f"onnxruntime {facts.environment.onnxruntime_version} was built for."
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
    in_build = first_gpu_provider(facts.environment.available_providers)
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
                f"provider; it offers only {', '.join(facts.environment.available_providers)}."
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
    env = facts.environment
    count = env.torch_cuda_device_count
    said = f" torch said: {one_line(env.torch_messages[0])}" if env.torch_messages else ""
    if count == 0 and env.torch_gpu_build is None:
        return [
            Finding(
                "torch-sees-no-cuda",
                problem=(
                    f"torch {env.torch_version} is a CPU-only build, so it cannot put "
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
                    f"torch {env.torch_version} is built for {env.torch_gpu_build} but "
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
    aligned = str(facts.aligned_device)
    if check.status == "failed":
        if facts.aligned_device.type == "cuda":
            fix = (
                f"The session cannot run on {aligned!r}: fix the causes above (if any), "
                "or ask for device 'cpu'."
            )
        else:
            fix = (
                f"onnxruntime cannot run this model on {aligned!r} with its own provider; "
                "its error above says why."
            )
        return [
            Finding(
                "inference-failed",
                problem=f"The test inference did not complete: {check.detail}",
                fix=fix,
            )
        ]
    if check.status == "inconclusive":
        if check.suggestion[:1] == ("--timeout",):
            fix = (
                f"Allow it more time with `{' '.join(check.suggestion)}`, give smaller inputs "
                "with --input or --dim, or check the device alone with `--no-inference`."
            )
        elif check.suggestion[:1] == ("--max-input-mib",):
            fix = (
                f"Allow the inputs with `{' '.join(check.suggestion)}`, give smaller ones "
                "with --input or --dim, or check the device alone with `--no-inference`."
            )
        else:
            named = listed([repr(name) for name in check.culprits]) or "the inputs"
            options = listed([f"`{hint}`" for hint in check.hints], separator=" or ") or (
                "`--input NAME=SHAPE[:VALUE]` or `--dim NAME=N`"
            )
            fix = (
                f"Give {named} a shape and value the model accepts: {options}, with the "
                "capitals filled in (as in `--input x=1x3x224x224` or `--input sr=:16000`); "
                "or check the device alone with `--no-inference`."
            )
        return [
            Finding(
                "inference-inconclusive",
                problem=(
                    f"The test inference was inconclusive: {check.detail}. This says nothing "
                    f"against the device: the session reads tensors on {aligned!r}."
                ),
                fix=fix,
            )
        ]
    if check.status == "skipped" and check.detail != "not run (--no-inference)":
        return [
            Finding(
                "inference-skipped",
                problem=f"The test inference was skipped: {check.detail}",
                fix=(
                    f"Run one inference of your own on {aligned!r} to confirm the session "
                    "works there."
                ),
            )
        ]
    return []


def _build(facts: Facts) -> str:
    owners = facts.module_owners
    if owners:
        return ", ".join(map(str, owners))
    return f"onnxruntime {facts.environment.onnxruntime_version}"
