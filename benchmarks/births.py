"""What observing a session's birth costs: creating the smallest session, hooked or not.

Two comparisons run in the same interleaved rounds.

* Whole sessions: three subclasses of ``onnxruntime.InferenceSession``, one
  bare, one whose ``__init__`` is a pass-through wrapt wrapper (the floor of
  any hook), and one whose ``__init__`` is the library's own birth hook with a
  watch in force. Creating a session varies between rounds by more than the
  hook costs, so this figure is context, not the target.
* The hook's own work: the same three, but the wrapped ``__init__`` copies a
  real session's providers instead of building one, so that what is timed is
  everything the hook adds (wrapt's call, reading what was asked for and what
  was got, the record) and nothing else. Timed in batches, its added time
  over the bare stand-in, as a share of creating the real smallest session
  in the same rounds, is the figure the 2 % target is checked on.

Each asks for the CPU only, the common case: the birth is recorded and found
to be no fallback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnxruntime
import wrapt
from timing import Target, Timing, compare, paired_ratio, paired_share

from onnx_device_guard import _births

_TEMPLATE: Any = None
"""A real session whose providers the stand-ins copy."""


class Bare(onnxruntime.InferenceSession):  # type: ignore[misc]
    """An unhooked session."""


class PassedThrough(onnxruntime.InferenceSession):  # type: ignore[misc]
    """A session whose constructor goes through a wrapt wrapper that does nothing more."""


class Observed(onnxruntime.InferenceSession):  # type: ignore[misc]
    """A session whose constructor goes through the library's birth hook."""


def _created(self: Any, *args: Any, **kwargs: Any) -> None:
    """A constructor whose session is already made: it takes the template's providers."""
    self._providers = _TEMPLATE._providers
    self._provider_options = _TEMPLATE._provider_options


class BareStandIn(onnxruntime.InferenceSession):  # type: ignore[misc]
    """A stand-in, unhooked (its constructor is `_created`, set when measured)."""


class PassedThroughStandIn(onnxruntime.InferenceSession):  # type: ignore[misc]
    """A stand-in whose constructor goes through the pass-through wrapper."""


class ObservedStandIn(onnxruntime.InferenceSession):  # type: ignore[misc]
    """A stand-in whose constructor goes through the birth hook."""


def _pass_through(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return wrapped(*args, **kwargs)


def measure_births(path: Path, rounds: int) -> dict[str, Timing]:
    """Time whole sessions and stand-ins, bare, passed through and observed, in the same rounds."""
    global _TEMPLATE
    model, cpu = str(path), ["CPUExecutionProvider"]
    _TEMPLATE = onnxruntime.InferenceSession(model, providers=cpu)
    for cls in (Bare, PassedThrough, Observed):  # each its own, so the watch's hook on the
        cls.__init__ = onnxruntime.InferenceSession.__init__  # base class reaches none of them
    for cls in (BareStandIn, PassedThroughStandIn, ObservedStandIn):
        cls.__init__ = _created
    wrapt.wrap_function_wrapper(PassedThrough, "__init__", _pass_through)
    wrapt.wrap_function_wrapper(Observed, "__init__", _births._on_init)
    wrapt.wrap_function_wrapper(PassedThroughStandIn, "__init__", _pass_through)
    wrapt.wrap_function_wrapper(ObservedStandIn, "__init__", _births._on_init)
    watch = _births.watch_sessions(warn=False)  # the hook on the base class, and a watch
    kinds = {
        "bare": Bare,
        "pass-through": PassedThrough,
        "observed": Observed,
        "bare stand-in": BareStandIn,
        "pass-through stand-in": PassedThroughStandIn,
        "observed stand-in": ObservedStandIn,
    }
    try:
        return compare(
            {name: (lambda cls=cls: cls(model, providers=cpu)) for name, cls in kinds.items()},
            rounds,
            {name: 1000 if "stand-in" in name else 10 for name in kinds},
        )
    finally:
        watch.undo()


def birth_targets(timings: dict[str, Timing]) -> tuple[dict[str, Any], list[Target]]:
    """The figures for the JSON report and the 2 % target they are checked against."""
    bare = timings["bare"]
    observed = 100 * (paired_ratio(timings["observed"], bare) - 1)
    passed = 100 * (paired_ratio(timings["pass-through"], bare) - 1)
    hook = paired_share(timings["observed stand-in"], timings["bare stand-in"], bare)
    floor = paired_share(timings["pass-through stand-in"], timings["bare stand-in"], bare)
    figures: dict[str, Any] = {name: timing.summary() for name, timing in timings.items()}
    figures["observed_added_percent"] = observed
    figures["pass_through_added_percent"] = passed
    figures["hook_work_percent_of_session"] = hook
    figures["pass_through_work_percent_of_session"] = floor
    label = f"a birth's hook work / smallest session (wrapt floor {floor:.2f} %)"
    return figures, [Target(label, hook, 2.0, "%")]
