"""`onnx-device-guard doctor`: does a model run on the device you want, and if not, why.

One module per job: `facts` (the records), `files` (finding model files),
`inputs` (test inputs that fit), `capture` (what onnxruntime says), `probe`
(the live machine, sessions and runs), `diagnosis` (causes, verdict, exit
status), `render` (the text and JSON reports), `terminal` (escapes, colour,
progress), `streams` (stdout and stderr), `command` (the doctor's run from
options to exit status) and `core` (the library's pieces it uses). The
command line is `onnx_device_guard._cli`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .diagnosis import (
        CUDA_REQUIREMENTS_URL,
        EXIT_PRECEDENCE,
        Finding,
        diagnose,
        exit_code,
        headline,
        verdict,
        worst,
    )
    from .facts import (
        Environment,
        Facts,
        InferenceCheck,
        InstalledDistribution,
        ModelError,
        one_line,
    )
    from .render import render_json, render_text

# Where each name lives; they are imported on first use, so that the command
# line's light modules (`streams`, `terminal`) load without torch.
_HOMES = {
    **dict.fromkeys(
        (
            "CUDA_REQUIREMENTS_URL",
            "EXIT_PRECEDENCE",
            "Finding",
            "diagnose",
            "exit_code",
            "headline",
            "verdict",
            "worst",
        ),
        "diagnosis",
    ),
    **dict.fromkeys(
        (
            "Environment",
            "Facts",
            "InferenceCheck",
            "InstalledDistribution",
            "ModelError",
            "one_line",
        ),
        "facts",
    ),
    **dict.fromkeys(("render_json", "render_text"), "render"),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
    "CUDA_REQUIREMENTS_URL",
    "EXIT_PRECEDENCE",
    "Environment",
    "Facts",
    "Finding",
    "InferenceCheck",
    "InstalledDistribution",
    "ModelError",
    "diagnose",
    "exit_code",
    "headline",
    "one_line",
    "render_json",
    "render_text",
    "verdict",
    "worst",
]
