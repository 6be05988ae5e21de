"""Run as ``__main__`` by tests/test_cloudpickle.py: cloudpickles guarded objects to stdout.

Functions defined in ``__main__`` (a script, a notebook) cannot be found by
name in another process, so cloudpickle carries them by value. This script
defines guarded factories and scoped functions in ``__main__``, locally and
as lambdas, and writes them, cloudpickled, to stdout. The test process loads
them, where ``__main__`` is another module altogether.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import cloudpickle
import torch

from onnx_device_guard import device_guard, device_policy, patch
from onnx_device_guard._policy import current_policy
from tests.sessions import cpu_session


class MainModel:
    """A model class defined in ``__main__``, so cloudpickle carries it by value too."""

    def __init__(self, device: str = "cuda:0") -> None:
        self.session = cpu_session()
        self.device = device

    @classmethod
    @device_guard(resolution_mode="fail")
    def strict(cls) -> MainModel:
        return cls()

    @device_guard(resolution_mode="fail")
    @classmethod
    def strict_outer(cls) -> MainModel:
        return cls()


@device_guard(resolution_mode="fail")
def load_strictly() -> MainModel:
    return MainModel()


@device_guard
def load_to_meta() -> MainModel:
    return MainModel()


@device_policy(resolution_mode="fail", fallback_device="meta")
def policy_in_force() -> tuple[str, str]:
    policy = current_policy()
    return str(policy.resolution_mode), str(policy.fallback_device)


@device_policy(fallback_device="meta", warn=False)
@device_guard
def load_under_policy() -> MainModel:
    return MainModel()


def local_factory() -> Any:
    @device_guard(resolution_mode="fail")
    def load_locally() -> MainModel:
        return MainModel()

    return load_locally


strict_lambda: Callable[[], MainModel] = lambda: MainModel()  # noqa: E731


class PatchedLoader:
    """A loader in ``__main__`` whose methods ``patch`` guards: no worker can look them up."""

    @classmethod
    def load(cls) -> MainModel:
        return MainModel()

    def load_here(self) -> MainModel:
        return MainModel()

    @staticmethod
    def build() -> MainModel:
        return MainModel()


def load_patched() -> MainModel:
    return MainModel()


def load_again(retries: int = 1) -> MainModel:
    """A loader that calls itself by its patched name (a retry)."""
    return MainModel() if retries == 0 else load_again(retries - 1)


def main() -> None:
    for target in ["PatchedLoader.load", "PatchedLoader.load_here", "PatchedLoader.build"]:
        patch(f"__main__:{target}", resolution_mode="fail")
    patch("__main__:load_patched", resolution_mode="fail")
    patch("__main__:load_again", resolution_mode="fail")
    objects = {
        "patched classmethod": PatchedLoader.load,
        "patched bound method": PatchedLoader().load_here,
        "patched unbound method": PatchedLoader.load_here,
        "patched static method": PatchedLoader.build,
        "patched static method of an instance": PatchedLoader().build,
        "patched function": load_patched,
        "patched function calling itself": load_again,
        "patched class, by value": lambda: PatchedLoader().load_here(),
        "main function": load_strictly,
        "local function": local_factory(),
        "lambda": device_guard(resolution_mode="fail")(strict_lambda),
        "classmethod, guard inside": MainModel.strict,
        "classmethod, guard outside": MainModel.strict_outer,
        "policy function": policy_in_force,
        "policy over guard": load_under_policy,
        "policy lambda": device_policy(resolution_mode="fail")(
            lambda: current_policy().resolution_mode
        ),
        "guard over meta": device_policy(fallback_device=torch.device("meta"))(load_to_meta),
    }
    sys.stdout.buffer.write(cloudpickle.dumps(objects))


if __name__ == "__main__":
    main()
