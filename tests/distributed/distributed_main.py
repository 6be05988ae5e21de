"""Run as ``__main__`` by test_distributed.py: ``python -m tests.distributed.distributed_main``.

A script's or notebook's functions cannot be found by name in a worker, so
Ray and Dask (cloudpickle) carry them by value. This script defines guarded
factories in ``__main__`` and writes a cloudpickled dict to stdout: for each
name, ``("ok", blob)`` with the object cloudpickled on its own, or
``("error", "TypeError: ...")`` when cloudpickle refused it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.resources import files
from typing import Any

import cloudpickle
import onnxruntime

from onnx_device_guard import device_guard
from tests.distributed.dist_factories import CPU, FakeSession

TINY = str(files("onnx_device_guard") / "data" / "tiny.onnx")


class MainModel:
    """A model class in ``__main__``: carried by value too."""

    def __init__(self, device: str = "cuda:0", session: Any = None) -> None:
        self.session = session if session is not None else FakeSession([CPU])
        self.device = device

    @classmethod
    @device_guard
    def from_pretrained(cls, device: str = "cuda:0") -> MainModel:
        return cls(device)

    @classmethod
    @device_guard
    def from_onnx(cls, device: str = "cuda:0") -> MainModel:
        return cls(device, real_session())


def real_session() -> onnxruntime.InferenceSession:
    """A real session asked for CUDA: the CPU build runs it on CPU."""
    return onnxruntime.InferenceSession(TINY, providers=["CUDAExecutionProvider", CPU])


@device_guard
def load_main(device: str = "cuda:0") -> MainModel:
    return MainModel(device)


@device_guard(resolution_mode="fail")
def load_main_strictly(device: str = "cuda:0") -> MainModel:
    return MainModel(device)


def closure(session_factory: Any = None) -> Any:
    @device_guard
    def load_locally(device: str = "cuda:0") -> MainModel:
        return MainModel(device, session_factory() if session_factory else None)

    return load_locally


@device_guard
class Recognizer:
    """A guarded class in ``__main__``: each instance is aligned when ``__init__`` returns."""

    def __init__(self, device: str = "cuda:0") -> None:
        self.session = FakeSession([CPU])
        self.device = device


def load_real_impl(device: str = "cuda:0") -> MainModel:
    return MainModel(device, real_session())


main_lambda: Callable[..., MainModel] = lambda device="cuda:0": MainModel(device)  # noqa: E731
real_lambda: Callable[..., MainModel] = lambda device="cuda:0": MainModel(device, real_session())  # noqa: E731


def dump(value: Any) -> tuple[str, Any]:
    try:
        return "ok", cloudpickle.dumps(value)
    except Exception as error:
        return "error", f"{type(error).__name__}: {error}"


def main() -> None:
    results: dict[str, tuple[str, Any]] = {
        "main function": dump(load_main),
        "closure": dump(closure()),
        "lambda": dump(device_guard(main_lambda)),
        "classmethod": dump(MainModel.from_pretrained),
        "main function, fail mode": dump(load_main_strictly),
        "guarded class": dump(Recognizer),
    }
    # Break 1: a factory that has been called, while a model it returned is alive.
    used = {
        "used main function": device_guard(load_real_impl),
        "used closure": closure(real_session),
        "used lambda": device_guard(real_lambda),
        "used classmethod": MainModel.from_onnx,
    }
    alive = []
    for name, factory in used.items():
        assert dump(factory)[0] == "ok", f"{name} must ship before its first call"
        alive.append(factory())
        assert alive[-1].device == "cpu"
        results[name] = dump(factory)
    sys.stdout.buffer.write(cloudpickle.dumps(results))


if __name__ == "__main__":
    main()
