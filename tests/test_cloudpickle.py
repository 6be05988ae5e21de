"""cloudpickle (Ray, Dask, joblib) keeps the guard and device_policy's scope.

Functions cloudpickle cannot find by name (defined in ``__main__``, locally,
lambdas) travel by value, wrapper included; the others by reference, as
with ``pickle``. Before: wrapt forwards ``__class__``, so cloudpickle took a
guarded function for the plain function inside and dropped the guard.
"""

from __future__ import annotations

import inspect
import multiprocessing
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from importlib.resources import files
from pathlib import Path
from typing import Any

import cloudpickle
import onnxruntime
import pytest

from onnx_device_guard import EnvironmentConfigurationError, device_guard, device_policy
from onnx_device_guard._policy import current_policy

from .pickled_factories import (
    Model,
    call_cloudpickled,
    device_of_cloudpickled,
    load_model,
    load_model_alias,
    load_model_impl,
    load_model_strictly,
    load_model_to_meta,
    load_model_to_meta_outer,
)
from .sessions import cpu_session

ROOT = Path(__file__).resolve().parent.parent
TINY = str(files("onnx_device_guard") / "data" / "tiny.onnx")


def round_trip(value: Any) -> Any:
    return cloudpickle.loads(cloudpickle.dumps(value))


@pytest.fixture(scope="module")
def from_main() -> dict[str, Any]:
    """Objects cloudpickled by a script run as ``__main__`` in another process."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.cloudpickled_main"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=300,
    )
    loaded: dict[str, Any] = cloudpickle.loads(result.stdout)
    return loaded


@pytest.fixture(autouse=True)
def quiet_fallbacks() -> Iterator[None]:
    """The fallbacks here are expected; keep them at DEBUG."""
    with device_policy(warn=False):
        yield


STRICT_FROM_MAIN = [
    "main function",
    "local function",
    "lambda",
    "classmethod, guard inside",
    "classmethod, guard outside",
    "patched classmethod",
    "patched bound method",
    "patched static method",
    "patched static method of an instance",
    "patched function",
    "patched function calling itself",  # before: cloudpickle recursed without end
    "patched class, by value",
]


class TestByValueFromMain:
    """Guarded objects from another process's ``__main__`` arrive with their guard."""

    @pytest.mark.parametrize("name", STRICT_FROM_MAIN)
    def test_strict_guard_still_raises(self, from_main: dict[str, Any], name: str) -> None:
        """A fail-mode guard raises after the trip (before: the plain function returned cuda)."""
        with pytest.raises(EnvironmentConfigurationError, match="'cuda:0'"):
            from_main[name]()

    def test_patched_unbound_method(self, from_main: dict[str, Any]) -> None:
        """``Class.method`` of a patched method, called with an instance, still guards.

        Before, cloudpickle took it (and, in a class it copied by value, the
        patched method) for the plain function: it arrived unguarded, on cuda.
        """
        loader = from_main["patched bound method"].__self__
        with pytest.raises(EnvironmentConfigurationError, match="'cuda:0'"):
            from_main["patched unbound method"](loader)

    def test_policy_scope_travels(self, from_main: dict[str, Any]) -> None:
        """A @device_policy function in __main__ runs inside its scope after the trip."""
        assert from_main["policy function"]() == ("fail", "meta")
        assert from_main["policy lambda"]() == "fail"
        assert current_policy().resolution_mode == "fallback"

    def test_stacked_policy_and_guard(self, from_main: dict[str, Any]) -> None:
        """Stacked either way round, the scope and the guard both survive."""
        assert from_main["policy over guard"]().device == "meta"
        assert from_main["guard over meta"]().device == "meta"

    def test_still_a_guarded_wrapper(self, from_main: dict[str, Any]) -> None:
        """What arrives is the guard's wrapper again, around the function carried by value."""
        factory = from_main["main function"]
        assert factory.__name__ == "load_strictly"
        assert factory.__wrapped__.__name__ == "load_strictly"
        assert factory.__code__ is not factory.__wrapped__.__code__


def local_strict_factory() -> Callable[[], Model]:
    @device_guard(resolution_mode="fail")
    def load_locally() -> Model:
        return Model(cpu_session(), "cuda:0")

    return load_locally


class LocalShapes:
    """Guarded methods of a module-level class, for in-process round trips."""

    @classmethod
    @device_guard(resolution_mode="fail")
    def inner(cls) -> Model:
        return Model(cpu_session(), "cuda:0")

    @device_guard(resolution_mode="fail")
    @classmethod
    def outer(cls) -> Model:
        return Model(cpu_session(), "cuda:0")


def local_class_method() -> Callable[[], Model]:
    class Local:
        @classmethod
        @device_guard(resolution_mode="fail")
        def make(cls) -> Model:
            return Model(cpu_session(), "cuda:0")

    return Local.make


class TestRoundTripInProcess:
    """cloudpickle round trips keep the guard, by value or by reference."""

    @pytest.mark.parametrize(
        "factory",
        [
            local_strict_factory(),
            device_guard(resolution_mode="fail")(lambda: Model(cpu_session(), "cuda:0")),
            LocalShapes.inner,
            LocalShapes.outer,
            local_class_method(),
        ],
        ids=[
            "local function",
            "lambda",
            "classmethod inside",
            "classmethod outside",
            "local class",
        ],
    )
    def test_strict_guard_survives(self, factory: Callable[[], Model]) -> None:
        """Each shape still raises in fail mode after the round trip."""
        with pytest.raises(EnvironmentConfigurationError):
            round_trip(factory)()

    @pytest.mark.parametrize("factory", [load_model, load_model_strictly, load_model_to_meta_outer])
    def test_module_level_goes_by_reference(self, factory: Callable[..., Model]) -> None:
        """A guarded function a module-level name holds comes back as itself."""
        assert round_trip(factory) is factory

    def test_alias_goes_by_value_guarded(self) -> None:
        """``alias = device_guard(impl)`` is not found by name: it travels by value, guarded."""
        restored = round_trip(load_model_alias)
        assert restored is not load_model_impl
        assert restored("cpu", "cuda:0").device == "cpu"

    def test_module_level_methods_align(self) -> None:
        """Guarded class and static methods of a module-level class align after the trip."""
        assert round_trip(Model.from_pretrained)("cpu", "cuda:0").device == "cpu"
        assert round_trip(Model.from_pretrained_outer)("gpu:1", "cuda:0").device == "cuda:1"
        assert round_trip(Model.build) is Model.build
        assert round_trip(Model.build)("cpu", "cuda").device == "cpu"

    def test_local_policy_function(self) -> None:
        """A local @device_policy function runs inside its scope after the trip."""

        @device_policy(resolution_mode="fail", fallback_device="meta")
        def scoped() -> tuple[str, str]:
            policy = current_policy()
            return str(policy.resolution_mode), str(policy.fallback_device)

        assert round_trip(scoped)() == ("fail", "meta")

    def test_stacked_policy_inside_guard(self) -> None:
        """A scope inside the guard covers the factory body only, after the trip as before."""
        assert round_trip(load_model_to_meta)("cpu", "cuda:0").device == "cpu"
        assert round_trip(load_model_to_meta_outer)("cpu", "cuda:0").device == "meta"

    def test_still_looks_like_a_function(self) -> None:
        """Outside a pickler, a guarded function still passes for a function (Ray's check)."""
        factory = local_strict_factory()
        assert isinstance(factory, types.FunctionType)
        assert inspect.isfunction(factory)
        assert isinstance(round_trip(factory), types.FunctionType)


@pytest.fixture(scope="module")
def spawn_pool() -> Iterator[ProcessPoolExecutor]:
    """Two fresh worker interpreters, as Dask and Ray start them."""
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


class TestSpawnPoolByValue:
    """Callables cloudpickled by value run guarded in spawned workers."""

    def test_local_and_lambda_factories(self, spawn_pool: ProcessPoolExecutor) -> None:
        """A local guarded factory and a guarded lambda align in the worker."""
        lenient = device_guard(lambda kind, device: Model(cpu_session(), device, os.getpid()))
        model = spawn_pool.submit(
            call_cloudpickled, cloudpickle.dumps(lenient), "cpu", "cuda:0"
        ).result(timeout=120)
        assert isinstance(model, Model)
        assert model.device == "cpu"
        assert model.made_in != os.getpid()
        future = spawn_pool.submit(call_cloudpickled, cloudpickle.dumps(local_strict_factory()))
        with pytest.raises(EnvironmentConfigurationError):
            future.result(timeout=120)

    def test_main_objects_in_a_worker(
        self, spawn_pool: ProcessPoolExecutor, from_main: dict[str, Any]
    ) -> None:
        """Objects from another process's __main__ keep their guard in a third process."""
        blob = cloudpickle.dumps(from_main["main function"])
        with pytest.raises(EnvironmentConfigurationError):
            spawn_pool.submit(call_cloudpickled, blob).result(timeout=120)
        blob = cloudpickle.dumps(from_main["policy over guard"])
        assert spawn_pool.submit(device_of_cloudpickled, blob).result(timeout=120) == "meta"


class OnnxModel:
    """A model on a real ``InferenceSession``, which pickles by no means."""

    def __init__(self, device: str = "cuda:0") -> None:
        self.session = onnxruntime.InferenceSession(TINY, providers=["CPUExecutionProvider"])
        self.device = device


def used_factories() -> dict[str, Callable[[], Any]]:
    """Factories cloudpickle carries by value: a closure, a lambda, a local classmethod."""

    @device_guard
    def load_locally(device: str = "cuda:0") -> OnnxModel:
        return OnnxModel(device)

    class Local(OnnxModel):
        @classmethod
        @device_guard
        def from_pretrained(cls, device: str = "cuda:0") -> OnnxModel:
            return cls(device)

    new_model: Callable[..., OnnxModel] = lambda device="cuda:0": OnnxModel(device)  # noqa: E731
    return {
        "closure": load_locally,
        "lambda": device_guard(new_model),
        "local classmethod": Local.from_pretrained,
    }


class TestRunTimeStateStaysBehind:
    """Issue 17, breaks 1 and 2: what travels is the guard's configuration, never its state."""

    @pytest.mark.parametrize("name", list(used_factories()))
    def test_a_used_factory_still_ships(self, name: str) -> None:
        """Called once, its model alive and followed: it still pickles, and starts fresh.

        Before, the options it carried held the follower of the live session
        (``TypeError: cannot pickle 'InferenceSession' object``).
        """
        factory = used_factories()[name]
        alive = factory()
        assert alive.device == "cpu"
        shipped = round_trip(factory)
        assert shipped().device == "cpu"
        assert alive.device == "cpu"

    def test_a_local_guarded_class_ships(self, spawn_pool: ProcessPoolExecutor) -> None:
        """By value, to a worker that builds and aligns its instances there.

        Before: ``TypeError: cannot pickle '_Constructing' object``, the
        thread-local that the class's installed ``__init__`` held.
        """

        @device_guard
        class Recognizer:
            def __init__(self, device: str = "cuda:0") -> None:
                self.session = cpu_session()
                self.device = device

        assert Recognizer().device == "cpu"
        blob = cloudpickle.dumps(Recognizer)
        assert spawn_pool.submit(device_of_cloudpickled, blob, "cuda:0").result(120) == "cpu"
        assert round_trip(Recognizer)("cuda:0").device == "cpu"
