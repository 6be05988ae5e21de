"""Guarded factories cross process boundaries: pickle, and a spawn process pool."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from onnx_device_guard import (
    EnvironmentConfigurationError,
    ModelInputError,
    device_guard,
    device_policy,
    patch,
)

from . import pickled_factories
from .pickled_factories import (
    UNBOUND_GUARDS,
    Model,
    load_model,
    load_model_alias,
    load_model_strictly,
    load_model_to_meta,
    load_model_to_meta_outer,
    policy_in_force,
)

Factory = Callable[[str, "torch.device | str"], Model]

GUARDED_FACTORIES: list[tuple[str, Factory]] = [
    ("module-level function", load_model),
    ("classmethod, guard inside", Model.from_pretrained),
    ("classmethod, guard outside", Model.from_pretrained_outer),
    ("staticmethod", Model.build),
]

CASES: list[tuple[str, torch.device | str, torch.device | str]] = [
    # (session kind, requested device, device the model must come back with)
    ("cpu", "cuda:0", "cpu"),
    ("cpu", torch.device("cuda"), torch.device("cpu")),
    ("gpu:1", "cuda:0", "cuda:1"),
    ("gpu:0", torch.device("cuda", 0), torch.device("cuda", 0)),
    ("gpu:2", "cpu", "cpu"),
]

factories = pytest.mark.parametrize(
    "factory", [factory for _, factory in GUARDED_FACTORIES], ids=[n for n, _ in GUARDED_FACTORIES]
)


@pytest.fixture(scope="module")
def spawn_pool() -> Iterator[ProcessPoolExecutor]:
    """Two worker processes started with ``spawn``: fresh interpreters that import everything."""
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


@pytest.fixture(autouse=True)
def quiet_fallbacks() -> Iterator[None]:
    """The fallbacks here are expected; keep them at DEBUG in this process."""
    with device_policy(warn=False):
        yield


class TestPickle:
    """Guarded factories pickle by reference and still align after a round trip."""

    @factories
    @pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
    def test_round_trip_aligns(self, factory: Factory, protocol: int) -> None:
        """Every protocol gives back a factory whose models come out aligned."""
        restored = pickle.loads(pickle.dumps(factory, protocol=protocol))
        for session_kind, device, aligned in CASES:
            model = restored(session_kind, device)
            assert model.device == aligned
            assert type(model.device) is type(aligned)

    def test_module_level_factory_comes_back_as_itself(self) -> None:
        """By reference: unpickling yields the very same guarded function."""
        assert pickle.loads(pickle.dumps(load_model)) is load_model

    def test_pickle_is_small(self) -> None:
        """By reference means a name, not the function's code or the guard's state."""
        assert len(pickle.dumps(Model.from_pretrained)) < 200

    @pytest.mark.parametrize(
        ("factory", "aligned"),
        [(load_model_to_meta_outer, "meta"), (load_model_to_meta, "cpu")],
        ids=["scope outside guard", "scope inside guard"],
    )
    def test_stacked_with_device_policy(self, factory: Factory, aligned: str) -> None:
        """Stacked with device_policy either way round, a guarded factory pickles and aligns.

        A scope inside the guard covers the factory's body only: the guard
        aligns afterwards, under the caller's policy.
        """
        restored = pickle.loads(pickle.dumps(factory))
        assert restored("cpu", "cuda:0").device == aligned

    def test_aligned_model_pickles(self) -> None:
        """The aligned model itself round-trips, device included."""
        model = load_model("gpu:1", torch.device("cuda", 0))
        assert pickle.loads(pickle.dumps(model)) == model

    def test_local_factory_says_why_it_cannot_pickle(self) -> None:
        """A factory defined in a function cannot be found by name: the error says so."""

        @device_guard
        def local_factory() -> Model:
            raise AssertionError("never called")

        with pytest.raises((pickle.PicklingError, AttributeError), match="local object"):
            pickle.dumps(local_factory)


class TestPickleChecksIdentity:
    """By reference only when the name holds the very wrapper: never the unguarded function."""

    @pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
    def test_alias_is_refused_never_unguarded(self, protocol: int) -> None:
        """``alias = device_guard(impl)``: its name holds ``impl``, so pickle refuses.

        Unpickling by that name would give back ``impl``, unguarded. (cloudpickle
        carries such a function by value, guard included: tests/test_cloudpickle.py.)
        """
        with pytest.raises(pickle.PicklingError, match="not the same object"):
            pickle.dumps(load_model_alias, protocol=protocol)

    @pytest.mark.parametrize("name", sorted(UNBOUND_GUARDS))
    def test_guard_no_name_holds_is_a_pickling_error(self, name: str) -> None:
        """A guarded lambda, or one only a dict holds: pickle refuses it, naming it."""
        with pytest.raises(pickle.PicklingError, match="Can't pickle"):
            pickle.dumps(UNBOUND_GUARDS[name])

    def test_message_names_what_the_name_holds(self) -> None:
        """When the name holds the plain function, pickle's identity check says so."""
        with pytest.raises(pickle.PicklingError, match="not the same object"):
            pickle.dumps(UNBOUND_GUARDS["held by a dict"])

    def test_classmethod_of_a_local_class(self) -> None:
        """A guarded classmethod on a local class: pickle's own error, in both orders."""

        class Local:
            @device_guard
            @classmethod
            def make(cls) -> None:
                raise AssertionError("never called")

            @classmethod
            @device_guard
            def make_inner(cls) -> None:
                raise AssertionError("never called")

        for method in (Local.make, Local.make_inner):
            with pytest.raises((pickle.PicklingError, AttributeError), match="local object"):
                pickle.dumps(method)

    def test_policy_on_a_lambda(self) -> None:
        """device_policy on a lambda no name holds: pickle refuses it too."""
        with pytest.raises((pickle.PicklingError, AttributeError), match=r"pickle|local object"):
            pickle.dumps(device_policy(resolution_mode="fail")(lambda: None))


class TestSpawnProcessPool:
    """Guarded factories run in spawned workers and their models come back aligned."""

    @factories
    def test_models_come_back_aligned(
        self, spawn_pool: ProcessPoolExecutor, factory: Factory
    ) -> None:
        """Each case is built and aligned in a worker, then pickled back to this process."""
        futures = [spawn_pool.submit(factory, kind, device) for kind, device, _ in CASES]
        for future, (_, _, aligned) in zip(futures, CASES, strict=True):
            model = future.result(timeout=120)
            assert model.made_in != os.getpid(), "built in a worker"
            assert model.device == aligned
            assert type(model.device) is type(aligned)

    def test_alias_is_refused_not_sent_unguarded(self, spawn_pool: ProcessPoolExecutor) -> None:
        """A guarded alias whose name holds the plain function cannot reach the worker."""
        future = spawn_pool.submit(load_model_alias, "cpu", "cuda:0")
        with pytest.raises(pickle.PicklingError, match="not the same object"):
            future.result(timeout=120)

    def test_map_many(self, spawn_pool: ProcessPoolExecutor) -> None:
        """A batch through pool.map keeps each model's own alignment."""
        kinds = [f"gpu:{index % 4}" for index in range(40)]
        devices = [f"cuda:{index % 3}" for index in range(40)]
        models = list(spawn_pool.map(load_model, kinds, devices, chunksize=5))
        assert [model.device for model in models] == [f"cuda:{index % 4}" for index in range(40)]

    def test_scope_does_not_cross_into_workers(self, spawn_pool: ProcessPoolExecutor) -> None:
        """A device_policy in this process holds here only: workers use their own defaults."""
        with device_policy(resolution_mode="fail", fallback_device="meta"):
            assert spawn_pool.submit(policy_in_force).result(timeout=120) == (
                "fallback",
                "cpu",
                True,
            )
            model = spawn_pool.submit(load_model, "cpu", "cuda:0").result(timeout=120)
        assert model.device == "cpu"

    @pytest.mark.parametrize(
        ("factory", "aligned"),
        [(load_model_to_meta_outer, "meta"), (load_model_to_meta, "cpu")],
        ids=["scope outside guard", "scope inside guard"],
    )
    def test_decorator_scope_travels_with_the_function(
        self, spawn_pool: ProcessPoolExecutor, factory: Factory, aligned: str
    ) -> None:
        """A scope set by @device_policy on the factory is part of it, in any process."""
        model = spawn_pool.submit(factory, "cpu", "cuda:0").result(timeout=120)
        assert model.device == aligned
        assert model.made_in != os.getpid()

    def test_errors_come_back_intact(self, spawn_pool: ProcessPoolExecutor) -> None:
        """An error raised in a worker arrives with its type, message and help_url."""
        with pytest.raises(EnvironmentConfigurationError) as info:
            spawn_pool.submit(load_model_strictly, "cpu", "cuda:0").result(timeout=120)
        assert "'cuda:0'" in info.value.message
        assert info.value.help_url.endswith("#no-data-transfer-registered")
        with pytest.raises(ModelInputError, match="'gpu:0'"):
            spawn_pool.submit(load_model, "cpu", "gpu:0").result(timeout=120)

    def test_pool_still_works_after_errors(self, spawn_pool: ProcessPoolExecutor) -> None:
        """A failed alignment does not break the worker: the next task succeeds."""
        results: list[Any] = []
        for _ in range(3):
            with pytest.raises(EnvironmentConfigurationError):
                spawn_pool.submit(load_model_strictly, "cpu", "cuda").result(timeout=120)
            results.append(spawn_pool.submit(load_model_strictly, "gpu:0", "cuda").result(120))
        assert [model.device for model in results] == ["cuda"] * 3

    def test_a_patched_function_arrives_guarded_with_its_options(
        self, spawn_pool: ProcessPoolExecutor
    ) -> None:
        """Issue 17, break 3: it pickles as its target and options, never as the plain name.

        Before, it pickled by reference: the worker looked the name up in its
        own, unpatched module, and the model kept ``cuda:0`` without a word.
        """
        with patch("tests.pickled_factories:load_model_impl", fallback_device="meta"):
            patched = pickled_factories.load_model_impl
            model = spawn_pool.submit(patched, "cpu", "cuda:0").result(timeout=120)
        assert model.made_in != os.getpid()
        assert model.device == "meta"

    def test_what_main_patched_arrives_guarded(self) -> None:
        """A script's patched loaders, sent to its process pool, arrive guarded.

        Before, ``pickle`` refused every one of them ("not the same object",
        "cannot pickle 'staticmethod' object"): the patch carried the plain
        function, which ``pickle`` takes by its name, and that name holds the
        patch. Now the worker looks the target up in its own ``__main__``.
        """
        result = subprocess.run(
            [sys.executable, "-m", "tests.pooled_main"],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            check=True,
            text=True,
            timeout=300,
        )
        outcomes = json.loads(result.stdout)
        assert outcomes == dict.fromkeys(outcomes, "guarded")
        assert len(outcomes) == 6


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform"
)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_fork_pool_started_in_a_scope_uses_the_defaults() -> None:
    """Issue 17, break 4: a forked worker ignores the scopes it inherited.

    The worker is forked inside the block (at the first ``submit``); before,
    it kept that scope for good, after the block had ended too.
    """
    context = multiprocessing.get_context("fork")
    with device_policy(resolution_mode="fail", fallback_device="meta"):
        pool = ProcessPoolExecutor(1, mp_context=context)
        try:
            inside = pool.submit(policy_in_force).result(timeout=120)
        except BaseException:
            pool.shutdown()
            raise
    try:
        after = pool.submit(policy_in_force).result(timeout=120)
        model = pool.submit(load_model, "cpu", "cuda:0").result(timeout=120)
    finally:
        pool.shutdown()
    assert inside == after == ("fallback", "cpu", True)
    assert model.device == "cpu"
