"""Scoped defaults: device_policy and aligned_device."""

from __future__ import annotations

import asyncio
import functools
import logging
import pickle
import threading
from collections.abc import Generator, Iterator
from typing import Any

import numpy
import pytest
import torch

from onnx_device_guard import (
    DeviceGuardError,
    EnvironmentConfigurationError,
    ModelInputError,
    align_device_with_onnx_session,
    aligned_device,
    device_policy,
)
from onnx_device_guard._policy import current_policy

from .sessions import cpu_session, cuda_session

CPU = torch.device("cpu")
META = torch.device("meta")


def fallback_of_cuda() -> torch.device:
    """What the core resolves cuda to on a CPU-only session, with the scope's options."""
    return align_device_with_onnx_session(cpu_session(), "cuda")


class TestDevicePolicy:
    """Options inside a device_policy block, and what happens on exit."""

    def test_defaults_outside_any_scope(self) -> None:
        """fallback, CPU and warnings are the built-in defaults."""
        policy = current_policy()
        assert (policy.resolution_mode, policy.fallback_device, policy.warn) == (
            "fallback",
            CPU,
            True,
        )

    def test_mode_applies_inside_the_block(self) -> None:
        """resolution_mode='fail' makes calls without a mode raise."""
        with device_policy(resolution_mode="fail"), pytest.raises(EnvironmentConfigurationError):
            fallback_of_cuda()
        assert fallback_of_cuda() == CPU

    def test_fallback_device_applies_inside_the_block(self) -> None:
        """The scope's fallback device is used by calls that do not pass one."""
        with device_policy(fallback_device="meta"):
            assert fallback_of_cuda() == META

    def test_explicit_arguments_win_over_the_scope(self) -> None:
        """Arguments passed to the core beat the scope."""
        with device_policy(resolution_mode="fail", fallback_device="meta"):
            result = align_device_with_onnx_session(
                cpu_session(), "cuda", resolution_mode="fallback", fallback_device="cpu"
            )
        assert result == CPU

    def test_unset_options_inherit_from_the_outer_scope(self) -> None:
        """An inner scope that sets only warn keeps the outer mode and device."""
        with device_policy(fallback_device="meta"), device_policy(warn=False):
            assert fallback_of_cuda() == META
            assert current_policy().warn is False

    def test_nesting_restores_the_outer_scope(self) -> None:
        """Leaving the inner scope brings back the outer one, then the defaults."""
        with device_policy(fallback_device="meta"):
            with device_policy(fallback_device="cpu"):
                assert fallback_of_cuda() == CPU
            assert fallback_of_cuda() == META
        assert current_policy().fallback_device == CPU

    def test_scope_is_restored_when_the_block_raises(self) -> None:
        """An exception leaving the block still restores the previous scope."""
        with pytest.raises(KeyError), device_policy(resolution_mode="fail"):
            raise KeyError("boom")
        assert current_policy().resolution_mode == "fallback"

    def test_one_instance_can_be_reused_and_nested(self) -> None:
        """The same instance entered twice, nested, unwinds correctly."""
        strict = device_policy(resolution_mode="fail")
        with strict, device_policy(resolution_mode="fallback"), strict:
            assert current_policy().resolution_mode == "fail"
        assert current_policy().resolution_mode == "fallback"

    def test_warn_false_logs_at_debug(self, caplog: pytest.LogCaptureFixture) -> None:
        """warn=False reports fallbacks at DEBUG instead of WARNING."""
        with caplog.at_level(logging.DEBUG, logger="onnx_device_guard"):
            with device_policy(warn=False):
                fallback_of_cuda()
            fallback_of_cuda()
        assert [record.levelno for record in caplog.records] == [logging.DEBUG, logging.WARNING]

    @pytest.mark.parametrize(
        ("options", "match"),
        [
            ({"resolution_mode": "strict"}, "resolution_mode"),
            ({"fallback_device": "gpu"}, "fallback_device"),
            ({"fallback_device": 0.5}, "fallback_device"),
            ({"warn": "no"}, "warn must be True or False"),
            ({"warn": 0}, "warn must be True or False"),
        ],
    )
    def test_bad_options_are_rejected_on_construction(
        self, options: dict[str, object], match: str
    ) -> None:
        """Invalid options raise ModelInputError before the block runs."""
        with pytest.raises(ModelInputError, match=match):
            device_policy(**options)  # type: ignore[arg-type]

    def test_repr_shows_the_options(self) -> None:
        """The repr names what the scope sets."""
        assert repr(device_policy(resolution_mode="fail")) == (
            "device_policy(resolution_mode='fail', fallback_device=None, warn=None)"
        )


class TestDevicePolicyAsDecorator:
    """device_policy(...) decorating functions."""

    def test_function_runs_inside_the_scope(self) -> None:
        """Each call runs with the scope; the caller's scope is untouched."""

        @device_policy(fallback_device="meta")
        def load() -> torch.device:
            return fallback_of_cuda()

        assert load() == META
        assert fallback_of_cuda() == CPU

    def test_recursion_sees_the_scope_at_every_depth(self) -> None:
        """A recursive decorated function keeps the scope at every level."""
        depths: list[str] = []

        @device_policy(resolution_mode="fail")
        def recurse(n: int) -> None:
            depths.append(str(current_policy().resolution_mode))
            if n:
                recurse(n - 1)

        recurse(3)
        assert depths == ["fail"] * 4
        assert current_policy().resolution_mode == "fallback"

    def test_coroutine_function_runs_inside_the_scope(self) -> None:
        """An async def keeps the scope across its awaits."""

        @device_policy(fallback_device="meta")
        async def load() -> torch.device:
            await asyncio.sleep(0)
            return fallback_of_cuda()

        assert asyncio.run(load()) == META

    def test_keeps_the_function_metadata(self) -> None:
        """Name and docstring survive decoration."""

        @device_policy(warn=False)
        def load() -> None:
            """Load quietly."""

        assert load.__name__ == "load"
        assert load.__doc__ == "Load quietly."

    def test_generator_functions_are_refused(self) -> None:
        """A generator would run after the scope ended, so it is refused."""

        def numbers() -> Iterator[int]:
            yield 1

        with pytest.raises(ModelInputError, match="generator function"):
            device_policy(warn=False)(numbers)

    def test_an_object_whose_call_is_a_generator_is_refused(self) -> None:
        """Before, it was taken: each call's scope ended before the generator ran, so its
        body saw the defaults, without a word."""

        class Numbers:
            def __call__(self) -> Iterator[int]:
                yield 1

        with pytest.raises(ModelInputError, match="generator function"):
            device_policy(warn=False)(Numbers())

    def test_a_wrapper_that_runs_a_generator_is_decorated(self) -> None:
        """A `functools.wraps` wrapper of a generator function is a plain function: it may
        run the generator to its end inside the call."""

        def numbers() -> Iterator[bool]:
            yield current_policy().resolution_mode == "fail"

        @functools.wraps(numbers)
        def collect() -> list[bool]:
            return list(numbers())

        assert device_policy(resolution_mode="fail")(collect)() == [True]


class TestIsolation:
    """Scopes never leak between threads and tasks."""

    def test_new_threads_start_with_the_defaults(self) -> None:
        """A thread started inside a scope does not inherit it."""
        seen: list[str] = []
        with device_policy(resolution_mode="fail"):
            thread = threading.Thread(
                target=lambda: seen.append(str(current_policy().resolution_mode))
            )
            thread.start()
            thread.join()
        assert seen == ["fallback"]

    def test_threads_do_not_see_each_others_scopes(self) -> None:
        """Two threads inside different scopes at the same time each see their own."""
        barrier = threading.Barrier(2)
        seen: dict[str, torch.device] = {}

        def worker(name: str, device: str) -> None:
            with device_policy(fallback_device=device):
                barrier.wait()
                seen[name] = fallback_of_cuda()
                barrier.wait()

        threads = [
            threading.Thread(target=worker, args=("a", "meta")),
            threading.Thread(target=worker, args=("b", "cpu")),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert seen == {"a": META, "b": CPU}

    def test_tasks_copy_the_scope_at_creation_and_keep_their_own(self) -> None:
        """A task starts with its creator's scope; its own changes stay inside it."""

        async def child(entered: asyncio.Event, release: asyncio.Event) -> str:
            with device_policy(resolution_mode="fallback"):
                entered.set()
                await release.wait()
                return str(current_policy().resolution_mode)

        async def main() -> tuple[str, str, str]:
            entered, release = asyncio.Event(), asyncio.Event()
            with device_policy(resolution_mode="fail"):
                task = asyncio.create_task(child(entered, release))
                await entered.wait()
                parent_mode = current_policy().resolution_mode
                release.set()
                child_mode = await task
            return str(parent_mode), child_mode, str(current_policy().resolution_mode)

        assert asyncio.run(main()) == ("fail", "fallback", "fallback")


class TestAlignedDevice:
    """aligned_device aligns on entry and scopes the same options."""

    def test_yields_the_aligned_device(self) -> None:
        """A CPU-only session yields cpu for cuda:0."""
        with aligned_device(cpu_session(), "cuda:0") as device:
            assert device == CPU

    def test_compatible_device_is_yielded_as_torch_device(self) -> None:
        """A compatible string device comes back as a torch.device."""
        with aligned_device(cuda_session(1), "cuda:1") as device:
            assert device == torch.device("cuda", 1)

    def test_options_apply_to_the_alignment_and_the_block(self) -> None:
        """fallback_device is used on entry and by calls inside the block."""
        with aligned_device(cpu_session(), "cuda", fallback_device="meta", warn=False) as device:
            assert device == META
            assert fallback_of_cuda() == META
            assert current_policy().warn is False
        assert current_policy().fallback_device == CPU

    def test_fail_mode_raises_on_entry(self) -> None:
        """In fail mode the block does not run, and the scope is restored."""
        ran = False
        with (
            pytest.raises(EnvironmentConfigurationError),
            aligned_device(cpu_session(), "cuda", resolution_mode="fail"),
        ):
            ran = True
        assert not ran
        assert current_policy().resolution_mode == "fallback"

    def test_inherits_the_enclosing_scope(self) -> None:
        """Options not given come from the enclosing device_policy."""
        with device_policy(fallback_device="meta"), aligned_device(cpu_session(), "cuda") as device:
            assert device == META

    def test_scope_is_restored_when_the_block_raises(self) -> None:
        """An exception inside the block restores the previous scope."""
        with (
            pytest.raises(ValueError, match="inside"),
            aligned_device(cuda_session(0), "cuda", resolution_mode="fail"),
        ):
            raise ValueError("inside")
        assert current_policy().resolution_mode == "fallback"

    def test_bad_options_are_model_input_errors(self) -> None:
        """A bad option is reported before anything is aligned."""
        with (
            pytest.raises(ModelInputError, match="warn"),
            aligned_device(cuda_session(0), "cuda", warn="yes"),  # type: ignore[arg-type]
        ):
            pass


def state() -> tuple[str, torch.device, bool]:
    policy = current_policy()
    return str(policy.resolution_mode), policy.fallback_device or CPU, bool(policy.warn)


DEFAULTS = ("fallback", CPU, True)


class TestExitRemovesItsOwnScope:
    """Scopes are left in the reverse order of entry; out of order is a clear error."""

    def test_outer_scope_leaving_first_is_an_error(self) -> None:
        """An out-of-order exit raises; the scope left is never in force again."""
        strict, to_meta = (
            device_policy(resolution_mode="fail"),
            device_policy(fallback_device="meta"),
        )
        strict.__enter__()
        to_meta.__enter__()
        assert state() == ("fail", META, True)
        with pytest.raises(DeviceGuardError, match="out of order"):
            strict.__exit__(None, None, None)
        assert state() == ("fail", META, True), "the later scope keeps what it inherited"
        to_meta.__exit__(None, None, None)
        assert state() == DEFAULTS, "the ended scope does not come back"

    def test_generator_closed_inside_the_callers_scope(self) -> None:
        """A scope inside a generator closed under the consumer's scope: an error, no leak."""

        def rows() -> Generator[int, None, None]:
            with device_policy(resolution_mode="fail"):
                yield 1
                yield 2

        generator = rows()
        next(generator)
        assert state()[0] == "fail", "the documented limit: the consumer sees it"
        with (
            device_policy(fallback_device="meta"),
            pytest.raises(DeviceGuardError, match="generator"),
        ):
            generator.close()
        assert state() == DEFAULTS

    def test_same_instance_nested(self) -> None:
        """One instance entered twice unwinds one entry per exit."""
        strict, to_meta = (
            device_policy(resolution_mode="fail"),
            device_policy(fallback_device="meta"),
        )
        with strict:
            with to_meta, strict:
                assert state() == ("fail", META, True)
            assert state() == ("fail", CPU, True)
        assert state() == DEFAULTS

    def test_exit_without_entry_is_an_error(self) -> None:
        """Leaving a scope never entered here raises, and changes nothing."""
        with device_policy(fallback_device="meta"):
            with pytest.raises(DeviceGuardError, match="not entered in this thread or task"):
                device_policy(resolution_mode="fail").__exit__(None, None, None)
            assert state() == ("fallback", META, True)

    def test_exit_in_another_thread_is_an_error(self) -> None:
        """A scope entered in one thread cannot be left from another."""
        scope = device_policy(resolution_mode="fail")
        scope.__enter__()
        errors: list[BaseException] = []

        def leave() -> None:
            try:
                scope.__exit__(None, None, None)
            except DeviceGuardError as error:
                errors.append(error)

        thread = threading.Thread(target=leave)
        thread.start()
        thread.join()
        assert len(errors) == 1
        assert state()[0] == "fail"
        scope.__exit__(None, None, None)
        assert state() == DEFAULTS

    def test_exit_in_a_task_the_scope_started_is_an_error(self) -> None:
        """A child task sees the scope (a copy of the context) but cannot leave it."""
        scope = device_policy(resolution_mode="fail")

        async def leave() -> None:
            with pytest.raises(DeviceGuardError, match="not entered in this thread or task"):
                scope.__exit__(None, None, None)

        async def main() -> str:
            scope.__enter__()
            await asyncio.create_task(leave())
            mode = current_policy().resolution_mode
            scope.__exit__(None, None, None)
            return mode

        assert asyncio.run(main()) == "fail"
        assert state() == DEFAULTS

    def test_tasks_interleaving_one_instance(self) -> None:
        """Tasks that share one instance each leave their own scope."""
        strict = device_policy(resolution_mode="fail")
        seen: list[str] = []

        async def task(step: asyncio.Event, other: asyncio.Event) -> None:
            with strict:
                step.set()
                await other.wait()
                seen.append(str(current_policy().resolution_mode))
            seen.append(str(current_policy().resolution_mode))

        async def both() -> None:
            first, second = asyncio.Event(), asyncio.Event()
            await asyncio.gather(task(first, second), task(second, first))

        asyncio.run(both())
        assert sorted(seen) == ["fail", "fail", "fallback", "fallback"]
        assert state() == DEFAULTS


class TestOddOptionValues:
    """Values at the edge of what an option takes."""

    @pytest.mark.parametrize(("value", "expected"), [(numpy.True_, True), (numpy.False_, False)])
    def test_numpy_bools_are_bools(self, value: object, expected: bool) -> None:
        """warn=numpy.True_ (what array.any() returns) is taken as True, not refused."""
        with device_policy(warn=value):  # type: ignore[arg-type]
            assert current_policy().warn is expected

    @pytest.mark.parametrize("value", [numpy.array([True]), numpy.int64(1), 1, "True"])
    def test_other_values_are_refused_with_their_type(self, value: object) -> None:
        """Anything else is refused; the message names the type as Python spells it."""
        with pytest.raises(ModelInputError, match="warn must be True or False") as info:
            device_policy(warn=value)  # type: ignore[arg-type]
        assert "got bool" not in info.value.message

    def test_decorating_a_non_callable_is_refused_at_once(self) -> None:
        """device_policy()(5): refused at decoration, as device_guard refuses it.

        Before: accepted, then a TypeError at call time.
        """
        with pytest.raises(ModelInputError, match="int 5"):
            device_policy()(5)  # type: ignore[type-var]

    def test_generator_message_recommends_what_works(self) -> None:
        """The refusal no longer recommends a scope inside the generator."""

        def numbers() -> Iterator[int]:
            yield 1

        with pytest.raises(ModelInputError) as info:
            device_policy(resolution_mode="fail")(numbers)
        message = info.value.message
        assert "inside it instead" not in message
        assert "around each use of the generator" in message
        assert "pass the options explicitly" in message


class ScopedMethods:
    """device_policy stacked outside @classmethod and @staticmethod."""

    @device_policy(resolution_mode="fail")
    @classmethod
    async def class_mode(cls) -> str:
        await asyncio.sleep(0)
        return str(current_policy().resolution_mode)

    @device_policy(resolution_mode="fail")
    @staticmethod
    async def static_mode() -> str:
        await asyncio.sleep(0)
        return str(current_policy().resolution_mode)

    @device_policy(resolution_mode="fail")
    @classmethod
    def sync_class_mode(cls) -> str:
        return str(current_policy().resolution_mode)


class TestPolicyOverAsyncClassmethodLostItsScope:
    """device_policy over @classmethod/@staticmethod async def ran the body outside the scope."""

    def test_async_classmethod_runs_in_the_scope(self) -> None:
        """Before: the coroutine was returned un-awaited, so the body saw 'fallback'."""
        assert asyncio.run(ScopedMethods.class_mode()) == "fail"
        assert asyncio.run(ScopedMethods().class_mode()) == "fail"

    def test_async_staticmethod_runs_in_the_scope(self) -> None:
        """The same for a static method."""
        assert asyncio.run(ScopedMethods.static_mode()) == "fail"

    def test_sync_classmethod_still_runs_in_the_scope(self) -> None:
        """The plain form worked before and still does; the scope ends with the call."""
        assert ScopedMethods.sync_class_mode() == "fail"
        assert current_policy().resolution_mode == "fallback"

    def test_generator_inside_classmethod_is_refused(self) -> None:
        """A generator hidden inside @classmethod is refused like a bare one."""

        def rows(cls: type) -> Any:
            yield cls

        with pytest.raises(ModelInputError, match="generator function"):
            device_policy(resolution_mode="fail")(classmethod(rows))  # type: ignore[type-var]


@device_policy(resolution_mode="fail", fallback_device="meta")
def strict_mode() -> str:
    return str(current_policy().resolution_mode)


@device_policy(resolution_mode="fail", fallback_device="meta")
async def strict_mode_async() -> str:
    return str(current_policy().resolution_mode)


class PolicyMethods:
    @classmethod
    @device_policy(fallback_device="meta")
    def fallback_of(cls) -> str:
        return str(current_policy().fallback_device)


class TestPolicyDecoratedFunctionsDidNotPickle:
    """A function decorated with device_policy raised 'object proxy must define __reduce__()'."""

    @pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
    def test_module_level_function(self, protocol: int) -> None:
        """Before: NotImplementedError from wrapt; now it pickles by reference, scope and all."""
        restored = pickle.loads(pickle.dumps(strict_mode, protocol=protocol))
        assert restored is strict_mode
        assert restored() == "fail"

    def test_async_function(self) -> None:
        """The async form pickles the same way."""
        restored = pickle.loads(pickle.dumps(strict_mode_async))
        assert asyncio.run(restored()) == "fail"

    def test_classmethod(self) -> None:
        """A scoped classmethod pickles as a lookup on its class."""
        assert pickle.loads(pickle.dumps(PolicyMethods.fallback_of))() == "meta"

    def test_local_function_says_why(self) -> None:
        """A function defined inside another cannot be found by name, and the error says so."""

        @device_policy(resolution_mode="fail")
        def local() -> None:
            raise AssertionError("never called")

        with pytest.raises((pickle.PicklingError, AttributeError), match="local object"):
            pickle.dumps(local)
