"""What a `Facts` record means: the causes with their fixes, the verdict, the exit status.

Pure functions, so each cause is testable with made-up environments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from .._devices import cuda_index
from .._providers import GPU_CAPABLE_EXECUTION_PROVIDERS, first_gpu_provider
from .capture import own_messages
from .facts import NO_SESSION, Facts, InferenceCheck, ModelError, Verdict, listed, one_line

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

# Why a provider in the build may not load, by provider ({version}: onnxruntime's).
_DROPPED_FIX: Mapping[str, str] = {
    "TensorrtExecutionProvider": "The TensorRT libraries it needs are missing or mismatched: "
    "install the TensorRT version this onnxruntime-gpu needs, or leave "
    "TensorrtExecutionProvider out (CUDAExecutionProvider alone reads CUDA tensors).",
    "CUDAExecutionProvider": "The CUDA or cuDNN libraries it needs are missing or of the wrong "
    "major version. Install the ones onnxruntime {version} was built for (system-wide or as "
    "nvidia-* pip packages), and call onnxruntime.preload_dlls() before creating the session "
    "so that they are found.",
    "GPU": "The GPU libraries {name} needs are missing or mismatched: install the versions "
    "onnxruntime {version} was built for.",
    "other": "Look at onnxruntime's messages for why {name} did not load, and install what it "
    "needs.",
}

# What to allow, and what smaller, for the option that would make a bounded run conclusive.
_ALLOW: Mapping[str, tuple[str, str]] = {
    "--timeout": ("it more time", "inputs"),
    "--max-input-mib": ("the inputs", "ones"),
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
    "cuda-not-checked",
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
    """Return the causes and notes that explain `facts`, most fundamental first."""
    requested = dict.fromkeys(facts.requested_providers)  # each once, in order
    return (
        *_distribution_findings(facts),
        *[_lost(name, facts) for name in requested if name not in facts.session_providers],
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
"""Exit statuses from the most to the least severe; several models give the first that applies."""


def verdict(facts: Facts) -> Verdict:
    """Return the model's verdict: `failed`, `inconclusive`, `fallback` or `ok`, in that order."""
    if facts.inference.status in ("failed", "inconclusive"):
        return facts.inference.status
    return "fallback" if facts.fell_back else "ok"


def exit_code(facts: Facts | ModelError, *, strict: bool) -> int:
    """Return one model's exit status: 2 for a `ModelError`, else the first of 3, 1, 4, 0."""
    if isinstance(facts, ModelError):
        return EXIT_BAD_INPUT
    if facts.inference.status == "failed":
        return EXIT_FAILED
    if strict and facts.fell_back:
        return EXIT_STRICT
    return EXIT_INCONCLUSIVE if facts.inference.status == "inconclusive" else EXIT_OK


def worst(statuses: Iterable[int]) -> int:
    """Return the most severe of `statuses` by `EXIT_PRECEDENCE` (0 for none)."""
    found = set(statuses)
    return next((status for status in EXIT_PRECEDENCE if status in found), EXIT_OK)


def headline(facts: Facts) -> str:
    """Return the verdict line: `OK: ...`, `FALLBACK: ...`, `INCONCLUSIVE: ...` or `FAILED: ...`."""
    requested, aligned = str(facts.requested_device), str(facts.aligned_device)
    result = verdict(facts)
    if result == "failed":
        moved = f" (moved there from {requested!r})" if facts.fell_back else ""
        return f"FAILED: the test inference on {aligned!r}{moved} did not complete."
    provider = first_gpu_provider(facts.session_providers)
    if facts.fell_back:
        why = facts.mismatch.problem if facts.mismatch is not None else ""
        answer = f"{requested!r} -> {aligned!r}. {why}".rstrip()
    elif facts.aligned_device.type == "cuda" and provider is not None:
        answer = f"the session runs {provider} and reads tensors on {aligned!r}."
    else:
        answer = f"the session reads tensors on {aligned!r}."
    if result == "ok" or result == "fallback":
        return f"{result.upper()}: {answer}"
    culprits = facts.inference.culprits
    named = listed([repr(name) for name in culprits])
    about = f" (input{'s' * (len(culprits) > 1)} {named})" if culprits else ""
    return (
        f"INCONCLUSIVE: {answer} But the test inference could not run with the inputs the "
        f"doctor tried{about}."
    )


# The causes, one group at a time.


def _distribution_findings(facts: Facts) -> list[Finding]:
    if len(facts.environment.module_owners) < 2:
        return []
    problem = (
        f"Several installed distributions provide the onnxruntime module ({_build(facts)}). "
        "They overwrite each other's files, so which execution providers load depends on the "
        "order they were installed in."
    )
    fix = (
        f"Uninstall all of them (`pip uninstall -y {_owners(facts)}`), then install exactly "
        "one: onnxruntime-gpu for CUDA, onnxruntime for CPU only."
    )
    return [Finding("several-distributions", problem, fix, _INSTALL_URL)]


def _lost(name: str, facts: Facts) -> Finding:
    """A provider asked for that the session does not run: what became of it, and the fix."""
    env, said = facts.environment, own_messages(name, facts.onnxruntime_messages)
    kind: FindingKind = "provider-dropped"
    if name in env.available_providers:
        where, how = f"{name} is in this onnxruntime build, but ", "onnxruntime dropped it"
        how += f" (it said: {one_line(said[0])})" if said else ""
        default = _DROPPED_FIX["GPU" if name in GPU_CAPABLE_EXECUTION_PROVIDERS else "other"]
        fix = _DROPPED_FIX.get(name, default).format(name=name, version=env.onnxruntime_version)
        url = _REQUIREMENTS_URL.get(name)
    else:
        offered = ", ".join(env.available_providers)
        where = f"{name} is not part of this onnxruntime build ({_build(facts)}), which "
        where, how = f"{where}offers only {offered}; ", "onnxruntime only warned"
        kind, fix, url = "provider-not-in-build", _install_fix(name, facts), _INSTALL_URL
    if facts.session_retry is not None:
        how = (
            f"creating the session with it failed ({facts.session_retry}); onnxruntime "
            "retried with its fallback providers"
        )
    ending = "the session runs without it"
    if facts.inference.detail.startswith(NO_SESSION):
        ending = "no session can be created without it: the rest lack an operator it may have"
    return Finding(kind, f"{where}{how}, and {ending}.", fix, url)


def _install_fix(name: str, facts: Facts) -> str:
    """How to install `name`, a provider this onnxruntime build lacks."""
    wanted = _DISTRIBUTION_FOR_PROVIDER.get(name)
    if name == "NvTensorRTRTXExecutionProvider":
        return (
            "It is a plugin provider: install onnxruntime-ep-nv-tensorrt-rtx and register it "
            "with onnxruntime.register_execution_provider_library() before creating the "
            "session (the doctor cannot register plugins)."
        )
    if wanted is None:
        return f"Install an onnxruntime build that includes {name}, or leave it out."
    uninstall = f"pip uninstall -y {owners} && " if (owners := _owners(facts)) else ""
    alone = " (exactly one onnxruntime package, none beside it)" * (wanted == "onnxruntime-gpu")
    return f"Install the onnxruntime build that has it: `{uninstall}pip install {wanted}`{alone}."


def _device_findings(facts: Facts) -> list[Finding]:
    device, mismatch = str(facts.requested_device), facts.mismatch
    if mismatch is None:
        if facts.requested_device.type in ("cpu", "cuda"):
            return []
        problem = (
            f"onnx-device-guard checks only CUDA devices; {device!r} is passed through unchecked."
        )
        kind = facts.requested_device.type
        fix = (
            f"Make sure one of the session's providers reads {kind!r} memory, or use device 'cpu'."
        )
        if kind == "meta":  # a placeholder: no provider reads it
            fix = "Ask for the device the model will run on: tensors on 'meta' hold no data."
        return [Finding("device-not-checked", problem, fix)]
    if mismatch.session_device is not None:
        return [Finding("device-id-mismatch", mismatch.problem, mismatch.fix, mismatch.help_url)]
    if any(name in GPU_CAPABLE_EXECUTION_PROVIDERS for name in facts.requested_providers):
        return []  # a GPU provider was asked for and lost: the provider findings say why
    in_build = first_gpu_provider(facts.environment.available_providers)
    if in_build is not None:
        problem = (
            f"The device is {device!r}, but the session was created with "
            f"{', '.join(facts.requested_providers)}, none of which reads CUDA tensors."
        )
        fix = (
            f"Put {in_build} first in the providers (`--providers {in_build} "
            "CPUExecutionProvider`), or ask for device 'cpu'."
        )
        return [Finding("no-gpu-provider-requested", problem, fix, mismatch.help_url)]
    problem = (
        f"This onnxruntime build ({_build(facts)}) has no GPU-capable execution provider; it "
        f"offers only {', '.join(facts.environment.available_providers)}."
    )
    fix = (
        f"To run on the GPU: `pip uninstall -y {_owners(facts) or 'onnxruntime'} && pip install "
        "onnxruntime-gpu`. Otherwise ask for device 'cpu'."
    )
    return [Finding("no-gpu-provider-in-build", problem, fix, _INSTALL_URL)]


def _torch_findings(facts: Facts) -> list[Finding]:
    env, device = facts.environment, str(facts.requested_device)
    count = env.torch_cuda_device_count
    if facts.device_chosen and facts.requested_device.type == "cpu":
        # The bare doctor checked 'cpu' because torch sees no GPU: CUDA itself went unchecked.
        build = f"a {env.torch_gpu_build} build" if env.torch_gpu_build else "a CPU-only build"
        problem = (
            f"torch {env.torch_version} ({build}) sees no CUDA device, so the doctor checked 'cpu' "
            "only: whether the model runs on CUDA was not checked."
        )
        fix = "Run again with `--device cuda` to check CUDA and see what stands in its way."
        return [Finding("cuda-not-checked", problem, fix)]
    if facts.requested_device.type != "cuda" or cuda_index(facts.requested_device) < count:
        return []
    if count == 0:
        said = f" torch said: {one_line(env.torch_messages[0])}" if env.torch_messages else ""
        problem = (
            f"torch {env.torch_version} is built for {env.torch_gpu_build} but sees no CUDA "
            f"device.{said}"
        )
        fix = (
            "Check that the GPU driver works (nvidia-smi) and that CUDA_VISIBLE_DEVICES does "
            "not hide the GPUs."
        )
        if env.torch_gpu_build is None:
            problem = (
                f"torch {env.torch_version} is a CPU-only build, so it cannot put tensors on "
                f"{device!r} even where onnxruntime could read them."
            )
            fix = "Install a CUDA build of torch (the selector on pytorch.org gives the command), "
            fix += "or ask for device 'cpu'."
        return [Finding("torch-sees-no-cuda", problem, fix)]
    problem = (
        f"{device!r} does not exist: torch sees {count} CUDA device(s), cuda:0 to cuda:{count - 1}."
    )
    fix = "Ask for one of those; CUDA_VISIBLE_DEVICES renumbers the GPUs a process sees from 0."
    return [Finding("torch-device-index", problem, fix)]


def _inference_findings(facts: Facts) -> list[Finding]:
    check, aligned = facts.inference, str(facts.aligned_device)
    if check.status == "failed":
        fix = (
            f"The session cannot run on {aligned!r}: fix any cause above, or ask for device 'cpu'."
            if facts.aligned_device.type == "cuda"
            else f"This torch build cannot put tensors on {aligned!r}: ask for device 'cpu'."
            if "creating the inputs on" in check.detail  # torch's error: no session ran
            else f"onnxruntime cannot run this model on {aligned!r} with its own provider; its "
            "error above says why."
        )
        problem = f"The test inference did not complete: {check.detail}"
        return [Finding("inference-failed", problem, fix)]
    if check.status == "inconclusive":
        problem = (
            f"The test inference was inconclusive: {check.detail}. This says nothing against "
            f"the device: the session reads tensors on {aligned!r}."
        )
        return [Finding("inference-inconclusive", problem, _inconclusive_fix(check))]
    # Asked for (--no-inference), or said above: nothing runs on 'meta'.
    quiet = check.detail == "not run (--no-inference)" or aligned == "meta"
    if check.status == "skipped" and not quiet:
        problem = f"The test inference was skipped: {check.detail}."
        fix = f"Run one inference of your own on {aligned!r} to confirm the session works there."
        return [Finding("inference-skipped", problem, fix)]
    return []


def _inconclusive_fix(check: InferenceCheck) -> str:
    alone = "check the device alone with `--no-inference`."
    if check.suggestion and check.suggestion[0] in _ALLOW:
        what, smaller = _ALLOW[check.suggestion[0]]
        return (
            f"Allow {what} with `{' '.join(check.suggestion)}`, give smaller {smaller} with "
            f"--input or --dim, or {alone}"
        )
    named = listed([repr(name) for name in check.culprits]) or "the inputs"
    options = listed([f"`{hint}`" for hint in check.hints], separator=" or ") or (
        "`--input NAME=SHAPE[:VALUE]` or `--dim NAME=N`"
    )
    if "SHAPE" not in options:  # fixed shapes: only a value can change
        return f"Give {named} a value the model accepts: {options}, VALUE filled in; or {alone}"
    return (
        f"Give {named} a shape and value the model accepts: {options}, with the capitals filled "
        f"in (as in `--input x=1x3x224x224`, `--input sr=:16000` or `--dim height=64`); or {alone}"
    )


def _owners(facts: Facts) -> str:
    return " ".join(dist.name for dist in facts.environment.module_owners)


def _build(facts: Facts) -> str:
    env = facts.environment
    return ", ".join(map(str, env.module_owners)) or f"onnxruntime {env.onnxruntime_version}"
