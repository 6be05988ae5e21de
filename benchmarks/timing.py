"""Timing helpers shared by the benchmark's measurements: interleaved rounds, paired ratios.

Timing is stdlib only (``time.perf_counter_ns``). The variants of a comparison
run in interleaved rounds with the garbage collector off; each round times a
batch of calls. A ratio is the median of the per-round ratios, so a slow patch
of the machine weighs on both sides alike.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Timing:
    """Per-call times of one variant, in nanoseconds, one per round."""

    name: str
    calls_per_round: int
    per_call_ns: list[float] = field(default_factory=list)

    @property
    def median_ns(self) -> float:
        return statistics.median(self.per_call_ns)

    @property
    def iqr_ns(self) -> float:
        if len(self.per_call_ns) < 4:
            return 0.0
        quartiles = statistics.quantiles(self.per_call_ns, n=4)
        return quartiles[2] - quartiles[0]

    def summary(self) -> dict[str, Any]:
        return {
            "median_ns": round(self.median_ns, 1),
            "iqr_ns": round(self.iqr_ns, 1),
            "rounds": len(self.per_call_ns),
            "calls_per_round": self.calls_per_round,
        }


def time_batch(call: Callable[[], object], calls: int) -> float:
    """Nanoseconds per call of ``call``, over a batch of ``calls`` calls."""
    loop = range(calls)
    start = time.perf_counter_ns()
    for _ in loop:
        call()
    return (time.perf_counter_ns() - start) / calls


def compare(
    variants: dict[str, Callable[[], object]], rounds: int, calls: int | dict[str, int]
) -> dict[str, Timing]:
    """Time ``variants`` in interleaved rounds, with the garbage collector off.

    ``calls`` is the batch size of every variant, or of each by name.
    """
    batch = calls if isinstance(calls, dict) else dict.fromkeys(variants, calls)
    timings = {name: Timing(name, batch[name]) for name in variants}
    for name, call in variants.items():  # warm up: caches, branch predictors, lazy imports
        time_batch(call, batch[name])
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for round_number in range(rounds):
            order = list(variants.items())
            if round_number % 2:
                order.reverse()  # neither variant always runs first
            for name, call in order:
                timings[name].per_call_ns.append(time_batch(call, batch[name]))
    finally:
        if gc_was_enabled:
            gc.enable()
    return timings


def paired_ratio(numerator: Timing, denominator: Timing) -> float:
    """The median of the per-round ratios of two variants timed in the same rounds."""
    return statistics.median(
        a / b for a, b in zip(numerator.per_call_ns, denominator.per_call_ns, strict=True)
    )


def paired_share(added: Timing, floor: Timing, scale: Timing) -> float:
    """The median over rounds of ``(added - floor) / scale``, in percent."""
    return 100 * statistics.median(
        (a - f) / s
        for a, f, s in zip(added.per_call_ns, floor.per_call_ns, scale.per_call_ns, strict=True)
    )


@dataclass
class Target:
    """One of the issue's targets and whether this run met it."""

    name: str
    figure: float
    limit: float
    unit: str

    @property
    def passed(self) -> bool:
        return self.figure <= self.limit

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": "PASS" if self.passed else "MISS"}


def bench_main(
    argv: Sequence[str] | None,
    description: str | None,
    default_output: Path,
    run: Callable[..., dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
) -> int:
    """The command line every benchmark script shares: `--output FILE` and `--quick`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--output",
        type=Path,
        default=default_output,
        help="where to write the figures as JSON (default: %(default)s)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer rounds: a smoke test, not a measurement"
    )
    args = parser.parse_args(argv)
    results = run(quick=args.quick)
    print(render(results))
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.output}")
    return 0
