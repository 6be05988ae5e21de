"""What observing a session's birth costs: creating the smallest session, hooked or not.

Three subclasses of ``onnxruntime.InferenceSession`` are created in the same
interleaved rounds: one bare, one whose ``__init__`` is a pass-through wrapt
wrapper (the floor of any hook), and one whose ``__init__`` is the library's
own birth hook with a watch in force. Each asks for the CPU only, the common
case: the birth is recorded and found to be no fallback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnxruntime
import wrapt
from timing import Target, Timing, compare, paired_ratio

from onnx_device_guard import _births


class Bare(onnxruntime.InferenceSession):  # type: ignore[misc]
    """An unhooked session."""


class PassedThrough(onnxruntime.InferenceSession):  # type: ignore[misc]
    """A session whose constructor goes through a wrapt wrapper that does nothing more."""


class Observed(onnxruntime.InferenceSession):  # type: ignore[misc]
    """A session whose constructor goes through the library's birth hook."""


def _pass_through(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return wrapped(*args, **kwargs)


def measure_births(path: Path, rounds: int) -> dict[str, Timing]:
    """Time the three kinds of session creation in the same rounds."""
    for cls in (Bare, PassedThrough, Observed):  # each its own, so the watch's hook on the
        cls.__init__ = onnxruntime.InferenceSession.__init__  # base class reaches none of them
    wrapt.wrap_function_wrapper(PassedThrough, "__init__", _pass_through)
    wrapt.wrap_function_wrapper(Observed, "__init__", _births._on_init)
    watch = _births.watch_sessions(warn=False)  # the hook on the base class, and a watch
    try:
        model, cpu = str(path), ["CPUExecutionProvider"]
        return compare(
            {
                name: (lambda cls=cls: cls(model, providers=cpu))
                for name, cls in (
                    ("bare", Bare),
                    ("pass-through", PassedThrough),
                    ("observed", Observed),
                )
            },
            rounds,
            10,
        )
    finally:
        watch.undo()


def birth_targets(timings: dict[str, Timing]) -> tuple[dict[str, Any], list[Target]]:
    """The figures for the JSON report and the 2 % target they are checked against."""
    observed = 100 * (paired_ratio(timings["observed"], timings["bare"]) - 1)
    passed = 100 * (paired_ratio(timings["pass-through"], timings["bare"]) - 1)
    figures = {name: timing.summary() for name, timing in timings.items()}
    figures["observed_added_percent"] = observed
    figures["pass_through_added_percent"] = passed
    label = f"observing a birth, added to the smallest session (pass-through: {passed:+.1f} %)"
    return figures, [Target(label, observed, 2.0, "%")]
