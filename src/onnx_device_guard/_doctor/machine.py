"""The GPU facts people ask for first: GPUs, driver, CUDA and cuDNN builds, loaded libraries.

Each is read the cheapest way there is, and `None` (or empty) where this machine has none.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import torch

_LIBRARY = re.compile(r"/(lib(?:cudart|cudnn|cublas|cublasLt|nvinfer)\.so[.\d]*)$")


def gpu_facts(ort: Any) -> dict[str, Any]:
    """The GPU facts, as `Environment`'s fields; onnxruntime's build info is read from `ort`."""
    build = getattr(getattr(ort, "capi", None), "build_and_package_info", None)
    built = [
        f"{label} {version}"
        for label, key in (("CUDA", "cuda_version"), ("cuDNN", "cudnn_version"))
        if (version := getattr(build, key, None))
    ]
    cudnn = torch.backends.cudnn.version() if torch.version.cuda else None  # type: ignore[no-untyped-call]
    return {
        "gpus": tuple(_nvidia_smi()),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torch_cudnn": None if cudnn is None else str(cudnn),
        "onnxruntime_build": ", ".join(built) or None,
    }


def _nvidia_smi() -> list[str]:
    """The GPUs and driver `nvidia-smi` lists; none where it is missing or fails."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [line.rsplit(",", 1) for line in done.stdout.splitlines() if "," in line]
    return [f"{name.strip()} (driver {driver.strip()})" for name, driver in rows]


def loaded_cuda_libraries(maps: str = "/proc/self/maps") -> tuple[str, ...]:
    """The CUDA, cuDNN, cuBLAS and TensorRT libraries loaded, from `maps` (none off Linux)."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as lines:
            found = {match[1] for line in lines if (match := _LIBRARY.search(line.rstrip()))}
    except OSError:
        return ()
    return tuple(sorted(found))
