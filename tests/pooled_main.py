"""Run as ``__main__`` by tests/test_process_boundaries.py: sends loaders it patched to a pool.

A process pool pickles with ``pickle``, which takes a function by its name;
a spawned worker imports this script again (as ``__mp_main__``, not running
``main``), so its loaders are unpatched there. Each patched callable must
arrive guarded all the same. Prints, as JSON, what became of each one.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from onnx_device_guard import EnvironmentConfigurationError, patch
from tests.sessions import cpu_session


class Model:
    """A model whose session runs on CPU only, asking for cuda."""

    def __init__(self) -> None:
        self.session = cpu_session()
        self.device = "cuda:0"


class Loader:
    """A loader defined in ``__main__``, whose methods are patched."""

    def load(self) -> Model:
        return Model()

    @staticmethod
    def build() -> Model:
        return Model()

    @classmethod
    def make(cls) -> Model:
        return Model()


def load() -> Model:
    return Model()


def device_of(loader: Callable[..., Model], *args: Any) -> str:
    """What the worker's model asks for: ``cuda:0`` only if the guard was dropped."""
    return loader(*args).device


def main() -> None:
    for target in ["Loader.load", "Loader.build", "Loader.make", "load"]:
        patch(f"__main__:{target}", resolution_mode="fail")
    calls: dict[str, tuple[Any, ...]] = {
        "bound method": (Loader().load,),
        "unbound method": (Loader.load, Loader()),
        "static method": (Loader.build,),
        "static method of an instance": (Loader().build,),
        "class method": (Loader.make,),
        "function": (load,),
    }
    outcomes = {}
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        for name, call in calls.items():
            try:
                outcomes[name] = f"unguarded, on {pool.submit(device_of, *call).result(120)}"
            except EnvironmentConfigurationError:
                outcomes[name] = "guarded"
            except Exception as error:  # reported, for the test to show
                outcomes[name] = f"{type(error).__name__}: {error}"
    print(json.dumps(outcomes))


if __name__ == "__main__":
    main()
