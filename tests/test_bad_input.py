"""Bad input at every public entry point: the documented error, naming the bad value.

Nothing may escape as a bare AttributeError, KeyError or TypeError from inside
the library; an exception the user's own factory raises reaches the caller
unchanged, and every scope is restored on the way out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy
import pytest
import torch

from onnx_device_guard import (
    DeviceGuardError,
    EnvironmentConfigurationError,
    ModelInputError,
    align_device_with_onnx_session,
    aligned_device,
    device_guard,
    device_policy,
    watch_sessions,
)
from onnx_device_guard._options import guard_options
from onnx_device_guard._policy import current_policy

from .helpers import no_scope_left
from .logs import recorded_logs
from .sessions import (
    FakeSession,
    ReturningSession,
    cpu_session,
    cuda_session,
)


class RaisingSession:
    """``get_providers()`` raises, as a session whose native part failed to load might."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def get_providers(self) -> list[str]:
        raise self.error


class NotCallableProviders:
    """``get_providers`` is there, but it is not a method."""

    get_providers: ClassVar[list[str]] = ["CPUExecutionProvider"]


class RaisingList(list[str]):
    """A list subclass whose iteration raises, as a proxy to a freed native list might."""

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("list went away")


def raising_names() -> Iterator[str]:
    yield "CPUExecutionProvider"
    raise KeyError("provider")


class ReprRaises:
    """An object whose ``__repr__`` raises."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr today")


class HugeRepr:
    """An object whose ``repr`` is ten megabytes long."""

    def __repr__(self) -> str:
        return "x" * 10_000_000


def session_with_device_id(device_id: object) -> FakeSession:
    return FakeSession(
        ["CUDAExecutionProvider", "CPUExecutionProvider"],
        {"CUDAExecutionProvider": {"device_id": device_id}},
    )


@dataclass
class Model:
    session: Any
    device: Any


class RefusingDeviceModel:
    """A model whose ``device`` setter refuses the value with its own error."""

    def __init__(self) -> None:
        self.session = cpu_session()

    @property
    def device(self) -> str:
        return "cuda:0"

    @device.setter
    def device(self, value: str) -> None:
        raise ValueError(f"{value!r} is not one of this model's devices")


@dataclass(frozen=True)
class Case:
    """One bad call: what it raises, and a fragment the message must hold."""

    id: str
    call: Callable[[], object]
    error: type[DeviceGuardError]
    names: str


def align(session: object, device: object, mode: object = None, fallback: object = None) -> Any:
    return lambda: align_device_with_onnx_session(
        session,
        device,  # type: ignore[arg-type]
        mode,  # type: ignore[arg-type]
        fallback,  # type: ignore[arg-type]
    )


def enter_aligned(session: object, device: object, **options: object) -> Callable[[], object]:
    def call() -> object:
        with aligned_device(session, device, **options) as aligned:  # type: ignore[arg-type]
            return aligned

    return call


def guarded_call(model: object, **options: object) -> Callable[[], object]:
    """Call a factory guarded with ``options`` that returns ``model``."""

    def factory() -> object:
        return model

    return lambda: device_guard(**options)(factory)()  # type: ignore[call-overload]


def guarded_async_call(model: object) -> Callable[[], object]:
    async def factory() -> object:
        return model

    return lambda: asyncio.run(device_guard(factory)())


def decorate(**options: object) -> Callable[[], object]:
    def factory() -> Model:
        raise AssertionError("never called")

    return lambda: device_guard(**options)(factory)  # type: ignore[call-overload]


def returns_coroutine() -> Callable[[], object]:
    async def make() -> Model:
        raise AssertionError("never awaited")

    def factory() -> Coroutine[Any, Any, Model]:
        return make()

    return lambda: device_guard(factory)()


def make_policy(*args: object, **options: object) -> Callable[[], object]:
    return lambda: device_policy(*args, **options)  # type: ignore[arg-type]


def policy_on(function: Callable[..., Any]) -> Callable[[], object]:
    return lambda: device_policy(warn=False)(function)


def generator_factory() -> Iterator[Model]:
    yield Model(cpu_session(), "cpu")


async def async_generator_factory() -> Any:
    yield Model(cpu_session(), "cpu")


CUDA = torch.device("cuda", 0)
CASES = [
    # align_device_with_onnx_session: arguments
    Case("mode unknown", align(cpu_session(), "cpu", "retry"), ModelInputError, "'retry'"),
    Case("mode wrong case", align(cpu_session(), CUDA, "FAIL"), ModelInputError, "'FAIL'"),
    Case("mode not a str", align(cpu_session(), "cpu", 1), ModelInputError, "got 1"),
    Case("mode bytes", align(cpu_session(), "cpu", b"fail"), ModelInputError, "b'fail'"),
    Case("mode before device", align(None, 3, "retry"), ModelInputError, "'retry'"),
    Case("device bool", align(cpu_session(), True), ModelInputError, "bool True"),
    Case("device int too large", align(cpu_session(), 300), ModelInputError, "300"),
    Case("device None", align(cpu_session(), None), ModelInputError, "NoneType None"),
    Case("device bytes", align(cpu_session(), b"cuda"), ModelInputError, "b'cuda'"),
    Case("device tuple", align(cpu_session(), ("cuda", 0)), ModelInputError, "('cuda', 0)"),
    Case("device unknown type", align(cpu_session(), "gpu:0"), ModelInputError, "'gpu:0'"),
    Case("device negative", align(cpu_session(), "cuda:-1"), ModelInputError, "'cuda:-1'"),
    Case("device empty", align(cpu_session(), ""), ModelInputError, "device=''"),
    Case("device padded", align(cpu_session(), " cuda"), ModelInputError, "' cuda'"),
    Case(
        "fallback unused but bad",
        align(cuda_session(), CUDA, fallback="nowhere"),
        ModelInputError,
        "'nowhere'",
    ),
    Case("fallback float", align(cpu_session(), "cpu", None, 3.0), ModelInputError, "float 3.0"),
    # align_device_with_onnx_session: sessions
    Case("session None", align(None, "cpu"), ModelInputError, "NoneType None"),
    Case("session str", align("CPUExecutionProvider", CUDA), ModelInputError, "str 'CPU"),
    Case(
        "get_providers not callable",
        align(NotCallableProviders(), CUDA),
        ModelInputError,
        "NotCallableProviders",
    ),
    Case(
        "get_providers raises RuntimeError",
        align(RaisingSession(RuntimeError("native session gone")), CUDA),
        ModelInputError,
        "RuntimeError: native session gone",
    ),
    Case(
        "get_providers raises KeyError",
        align(RaisingSession(KeyError("providers")), CUDA),
        ModelInputError,
        "KeyError: 'providers'",
    ),
    Case(
        "get_providers raises AttributeError",
        align(RaisingSession(AttributeError("_sess")), CUDA),
        ModelInputError,
        "AttributeError: _sess",
    ),
    Case(
        "get_providers returns None",
        align(ReturningSession(None), CUDA),
        ModelInputError,
        "NoneType None",
    ),
    Case(
        "get_providers returns a str",
        align(ReturningSession("CUDAExecutionProvider"), CUDA),
        ModelInputError,
        "str 'CUDAExecutionProvider'",
    ),
    Case(
        "get_providers returns non-str names",
        align(ReturningSession([1, None]), CUDA),
        ModelInputError,
        "[1, None]",
    ),
    Case(
        "get_providers returns bytes",
        align(ReturningSession(b"CUDAExecutionProvider"), CUDA),
        ModelInputError,
        "bytes b'CUDAExecutionProvider'",
    ),
    Case(
        "get_providers returns an int",
        align(ReturningSession(3), CUDA),
        ModelInputError,
        "int 3",
    ),
    Case(
        "get_providers returns a list whose iteration raises",
        align(ReturningSession(RaisingList(["CUDAExecutionProvider"])), CUDA),
        ModelInputError,
        "RuntimeError: list went away",
    ),
    Case(
        "get_providers returns a generator that raises",
        align(ReturningSession(raising_names()), CUDA),
        ModelInputError,
        "KeyError: 'provider'",
    ),
    Case(
        "get_providers returns names whose repr raises",
        align(ReturningSession([ReprRaises()]), CUDA),
        ModelInputError,
        "<ReprRaises object>",
    ),
    Case(
        "get_providers returns a huge repr",
        align(ReturningSession([HugeRepr()]), CUDA),
        ModelInputError,
        "[xxxx",
    ),
    Case("session whose repr raises", align(ReprRaises(), CUDA), ModelInputError, "ReprRaises"),
    Case("device whose repr raises", align(cpu_session(), ReprRaises()), ModelInputError, "<Repr"),
    Case("device huge repr", align(cpu_session(), HugeRepr()), ModelInputError, "xxx..."),
    Case("device huge str", align(cpu_session(), "x" * 10_000_000), ModelInputError, "xxx..."),
    Case("mode whose repr raises", align(cpu_session(), CUDA, ReprRaises()), ModelInputError, "<R"),
    Case("device index 256", align(cpu_session(), "cuda:256"), ModelInputError, "'cuda:256'"),
    Case("device index 128", align(cpu_session(), "cuda:128"), ModelInputError, "'cuda:128'"),
    Case(
        "torch.device index 128",
        align(cpu_session(), torch.device("cuda", 128)),
        ModelInputError,
        "device index -128",
    ),
    Case(
        "fallback index 128",
        align(cpu_session(), CUDA, None, "cuda:128"),
        ModelInputError,
        "fallback_device='cuda:128'",
    ),
    # aligned_device
    Case(
        "aligned_device mode",
        enter_aligned(cpu_session(), "cpu", resolution_mode="x"),
        ModelInputError,
        "'x'",
    ),
    Case("aligned_device device", enter_aligned(cpu_session(), "gpu"), ModelInputError, "'gpu'"),
    Case(
        "aligned_device fallback",
        enter_aligned(cpu_session(), "cpu", fallback_device=1.5),
        ModelInputError,
        "float 1.5",
    ),
    Case(
        "aligned_device warn",
        enter_aligned(cpu_session(), "cpu", warn="yes"),
        ModelInputError,
        "str 'yes'",
    ),
    Case(
        "aligned_device session",
        enter_aligned(RaisingSession(TypeError("bad call")), CUDA),
        ModelInputError,
        "TypeError: bad call",
    ),
    # device_policy
    Case("policy mode", make_policy(resolution_mode="strict"), ModelInputError, "'strict'"),
    Case("policy fallback", make_policy(fallback_device="gpu"), ModelInputError, "'gpu'"),
    Case("policy fallback type", make_policy(fallback_device=0.5), ModelInputError, "float 0.5"),
    Case("policy warn int", make_policy(warn=1), ModelInputError, "int 1"),
    Case("policy warn str", make_policy(warn="False"), ModelInputError, "str 'False'"),
    Case(
        "policy warn numpy array",
        make_policy(warn=numpy.array([True])),
        ModelInputError,
        "numpy.ndarray array([ True])",
    ),
    Case("policy fallback index", make_policy(fallback_device="cuda:256"), ModelInputError, "256"),
    Case("policy on an int", lambda: device_policy()(5), ModelInputError, "int 5"),  # type: ignore[type-var]
    Case("policy on None", lambda: device_policy()(None), ModelInputError, "NoneType None"),  # type: ignore[type-var]
    Case(
        "policy on generator",
        policy_on(generator_factory),
        ModelInputError,
        "'generator_factory'",
    ),
    Case(
        "policy on async generator",
        policy_on(async_generator_factory),
        ModelInputError,
        "'async_generator_factory'",
    ),
    # device_guard: decoration
    Case("guard not callable", lambda: device_guard(cast(Any, 42)), ModelInputError, "int 42"),
    Case("guard mode", decorate(resolution_mode="retry"), ModelInputError, "'retry'"),
    Case("guard fallback", decorate(fallback_device="gpu"), ModelInputError, "'gpu'"),
    Case(
        "guard session_attr", decorate(session_attr="not a name"), ModelInputError, "'not a name'"
    ),
    Case("guard session_attr empty", decorate(session_attr=()), ModelInputError, "()"),
    Case("guard session_attr types", decorate(session_attr=[1]), ModelInputError, "[1]"),
    Case(
        "guard device_attr tuple", decorate(device_attr=("a", "b")), ModelInputError, "('a', 'b')"
    ),
    Case("guard device_attr int", decorate(device_attr=3), ModelInputError, "got 3"),
    # device_guard: what the factory returns
    Case("factory returns None", guarded_call(None), DeviceGuardError, "NoneType"),
    Case("async factory returns None", guarded_async_call(None), DeviceGuardError, "NoneType"),
    Case(
        "model without session",
        guarded_call(object(), require_session=True),
        DeviceGuardError,
        "'_session', 'session'",
    ),
    Case(
        "model without device",
        guarded_call(type("NoDevice", (), {"session": cpu_session()})()),
        DeviceGuardError,
        "'_device', 'device'",
    ),
    Case(
        "named session attr missing",
        guarded_call(Model(cpu_session(), "cpu"), session_attr=("vision", "text")),
        DeviceGuardError,
        "'vision', 'text'",
    ),
    Case(
        "named device attr missing",
        guarded_call(Model(cpu_session(), "cpu"), device_attr="target"),
        DeviceGuardError,
        "'target'",
    ),
    Case(
        "session None, searched, session_attr suggested",
        guarded_call(Model(None, "cuda"), require_session=True),
        DeviceGuardError,
        "session (a NoneType, not a session)",
    ),
    Case("device float", guarded_call(Model(cpu_session(), 3.5)), ModelInputError, "float 3.5"),
    Case(
        "device unparsable", guarded_call(Model(cpu_session(), "gpu:0")), ModelInputError, "'gpu:0'"
    ),
    Case(
        "session raises",
        guarded_call(Model(RaisingSession(KeyError("x")), "cuda")),
        ModelInputError,
        "KeyError: 'x'",
    ),
    Case(
        "guarded device index 256",
        guarded_call(Model(cpu_session(), "cuda:256")),
        ModelInputError,
        "'cuda:256'",
    ),
    Case(
        "device setter refuses",
        guarded_call(RefusingDeviceModel()),
        DeviceGuardError,
        "'device' cannot be set to 'cpu'",
    ),
    Case("sync factory returns coroutine", returns_coroutine(), DeviceGuardError, "awaitable"),
    Case(
        "fail mode",
        guarded_call(Model(cpu_session(), "cuda:0"), resolution_mode="fail"),
        EnvironmentConfigurationError,
        "'cuda:0'",
    ),
]


@pytest.fixture(autouse=True)
def defaults_back_after_each() -> Iterator[None]:
    """Whatever a case does, no scope outlives it."""
    yield
    assert no_scope_left()


class TestBadInput:
    """Each bad call raises the documented error, naming the bad value."""

    @pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
    def test_documented_error_naming_the_value(self, case: Case) -> None:
        """The error is the documented type, says what was wrong and links to the docs."""
        with device_policy(warn=False), pytest.raises(DeviceGuardError) as info:
            case.call()
        error = info.value
        assert type(error) is case.error
        assert not isinstance(error, AttributeError | KeyError | TypeError)
        assert case.names in error.message
        assert error.help_url.startswith("https://")
        assert str(error) == f"{error.message} (see {error.help_url})"
        assert len(error.message) < 1000, "values are cut to a sane length"

    def test_every_entry_point_is_covered(self) -> None:
        """The table exercises every public callable."""
        called = " ".join(case.id for case in CASES)
        for entry in ("aligned_device", "policy", "guard", "factory", "mode", "session"):
            assert entry in called


class UserError(Exception):
    """Something the user's own factory raises."""


@dataclass
class FactoryFailure:
    id: str
    error: BaseException


FAILURES = [
    FactoryFailure("custom", UserError("weights not found")),
    FactoryFailure("KeyError", KeyError("weights")),
    FactoryFailure("AttributeError", AttributeError("no attribute 'onnx'")),
    FactoryFailure("TypeError", TypeError("bad argument")),
    FactoryFailure("library error", ModelInputError("raised by a nested call")),
    FactoryFailure("KeyboardInterrupt", KeyboardInterrupt()),
]
failures = pytest.mark.parametrize("failure", FAILURES, ids=[f.id for f in FAILURES])


def check_in_scope(mode: str, fallback: str) -> None:
    policy = current_policy()
    assert (policy.resolution_mode, str(policy.fallback_device)) == (mode, fallback)


class TestFactoryErrors:
    """An exception from the factory itself reaches the caller unchanged; scopes unwind."""

    @failures
    def test_sync_factory(self, failure: FactoryFailure) -> None:
        """A guarded factory's own exception passes through the guard as the same object."""

        @device_guard(resolution_mode="fail")
        def load() -> Model:
            raise failure.error

        with device_policy(resolution_mode="fallback", fallback_device="meta"):
            with pytest.raises(type(failure.error)) as info:
                load()
            assert info.value is failure.error
            check_in_scope("fallback", "meta")

    @failures
    def test_async_factory(self, failure: FactoryFailure) -> None:
        """An async guarded factory's exception passes through the guard unchanged."""

        @device_guard
        async def load() -> Model:
            await asyncio.sleep(0)
            raise failure.error

        async def main() -> None:
            with device_policy(resolution_mode="fail", fallback_device="meta"):
                with pytest.raises(type(failure.error)) as info:
                    await load()
                assert info.value is failure.error
                check_in_scope("fail", "meta")

        asyncio.run(main())

    @failures
    def test_factory_under_device_policy_decorator(self, failure: FactoryFailure) -> None:
        """A factory decorated with device_policy restores the caller's scope when it raises."""

        @device_policy(resolution_mode="fail", fallback_device="cuda:3")
        @device_guard
        def load() -> Model:
            check_in_scope("fail", "cuda:3")
            raise failure.error

        with device_policy(resolution_mode="fallback", fallback_device="meta"):
            with pytest.raises(type(failure.error)) as info:
                load()
            assert info.value is failure.error
            check_in_scope("fallback", "meta")

    @failures
    def test_async_factory_under_device_policy_decorator(self, failure: FactoryFailure) -> None:
        """The async form restores the caller's scope too."""

        @device_policy(resolution_mode="fail", fallback_device="cuda:3")
        @device_guard
        async def load() -> Model:
            await asyncio.sleep(0)
            check_in_scope("fail", "cuda:3")
            raise failure.error

        async def main() -> None:
            with pytest.raises(type(failure.error)) as info:
                await load()
            assert info.value is failure.error

        asyncio.run(main())

    @failures
    def test_aligned_device_block(self, failure: FactoryFailure) -> None:
        """An exception inside an aligned_device block passes through and ends its scope."""

        def block() -> None:
            with aligned_device(cpu_session(), "cuda", fallback_device="cpu", warn=False):
                check_in_scope("fallback", "cpu")
                raise failure.error

        with device_policy(resolution_mode="fallback", fallback_device="meta"):
            with pytest.raises(type(failure.error)) as info:
                block()
            assert info.value is failure.error
            check_in_scope("fallback", "meta")

    def test_alignment_error_leaves_the_model_untouched(self) -> None:
        """When alignment raises, the model's device keeps the value the factory gave it."""
        model = Model(cpu_session(), "cuda:0")

        @device_guard(resolution_mode="fail")
        def load() -> Model:
            return model

        with pytest.raises(EnvironmentConfigurationError):
            load()
        assert model.device == "cuda:0"


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


class ComparesBadlyStr(str):
    """A string whose own ``==`` raises: its text is what counts."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("compared")

    __hash__ = str.__hash__


class ConvertsBadly(int):
    """An int whose own conversion raises."""

    def __int__(self) -> int:
        raise RuntimeError("converted")

    __index__ = __int__


class TestHostileValuesGetLibraryErrors:
    """Values whose own ==, int() or repr() raise get the library's errors, never their own."""

    @pytest.mark.parametrize("option", ["resolution_mode", "fallback_device", "warn"])
    def test_watch_sessions_checks_before_comparing(self, option: str) -> None:
        """watch_sessions compared its options with None by == before checking them."""
        with pytest.raises(ModelInputError, match=option):
            watch_sessions(**{option: ComparesBadly()})

    def test_a_mode_is_read_by_its_text(self) -> None:
        """A str subclass with a raising == is its text: 'fail' is "fail" mode."""
        with pytest.raises(EnvironmentConfigurationError):
            align_device_with_onnx_session(cpu_session(), "cuda", ComparesBadlyStr("fail"))  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        "check",
        [
            lambda value: align_device_with_onnx_session(cpu_session(), value),
            lambda value: device_policy(fallback_device=value),
            lambda value: device_guard(device=value),
        ],
        ids=["align", "device_policy", "device_guard"],
    )
    def test_an_index_that_cannot_be_converted(self, check: Any) -> None:
        with pytest.raises(ModelInputError, match="cannot be read as an index"):
            check(ConvertsBadly(0))

    def test_attribute_names_are_kept_as_plain_strings(self) -> None:
        options = guard_options(
            {
                **dict.fromkeys(("resolution_mode", "fallback_device", "warn", "device"), None),
                "session_attr": ComparesBadlyStr("inner.session"),
                "device_attr": ComparesBadlyStr("device"),
            }
        )
        assert type(options.session_attr[0]) is str  # type: ignore[index]
        assert type(options.device_attr) is str


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


class TestDeviceStringsParsedOnce:
    """Device strings are parsed once per process; what is kept never answers for another."""

    def test_a_str_subclass_is_read_by_its_text(self) -> None:
        """A subclass that hashes and compares as 'cuda:0' is still the device it spells."""

        class Posing(str):
            def __hash__(self) -> int:
                return hash("cuda:0")

            def __eq__(self, other: object) -> bool:
                return True

        align_device_with_onnx_session(cuda_session(), "cuda:0")  # 'cuda:0' is kept now
        assert align_device_with_onnx_session(cuda_session(), Posing("cpu")) == torch.device("cpu")

    def test_a_bad_string_raises_every_time(self) -> None:
        """Errors are not kept: the same bad text raises again, with the same message."""
        messages = []
        for _ in range(2):
            with pytest.raises(ModelInputError) as info:
                align_device_with_onnx_session(cpu_session(), "cuda:007")
            messages.append(info.value.message)
        assert messages[0] == messages[1]
        assert "'cuda:007'" in messages[0]

    def test_many_distinct_strings_keep_the_cache_small(self) -> None:
        """A program walking through every index does not grow what is kept past its bound."""
        from onnx_device_guard import _devices

        for index in range(128):
            for kind in ("cuda", "cpu", "meta"):
                text = f"{kind}:{index}" if kind == "cuda" else kind
                assert str(_devices.as_device(text, "device")) == text
        assert _devices._parse.cache_info().currsize <= 256
