"""What following a session's provider changes costs: per inference, and per change.

Measured side by side, in interleaved rounds (see ``timing``):

* ``run()`` of the tiny model's real CPU session while a model watches it
  (its ``set_providers`` hooked) against another real session of the same
  model that nobody watches. The hook is on ``set_providers`` only, so the
  target is no added time: within 2 %.
  The two sessions swap roles half-way through the rounds.
* One re-alignment after a provider change: the hook, the callback and the
  alignment (``"fallback"``, the device written back), timed on a session
  whose ``set_providers`` only swaps a list, hooked against unhooked; and
  ``set_providers`` on real sessions, hooked against unhooked, for scale
  (onnxruntime re-creates the session there). The providers alternate
  between two lists, so every call is a change. Target: the re-alignment
  within 1 % of a real ``set_providers``.
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
from timing import Target, Timing, compare, paired_ratio

from onnx_device_guard import align_device_with_onnx_session, device_policy
from onnx_device_guard._following import Follower, Providers

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


class SwappingSession:
    """A session whose ``set_providers`` only swaps its list: the hook's cost, alone."""

    def __init__(self) -> None:
        self._providers = list(CPU_ONLY)

    def get_providers(self) -> list[str]:
        return self._providers

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {name: {} for name in self._providers}

    def set_providers(self, providers: list[str]) -> None:
        self._providers = providers


def alternating(session: Any) -> Callable[[], object]:
    """A call that switches `session` to the other provider list each time."""
    lists = itertools.cycle([WITH_AZURE, CPU_ONLY])
    return lambda: session.set_providers(next(lists))


def measure_following(path: Path, rounds: int, calls: int) -> dict[str, dict[str, Timing]]:
    """Take the measurements; return the timings by comparison."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    expected = x + 1

    def new_session() -> Any:
        return onnxruntime.InferenceSession(str(path), providers=CPU_ONLY)

    # run(): two sessions swap roles half-way, so neither's own speed counts as the hook's.
    first, second = new_session(), new_session()
    halves = []
    for followed, plain in ((first, second), (second, first)):
        with Follower() as follower:
            model = Model(followed)
            assert follower.watch(model, [("session", followed)], realign) == 1
            for session in (followed, plain):  # both sides give the same answer
                assert (session.run(["y"], {"x": x})[0] == expected).all()
            halves.append(
                compare(
                    {
                        "followed session": functools.partial(followed.run, ["y"], {"x": x}),
                        "plain session": functools.partial(plain.run, ["y"], {"x": x}),
                    },
                    max(1, rounds // 2),
                    calls,
                )
            )
        assert model.device == REQUESTED, "run() never changes providers"
    inference = halves[0]
    for name, timing in halves[1].items():
        inference[name].per_call_ns += timing.per_call_ns

    hooked_set, plain_set = new_session(), new_session()
    hooked_swap, plain_swap = SwappingSession(), SwappingSession()
    models = [Model(hooked_set), Model(hooked_swap)]
    with Follower() as follower:
        for model in models:
            assert follower.watch(model, [("session", model.session)], realign) == 1
        hooked_set.set_providers(WITH_AZURE)
        assert models[0].device == torch.device("cpu"), "a change re-aligns the model"
        hooked_set.set_providers(CPU_ONLY)
        change = compare(
            {
                "followed session": alternating(hooked_set),
                "plain session": alternating(plain_set),
            },
            rounds,
            max(2, calls // 500),
        )
        hook_alone = compare(
            {
                "followed session": alternating(hooked_swap),
                "plain session": alternating(plain_swap),
            },
            rounds,
            max(10, calls // 5),
        )
    return {"run": inference, "set_providers": change, "hook alone": hook_alone}


def following_targets(
    timings: dict[str, dict[str, Timing]],
) -> tuple[dict[str, Any], list[Target]]:
    """The figures for the JSON report and the targets they are checked against.

    The re-alignment's share is its own cost (the hook, the callback and the
    alignment, timed on the list-swapping session, where nothing else varies)
    over a real ``set_providers``; the two real sessions' difference is too
    noisy to read a few microseconds from.
    """
    run, change, alone = timings["run"], timings["set_providers"], timings["hook alone"]
    run_added = 100 * (paired_ratio(run["followed session"], run["plain session"]) - 1)
    realignment_ns = alone["followed session"].median_ns - alone["plain session"].median_ns
    share = 100 * realignment_ns / change["plain session"].median_ns
    figures: dict[str, Any] = {
        name: {variant: timing.summary() for variant, timing in variants.items()}
        for name, variants in timings.items()
    }
    figures["run_added_percent"] = run_added
    figures["realignment_ns"] = round(realignment_ns, 1)
    figures["realignment_share_of_set_providers_percent"] = share
    targets = [
        Target("run() of a followed session, added time", run_added, 2.0, "%"),
        Target("one re-alignment after a change / set_providers itself", share, 1.0, "%"),
    ]
    return figures, targets


def following_rows(figures: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The report's rows: a label and a timing summary each."""
    labels = {
        "run": "run() of the tiny model",
        "set_providers": "set_providers, real session",
        "hook alone": "set_providers, list swap only",
    }
    return [
        (f"following: {label:29} | {variant}", summary)
        for name, label in labels.items()
        for variant, summary in figures[name].items()
    ]
