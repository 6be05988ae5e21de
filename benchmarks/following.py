"""What following a session's provider changes costs: per inference, and per change.

Measured side by side, in interleaved rounds (see ``timing``):

* ``run()`` of the tiny model's real CPU session while a model watches it
  against another real session of the same model that nobody watches, over
  several fresh groups of sessions (which one is watched rotates). A third,
  unwatched session in each group gives an A/A control, printed beside the
  figure: the spread of two identical sides on this machine, against which a
  MISS can be judged. The hook is ``InferenceSession.set_providers``, wrapped
  on the class, and nothing is put on the session, so the target is no added
  time: within 2 %.
* One provider change: on a real session whose base ``set_providers`` only
  swaps a list (its ``_reset_session`` overridden), the follower's own cost
  (a no-op callback) and one re-alignment (the callback aligns the model
  again, ``"fallback"``, and writes the device back), each against the same
  kind of session called past the class's wrapper; an unwatched one through
  the wrapper beside them; and ``set_providers`` on real sessions, followed
  and not, for scale (onnxruntime re-creates the session there). The
  providers alternate between two lists, so every call is a change.
  Target: the follower's own cost within 2 % of a real ``set_providers`` on
  the smallest model, where that is cheapest; the re-alignment, most of
  which is the alignment itself, is reported beside.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import torch
from timing import Target, Timing, compare, paired_ratio, paired_share

from onnx_device_guard import align_device_with_onnx_session, device_policy
from onnx_device_guard._births import release, use
from onnx_device_guard._follow import Providers, followers_of, watch

CPU_ONLY = ["CPUExecutionProvider"]
WITH_AZURE = ["AzureExecutionProvider", "CPUExecutionProvider"]
REQUESTED = torch.device("cuda", 0)


class Model:
    """A model as a factory returns it, remembering the device it asked for."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.requested = REQUESTED
        self.device = REQUESTED


def realign(model: Any, session_name: str, old: Providers, new: Providers) -> None:
    """What the guard does on a change: align the requested device again, write it back."""
    with device_policy(warn=False):
        aligned = align_device_with_onnx_session(model.session, model.requested, "fallback")
    if aligned != model.device:
        model.device = aligned


class SwappingSession(onnxruntime.InferenceSession):  # type: ignore[misc]
    """A real session whose base ``set_providers`` only swaps its list: the hook's cost, alone."""

    def _reset_session(self, providers: list[str], provider_options: object) -> None:
        self._providers = providers
        self._provider_options = {name: {} for name in providers}


def alternating(session: Any, unhooked: bool = False) -> Callable[[], object]:
    """A call that switches `session` to the other provider list each time.

    `unhooked` calls onnxruntime's own `set_providers`, past the class's wrapper.
    """
    lists = itertools.cycle([WITH_AZURE, CPU_ONLY])
    if unhooked:
        original = onnxruntime.InferenceSession.set_providers.__wrapped__
        return lambda: original(session, next(lists))
    return lambda: session.set_providers(next(lists))


def measure_following(path: Path, rounds: int, calls: int) -> dict[str, dict[str, Timing]]:
    """Take the measurements, with the class hooks in place; return the timings by comparison."""
    use()
    try:
        return _measure(path, rounds, calls)
    finally:
        release()


def _measure(path: Path, rounds: int, calls: int) -> dict[str, dict[str, Timing]]:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    expected = x + 1

    def new_session() -> Any:
        return onnxruntime.InferenceSession(str(path), providers=CPU_ONLY)

    # run(): fresh sessions in threes, roles rotating, so that neither one session's
    # own speed nor creation order counts as the hook's. The two unfollowed ones are
    # an A/A control: how far apart two identical sides land on this machine.
    groups = max(3, rounds // 2)
    names = ("followed session", "plain session", "another plain session")
    inference = {name: Timing(name, calls) for name in names}
    for group in range(groups):
        sessions = [new_session() for _ in names]
        followed, plain, other = (sessions[(group + shift) % 3] for shift in range(3))
        model = Model(followed)
        watch(model, [("session", followed)], realign)
        assert followers_of(followed) is not None
        for session in sessions:  # every side gives the same answer
            assert (session.run(["y"], {"x": x})[0] == expected).all()
        timings = compare(
            {
                name: functools.partial(session.run, ["y"], {"x": x})
                for name, session in zip(names, (followed, plain, other), strict=True)
            },
            max(2, rounds // groups),
            calls,
        )
        assert model.device == REQUESTED, "run() never changes providers"
        for name, timing in timings.items():
            inference[name].per_call_ns += timing.per_call_ns

    hooked_set, plain_set = new_session(), new_session()
    hooked_swap, noop_swap, plain_swap, bare_swap = (
        SwappingSession(str(path), providers=CPU_ONLY) for _ in range(4)
    )
    models = [Model(hooked_set), Model(hooked_swap)]
    quiet = Model(noop_swap)
    for model in models:
        watch(model, [("session", model.session)], realign)
    watch(quiet, [("session", noop_swap)], ignore)
    assert followers_of(noop_swap) is not None
    hooked_set.set_providers(WITH_AZURE)
    assert models[0].device == torch.device("cpu"), "a change re-aligns the model"
    hooked_set.set_providers(CPU_ONLY)
    swaps = max(10, calls // 5)
    change = compare(
        {
            "real session, followed": alternating(hooked_set),
            "real session, plain": alternating(plain_set),
            "swap, followed, re-aligning": alternating(hooked_swap),
            "swap, followed, no-op": alternating(noop_swap),
            "swap, plain": alternating(plain_swap),
            "swap, unhooked": alternating(bare_swap, unhooked=True),
        },
        rounds,
        {
            "real session, followed": max(2, calls // 500),
            "real session, plain": max(2, calls // 500),
            "swap, followed, re-aligning": swaps,
            "swap, followed, no-op": swaps,
            "swap, plain": swaps,
            "swap, unhooked": swaps,
        },
    )
    return {"run": inference, "set_providers": change}


def ignore(model: Any, session_name: str, old: Providers, new: Providers) -> None:
    """A callback that does nothing: what is left is the follower's own cost."""


def following_targets(
    timings: dict[str, dict[str, Timing]],
) -> tuple[dict[str, Any], list[Target]]:
    """The figures for the JSON report and the targets they are checked against.

    A change's costs are taken on a session whose ``set_providers`` only
    swaps a list, where nothing else varies, measured from the same call past
    the class's wrapper (``swap, unhooked``), and set against a real
    ``set_providers`` of the smallest model timed in the same rounds; the two
    real sessions' difference is too noisy to read microseconds from.
    """
    run, change = timings["run"], timings["set_providers"]
    run_added = 100 * (paired_ratio(run["followed session"], run["plain session"]) - 1)
    control = 100 * (paired_ratio(run["another plain session"], run["plain session"]) - 1)
    floor, scale = change["swap, unhooked"], change["real session, plain"]
    follower = change["swap, followed, no-op"]
    realignment = change["swap, followed, re-aligning"]
    figures: dict[str, Any] = {
        name: {variant: timing.summary() for variant, timing in variants.items()}
        for name, variants in timings.items()
    }
    figures["run_added_percent"] = run_added
    figures["run_control_percent"] = control
    figures["follower_per_change_ns"] = round(follower.median_ns - floor.median_ns, 1)
    figures["realignment_per_change_ns"] = round(realignment.median_ns - floor.median_ns, 1)
    figures["follower_share_of_set_providers_percent"] = paired_share(follower, floor, scale)
    figures["realignment_share_of_set_providers_percent"] = paired_share(realignment, floor, scale)
    targets = [
        Target(
            f"run() of a followed session, added time (A/A control {control:+.1f} %)",
            run_added,
            2.0,
            "%",
        ),
        Target(
            "follower's cost of a provider change / set_providers, smallest model",
            figures["follower_share_of_set_providers_percent"],
            2.0,
            "%",
        ),
    ]
    return figures, targets


def following_rows(figures: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The report's rows: a label and a timing summary each."""
    labels = {"run": "run()", "set_providers": "set_providers"}
    return [
        (f"following: {label:13} | {variant}", summary)
        for name, label in labels.items()
        for variant, summary in figures[name].items()
    ]
