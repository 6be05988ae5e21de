"""`onnx-device-guard doctor`: does a model run on the device you want, and if not, why.

One module per job: `facts` (the records), `files` (finding model files),
`inputs` (test inputs that fit), `capture` (what onnxruntime says), `probe`
(the live machine, sessions and runs), `diagnosis` (causes, verdict, exit
status) and `render` (the text and JSON reports). The command line is
`onnx_device_guard._cli`.
"""

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
