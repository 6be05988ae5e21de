"""Probing the live machine for `doctor`: torch, onnxruntime, one session, one inference.

`gather` collects everything into a `Facts`
record. onnxruntime is imported here, inside the functions, never when
`onnx_device_guard` itself is imported. Bad input (a model file that is not
there, an unknown provider, no onnxruntime) raises
`ModelInputError` with a one-line message.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import platform
import re
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from importlib.resources import files
from pathlib import Path
from typing import Any

import torch

from ._alignment import Mismatch, align_device_with_onnx_session, find_mismatch
from ._devices import cuda_index
from ._doctor import Facts, InferenceCheck, InstalledDistribution, one_line
from ._errors import ModelInputError
from ._policy import device_policy
from ._providers import GPU_CAPABLE_EXECUTION_PROVIDERS

TINY_MODEL = "packaged tiny model (y = x + 1)"
"""How the report names the model used when none is given."""

ProviderSpec = tuple[str, Mapping[str, str]]
"""A provider name and the options to create it with (empty for the defaults)."""

# Short names people type for providers, beyond "cuda" for CUDAExecutionProvider.
_ALIASES: Mapping[str, str] = {
    "gpu": "CUDAExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "directml": "DmlExecutionProvider",
    "rocm": "ROCMExecutionProvider",
}

# Add-ons that share the "onnxruntime" prefix but not the onnxruntime module.
_ADD_ON_PREFIXES = (
    "onnxruntime-extensions",
    "onnxruntime-genai",
    "onnxruntime-tools",
    "onnxruntime-ep-",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?\s+")

_TORCH_DTYPES: Mapping[str, torch.dtype] = {
    "tensor(float)": torch.float32,
    "tensor(double)": torch.float64,
    "tensor(float16)": torch.float16,
    "tensor(int8)": torch.int8,
    "tensor(int16)": torch.int16,
    "tensor(int32)": torch.int32,
    "tensor(int64)": torch.int64,
    "tensor(uint8)": torch.uint8,
    "tensor(bool)": torch.bool,
}


def gather(
    model: Path | None,
    device: torch.device | None,
    providers: Sequence[ProviderSpec] | None,
) -> Facts:
    """Probe torch and onnxruntime, create a session, align the device, run one inference.

    Args:
        model: The ONNX model file; `None` uses the packaged tiny model.
        device: The torch device to check; `None` takes `cuda` when torch
            sees a CUDA device, else `cpu`.
        providers: The execution providers to request, in order; `None`
            takes `onnxruntime.get_available_providers()`.

    Raises:
        ModelInputError: Bad input: the model file is missing, unreadable or
            not an ONNX model, a provider name is unknown, or onnxruntime
            cannot be imported.
    """
    from . import __version__

    if model is not None:
        check_model_file(model)
    with captured_output() as on_import:
        ort = import_onnxruntime()
    gpu_build, device_count, torch_messages = torch_cuda_facts()
    requested_device = torch.device("cuda" if device_count else "cpu") if device is None else device
    available = tuple(ort.get_available_providers())
    if providers is None:
        providers = [(name, {}) for name in available]
    check_provider_names([name for name, _ in providers], ort.get_all_providers())
    if model is None:
        source: Path | bytes = (files("onnx_device_guard") / "data" / "tiny.onnx").read_bytes()
        label = TINY_MODEL
    else:
        source, label = model, str(model)
    session, on_creation = create_session(ort, source, label, providers)
    aligned, mismatch = align(session, requested_device)
    with captured_output() as on_run:
        inference = run_inference(session, aligned)
    return Facts(
        model=label,
        onnx_device_guard_version=__version__,
        python=f"{platform.python_version()} on {platform.system()} {platform.machine()}",
        torch_version=str(torch.__version__),
        torch_gpu_build=gpu_build,
        torch_cuda_device_count=device_count,
        onnxruntime_version=str(ort.__version__),
        installed_distributions=onnxruntime_distributions(),
        available_providers=available,
        requested_providers=tuple(name for name, _ in providers),
        requested_provider_options={name: dict(opts) for name, opts in providers if opts},
        session_providers=tuple(session.get_providers()),
        session_provider_options={
            str(name): {str(key): str(value) for key, value in options.items()}
            for name, options in session.get_provider_options().items()
        },
        requested_device=requested_device,
        aligned_device=aligned,
        mismatch=mismatch,
        inference=inference,
        onnxruntime_messages=(
            *on_import.messages(),
            *on_creation.messages(),
            *on_run.messages(),
        ),
        session_retry=on_creation.retry(),
        torch_messages=torch_messages,
    )


def align(session: object, device: torch.device) -> tuple[torch.device, Mismatch | None]:
    """Align `device` with `session` through the library's core, in `"fallback"` mode.

    Returns the aligned device and, when it differs from `device`, the core's
    explanation of the mismatch. Nothing is logged: the report says it all.

    Examples:
        >>> import torch
        >>> from onnx_device_guard._probe import align
        >>> class CPUSession:
        ...     def get_providers(self):
        ...         return ["CPUExecutionProvider"]
        >>> aligned, mismatch = align(CPUSession(), torch.device("cuda:0"))
        >>> aligned, mismatch.session_device
        (device(type='cpu'), None)
    """
    with device_policy(warn=False):
        aligned = align_device_with_onnx_session(session, device, "fallback", "cpu")
    return aligned, (find_mismatch(session, device) if aligned != device else None)


# The environment.


def import_onnxruntime() -> Any:
    """Import and return onnxruntime, or raise `ModelInputError` saying why not."""
    try:
        import onnxruntime
    except ModuleNotFoundError as error:
        if error.name != "onnxruntime":
            raise ModelInputError(
                f"onnxruntime is installed but cannot be imported: {one_line(error, 500)}."
            ) from None
        owners = [dist for dist in onnxruntime_distributions() if dist.provides_module]
        if owners:
            listed = ", ".join(map(str, owners))
            names = " ".join(dist.name for dist in owners)
            raise ModelInputError(
                f"the onnxruntime module cannot be imported although pip lists {listed}; "
                f"reinstall it: pip install --force-reinstall {names}"
            ) from None
        raise ModelInputError(
            "onnxruntime is not installed; install exactly one onnxruntime package: "
            "pip install onnxruntime (CPU) or pip install onnxruntime-gpu (CUDA)"
        ) from None
    except ImportError as error:
        raise ModelInputError(
            f"onnxruntime is installed but cannot be imported: {one_line(error, 500)}"
        ) from None
    return onnxruntime


def onnxruntime_distributions(
    distributions: Iterable[metadata.Distribution] | None = None,
) -> tuple[InstalledDistribution, ...]:
    """Return the installed distributions named `onnxruntime*` or `ort-nightly*`.

    Names are normalised (`onnxruntime_gpu` is `onnxruntime-gpu`) and
    sorted; a distribution found twice on the path counts once.
    """
    found: dict[str, InstalledDistribution] = {}
    for dist in metadata.distributions() if distributions is None else distributions:
        raw = next(iter(dist.metadata.get_all("Name") or []), None)
        if not isinstance(raw, str):
            continue  # a broken installation without a name
        name = re.sub(r"[-_.]+", "-", raw).lower()
        if name in found or not name.startswith(("onnxruntime", "ort-nightly")):
            continue
        found[name] = InstalledDistribution(name, str(dist.version), _provides_module(dist, name))
    return tuple(sorted(found.values(), key=lambda dist: dist.name))


def _provides_module(dist: metadata.Distribution, name: str) -> bool:
    paths = dist.files
    if paths:
        return any(tuple(path.parts) == ("onnxruntime", "__init__.py") for path in paths)
    top_level = dist.read_text("top_level.txt")
    if top_level is not None:
        return "onnxruntime" in top_level.split()
    return not name.startswith(_ADD_ON_PREFIXES)


def torch_cuda_facts() -> tuple[str | None, int, tuple[str, ...]]:
    """Return torch's GPU build (`"CUDA 12.4"` or `None`), CUDA device count and warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cuda: str | None = torch.version.cuda
    hip: str | None = getattr(torch.version, "hip", None)
    build = f"CUDA {cuda}" if cuda else f"ROCm {hip}" if hip else None
    return build, count, tuple(one_line(warning.message, 500) for warning in caught)


# The input.


def check_model_file(path: Path) -> None:
    """Raise `ModelInputError` unless `path` is a readable, non-empty file."""
    if not path.exists():
        raise ModelInputError(f"model file '{path}' does not exist")
    if path.is_dir():
        raise ModelInputError(f"'{path}' is a directory, not an ONNX model file")
    try:
        with path.open("rb") as stream:
            head = stream.read(1)
    except OSError as error:
        raise ModelInputError(
            f"cannot read model file '{path}': {error.strerror or error}"
        ) from None
    if not head:
        raise ModelInputError(f"model file '{path}' is empty, not an ONNX model")


def check_provider_names(names: Iterable[str], known: Iterable[str]) -> None:
    """Raise `ModelInputError` for a provider name onnxruntime does not know.

    `known` is `onnxruntime.get_all_providers()`; the GPU-capable providers
    count as known too, since not every build lists them. The message suggests
    the closest known name.

    Examples:
        >>> from onnx_device_guard import ModelInputError
        >>> from onnx_device_guard._probe import check_provider_names
        >>> try:
        ...     check_provider_names(["CUDAExecutonProvider"], ["CUDAExecutionProvider"])
        ... except ModelInputError as error:
        ...     print(error.message)
        unknown execution provider 'CUDAExecutonProvider'; did you mean 'CUDAExecutionProvider'?
    """
    every = sorted({*known, *GPU_CAPABLE_EXECUTION_PROVIDERS})
    for name in names:
        if name in every:
            continue
        suggestion = suggest_provider(name, every)
        hint = (
            f"did you mean {suggestion!r}?"
            if suggestion
            else f"onnxruntime knows {', '.join(every)}"
        )
        raise ModelInputError(f"unknown execution provider {name!r}; {hint}")


def suggest_provider(name: str, known: Iterable[str]) -> str | None:
    """Return the known provider name closest to `name`, or `None` if none is close.

    Case, the `ExecutionProvider` suffix and a few common short names
    (`cuda`, `gpu`, `trt`, `directml`) are forgiven before spelling.

    Examples:
        >>> from onnx_device_guard._probe import suggest_provider
        >>> known = ["CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"]
        >>> suggest_provider("CUDAExecutonProvider", known)
        'CUDAExecutionProvider'
        >>> suggest_provider("cuda", known)
        'CUDAExecutionProvider'
        >>> suggest_provider("TensorRTExecutionProvider", known)
        'TensorrtExecutionProvider'
        >>> suggest_provider("banana", known) is None
        True
    """
    by_key = {provider.lower(): provider for provider in known}
    key = name.strip().lower()
    if key in by_key:
        return by_key[key]
    short = {provider.removesuffix("executionprovider"): real for provider, real in by_key.items()}
    bare = key.removesuffix("executionprovider")
    if bare in short:
        return short[bare]
    if bare in _ALIASES and _ALIASES[bare].lower() in by_key:
        return _ALIASES[bare]
    close = difflib.get_close_matches(key, by_key, n=1, cutoff=0.75)
    return by_key[close[0]] if close else None


# The session.


def create_session(
    ort: Any, source: Path | bytes, label: str, providers: Sequence[ProviderSpec]
) -> tuple[Any, Captured]:
    """Create the session as a program would, keeping what onnxruntime says meanwhile.

    Returns the session and what onnxruntime said while creating it: its
    warnings, what it printed (the banner of a retry with its fallback
    providers) and what its native log wrote to stderr. Raises
    `ModelInputError` if no session can be created at all.
    """
    arguments = [(name, dict(options)) if options else name for name, options in providers]
    model = source if isinstance(source, bytes) else str(source)
    with captured_output() as captured:
        try:
            session = ort.InferenceSession(model, providers=arguments)
        except Exception as error:
            failure: Exception | None = error
        else:
            failure = None
    if failure is not None:
        raise ModelInputError(_session_error(label, failure))
    return session, captured


def _session_error(label: str, error: Exception) -> str:
    text = one_line(error, 500)
    found = re.search(r"failed:\s*(.+)$", text)
    reason = found.group(1) if found else text
    if (
        type(error).__name__ == "InvalidProtobuf"
        or "INVALID_PROTOBUF" in text
        or "No graph was found" in text
    ):
        return f"'{label}' is not an ONNX model: onnxruntime cannot parse it ({reason})"
    return f"onnxruntime cannot create a session for '{label}': {reason}"


@dataclass
class Captured:
    """What was said while `captured_output` was in force."""

    stdout: str = ""
    stderr: str = ""
    warnings: list[str] = field(default_factory=list)

    def messages(self) -> tuple[str, ...]:
        """Return the warnings, printed lines and native log lines, one line each."""
        messages = [one_line(text, 500) for text in self.warnings]
        for line in self.stdout.splitlines():
            if line.strip("* \t") not in ("", "EP Error"):  # not the banner of a retry
                messages.append(line.strip())
        for line in self.stderr.splitlines():
            # onnxruntime's native log colours its lines and stamps them with the time.
            line = _TIMESTAMP.sub("", _ANSI.sub("", line)).strip()
            if line:
                messages.append(line)
        return tuple(messages)

    def retry(self) -> str | None:
        """Return the error onnxruntime printed when it retried with its fallback providers."""
        for line in self.stdout.splitlines():
            if line.startswith("EP Error"):
                return line.removeprefix("EP Error").lstrip(": ").strip()
        return None


@contextlib.contextmanager
def captured_output() -> Iterator[Captured]:
    """Capture warnings, `print` output and native writes to file descriptor 2.

    onnxruntime warns about unavailable providers, prints a banner when it
    retries a failed session, and its C++ log (why a CUDA library did not
    load) goes straight to the process's stderr. The doctor reports all of
    these itself instead of letting them spill onto the terminal.

    `warnings.catch_warnings` swaps process-wide state: this is for the
    command line, which runs in one thread.
    """
    captured = Captured()
    printed = io.StringIO()
    native: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with contextlib.redirect_stdout(printed), _native_stderr(native):
                yield captured
        finally:
            captured.stdout = printed.getvalue()
            captured.stderr = "".join(native)
            captured.warnings = [str(warning.message) for warning in caught]


@contextlib.contextmanager
def _native_stderr(sink: list[str]) -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable fd 2: capture nothing
        yield
        return
    with tempfile.TemporaryFile() as temporary:
        os.dup2(temporary.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            temporary.seek(0)
            sink.append(temporary.read().decode(errors="replace"))


# The inference.


class UnbuildableInputError(Exception):
    """The model has an input the doctor cannot make from torch (a string, a sequence...)."""


@dataclass(frozen=True)
class InputSpec:
    """One model input as the doctor builds it: dynamic dimensions set to 1."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    def __str__(self) -> str:
        dims = ",".join(map(str, self.shape))
        return f"{self.name} {str(self.dtype).removeprefix('torch.')}[{dims}]"


def input_specs(session: Any) -> tuple[InputSpec, ...]:
    """Return the session's inputs, dynamic dimensions set to 1; raise UnbuildableInputError."""
    specs = []
    for argument in session.get_inputs():
        dtype = _TORCH_DTYPES.get(argument.type)
        if dtype is None:
            raise UnbuildableInputError(
                f"input {argument.name!r} has type {argument.type}, which the doctor cannot "
                "build as a torch tensor"
            )
        shape = tuple(
            dim if isinstance(dim, int) and dim >= 0 else 1 for dim in (argument.shape or ())
        )
        specs.append(InputSpec(argument.name, shape, dtype))
    return tuple(specs)


def run_inference(session: Any, device: torch.device) -> InferenceCheck:
    """Run the session once on zeros created on `device`; never raise.

    A CUDA device goes through IO binding, so that the session reads the
    tensors where torch put them, as a model would; any other device through
    `session.run` with the inputs copied to NumPy.
    """
    how = "run_with_iobinding" if device.type == "cuda" else "InferenceSession.run"
    try:
        specs = input_specs(session)
    except UnbuildableInputError as error:
        return InferenceCheck("skipped", str(error))
    except Exception as error:
        return InferenceCheck("failed", f"session.get_inputs() raised {_describe(error)}")
    shown = ", ".join(map(str, specs)) or "no inputs"
    try:
        tensors = make_inputs(specs, device)
        if device.type == "cuda":
            run_bound(session, specs, tensors, cuda_index(device))
        else:
            session.run(
                None,
                {
                    spec.name: tensor.cpu().numpy()
                    for spec, tensor in zip(specs, tensors, strict=True)
                },
            )
    except Exception as error:
        return InferenceCheck("failed", f"{how} on {device} with {shown} raised {_describe(error)}")
    return InferenceCheck("ok", f"{how} on {device} with {shown}")


def make_inputs(specs: Sequence[InputSpec], device: torch.device) -> list[torch.Tensor]:
    """Return a tensor of zeros on `device` for each of `specs`."""
    return [torch.zeros(spec.shape, dtype=spec.dtype, device=device) for spec in specs]


def run_bound(
    session: Any, specs: Sequence[InputSpec], tensors: Sequence[torch.Tensor], device_id: int
) -> None:
    """Bind `tensors` in place as the session's inputs, outputs on the same GPU, and run."""
    binding = session.io_binding()
    for spec, tensor in zip(specs, tensors, strict=True):
        binding.bind_input(
            name=spec.name,
            device_type="cuda",
            device_id=device_id,
            element_type=torch.empty(0, dtype=spec.dtype).numpy().dtype.type,
            shape=tuple(tensor.shape),
            buffer_ptr=tensor.data_ptr(),
        )
    for output in session.get_outputs():
        binding.bind_output(output.name, device_type="cuda", device_id=device_id)
    if any(tensor.is_cuda for tensor in tensors):
        # onnxruntime runs on its own stream: the zeros must be written first.
        torch.cuda.synchronize(torch.device("cuda", device_id))
    session.run_with_iobinding(binding)
    binding.copy_outputs_to_cpu()  # returns once the outputs really exist


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {one_line(error, 500)}"
