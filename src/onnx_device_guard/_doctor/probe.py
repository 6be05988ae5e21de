"""Probing the live machine for `doctor`: torch, onnxruntime, each model's session and run."""

from __future__ import annotations

import difflib
import math
import platform
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from importlib.resources import files
from pathlib import Path
from typing import Any, NamedTuple

import torch

from .._alignment import Mismatch, align_device_with_onnx_session, find_mismatch
from .._devices import cuda_index
from .._errors import ModelInputError
from .._policy import device_policy
from .._providers import GPU_CAPABLE_EXECUTION_PROVIDERS
from .capture import Captured, captured_output, clean_messages, own_messages
from .facts import (
    NO_SESSION,
    Environment,
    Facts,
    InferenceCheck,
    InstalledDistribution,
    listed,
    one_line,
    tidy_error,
)
from .files import ModelBytes, display_path, read_model_file
from .inputs import (
    DEFAULT_MAX_INPUT_MIB,
    InputOverride,
    InputSpec,
    ModelInput,
    UnbuildableInputError,
    attempts,
    declared_inputs,
    make_tensors,
    mentioned_inputs,
)
from .machine import gpu_facts

TINY_MODEL = "packaged tiny model (y = x + 1)"
"""How the report names the model used when none is given."""

ProviderSpec = tuple[str, Mapping[str, str]]
"""A provider name and the options to create it with (empty for the defaults)."""

MIB = 2**20

# Add-ons named "onnxruntime-*" that do not hold the onnxruntime module.
_ADD_ONS = ("extensions", "genai", "tools", "ep-")

# Words that blame the device in an inference error without _NAMES (paths, C++ and node names).
_DEVICE_ERROR = re.compile(
    r"(?i)data transfer|cuda|cudnn|cublas|cufft|curand|\bhip\b|rocm|miopen|tensorrt|"
    r"device|memcpy|provider|\bEP\b|iobinding|io binding|bind"
)
_NAMES = re.compile(r"(?i)'[^'\s]*'|\"[^\"\s]*\"|\S*(?:[/\\]|::)\S*|\b(?:in|out)put:\s*\S+")
_MEMORY = re.compile(r"(?i)out of memory|failed to allocate|alloc_failed|bad.alloc")


@dataclass(frozen=True)
class InferenceOptions:
    """How to run the test inference: `--input`, `--dim`, the size cap, `--no-inference`."""

    overrides: Mapping[str, InputOverride] = field(default_factory=dict)
    dims: Mapping[str, int] = field(default_factory=dict)
    max_bytes: int = DEFAULT_MAX_INPUT_MIB * MIB
    run: bool = True
    timeout: float = 60.0
    """The most seconds the whole test inference may take, search included (`--timeout`)."""


@dataclass(frozen=True)
class Check:
    """What to check each model with: the machine, the device, the providers, the inference."""

    ort: Any
    """The onnxruntime module, imported by `environment`."""
    env: Environment
    device: torch.device
    providers: Sequence[ProviderSpec]
    fallback: torch.device = field(default_factory=lambda: torch.device("cpu"))
    """The device a fallback goes to (`ONNX_DEVICE_GUARD_FALLBACK_DEVICE`, else cpu)."""
    options: InferenceOptions = field(default_factory=InferenceOptions)
    device_chosen: bool = False
    """Whether `device` is the doctor's choice, `--device` being left out."""


GRACE_SECONDS = 5.0
"""How long a stopped inference is waited for before it is abandoned."""


def environment() -> tuple[Environment, Any]:
    """Probe Python, torch and onnxruntime once; return the facts and the onnxruntime module."""
    from .. import __version__

    with captured_output() as on_import:
        ort = import_onnxruntime()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        device_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cuda: str | None = torch.version.cuda
    hip: str | None = getattr(torch.version, "hip", None)
    env = Environment(
        onnx_device_guard_version=__version__,
        python=f"{platform.python_version()} on {platform.system()} {platform.machine()}",
        torch_version=str(torch.__version__),
        torch_gpu_build=f"CUDA {cuda}" if cuda else f"ROCm {hip}" if hip else None,
        torch_cuda_device_count=device_count,
        onnxruntime_version=str(getattr(ort, "__version__", "unknown")),
        installed_distributions=onnxruntime_distributions(),
        available_providers=tuple(ort.get_available_providers()),
        torch_messages=tuple(one_line(warning.message, 500) for warning in caught),
        import_messages=on_import.messages(),
        **gpu_facts(ort),
    )
    return env, ort


def check_model(check: Check, model: Path | None, wait: WaitHook | None = None) -> Facts:
    """Create `model`'s session (`None`: the tiny model), align the device, run the inference."""
    started = time.perf_counter()
    label, session, on_creation = _open(check.ort, model, check.providers)
    if isinstance(session, Unmade) and check.device.type != "cuda":
        raise ModelInputError(session.error)  # the model cannot run off the GPU: its own fault
    aligned, mismatch = align(session, check.device, check.fallback)
    with captured_output() as on_run:
        inference = run_with_deadline(session, aligned, check.options, wait)
    messages, omitted = clean_messages(
        [*check.env.import_messages, *on_creation.messages(), *on_run.messages()],
        known=[inference.detail],
    )
    return Facts(
        model=label,
        environment=check.env,
        requested_providers=tuple(name for name, _ in check.providers),
        requested_provider_options={name: dict(opts) for name, opts in check.providers if opts},
        session_providers=tuple(session.get_providers()),
        session_provider_options={
            str(name): {str(key): str(value) for key, value in values.items()}
            for name, values in getattr(session, "get_provider_options", dict)().items()
        },
        requested_device=check.device,
        aligned_device=aligned,
        mismatch=mismatch,
        inference=inference,
        onnxruntime_messages=tuple(messages),
        omitted_messages=omitted,
        session_retry=on_creation.retry(),
        seconds=time.perf_counter() - started,
        device_chosen=check.device_chosen,
    )


def model_inputs(ort: Any, model: Path | None) -> tuple[ModelInput, ...] | None:
    """The inputs `model` declares, read from a CPU session; `None` when they cannot be read."""
    try:
        _, session, _ = _open(ort, model, [("CPUExecutionProvider", {})])
        return declared_inputs(session)
    except Exception:  # the model's own check says why
        return None


def _open(
    ort: Any, model: Path | None, providers: Sequence[ProviderSpec]
) -> tuple[str, Any, Captured]:
    """The model's label, its session and what onnxruntime said creating it (`None`: tiny)."""
    if model is None:
        tiny = (files("onnx_device_guard") / "data" / "tiny.onnx").read_bytes()
        return TINY_MODEL, *create_session(ort, ModelBytes(tiny, None), TINY_MODEL, providers)
    label = display_path(model)
    return label, *create_session(ort, read_model_file(model), label, providers)


def align(
    session: object, device: torch.device, fallback: torch.device | str = "cpu"
) -> tuple[torch.device, Mismatch | None]:
    """The core's aligned device, in `"fallback"` mode and unlogged, and the mismatch if any."""
    with device_policy(warn=False):
        aligned = align_device_with_onnx_session(session, device, "fallback", fallback)
    return aligned, (find_mismatch(session, device) if aligned != device else None)


def import_onnxruntime() -> Any:
    """Import and return onnxruntime, or raise `ModelInputError` saying why not in one line."""
    try:
        import onnxruntime
    except Exception as error:  # a broken build can raise anything while loading its library
        if not isinstance(error, ModuleNotFoundError) or error.name != "onnxruntime":
            raise ModelInputError(
                f"onnxruntime is installed but importing it raised {type(error).__name__}: "
                f"{one_line(error, 500)}; reinstall exactly one onnxruntime package"
            ) from None
        if owners := [dist.name for dist in onnxruntime_distributions() if dist.provides_module]:
            raise ModelInputError(
                f"the onnxruntime module cannot be imported although pip lists {', '.join(owners)}"
                f"; reinstall it: pip install --force-reinstall {' '.join(owners)}"
            ) from None
        raise ModelInputError(
            "onnxruntime is not installed; install exactly one onnxruntime package: "
            "pip install onnxruntime (CPU) or pip install onnxruntime-gpu (CUDA)"
        ) from None
    return onnxruntime


def onnxruntime_distributions(
    distributions: Iterable[metadata.Distribution] | None = None,
) -> tuple[InstalledDistribution, ...]:
    """The installed distributions named `onnxruntime*` or `ort-nightly*`, normalised, sorted."""
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
    """Whether `dist` installs the onnxruntime module: its RECORD says, else its name."""
    if paths := dist.files:
        return any(tuple(path.parts) == ("onnxruntime", "__init__.py") for path in paths)
    return not name.removeprefix("onnxruntime-").startswith(_ADD_ONS)


def check_provider_names(names: Iterable[str], known: Iterable[str]) -> None:
    """Raise `ModelInputError` for a provider name neither `known` nor GPU-capable."""
    every = sorted({*known, *GPU_CAPABLE_EXECUTION_PROVIDERS})
    for name in names:
        if name not in every:
            hint = f"onnxruntime knows {', '.join(every)}"
            if suggestion := suggest_provider(name, every):
                hint = f"did you mean {suggestion!r}?"
            raise ModelInputError(f"unknown execution provider {name!r}; {hint}")


def suggest_provider(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to `name` (case and `ExecutionProvider` forgiven), or `None`."""
    by_key = {provider.lower(): provider for provider in known}
    forgiven = {key.removesuffix("executionprovider"): real for key, real in by_key.items()}
    key = name.strip().lower()
    close = difflib.get_close_matches(key, by_key, n=1, cutoff=0.75)
    found = forgiven.get(key.removesuffix("executionprovider"))
    return found or (by_key[close[0]] if close else None)


EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"
"""onnxruntime's session option: where a model loaded from bytes finds its external data."""


class Unmade(NamedTuple):
    """A session onnxruntime could not create: why, in one line, and the providers it tried."""

    error: str
    get_providers: Callable[[], list[str]]


def create_session(
    ort: Any, model: ModelBytes, label: str, providers: Sequence[ProviderSpec]
) -> tuple[Any, Captured]:
    """Create the session from the checked bytes; return it (`Unmade` where an operator has a
    kernel only in a GPU provider asked for that onnxruntime lost) and what onnxruntime said."""
    wanted = [(name, dict(options)) if options else name for name, options in providers]
    session_options = ort.SessionOptions()
    if model.folder is not None:
        session_options.add_session_config_entry(EXTERNAL_DATA_FOLDER, model.folder)
    with captured_output() as captured:  # filled in as the block ends, on a return too
        try:
            return ort.InferenceSession(model.content, session_options, providers=wanted), captured
        except Exception as error:
            reason = session_error(label, error, model)
    available, said = ort.get_available_providers(), captured.messages()
    loaded = {name for name in available if not (captured.retry() or own_messages(name, said))}
    lost = {name for name, _ in providers if name in GPU_CAPABLE_EXECUTION_PROVIDERS} - loaded
    if not lost or "Could not find an implementation" not in reason:
        raise ModelInputError(reason)
    tried = tuple(name for name, _ in providers if name in available and name not in lost)
    return Unmade(reason, lambda: list(tried)), captured


# onnxruntime's errors quote a C++ function signature ("... failed:" comes after it).
_CPP_NOISE = re.compile(r"^.*?\b(?:Load model from \S+ failed|failed):\s*", re.DOTALL)


def session_error(label: str, error: BaseException, model: ModelBytes | None = None) -> str:
    """Say in one line why onnxruntime could not create a session for `label`.

    Examples:
        >>> from onnx_device_guard._doctor.probe import session_error
        >>> session_error("m.onnx", RuntimeError(
        ...     "[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed:"
        ...     "/onnxruntime/core/graph/model.cc:181 onnxruntime::Model::Model(...) "
        ...     "Unsupported model IR version: 99, max supported IR version: 11"
        ... ))
        "onnxruntime cannot create a session for 'm.onnx': Unsupported model IR version: 99, ..."
    """
    text = one_line(error, 100_000)
    reason = one_line(tidy_error(_CPP_NOISE.sub("", text, count=1)), 600)
    if type(error).__name__ == "InvalidProtobuf" or re.search(
        "INVALID_PROTOBUF|No graph was found", text
    ):
        return f"'{label}' is not an ONNX model: onnxruntime cannot parse it ({reason})"
    external = "external data" in text.lower() or "model_path must not be empty" in text
    if model is not None and model.folder is None and external:
        return (
            f"the external data of '{label}' cannot be found: the name of its folder is not "
            "valid UTF-8, which onnxruntime cannot take; move or rename it"
        )
    return f"onnxruntime cannot create a session for '{label}': {reason}"


WaitHook = Callable[[float], None]
"""Called, about ten times a second, with the seconds a running inference has taken."""


def run_with_deadline(
    session: Any, device: torch.device, options: InferenceOptions, wait: WaitHook | None = None
) -> InferenceCheck:
    """`run_inference` in a worker thread, stopped (`RunOptions.terminate`, checked between
    operators) at `options.timeout` seconds, inconclusive then, or at Ctrl-C, raised again.
    """
    if isinstance(session, Unmade):  # --no-inference too: the model cannot load on this machine
        return InferenceCheck("failed", f"{NO_SESSION} ({session.error}), so nothing ran")
    if not options.run:
        return InferenceCheck("skipped", "not run (--no-inference)")
    import onnxruntime

    run_options = onnxruntime.RunOptions()
    done: list[InferenceCheck] = []
    finished = threading.Event()

    def work() -> None:
        try:
            done.append(run_inference(session, device, options, run_options))
        except Exception as error:  # the doctor's own slip: say so, never a timeout
            done.append(InferenceCheck("inconclusive", f"the doctor raised {_describe(error)}"))
        finally:
            finished.set()

    # An Event, not Thread.join: Ctrl-C inside join() leaves the thread looking
    # stopped before Python 3.13, and a later join returns at once.
    started = time.monotonic()
    threading.Thread(target=work, name="onnx-device-guard inference", daemon=True).start()
    try:
        while not finished.wait(0.1) and time.monotonic() - started < options.timeout:
            if wait is not None:
                wait(time.monotonic() - started)
    except BaseException:  # Ctrl-C: end the run before saying so
        run_options.terminate = True
        finished.wait(GRACE_SECONDS)
        raise
    if done:
        return done[0]
    run_options.terminate = True
    left = "" if finished.wait(GRACE_SECONDS) else " (and it did not stop, so it was left running)"
    return InferenceCheck(
        "inconclusive",
        f"the test inference did not end within {options.timeout:g} seconds and was stopped{left}",
        suggestion=("--timeout", str(math.ceil(options.timeout * 4))),
    )


def run_inference(
    session: Any,
    device: torch.device,
    options: InferenceOptions | None = None,
    run_options: Any = None,
) -> InferenceCheck:
    """Run the session on `device` with inputs that fit, searching if need be; never raise."""
    if device.type == "meta":
        return InferenceCheck("skipped", "tensors on 'meta' hold no data, so nothing can run there")
    try:
        inputs = declared_inputs(session)
    except UnbuildableInputError as error:
        return InferenceCheck("skipped", str(error))
    except Exception as error:
        return InferenceCheck(
            "skipped",
            f"the model's inputs cannot be read: session.get_inputs() raised {_describe(error)}",
        )
    return _Run(session, device, run_options).search(inputs, options or InferenceOptions())


@dataclass(frozen=True)
class _Run:
    """Where and how each attempt runs: the session, the device and onnxruntime's `RunOptions`."""

    session: Any
    device: torch.device
    options: Any

    @property
    def how(self) -> str:
        return "run_with_iobinding" if self.device.type == "cuda" else "InferenceSession.run"

    def search(self, inputs: Sequence[ModelInput], options: InferenceOptions) -> InferenceCheck:
        """Try the input sets in turn, within the size cap, until one runs or the run is stopped."""
        tried: list[tuple[InputSpec, ...]] = []
        last_error = ""
        for specs in attempts(inputs, options.overrides, options.dims):
            size = sum(spec.nbytes for spec in specs)
            if size > options.max_bytes and not tried:
                return _too_large(specs, size, options.max_bytes)
            if size > options.max_bytes or getattr(self.options, "terminate", False):
                break  # larger sizes only get larger
            tried.append(specs)
            failure = self.attempt(specs)
            shown = f"{self.how} on {self.device} with {_shown(specs)}"
            if failure is None:
                return InferenceCheck("ok", shown, attempts=len(tried))
            if failure[0] == "device":
                return InferenceCheck("failed", f"{shown}: {failure[1]}", attempts=len(tried))
            if failure[0] == "doctor":
                return InferenceCheck("skipped", failure[1], attempts=len(tried))
            last_error = failure[1]
        return self.inconclusive(tried, last_error, inputs)

    def attempt(self, specs: Sequence[InputSpec]) -> tuple[str, str] | None:
        """Run once; return None, or ("device" | "input" | "doctor", what went wrong)."""
        try:
            tensors = make_tensors(specs, self.device)
        except UnbuildableInputError as error:
            return "doctor", str(error)
        except Exception as error:
            return "device", f"creating the inputs on {self.device} raised {_describe(error)}"
        run = self.run_bound if self.device.type == "cuda" else self.run_numpy
        try:
            run(specs, tensors)
            return None
        except Exception as error:
            said = f"raised {_describe(error)}"
            if _MEMORY.search(said):  # not the inputs, nor torch's tensors (a host run may fit)
                return "device", f"{said}; {self.device} ran out of memory"
            if self.device.type != "cuda":
                return "input", said
        try:  # the same inputs from host memory: does the model itself refuse them?
            self.run_numpy(specs, tensors)
        except Exception as error:  # the device only if this error names it, too
            again = f"raised {_describe(error)}"
            if _DEVICE_ERROR.search(_NAMES.sub(" ", one_line(error, 100_000))):
                return "device", said if again == said else f"{said}; from host memory it {again}"
            return "input", again
        return "device", (
            f"{said}; the same inputs as NumPy arrays through InferenceSession.run completed, "
            f"so the session cannot read torch's tensors on {self.device}"
        )

    def run_bound(self, specs: Sequence[InputSpec], tensors: Sequence[torch.Tensor]) -> None:
        """Bind `tensors` in place as the session's inputs, outputs on the same GPU, and run."""
        binding = self.session.io_binding()
        device_id = cuda_index(self.device)
        for spec, tensor in zip(specs, tensors, strict=True):
            binding.bind_input(
                name=spec.name,
                device_type="cuda",
                device_id=device_id,
                element_type=torch.empty(0, dtype=spec.dtype).numpy().dtype.type,
                shape=tuple(tensor.shape),
                buffer_ptr=tensor.data_ptr(),
            )
        for output in self.session.get_outputs():
            binding.bind_output(output.name, device_type="cuda", device_id=device_id)
        if any(tensor.is_cuda for tensor in tensors):
            # onnxruntime runs on its own stream: the inputs must be written first.
            torch.cuda.synchronize(torch.device("cuda", device_id))
        self.session.run_with_iobinding(binding, self.options)
        binding.copy_outputs_to_cpu()  # returns once the outputs really exist

    def run_numpy(self, specs: Sequence[InputSpec], tensors: Sequence[torch.Tensor]) -> None:
        """Run the session from host copies of `tensors`."""
        feeds = {s.name: t.cpu().numpy() for s, t in zip(specs, tensors, strict=True)}
        self.session.run(None, feeds, self.options)

    def inconclusive(
        self, tried: Sequence[tuple[InputSpec, ...]], error: str, inputs: Sequence[ModelInput]
    ) -> InferenceCheck:
        """Every input set tried was refused by the model's own operators."""
        suspects = [item for item in inputs if item.dynamic or item.one_integer] or inputs
        culprits = mentioned_inputs(error, inputs) or tuple(item.name for item in suspects)
        what = f"the inputs {_shown(tried[0])}"
        if len(tried) > 1:
            what = (
                f"each of the {len(tried)} input sets tried, from {_shown(tried[0])} "
                f"to {_shown(tried[-1])}"
            )
        hints = [
            f"--input {item.name}=SHAPE" if item.dynamic else f"--input {item.name}=:VALUE"
            for item in inputs
            if item.name in culprits
        ]
        return InferenceCheck(
            "inconclusive",
            f"the model's own operators refused {what} ({self.how} on {self.device}); "
            f"the last {error}",
            culprits=culprits,
            suggestion=("--no-inference",),
            attempts=len(tried),
            hints=tuple(hints),
        )


def _too_large(specs: Sequence[InputSpec], size: int, limit: int) -> InferenceCheck:
    """The smallest inputs are over the cap: nothing is allocated."""
    return InferenceCheck(
        "inconclusive",
        f"inputs too large: the smallest inputs the model takes ({_shown(specs)}) need "
        f"{_mib(size)}, over the {_mib(limit)} limit; nothing was allocated",
        culprits=(max(specs, key=lambda spec: spec.nbytes).name,),
        suggestion=("--max-input-mib", str(math.ceil(size / MIB))),
    )


def _shown(specs: Sequence[InputSpec]) -> str:
    return listed([str(spec) for spec in specs], 8) or "no inputs"


def _mib(size: int) -> str:
    return f"{size / MIB:,.{1 if size < 100 * MIB else 0}f} MiB"


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {one_line(tidy_error(one_line(error, 100_000)), 500)}"
