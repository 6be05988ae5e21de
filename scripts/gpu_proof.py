"""Prove the guard on a real GPU machine where onnxruntime is the CPU build.

This is the everyday failure the project exists for: torch sees a CUDA GPU,
but the installed onnxruntime cannot read CUDA memory. Run it once on such a
machine (``python scripts/gpu_proof.py [--output gpu-proof.json]``, well
under five minutes); it

1. IO-binds a CUDA tensor to a raw session of the packaged tiny model
   (``y = x + 1``) and records what onnxruntime raises (expected: "no data
   transfer registered");
2. loads the same model through a ``device_guard``-ed factory that asks for
   ``cuda`` and checks that the model falls back to ``cpu`` and runs;
3. runs ``python -m onnx_device_guard doctor --device cuda --json`` and
   checks its verdict;
4. runs an unmodified program that asks for CUDA under
   ``onnx-device-guard run --strict`` and checks that its session
   constructor raises (or, with onnxruntime-gpu, runs on CUDA);
5. checks the device-index logic against the real
   ``torch.cuda.current_device()`` and ``torch.device("cuda")``;
6. writes every fact and check as JSON to ``--output`` and as text beside
   it (the same name with ``.txt``).

Where onnxruntime does have a GPU provider (onnxruntime-gpu), the expectations
turn round: the raw IO binding works and the model stays on ``cuda``.

Without a CUDA device visible to torch it prints "skipped: torch sees no CUDA
device", writes that to the output and exits 0. It exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import platform
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

import numpy as np
import torch

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
EXPECTED_BINDING_ERROR = "no data transfer registered"


@dataclass
class Check:
    """One step of the proof: what was expected, what happened, and whether they agree."""

    name: str
    expected: str
    observed: str = ""
    passed: bool = False
    facts: dict[str, Any] = field(default_factory=dict)


def gpu_session(path: Path) -> Any:
    """A session that asks for CUDA then CPU, as a model's loader would.

    A CPU build of onnxruntime warns that the CUDA provider is not available
    and carries on with CPU only; the warning is the everyday silent part.
    """
    import onnxruntime

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return onnxruntime.InferenceSession(str(path), providers=[CUDA, CPU])


def onnxruntime_reads_cuda() -> bool:
    """Whether the installed onnxruntime offers a provider that reads CUDA memory."""
    import onnxruntime

    from onnx_device_guard import GPU_CAPABLE_EXECUTION_PROVIDERS

    return bool(set(onnxruntime.get_available_providers()) & GPU_CAPABLE_EXECUTION_PROVIDERS)


def run_bound(session: Any, x: torch.Tensor) -> torch.Tensor:
    """Run the tiny model with `x` and its output bound in place on `x.device`."""
    y = torch.empty_like(x)
    device_type = "cuda" if x.device.type == "cuda" else "cpu"
    index = x.device.index or 0
    binding = session.io_binding()
    binding.bind_input("x", device_type, index, np.float32, tuple(x.shape), x.data_ptr())
    binding.bind_output("y", device_type, index, np.float32, tuple(y.shape), y.data_ptr())
    session.run_with_iobinding(binding)
    return y


def check_raw_binding(path: Path, reads_cuda: bool) -> Check:
    """Step 1: IO-bind a CUDA tensor to the raw session."""
    check = Check(
        "raw session, CUDA tensor bound",
        "runs and returns x + 1"
        if reads_cuda
        else f"onnxruntime raises, saying {EXPECTED_BINDING_ERROR!r}",
    )
    session = gpu_session(path)
    check.facts["session_providers"] = list(session.get_providers())
    x = torch.arange(8, dtype=torch.float32, device="cuda").reshape(2, 4)
    try:
        y = run_bound(session, x)
        torch.cuda.synchronize()
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
        check.observed = f"raised {message}"
        check.facts["error"] = message
        check.facts["message_says_no_data_transfer"] = EXPECTED_BINDING_ERROR in str(error).lower()
        check.passed = not reads_cuda
        return check
    correct = bool(torch.equal(y, x + 1))
    check.observed = f"ran on {list(session.get_providers())}; output correct: {correct}"
    check.passed = reads_cuda and correct
    return check


class TinyModel:
    """A model as a `from_pretrained` factory returns it: a session and a device."""

    def __init__(self, session: Any, device: torch.device) -> None:
        self.session = session
        self.device = device

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device)
        if self.device.type == "cuda":
            return run_bound(self.session, x)
        (y,) = self.session.run(["y"], {"x": x.numpy()})
        return torch.from_numpy(y)


def check_guarded_factory(path: Path, reads_cuda: bool) -> Check:
    """Step 2: the same model through a guarded factory asking for cuda."""
    from onnx_device_guard import device_guard

    @device_guard
    def load_tiny(device: str = "cuda") -> TinyModel:
        return TinyModel(gpu_session(path), torch.device(device))

    expected_device = "cuda" if reads_cuda else "cpu"
    check = Check(
        "guarded factory asking for cuda",
        f"the model's device is {expected_device!r}, one WARNING if it moved, and it runs",
    )
    records: list[logging.LogRecord] = []
    handler = _Recorder(records)
    logger = logging.getLogger("onnx_device_guard")
    logger.addHandler(handler)
    try:
        model = load_tiny()
    finally:
        logger.removeHandler(handler)
    warnings_logged = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    y = model(x)
    correct = bool(torch.equal(y.cpu(), x + 1))
    check.facts.update(
        device=str(model.device),
        session_providers=list(model.session.get_providers()),
        warnings=warnings_logged,
        output_correct=correct,
    )
    check.observed = (
        f"device {str(model.device)!r}, {len(warnings_logged)} WARNING(s), output correct: "
        f"{correct}"
    )
    check.passed = (
        model.device.type == expected_device
        and len(warnings_logged) == (0 if reads_cuda else 1)
        and correct
    )
    return check


def check_doctor(reads_cuda: bool) -> Check:
    """Step 3: the doctor's verdict for --device cuda."""
    expected = "ok" if reads_cuda else "fallback"
    check = Check(
        "doctor --device cuda --json",
        f"exit 0, verdict {expected!r}, the test inference ran, torch's CUDA not blamed",
    )
    command = [sys.executable, "-m", "onnx_device_guard", "doctor", "--device", "cuda", "--json"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    check.facts["exit_code"] = result.returncode
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        check.observed = f"exit {result.returncode}, no JSON; stderr: {result.stderr[-2000:]}"
        return check
    kinds = [finding["kind"] for finding in report.get("findings", [])]
    check.facts.update(
        verdict=report.get("verdict"),
        summary=report.get("summary"),
        aligned_device=report.get("aligned_device"),
        inference_ok=report.get("inference_ok"),
        finding_kinds=kinds,
        torch_cuda_device_count=report.get("torch_cuda_device_count"),
    )
    check.observed = (
        f"exit {result.returncode}, verdict {report.get('verdict')!r}, aligned device "
        f"{report.get('aligned_device')!r}, findings {kinds}"
    )
    check.passed = (
        result.returncode == 0
        and report.get("verdict") == expected
        and report.get("inference_ok") is True
        and "torch-sees-no-cuda" not in kinds
        and (reads_cuda or "no-gpu-provider-in-build" in kinds)
    )
    return check


WATCHED_PROGRAM = """
import onnxruntime, warnings
from onnx_device_guard import example_model
warnings.simplefilter("ignore", UserWarning)
session = onnxruntime.InferenceSession(
    example_model(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
)
print(session.get_providers())
"""


def check_run_command(reads_cuda: bool) -> Check:
    """Step 4: an unmodified program under `onnx-device-guard run --strict`."""
    check = Check(
        "run --strict -- python program asking for CUDA",
        "exit 0, the session on CUDA"
        if reads_cuda
        else "exit 1: the program's session constructor raises EnvironmentConfigurationError",
    )
    command = [sys.executable, "-m", "onnx_device_guard", "run", "--strict", "--"]
    command += [sys.executable, "-c", WATCHED_PROGRAM]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    raised = "EnvironmentConfigurationError: onnxruntime dropped" in result.stderr
    check.facts.update(exit_code=result.returncode, stdout=result.stdout, raised=raised)
    check.observed = f"exit {result.returncode}; raised: {raised}; stdout {result.stdout!r}"
    check.passed = (
        result.returncode == 0 and CUDA in result.stdout
        if reads_cuda
        else result.returncode == 1 and raised
    )
    return check


class _IndexedSession:
    """A session whose CUDA provider says it runs on `device_id` (what onnxruntime-gpu reports)."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id

    def get_providers(self) -> list[str]:
        return [CUDA, CPU]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {CUDA: {"device_id": str(self.device_id)}, CPU: {}}


def check_index_logic() -> Check:
    """Step 4: `cuda` means torch's current device; another device_id moves the model there."""
    from onnx_device_guard import EnvironmentConfigurationError, align_device_with_onnx_session

    torch.cuda.init()  # type: ignore[no-untyped-call]
    current = torch.cuda.current_device()
    plain = torch.device("cuda")
    check = Check(
        "device index against torch.cuda.current_device()",
        f"'cuda' and 'cuda:{current}' stay for a session on device_id {current}; a session on "
        f"device_id {current + 1} moves them to cuda:{current + 1} ('fallback') or raises "
        "('fail')",
    )
    same = _IndexedSession(current)
    other = _IndexedSession(current + 1)
    observed: dict[str, Any] = {
        "current_device": current,
        "device_count": torch.cuda.device_count(),
        "device_name": torch.cuda.get_device_name(current),
    }
    logger = logging.getLogger("onnx_device_guard")
    level = logger.level
    logger.setLevel(logging.ERROR)  # the 'fallback' case warns by design
    try:
        observed["same_plain"] = str(align_device_with_onnx_session(same, plain))
        observed["same_indexed"] = str(align_device_with_onnx_session(same, f"cuda:{current}"))
        observed["other_plain"] = str(align_device_with_onnx_session(other, plain, "fallback"))
    finally:
        logger.setLevel(level)
    try:
        align_device_with_onnx_session(other, plain, "fail")
        observed["other_plain_fail"] = "returned"
    except EnvironmentConfigurationError as error:
        observed["other_plain_fail"] = f"raised: {error.message}"
    check.facts = observed
    check.observed = (
        f"{observed['same_plain']}, {observed['same_indexed']}, {observed['other_plain']}, "
        f"{observed['other_plain_fail'][:60]}"
    )
    check.passed = (
        observed["same_plain"] == "cuda"
        and observed["same_indexed"] == f"cuda:{current}"
        and observed["other_plain"] == f"cuda:{current + 1}"
        and observed["other_plain_fail"].startswith("raised:")
    )
    return check


class _Recorder(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.DEBUG)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def environment() -> dict[str, Any]:
    """Versions and the machine, for the record."""
    import onnxruntime

    import onnx_device_guard

    facts: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "onnx_device_guard": onnx_device_guard.__version__,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "onnxruntime": onnxruntime.__version__,
        "onnxruntime_providers": onnxruntime.get_available_providers(),
    }
    if torch.cuda.is_available():
        facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return facts


def prove() -> dict[str, Any]:
    """Run every step; a step that raises fails with its traceback, the others still run."""
    started = time.monotonic()
    facts = environment()
    reads_cuda = onnxruntime_reads_cuda()
    facts["onnxruntime_reads_cuda"] = reads_cuda
    checks: list[Check] = []
    with as_file(files("onnx_device_guard") / "data" / "tiny.onnx") as path:
        steps: list[tuple[str, Callable[[], Check]]] = [
            ("raw session, CUDA tensor bound", lambda: check_raw_binding(path, reads_cuda)),
            ("guarded factory asking for cuda", lambda: check_guarded_factory(path, reads_cuda)),
            ("doctor --device cuda --json", lambda: check_doctor(reads_cuda)),
            ("run --strict", lambda: check_run_command(reads_cuda)),
            ("device index against torch.cuda.current_device()", check_index_logic),
        ]
        for name, step in steps:
            try:
                checks.append(step())
            except Exception:
                crash = f"crashed:\n{traceback.format_exc()}"
                checks.append(Check(name, "the step completes", crash))
    passed = all(check.passed for check in checks)
    return {
        "status": "passed" if passed else "failed",
        "environment": facts,
        "checks": [asdict(check) for check in checks],
        "seconds": round(time.monotonic() - started, 1),
    }


def skipped(reason: str) -> dict[str, Any]:
    return {"status": "skipped", "reason": reason, "environment": environment()}


def render(results: dict[str, Any]) -> str:
    """The results as text a person reads."""
    env = results["environment"]
    lines = [
        f"GPU proof, {env.get('date')}: {results['status'].upper()}",
        f"torch {env['torch']} (CUDA {env['torch_cuda']}) | onnxruntime {env['onnxruntime']} "
        f"{env['onnxruntime_providers']} | onnx-device-guard {env['onnx_device_guard']} | "
        f"Python {env['python']}",
    ]
    if results["status"] == "skipped":
        lines.append(f"skipped: {results['reason']}")
        return "\n".join(lines)
    lines.append(f"GPUs: {env.get('gpus')}")
    for number, check in enumerate(results["checks"], start=1):
        mark = "PASS" if check["passed"] else "FAIL"
        lines.append(f"\n{number}. {mark} {check['name']}")
        lines.append(f"   expected: {check['expected']}")
        lines.append(f"   observed: {check['observed']}")
        for key, value in check["facts"].items():
            lines.append(f"   {key}: {value}")
    lines.append(f"\n{results['seconds']} s")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("gpu-proof.json"),
        help="where to write the results as JSON; the text goes beside it, as .txt "
        "(default: %(default)s)",
    )
    args = parser.parse_args(argv)
    results = prove() if torch.cuda.is_available() else skipped("torch sees no CUDA device")
    text = render(results)
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    args.output.with_suffix(".txt").write_text(text + "\n", encoding="utf-8")
    print(f"\nwrote {args.output} and {args.output.with_suffix('.txt')}")
    return 1 if results["status"] == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
