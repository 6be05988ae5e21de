"""Property-based tests: the core, the scopes and the guard agree with a small oracle.

The oracle below is written from the documented behaviour, not from the code:
it reads the providers and options off the stand-in session's fields, never
through the library's helpers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Literal, cast

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from onnx_device_guard import (
    DeviceGuardError,
    EnvironmentConfigurationError,
    ModelInputError,
    align_device_with_onnx_session,
    device_guard,
    device_policy,
)
from onnx_device_guard._policy import current_policy

from .helpers import no_scope_left
from .logs import recorded_logs
from .sessions import FakeSession, ProvidersOnlySession
from .strategies import (
    Scope,
    devices,
    fallback_devices,
    modes,
    scope_stacks,
    sessions,
    valid_device_strings,
    valid_devices,
)

GPU_CAPABLE = {
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "NvTensorRTRTXExecutionProvider",
    "ROCMExecutionProvider",
    "MIGraphXExecutionProvider",
}
"""Written out again on purpose: the oracle does not trust the library's constant."""

CPU = torch.device("cpu")
Mode = Literal["fail", "fallback"]


@dataclass(frozen=True)
class Expected:
    """What the oracle predicts: a device, or an error type whose message names ``bad``."""

    device: torch.device | None = None
    error: type[Exception] | None = None
    bad: str = ""
    logged: bool = False
    unchecked: bool = False
    """The device index is not checked: one WARNING, whatever the policy's ``warn``."""


@dataclass(frozen=True)
class Defaults:
    """The policy the oracle assumes to be in force."""

    resolution_mode: Mode = "fallback"
    fallback_device: torch.device = CPU
    warn: bool = True

    def under(self, scope: Scope) -> Defaults:
        """The policy inside ``scope`` entered where this one is in force."""
        return Defaults(
            resolution_mode=cast("Mode", scope.resolution_mode or self.resolution_mode),
            fallback_device=(
                self.fallback_device
                if scope.fallback_device is None
                else cast(torch.device, parse_device(scope.fallback_device))
            ),
            warn=self.warn if scope.warn is None else scope.warn,
        )

    def check(self) -> None:
        """Assert that this is the policy in force."""
        policy = current_policy()
        assert (policy.resolution_mode, policy.fallback_device, policy.warn) == (
            self.resolution_mode,
            self.fallback_device,
            self.warn,
        )


def parse_device(value: object) -> torch.device | None:
    """The oracle's reading of a device argument; ``None`` when it is not one.

    torch keeps indices 0 to 127 only; it silently changes larger ones, so
    they are not devices. An int is a CUDA index, as `torch.device(0)` reads it.
    """
    if isinstance(value, torch.device):
        return value if value.index is None or 0 <= value.index <= 127 else None
    if type(value) is int:  # a CUDA index, as torch reads it
        return torch.device("cuda", value) if 0 <= value <= 127 else None
    if isinstance(value, str):
        try:
            device = torch.device(value)
        except RuntimeError:
            return None
        written = value.partition(":")[2]
        return device if not written or int(written) <= 127 else None
    return None


def read_device_id(raw: object) -> int | None:
    """The oracle's reading of a ``device_id``: the GPU index, or ``None`` if not checked.

    A GPU index is a non-negative int, or a string of ASCII digits (whitespace
    around them allowed, as onnxruntime allows it), that torch can address
    (0 to 127). Anything else means the index is not checked.
    """
    text = raw.strip() if isinstance(raw, str) else ""
    number = int(text) if text.isascii() and text.isdigit() else raw
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= 127:
        return None
    return number


def oracle(
    session: FakeSession | ProvidersOnlySession,
    device: object,
    mode: object,
    fallback: object,
    defaults: Defaults,
) -> Expected:
    """Predict ``align_device_with_onnx_session(session, device, mode, fallback)``."""
    if mode is not None and not (isinstance(mode, str) and mode in ("fail", "fallback")):
        return Expected(error=ModelInputError, bad=repr(mode))
    requested = parse_device(device)
    if requested is None:
        return Expected(error=ModelInputError, bad=repr(device))
    fallback_device = defaults.fallback_device if fallback is None else parse_device(fallback)
    if fallback_device is None:
        return Expected(error=ModelInputError, bad=repr(fallback))
    effective_mode = defaults.resolution_mode if mode is None else mode
    if requested.type != "cuda":
        return Expected(device=requested)
    gpu = [name for name in session.providers if name in GPU_CAPABLE]
    if not gpu:
        if effective_mode == "fail":
            return Expected(error=EnvironmentConfigurationError, bad=repr(str(requested)))
        if fallback_device.type == "cuda":  # a fallback the session cannot read either
            return Expected(error=EnvironmentConfigurationError, bad=repr(str(fallback_device)))
        return Expected(device=fallback_device, logged=True)
    options = session.options.get(gpu[0], {}) if isinstance(session, FakeSession) else {}
    if "device_id" not in options:
        return Expected(device=requested)
    device_id = read_device_id(options["device_id"])
    if device_id is None:
        return Expected(device=requested, unchecked=True)
    index = requested.index if requested.index is not None else 0  # CUDA never initialised here
    if index == device_id:
        return Expected(device=requested)
    if effective_mode == "fail":
        return Expected(error=EnvironmentConfigurationError, bad=f"device_id {device_id}")
    return Expected(device=torch.device("cuda", device_id), logged=True)


def enter_scopes(stack: ExitStack, scopes: Sequence[Scope]) -> Defaults:
    """Enter ``scopes`` outermost first and return the policy the oracle expects inside."""
    expected = Defaults()
    for scope in scopes:
        stack.enter_context(policy_for(scope))
        expected = expected.under(scope)
    return expected


def policy_for(scope: Scope) -> device_policy:
    return device_policy(
        resolution_mode=cast("Mode | None", scope.resolution_mode),
        fallback_device=scope.fallback_device,
        warn=scope.warn,
    )


def assert_defaults_back() -> None:
    assert no_scope_left()


class TestCoreAgreesWithOracle:
    """align_device_with_onnx_session against the oracle, over generated inputs."""

    @given(
        session=sessions(),
        device=devices,
        mode=modes,
        fallback=fallback_devices,
        scopes=scope_stacks,
    )
    def test_result_error_and_log_match_the_oracle(
        self,
        session: FakeSession | ProvidersOnlySession,
        device: object,
        mode: object,
        fallback: object,
        scopes: list[Scope],
    ) -> None:
        """Every input gives the oracle's device or error, and a fallback logs exactly once."""
        with ExitStack() as stack, recorded_logs() as records:
            defaults = enter_scopes(stack, scopes)
            expected = oracle(session, device, mode, fallback, defaults)
            outcome: torch.device | DeviceGuardError
            try:
                outcome = align_device_with_onnx_session(
                    session,
                    device,  # type: ignore[arg-type]
                    mode,  # type: ignore[arg-type]
                    fallback,  # type: ignore[arg-type]
                )
            except DeviceGuardError as error:
                outcome = error
        levels = [record.levelno for record in records]
        if isinstance(outcome, DeviceGuardError):
            assert expected.error is not None, f"raised {outcome!r}, expected {expected}"
            assert type(outcome) is expected.error, (outcome, expected)
            assert expected.bad in outcome.message
            assert levels == []
        else:
            assert expected.error is None, f"returned {outcome!r}, expected {expected}"
            assert isinstance(outcome, torch.device)
            assert outcome == expected.device
            if expected.logged:
                assert levels == [logging.WARNING if defaults.warn else logging.DEBUG]
            elif expected.unchecked:
                assert levels == [logging.WARNING]
            else:
                assert levels == []
        assert_defaults_back()

    @given(session=sessions(), device=valid_devices, mode=modes, fallback=fallback_devices)
    def test_never_raises_anything_but_documented_errors(
        self,
        session: FakeSession | ProvidersOnlySession,
        device: object,
        mode: object,
        fallback: object,
    ) -> None:
        """Whatever the providers and options hold, only the library's own errors escape."""
        try:
            with device_policy(warn=False):
                align_device_with_onnx_session(
                    session,
                    device,  # type: ignore[arg-type]
                    mode,  # type: ignore[arg-type]
                    fallback,  # type: ignore[arg-type]
                )
        except (ModelInputError, EnvironmentConfigurationError):
            pass

    @given(session=sessions(), device=valid_devices)
    def test_an_aligned_device_is_a_fixed_point(
        self, session: FakeSession | ProvidersOnlySession, device: torch.device | str
    ) -> None:
        """Aligning the result of a fallback again changes nothing (unless it is garbage)."""
        with device_policy(resolution_mode="fallback", warn=False):
            try:
                aligned = align_device_with_onnx_session(session, device)
            except ModelInputError:
                return
            assert align_device_with_onnx_session(session, aligned) == aligned

    @given(session=sessions(), device=valid_devices, mode=modes)
    def test_the_session_is_left_as_it_was(
        self, session: FakeSession | ProvidersOnlySession, device: object, mode: object
    ) -> None:
        """The core only reads the session: its providers and options are not mutated."""
        before = (list(session.providers), repr(getattr(session, "options", None)))
        try:
            with device_policy(warn=False):
                align_device_with_onnx_session(session, device, mode)  # type: ignore[arg-type]
        except DeviceGuardError:
            pass
        assert (list(session.providers), repr(getattr(session, "options", None))) == before


class TestScopesAgreeWithOracle:
    """device_policy scopes nest and unwind as the oracle says."""

    @given(scopes=scope_stacks, raise_inside=st.booleans())
    def test_nested_scopes_compose_and_unwind(
        self, scopes: list[Scope], raise_inside: bool
    ) -> None:
        """Each scope overrides only what it sets; leaving them, even by an error, restores all."""
        depths: list[int] = []

        def descend(depth: int, expected: Defaults) -> None:
            expected.check()
            depths.append(depth)
            if depth == len(scopes):
                if raise_inside:
                    raise LookupError(depth)
                return
            with policy_for(scopes[depth]):
                descend(depth + 1, expected.under(scopes[depth]))
            expected.check()

        if raise_inside:
            with pytest.raises(LookupError):
                descend(0, Defaults())
        else:
            descend(0, Defaults())
        assert depths == list(range(len(scopes) + 1))
        assert_defaults_back()


@dataclass
class Model:
    """A model as factories return them: a session and a device."""

    session: Any
    device: Any


class TestGuardAgreesWithOracle:
    """device_guard writes back what the core would return, in the type it found."""

    @given(
        session=sessions(),
        device_text=valid_device_strings,
        as_string=st.booleans(),
        mode=st.one_of(st.none(), st.sampled_from(["fail", "fallback"])),
        scopes=scope_stacks,
    )
    def test_guarded_factory_agrees_with_oracle(
        self,
        session: FakeSession | ProvidersOnlySession,
        device_text: str,
        as_string: bool,
        mode: Mode | None,
        scopes: list[Scope],
    ) -> None:
        """The same model comes back, its device aligned as the oracle says, or the error."""
        device: torch.device | str = device_text if as_string else torch.device(device_text)
        model = Model(session, device)

        @device_guard(resolution_mode=mode)
        def load() -> Model:
            return model

        with ExitStack() as stack, recorded_logs():
            defaults = enter_scopes(stack, scopes)
            expected = oracle(session, device, mode, None, defaults)
            if expected.error is not None:
                with pytest.raises(expected.error) as info:
                    load()
                assert expected.bad in str(info.value)
                assert model.device is device
                return
            assert load() is model
        assert expected.device is not None
        if as_string:
            assert isinstance(model.device, str)
            assert torch.device(model.device) == expected.device
        else:
            assert model.device == expected.device
        if expected.device == torch.device(device):
            assert model.device is device, "an aligned device is left untouched"
