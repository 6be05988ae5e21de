"""The alignment core: compare a torch device with what a session can read, report a fallback."""

from __future__ import annotations

import inspect
import logging
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from ._devices import DeviceLike, as_device, cuda_index, is_cuda
from ._errors import DeviceFallbackWarning, EnvironmentConfigurationError, ModelInputError, help_url
from ._messages import logger, short_repr
from ._options import DeviceMismatchResolutionMode, Resolved, Settings, check_mode
from ._policy import current_policy, device_policy
from ._providers import (
    effective_providers,
    first_gpu_provider,
    provider_device_id,
    require_session,
    why_dropped,
)

_NO_GPU_HELP = EnvironmentConfigurationError.default_help_url  # "no data transfer registered"
_DEVICE_ID_HELP = help_url("troubleshooting", "device-id-mismatch")
_DISAGREE_HELP = help_url("troubleshooting", "sessions-on-different-gpus")


@dataclass(slots=True)
class Mismatch:
    """Why a session cannot read tensors from a device; its texts are written only when read."""

    device: torch.device
    """The device the model asks for."""
    providers: tuple[str, ...]
    """The session's effective providers."""
    provider: str | None = None
    """The GPU-capable provider, when it runs on another GPU than `index`."""
    index: int | None = None
    """The CUDA index that `device` stands for, when the GPUs differ."""
    session_device: torch.device | None = None
    """The GPU the session does run on, when it runs on another one."""
    session_name: str | None = None
    """Where the model keeps the session (an attribute path), when it has several."""
    others: tuple[str, ...] = ()
    """The other sessions that run only the same providers, named in the same sentence."""
    dropped: str | None = None
    """The GPU provider onnxruntime dropped for the session, when its birth says so."""

    @property
    def problem(self) -> str:
        """What is wrong, naming the device and the session's providers."""
        name = "" if self.session_name is None else f" {self.session_name!r}"
        if self.session_device is None:
            names = ", ".join(map(repr, (self.session_name, *self.others)))
            return (
                f"The model asks for device {str(self.device)!r}, but its onnxruntime "
                f"{f'sessions {names} run' if self.others else f'session{name} runs'} only "
                f"{short_repr(list(self.providers), 400)}, and none of these can read CUDA tensors."
            )
        device = self.device
        asked = f"'cuda' (now cuda:{self.index})" if device.index is None else repr(str(device))
        return (
            f"The model asks for device {asked}, but its session{name}'s {self.provider} runs "
            f"on device_id {self.session_device.index}, so every input would need a copy "
            "between GPUs."
        )

    @property
    def fix(self) -> str:
        """What to change to make the session read the device."""
        if self.session_device is None and self.dropped is not None:  # asked for, and lost
            return f"{why_dropped(self.dropped)} Otherwise ask for device 'cpu'."
        if self.session_device is None:
            return (
                "To run on the GPU, install onnxruntime-gpu (and no other onnxruntime "
                "package beside it), create the session with providers="
                "['CUDAExecutionProvider', 'CPUExecutionProvider'] and check that the CUDA "
                "and cuDNN libraries load; otherwise ask for device 'cpu'."
            )
        return (
            f"Create the session with provider options {{'device_id': {self.index}}} for "
            f"{self.provider}, or ask for device 'cuda:{self.session_device.index}'."
        )

    @property
    def help_url(self) -> str:
        """The troubleshooting section that explains this mismatch."""
        return _NO_GPU_HELP if self.session_device is None else _DEVICE_ID_HELP


def find_mismatch(session: object, device: torch.device) -> Mismatch | None:
    """Return why `session` cannot read tensors on `device`, or `None` if it can."""
    if not is_cuda(device):
        require_session(session)
        return None
    providers = effective_providers(session)
    provider = first_gpu_provider(providers)
    if provider is None:
        return Mismatch(device, providers)
    device_id = provider_device_id(session, provider)
    if device_id is None or (index := cuda_index(device)) == device_id:
        return None
    # provider_device_id only returns indices torch addresses.
    return Mismatch(device, providers, provider, index, torch.device("cuda", device_id))


def align_device_with_onnx_session(
    session: object,
    device: DeviceLike,
    resolution_mode: DeviceMismatchResolutionMode | None = None,
    fallback_device: DeviceLike | None = None,
) -> torch.device:
    """Return a device whose tensors `session` can read, starting from `device`.

    A `cuda` device needs one of the
    [`GPU_CAPABLE_EXECUTION_PROVIDERS`][onnx_device_guard.GPU_CAPABLE_EXECUTION_PROVIDERS]
    among `session.get_providers()`, on the same GPU; other devices pass
    unchanged. On a mismatch `"fail"` raises, and `"fallback"` warns and
    returns `fallback_device` (or the session's GPU when only the index
    differs). The guide's "How the decision is made" says it in full.

    Args:
        session: An initialised `onnxruntime.InferenceSession`, or any object
            with `get_providers()` (and optionally `get_provider_options()`).
        device: The device requested for the model: a `torch.device`, a
            string such as `"cuda:0"`, or a CUDA index (`0` is `cuda:0`).
        resolution_mode: `"fallback"` or `"fail"`; `None` takes the policy's.
        fallback_device: Returned in `"fallback"` mode when the session runs
            no GPU-capable provider; `None` takes the policy's (CPU by default).

    Returns:
        `device` as a `torch.device` when the session can read it, else the
        device the `"fallback"` resolution chose.

    Raises:
        ModelInputError: `resolution_mode` is not `"fail"` or `"fallback"`
            (checked first), a device cannot be parsed, or `session` has no
            working `get_providers()`.
        EnvironmentConfigurationError: The session cannot read `device` and
            the mode is `"fail"`, or cannot read the fallback device either.

    Examples:
        Align device in a model's `from_pretrained`:

        >>> session = onnxruntime.InferenceSession(
        ...     "model.onnx", providers=["CPUExecutionProvider"]
        ... )
        >>> device = align_device_with_onnx_session(
        ...     session=session, device=torch.device("cuda:0")
        ... )
        >>> device
        device(type='cpu')

        Raise instead of falling back:

        >>> device = align_device_with_onnx_session(
        ...     session=session,
        ...     device=torch.device("cuda:0"),
        ...     resolution_mode="fail",
        ... )
        Traceback (most recent call last):
        onnx_device_guard.EnvironmentConfigurationError: ...
    """
    mode = None if resolution_mode is None else check_mode(resolution_mode)
    requested = as_device(device, "device")
    fallback = None if fallback_device is None else as_device(fallback_device, "fallback_device")
    policy = current_policy()  # a bad environment variable raises at every call
    mismatch = find_mismatch(session, requested)
    if mismatch is None:  # the common case, kept short
        return requested
    used = policy if mode is None and fallback is None else Settings(mode, fallback).over(policy)
    aligned = _resolve(session, mismatch, used)
    if used.warn or logger.isEnabledFor(logging.DEBUG):  # else nothing is said
        report_fallback(Fallback(requested, aligned, (mismatch,)), used.warn)
    return aligned


def _resolve(session: object, mismatch: Mismatch, settings: Resolved) -> torch.device:
    """Raise in `"fail"` mode; else the device to use, refusing a fallback `session` cannot read."""
    fallback = settings.fallback_device
    if settings.resolution_mode == "fail":
        raise EnvironmentConfigurationError(
            f"{mismatch.problem} {mismatch.fix}", help_url=mismatch.help_url
        )
    if mismatch.session_device is not None:
        return mismatch.session_device
    if is_cuda(fallback) and find_mismatch(session, fallback) is not None:
        named = "" if mismatch.session_name is None else f" {mismatch.session_name!r}"
        raise EnvironmentConfigurationError(  # the problem names the device asked for
            f"The session{named} cannot read the fallback device {str(fallback)!r} either: "
            f"{mismatch.problem} Pick a fallback_device it reads, such as 'cpu'.",
            help_url=mismatch.help_url,
        )
    return fallback


def plan_alignment(
    sessions: Sequence[tuple[str, object]],
    requested: torch.device,
    settings: Resolved,
    dropped: str | None = None,
) -> tuple[torch.device, Fallback | None]:
    """The device all `(name, session)` read (the fallback device where they end on different
    GPUs) and the fallback to report, naming each session that cannot read `requested`."""
    fallback = settings.fallback_device
    several = len(sessions) > 1
    aligned = requested
    mismatches: list[Mismatch] = []
    for name, session in sessions:
        if (mismatch := find_mismatch(session, requested)) is not None:
            mismatch.session_name, mismatch.dropped = name if several else None, dropped
            mismatches.append(mismatch)
            if aligned is requested or find_mismatch(session, aligned) is not None:
                aligned = _resolve(session, mismatch, settings)
    if not mismatches:
        return aligned, None
    at_fault = [name for name, one in sessions if find_mismatch(one, aligned)] if several else []
    if not at_fault:
        return aligned, Fallback(requested, aligned, tuple(mismatches))
    if len(mismatches) < len(sessions):  # some keep to the device asked for: the rest are at fault
        at_fault = [str(mismatch.session_name) for mismatch in mismatches]
    if any(find_mismatch(session, fallback) for _, session in sessions):
        raise EnvironmentConfigurationError(
            f"The model's sessions run on different GPUs, so {', '.join(map(repr, at_fault))} "
            "cannot read the GPU the others run on, and not all of them can read the "
            f"fallback device {str(fallback)!r} either. Create every session with the same "
            "provider option 'device_id', or pick a fallback_device they all read (such as "
            "'cpu').",
            help_url=_DISAGREE_HELP,
        )
    return fallback, Fallback(requested, fallback, tuple(mismatches), tuple(at_fault))


@dataclass(slots=True)
class Fallback:
    """A mismatch that `"fallback"` mode resolved, kept until it is reported."""

    requested: torch.device
    aligned: torch.device
    mismatches: tuple[Mismatch, ...]
    """Each session that could not read the device, in the order they were checked."""
    disagreeing: tuple[str, ...] = ()
    """The sessions that cannot read the device the others run on, if they disagree."""

    def explained(self) -> tuple[str, str, str, str]:
        """The problem, the fixes, the `odg_reason` and the help URL."""
        if self.disagreeing:
            return (
                "The model's sessions run on different GPUs, so no single CUDA device serves "
                f"them all ({', '.join(map(repr, self.disagreeing))} cannot read the GPU the "
                "others run on).",
                "Create every session with the same provider option 'device_id' to keep "
                "them on one GPU.",
                "sessions_disagree",
                _DISAGREE_HELP,
            )
        first, mismatches = self.mismatches[0], self.mismatches
        if all(m.session_device is None and m.providers == first.providers for m in mismatches):
            mismatches = (
                replace(first, others=tuple(str(m.session_name) for m in mismatches[1:])),
            )
        return (
            " ".join(mismatch.problem for mismatch in mismatches),
            " ".join(dict.fromkeys(mismatch.fix for mismatch in self.mismatches)),
            "no_gpu_provider" if first.session_device is None else "device_id_mismatch",
            first.help_url,
        )


@dataclass(frozen=True)
class Details:
    """What a fallback report says about the model, beyond the mismatch itself."""

    applied: bool = True
    """Whether the model now uses the aligned device (`False`: it has no device attribute)."""
    context: str = ""
    """Ends the message: which model, which factory, where the device came from."""
    outcome: str = ""
    """Says what became of the model, instead of "Using ... instead." (a read-only attribute)."""
    factory: str | None = None  # its qualified name, for `odg_factory`
    device_attr: str | None = None  # for `odg_device_attr`
    packages: tuple[str, ...] = ()
    """Packages whose frames the warning skips: the patched loader's."""


def report_fallback(fallback: Fallback, warn: bool, details: Details | None = None) -> None:
    """Report `fallback`: a warning at the user's line and a WARNING record, or DEBUG only."""
    level = logging.WARNING if warn else logging.DEBUG
    if not warn and not logger.isEnabledFor(level):
        return  # nothing to say: the texts are not even written
    details = details or Details()
    problem, fix, reason, url = fallback.explained()
    target = repr(str(fallback.aligned))
    outcome = details.outcome or (
        f"Using {target} instead."
        if details.applied
        else "The model has no device attribute, so it was left as it is; a fallback "
        f"would use {target}."
    )
    text = f"{problem} {outcome} {fix}" + (f" ({details.context})" if details.context else "")
    if warn:
        warn_at_caller(text, *details.packages)
    names = tuple(mismatch.session_name for mismatch in fallback.mismatches)
    fields = {
        "odg_event": "fallback",
        "odg_reason": reason,
        "odg_requested_device": str(fallback.requested),
        "odg_aligned_device": str(fallback.aligned),
        "odg_applied": details.applied,
        "odg_providers": list(fallback.mismatches[0].providers),
        "odg_sessions": list(fallback.disagreeing or filter(None, names)),
        "odg_factory": details.factory,
        "odg_device_attr": details.device_attr,
        "odg_help_url": url,
    }
    logger.log(level, text, extra=fields)


def _files_of(module: str) -> str:
    """The prefix of an imported package's files (a plain module's own file), else "\0"."""
    file = getattr(sys.modules.get(module), "__file__", None)
    if not isinstance(file, str):
        return "\0"  # matches no file name
    return os.path.dirname(file) + os.sep if file.endswith("__init__.py") else file


def warn_at_caller(text: str, *packages: str) -> None:
    """Warn with `text` at the first frame outside this library, its helpers and `packages`."""
    names = ("onnxruntime", "wrapt", "asyncio", "contextlib", *packages)
    skipped = (os.path.dirname(__file__) + os.sep, *(_files_of(name) for name in names))
    frame = inspect.currentframe()
    # The frame is found here and the warning issued there, as warnings.warn itself does:
    # skip_file_prefixes (3.12+) starts counting one frame up and then skips too little.
    while frame is not None and (
        frame.f_code.co_filename.startswith(skipped)
        or "importlib._bootstrap" in frame.f_code.co_filename
    ):
        frame = frame.f_back
    if frame is None and packages:  # every frame is theirs: a loader patched in __main__
        warn_at_caller(text)
    elif frame is None:
        warnings.warn(text, DeviceFallbackWarning, stacklevel=2)
    else:
        scope = frame.f_globals
        warnings.warn_explicit(
            text,
            DeviceFallbackWarning,
            frame.f_code.co_filename,
            frame.f_lineno,
            module=scope.get("__name__", "<string>"),
            registry=scope.setdefault("__warningregistry__", {}),
        )


@contextmanager
def aligned_device(
    session: object | Sequence[object],
    device: DeviceLike,
    *,
    resolution_mode: DeviceMismatchResolutionMode | None = None,
    fallback_device: DeviceLike | None = None,
    warn: bool | None = None,
) -> Iterator[torch.device]:
    """Align `device` with `session` (or several sessions) on entry; give the result.

    The options hold for the whole block, as in a
    [`device_policy`][onnx_device_guard.device_policy] scope: nested
    alignments and guarded factories use them too.

    Args:
        session: A session, as `align_device_with_onnx_session` takes; or a
            list or tuple of them (a pipeline), which the device must all suit.
        device: The torch device the code in the block wants to use.
        resolution_mode: As for `device_policy`; `None` keeps the scope's.
        fallback_device: As for `device_policy`; `None` keeps the scope's.
        warn: As for `device_policy`; `None` keeps the scope's.

    Returns:
        A context manager whose `with ... as device` gives the aligned
        `torch.device`.

    Raises:
        ModelInputError: An argument cannot be used (see
            [`align_device_with_onnx_session`][onnx_device_guard.align_device_with_onnx_session]),
            or the list of sessions is empty.
        EnvironmentConfigurationError: A session cannot read `device` in
            `"fail"` mode, or the sessions run on different GPUs and cannot
            all read the fallback device.

    Examples:
        >>> from onnx_device_guard import aligned_device
        >>> class CPUSession:
        ...     def get_providers(self):
        ...         return ["CPUExecutionProvider"]
        >>> with aligned_device(CPUSession(), "cuda:0", warn=False) as device:
        ...     device
        device(type='cpu')

        A pipeline of three sessions needs one block, not three:

        >>> with aligned_device([CPUSession()] * 3, "cuda", warn=False) as device:
        ...     device
        device(type='cpu')
    """
    scope = device_policy(
        resolution_mode=resolution_mode, fallback_device=fallback_device, warn=warn
    )
    sessions = list(session) if isinstance(session, list | tuple) else [session]
    if not sessions:
        raise ModelInputError(
            "aligned_device needs a session or a non-empty list of sessions; got an empty "
            f"{type(session).__name__}."
        )
    with scope:
        requested = as_device(device, "device")
        policy = current_policy()
        named = [(f"sessions[{number}]", one) for number, one in enumerate(sessions)]
        aligned, report = plan_alignment(named, requested, policy)
        if report is not None:
            report_fallback(report, policy.warn)
        yield aligned
