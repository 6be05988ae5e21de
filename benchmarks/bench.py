"""What onnx-device-guard costs: per call, per guarded factory call, and at import.

Run with ``nox -s bench``, or ``python benchmarks/bench.py [--output FILE] [--quick]``
in an environment with the project, torch and onnxruntime installed. It measures,
side by side in one run:

* the alignment core on its compatible path (a GPU session reporting a
  ``device_id``) and on its fallback path (a real CPU session, ``warn=False``),
  each against a minimal baseline that does only the seed's bare steps;
* a guarded factory that returns a ready model, against the same factory
  under a pass-through wrapt wrapper and bare, and the time to create the
  smallest real onnxruntime session, for scale;
* following a session's provider changes (``following.py``): ``run()`` of a
  watched real session against an unwatched one, and the cost of one
  re-alignment after ``set_providers``;
* observing a session's birth (``births.py``): the hook's own work on a
  stand-in session whose creation costs nothing, against bare and
  pass-through stand-ins, as a share of creating the smallest real session;
  and, for context, whole sessions created through the hook, bare and under a
  pass-through wrapt wrapper;
* ``import onnx_device_guard`` in a fresh interpreter that has imported torch.

The timing helpers live in ``timing.py``, beside this script. Timing is
stdlib only (``time.perf_counter_ns``). The variants of a comparison run in
interleaved rounds with the garbage collector off; each round times a batch
of calls, and the report gives the median per call and the spread between
the first and third quartiles (IQR). A ratio is the median of the
per-round ratios, so a slow patch of the machine weighs on both sides alike.

It prints a table, writes every figure as JSON and exits 0 whether the
targets are met or not; each target is marked PASS or MISS.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from importlib.metadata import version
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

import onnxruntime
import torch
import wrapt

# The modules beside this script (its folder is first on sys.path when run).
from births import birth_targets, measure_births
from following import following_rows, following_targets, measure_following
from timing import Target, Timing, bench_main, compare, paired_ratio, paired_share

import onnx_device_guard
from onnx_device_guard import (
    GPU_CAPABLE_EXECUTION_PROVIDERS,
    align_device_with_onnx_session,
    device_guard,
    device_policy,
)

CUDA0 = torch.device("cuda", 0)
CPU = torch.device("cpu")


# --- What is measured --------------------------------------------------------


def baseline_align(
    session: Any,
    device: torch.device,
    resolution_mode: str = "fallback",
    fallback_device: torch.device | None = None,
) -> torch.device:
    """The seed's bare steps and nothing more: the floor the core is compared with.

    A mode check, a type check and ``set(get_providers())`` intersected with
    the GPU-capable providers; no device index, no scopes, no logging.
    """
    if resolution_mode not in ("fail", "fallback"):
        raise ValueError(f"resolution_mode must be 'fail' or 'fallback'; got {resolution_mode!r}")
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be a torch.device; got {device!r}")
    if device.type != "cuda":
        return device
    if set(session.get_providers()) & GPU_CAPABLE_EXECUTION_PROVIDERS:
        return device
    if resolution_mode == "fail":
        raise RuntimeError(f"the session cannot read {device}")
    return CPU if fallback_device is None else fallback_device


class GPUSession:
    """Stands in for an onnxruntime session whose CUDA provider loaded, on GPU 0.

    Like ``onnxruntime.InferenceSession``, whose ``get_providers()`` and
    ``get_provider_options()`` return lists and dicts it made at creation,
    it hands back the objects it keeps (with options as onnxruntime reports
    them: strings).
    """

    def __init__(self) -> None:
        self._providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        self._provider_options = {
            "CUDAExecutionProvider": {
                "device_id": "0",
                "gpu_mem_limit": "18446744073709551615",
                "arena_extend_strategy": "kNextPowerOfTwo",
                "cudnn_conv_algo_search": "EXHAUSTIVE",
                "do_copy_in_default_stream": "1",
            },
            "CPUExecutionProvider": {},
        }

    def get_providers(self) -> list[str]:
        return self._providers

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return self._provider_options


class Model:
    """A ready model, as a ``from_pretrained`` factory returns it."""

    def __init__(self, session: Any, device: torch.device) -> None:
        self._session = session
        self._device = device


@wrapt.decorator
def pass_through(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The floor of any wrapt decorator: call the factory, return what it returns."""
    return wrapped(*args, **kwargs)


def new_cpu_session(path: Path) -> Any:
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


# --- Timing ------------------------------------------------------------------


IMPORT_PROBE = """
import json, sys, time
import torch
start = time.perf_counter_ns()
import onnx_device_guard
elapsed = time.perf_counter_ns() - start
print(json.dumps({"ns": elapsed, "onnxruntime_imported": "onnxruntime" in sys.modules}))
"""


def time_import(repeats: int) -> tuple[Timing, bool]:
    """Time ``import onnx_device_guard`` on top of torch, each in a fresh interpreter."""
    timing = Timing("import onnx_device_guard", 1)
    onnxruntime_imported = False
    for _ in range(repeats + 1):
        result = subprocess.run(
            [sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, check=True
        )
        probe = json.loads(result.stdout.strip().splitlines()[-1])
        timing.per_call_ns.append(float(probe["ns"]))
        onnxruntime_imported |= bool(probe["onnxruntime_imported"])
    del timing.per_call_ns[0]  # the first run may fill the OS file cache
    return timing, onnxruntime_imported


# --- The run -----------------------------------------------------------------


def run(quick: bool) -> dict[str, Any]:
    """Take every measurement; return the figures and the targets."""
    with as_file(files("onnx_device_guard") / "data" / "tiny.onnx") as path:
        return measure(Path(path), quick)


def measure(path: Path, quick: bool) -> dict[str, Any]:
    rounds, calls = (9, 500) if quick else (41, 2000)
    import_repeats = 3 if quick else 11

    gpu_session = GPUSession()
    cpu_session = new_cpu_session(path)

    # Check the two sides agree before timing them.
    assert align_device_with_onnx_session(gpu_session, CUDA0) == CUDA0
    assert baseline_align(gpu_session, CUDA0) == CUDA0
    with device_policy(warn=False):
        assert align_device_with_onnx_session(cpu_session, CUDA0) == CPU
    assert baseline_align(cpu_session, CUDA0) == CPU

    compatible = compare(
        {
            "core": functools.partial(align_device_with_onnx_session, gpu_session, CUDA0),
            "baseline": functools.partial(baseline_align, gpu_session, CUDA0),
        },
        rounds,
        calls,
    )
    with device_policy(warn=False):
        fallback = compare(
            {
                "core": functools.partial(align_device_with_onnx_session, cpu_session, CUDA0),
                "baseline": functools.partial(baseline_align, cpu_session, CUDA0),
            },
            rounds,
            calls,
        )

    guards: dict[str, dict[str, Timing]] = {}
    for label, model in (
        ("cuda model, GPU session", Model(gpu_session, CUDA0)),
        ("cpu model, real CPU session", Model(cpu_session, CPU)),
    ):

        def factory(model: Model = model) -> Model:
            return model

        guarded, wrapped = device_guard(factory), pass_through(factory)
        ready = model._device
        assert guarded() is model
        assert model._device is ready, "the model was ready: the guard leaves it as it is"
        # Sessions are created in the same rounds, so the guard's share of one
        # is taken from figures measured at the same time on a noisy machine.
        guards[label] = compare(
            {
                "guarded": guarded,
                "pass-through": wrapped,
                "bare": factory,
                "session creation": functools.partial(new_cpu_session, path),
            },
            rounds,
            {"guarded": calls, "pass-through": calls, "bare": calls, "session creation": 2},
        )

    session_creation = Timing("session creation", 2)
    for timings in guards.values():
        session_creation.per_call_ns += timings["session creation"].per_call_ns
    following_figures, following_goals = following_targets(measure_following(path, rounds, calls))
    birth_figures, birth_goals = birth_targets(measure_births(path, rounds))
    import_time, onnxruntime_imported = time_import(import_repeats)

    targets = [
        Target(
            "core / baseline, compatible path",
            paired_ratio(compatible["core"], compatible["baseline"]),
            2.0,
            "x",
        ),
        Target(
            "core / baseline, fallback path",
            paired_ratio(fallback["core"], fallback["baseline"]),
            2.0,
            "x",
        ),
    ]
    guard_figures: dict[str, Any] = {}
    for label, timings in guards.items():
        added = timings["guarded"].median_ns - timings["bare"].median_ns
        share = paired_share(timings["guarded"], timings["bare"], timings["session creation"])
        guard_figures[label] = {
            "timings": {name: timing.summary() for name, timing in timings.items()},
            "ratio_to_pass_through": paired_ratio(timings["guarded"], timings["pass-through"]),
            "added_ns": round(added, 1),
            "added_share_of_session_creation_percent": share,
        }
        # The guard runs once per load: its share of a load is the target, and
        # the ratio to a pass-through wrapper is reported, not held to a bound.
        targets.append(Target(f"guard's added time / session creation, {label}", share, 1.0, "%"))
    targets.extend(following_goals)
    targets.extend(birth_goals)
    targets.append(Target("import on top of torch", import_time.median_ns / 1e6, 30.0, "ms"))
    targets.append(
        Target(
            "onnxruntime imported by import onnx_device_guard", float(onnxruntime_imported), 0, ""
        )
    )

    return {
        "environment": environment(),
        "settings": {
            "quick": quick,
            "rounds": rounds,
            "calls_per_round": calls,
            "import_repeats": import_repeats,
        },
        "core": {
            "compatible_path": {n: t.summary() for n, t in compatible.items()},
            "fallback_path": {n: t.summary() for n, t in fallback.items()},
        },
        "guard": guard_figures,
        "following": following_figures,
        "births": birth_figures,
        "session_creation": session_creation.summary(),
        "import": {**import_time.summary(), "onnxruntime_imported": onnxruntime_imported},
        "targets": [target.as_dict() for target in targets],
    }


def environment() -> dict[str, Any]:
    try:
        switch = importlib.import_module("wrapt.__wrapt__")
    except ImportError:  # another wrapt layout
        switch = None
    wrapt_c_extension = getattr(switch, "_using_c_extension", None)
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "onnx_device_guard": onnx_device_guard.__version__,
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "wrapt": version("wrapt"),
        "wrapt_c_extension": wrapt_c_extension,
    }


# --- Report ------------------------------------------------------------------


def microseconds(ns: float) -> str:
    return f"{ns / 1000:8.3f} us"


def render(results: dict[str, Any]) -> str:
    lines: list[str] = []
    env = results["environment"]
    lines.append(
        f"onnx-device-guard {env['onnx_device_guard']} | Python {env['python']} | "
        f"torch {env['torch']} | onnxruntime {env['onnxruntime']} | wrapt {env['wrapt']} "
        f"(C extension: {env['wrapt_c_extension']}) | {env['cpu_count']} CPUs"
    )
    settings = results["settings"]
    lines.append(
        f"{settings['rounds']} interleaved rounds of {settings['calls_per_round']} calls; "
        "median per call (IQR)"
    )
    lines.append("")
    header = f"{'measurement':58} {'median':>11}  {'IQR':>11}"
    lines.append(header)
    lines.append("-" * len(header))

    def row(name: str, summary: dict[str, Any]) -> None:
        lines.append(
            f"{name:58} {microseconds(summary['median_ns'])}  {microseconds(summary['iqr_ns'])}"
        )

    for path_name, label in (("compatible_path", "compatible"), ("fallback_path", "fallback")):
        for variant, summary in results["core"][path_name].items():
            row(f"core path: {label:10} | {variant}", summary)
    for label, figures in results["guard"].items():
        for variant, summary in figures["timings"].items():
            row(f"guard: {label:27} | {variant}", summary)
    for name, summary in following_rows(results["following"]):
        row(name, summary)
    for variant, summary in results["births"].items():
        if isinstance(summary, dict):
            row(f"session birth: {variant}", summary)
    row("smallest real CPU session creation", results["session_creation"])
    row("import onnx_device_guard after torch", results["import"])
    lines.append("")
    header = f"{'target':70} {'figure':>9}  {'limit':>7}  status"
    lines.append(header)
    lines.append("-" * len(header))
    for target in results["targets"]:
        if target["unit"]:
            figure = f"{target['figure']:.2f} {target['unit']}"
            limit = f"{target['limit']:g} {target['unit']}"
        else:
            figure, limit = ("yes" if target["figure"] else "no"), "no"
        lines.append(f"{target['name']:70} {figure:>9}  {limit:>7}  {target['status']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else None
    return bench_main(argv, description, Path("bench-results.json"), run, render)


if __name__ == "__main__":
    sys.exit(main())
