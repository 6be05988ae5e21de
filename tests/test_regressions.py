"""Regression tests: one class per bug found, named for what it broke."""

from __future__ import annotations

import asyncio
import logging
import pickle
from typing import Any

import pytest
import torch

from onnx_device_guard import (
    EnvironmentConfigurationError,
    ModelInputError,
    align_device_with_onnx_session,
    device_guard,
    device_policy,
)
from onnx_device_guard._policy import current_policy

from .logs import recorded_logs
from .sessions import FakeSession, cpu_session


def session_on(device_id: object) -> FakeSession:
    return FakeSession(
        ["CUDAExecutionProvider", "CPUExecutionProvider"],
        {"CUDAExecutionProvider": {"device_id": device_id}},
    )


class TestDeviceIdBeyondTorchsRange:
    """A device_id torch cannot address was turned into a wrong device, then into an error."""

    @pytest.mark.parametrize("device_id", ["128", 128, "255", 256, 2**31, 2**70, "9" * 20])
    @pytest.mark.parametrize("mode", ["fallback", "fail"])
    def test_index_is_not_checked(self, device_id: object, mode: str) -> None:
        """First cuda:-128 came back for 128; then a GPU session that reads cuda:0 raised.

        Now the index is not checked (one WARNING names it) and the CUDA
        provider alone decides: the device is kept.
        """
        with recorded_logs() as records:
            aligned = align_device_with_onnx_session(
                session_on(device_id),
                "cuda:0",
                mode,  # type: ignore[arg-type]
            )
        assert aligned == torch.device("cuda", 0)
        assert [r.levelno for r in records] == [logging.WARNING]
        assert f"device_id={device_id!r}" in records[0].getMessage()

    def test_largest_addressable_index_still_aligns(self) -> None:
        """cuda:127 is the last index torch keeps as it is; it still aligns normally."""
        assert align_device_with_onnx_session(session_on("127"), "cuda:0") == torch.device(
            "cuda", 127
        )
        with pytest.raises(EnvironmentConfigurationError, match="device_id 127"):
            align_device_with_onnx_session(session_on(127), "cuda:0", "fail")


class ComparesBadly:
    """A value whose ``==`` raises, as numpy arrays do in a boolean context."""

    def __eq__(self, other: object) -> bool:
        raise ValueError("The truth value of an array with more than one element is ambiguous")

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "array(['fail', 'fail'])"


class TestModeComparedBeforeItsTypeWasChecked:
    """resolution_mode was compared with '==' before checking it was a str."""

    @pytest.mark.parametrize(
        "check",
        [
            lambda mode: align_device_with_onnx_session(cpu_session(), "cpu", mode),
            lambda mode: device_policy(resolution_mode=mode),
            lambda mode: device_guard(resolution_mode=mode),
        ],
        ids=["align", "device_policy", "device_guard"],
    )
    def test_value_with_odd_equality_is_a_model_input_error(self, check: Any) -> None:
        """Before: the value's own ValueError escaped instead of a ModelInputError naming it."""
        with pytest.raises(ModelInputError, match=r"got array\(\['fail', 'fail'\]\)"):
            check(ComparesBadly())


class LookupRaises:
    """A lazy session proxy whose attribute lookup raises, as a broken ``__getattr__`` does."""

    def __init__(self, error: Exception, providers: list[str] | None = None) -> None:
        self._error = error
        self._providers = providers

    def __getattr__(self, name: str) -> Any:
        if name == "get_providers" and self._providers is not None:
            return lambda: self._providers
        raise self._error


class TestSessionLookupLeakedItsError:
    """A session whose attribute lookup raised something else than AttributeError leaked it."""

    @pytest.mark.parametrize("error", [KeyError("get_providers"), RuntimeError("not loaded")])
    @pytest.mark.parametrize("device", ["cpu", "cuda:0"])
    def test_get_providers_lookup(self, error: Exception, device: str) -> None:
        """Before: the KeyError or RuntimeError itself escaped from the library."""
        with pytest.raises(
            ModelInputError, match=rf"session\.get_providers raised {type(error).__name__}"
        ):
            align_device_with_onnx_session(LookupRaises(error), device)

    def test_get_provider_options_lookup(self) -> None:
        """The optional get_provider_options: its error no longer escapes, nor fails the call.

        A session that reads CUDA is aligned by provider type alone, with one
        WARNING that names the error (before: a ModelInputError).
        """
        session = LookupRaises(KeyError("get_provider_options"), ["CUDAExecutionProvider"])
        with recorded_logs() as records:
            assert align_device_with_onnx_session(session, "cuda:0") == torch.device("cuda", 0)
        assert "raised KeyError" in records[0].getMessage()

    def test_attribute_error_still_means_absent(self) -> None:
        """An AttributeError from the lookup still means the method is not there."""
        session = LookupRaises(AttributeError("get_provider_options"), ["CUDAExecutionProvider"])
        assert align_device_with_onnx_session(session, "cuda:1") == torch.device("cuda", 1)
        with pytest.raises(ModelInputError, match="with a get_providers\\(\\) method"):
            align_device_with_onnx_session(LookupRaises(AttributeError("x")), "cpu")


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
