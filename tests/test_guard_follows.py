"""Guarded models follow their sessions' provider changes, through the public API.

`device_guard` (on functions, methods, class methods, `async def` factories
and classes) and `patch()` keep every model they return in line with its
sessions after load. The sessions are real CPU onnxruntime sessions of the
tiny model (a fresh one per test, as hooking changes the instance) and the
fakes of `test_following`, whose `run()` takes onnxruntime's fallback path:
an EPFail-like error, `self.set_providers(fallback)`, one retry.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator
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
    realign,
)
from onnx_device_guard._follow import is_followed

from . import test_following as following
from .logs import recorded_logs, warning_records
from .test_following import CPU, CUDA, GPU_PROVIDERS, EPFail, FallingBackSession

AZURE = "AzureExecutionProvider"
CHANGE = (
    "The session 'session' of a Model changed its providers from "
    "['CUDAExecutionProvider', 'CPUExecutionProvider'] to ['CPUExecutionProvider']. "
)
X = following.X
ONE = [[1.0] * 4]

_module_names = itertools.count()


class Model:
    """A model as a factory returns it: one session and a device."""

    def __init__(self, session: Any, device: Any = "cuda:0") -> None:
        self.session = session
        self.device = torch.device(device) if isinstance(device, str) else device


class TwoSessions:
    """A model with a detector and a recognizer session, as OCR pipelines have."""

    def __init__(self, detector: Any, recognizer: Any) -> None:
        self.detector, self.recognizer = detector, recognizer
        self.device = torch.device("cuda:0")


class NoDevice:
    """A model that keeps a session but no device attribute."""

    def __init__(self, session: Any) -> None:
        self.session = session


def at_least_warning(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return [record for record in records if record.levelno >= logging.WARNING]


@pytest.fixture
def real_session(tiny_model_path: Path) -> Callable[[], Any]:
    """Makes a fresh real CPU session of the tiny model."""
    import onnxruntime

    def make() -> Any:
        return onnxruntime.InferenceSession(str(tiny_model_path), providers=[CPU])

    return make


@pytest.fixture
def real_gpu_session(real_session: Callable[[], Any]) -> Callable[[], Any]:
    """Makes a fresh real session that reports CUDA and whose next run raises a real EPFail.

    What happens then is onnxruntime's own `run()`: it catches the EPFail,
    calls `self.set_providers(['CPUExecutionProvider'])` and retries.
    """

    def make() -> Any:
        session = real_session()
        following.TestRealSessions.gpu_session_failing_once(session)
        return session

    return make


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    """A module in `sys.modules` with a loader `load` and a class `Detector` to patch."""
    name = f"odg_follow_target_{next(_module_names)}"
    created = types.ModuleType(name)

    def load(session: Any, device: str = "cuda:0") -> Model:
        return Model(session, device)

    class Detector(Model):
        pass

    created.load = load  # type: ignore[attr-defined]
    created.Detector = Detector  # type: ignore[attr-defined]
    sys.modules[name] = created
    try:
        yield created
    finally:
        del sys.modules[name]


class TestFallbackMode:
    def test_set_providers_rewrites_the_device_with_one_warning(self) -> None:
        """A change to CPU rewrites the device and logs one WARNING naming both provider lists."""

        @device_guard
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        assert model.device == torch.device("cuda:0")
        with recorded_logs() as records:
            model.session.set_providers([CPU])
        assert model.device == torch.device("cpu")
        (warning,) = at_least_warning(records)
        assert warning.levelno == logging.WARNING
        assert warning.getMessage().startswith(
            CHANGE + "The model asks for device 'cuda:0', but its onnxruntime session runs "
            "only ['CPUExecutionProvider']"
        )
        assert "Using 'cpu' instead." in warning.getMessage()
        fields = vars(warning)
        assert fields["odg_changed_session"] == "session"
        assert fields["odg_old_providers"] == list(GPU_PROVIDERS)
        assert fields["odg_new_providers"] == [CPU]
        assert fields["odg_event"] == "fallback"
        assert fields["odg_reason"] == "no_gpu_provider"
        assert fields["odg_requested_device"] == "cuda:0"
        assert fields["odg_aligned_device"] == "cpu"
        assert fields["odg_applied"] is True
        assert fields["odg_providers"] == [CPU]
        assert fields["odg_device_attr"] == "device"
        assert "load" in fields["odg_factory"]

    def test_run_fallback_rewrites_the_device_and_retries(self, capsys: Any) -> None:
        """onnxruntime's fallback inside run() moves the model to CPU; the retried run answers."""

        @device_guard
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        with recorded_logs() as records:
            outputs = model.session.run(None, {"x": X})
        assert outputs[0].tolist() == ONE
        assert model.device == torch.device("cpu")
        (warning,) = at_least_warning(records)
        assert warning.getMessage().startswith(CHANGE)
        assert "Falling back to ['CPUExecutionProvider'] and retrying." in capsys.readouterr().out

    def test_a_real_run_fallback_rewrites_the_device(
        self, real_gpu_session: Callable[[], Any], capsys: Any
    ) -> None:
        """A real InferenceSession.run() falling back after a real EPFail moves the model."""

        @device_guard
        def load() -> Model:
            return Model(real_gpu_session())

        model = load()
        assert model.device == torch.device("cuda:0")
        with recorded_logs() as records:
            outputs = model.session.run(None, {"x": X})
        assert outputs[0].tolist() == ONE
        assert model.session.get_providers() == [CPU]
        assert model.device == torch.device("cpu")
        (warning,) = at_least_warning(records)
        assert warning.getMessage().startswith(CHANGE)
        assert "Falling back to ['CPUExecutionProvider'] and retrying." in capsys.readouterr().out

    def test_a_string_device_is_rewritten_as_a_string(self) -> None:
        """A model that stores its device as a string gets the new device as a string."""

        @device_guard
        def load() -> Model:
            model = Model(FallingBackSession())
            model.device = "cuda:0"
            return model

        model = load()
        with recorded_logs():
            model.session.set_providers([CPU])
        assert model.device == "cpu"

    def test_the_guards_fallback_device_is_used(self) -> None:
        """fallback_device= given to the guard is where a change moves the model."""

        @device_guard(fallback_device="meta")
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        with recorded_logs():
            model.session.set_providers([CPU])
        assert model.device == torch.device("meta")

    def test_a_change_the_device_survives_is_quiet(self, real_session: Callable[[], Any]) -> None:
        """A real session changing providers under a CPU model is followed and logs no WARNING."""

        @device_guard
        def load() -> Model:
            return Model(real_session(), "cpu")

        model = load()
        assert is_followed(model.session)
        with recorded_logs() as records:
            model.session.set_providers([AZURE, CPU])
        assert model.device == torch.device("cpu")
        assert at_least_warning(records) == []
        assert any(
            "changed its providers from ['CPUExecutionProvider'] to "
            "['AzureExecutionProvider', 'CPUExecutionProvider']. Aligning the model again."
            in record.getMessage()
            for record in records
        )
        assert model.session.run(None, {"x": X})[0].tolist() == ONE

    def test_moving_back_to_the_gpu_keeps_the_fallback_device(self) -> None:
        """A model moved to CPU stays there when the session later regains CUDA: CPU reads it."""

        @device_guard
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        with recorded_logs() as records:
            model.session.set_providers([CPU])
            model.session.set_providers(list(GPU_PROVIDERS))
        assert model.device == torch.device("cpu")
        assert len(warning_records(records)) == 1

    def test_a_new_device_id_moves_the_model_to_that_gpu(self) -> None:
        """A change of the CUDA provider's device_id alone moves the model to the session's GPU."""

        class MovableSession(FallingBackSession):
            device_id = "0"

            def get_provider_options(self) -> dict[str, dict[str, str]]:
                return {CUDA: {"device_id": self.device_id}, CPU: {}}

            def set_providers(self, providers: Any = None, provider_options: Any = None) -> None:
                super().set_providers(providers, provider_options)
                self.device_id = str(provider_options[0]["device_id"])

        @device_guard
        def load() -> Model:
            return Model(MovableSession())

        model = load()
        with recorded_logs() as records:
            model.session.set_providers([CUDA, CPU], [{"device_id": 1}, {}])
        assert model.device == torch.device("cuda:1")
        (warning,) = at_least_warning(records)
        assert vars(warning)["odg_reason"] == "device_id_mismatch"
        assert warning.getMessage().startswith(
            "The session 'session' of a Model changed the options of its providers"
        )

    def test_a_private_device_behind_a_read_only_property_is_rewritten(self) -> None:
        """A model exposing `device` read-only over `_device` gets `_device` rewritten."""

        class Wrapped:
            def __init__(self) -> None:
                self.session = FallingBackSession()
                self._device = torch.device("cuda:0")

            @property
            def device(self) -> torch.device:
                return self._device

        @device_guard
        def load() -> Wrapped:
            return Wrapped()

        model = load()
        with recorded_logs():
            model.session.set_providers([CPU])
        assert model.device == torch.device("cpu")


class TestFailMode:
    def test_set_providers_raises(self) -> None:
        """In "fail" mode set_providers raises, naming the change; the device is left as it was."""

        @device_guard(resolution_mode="fail")
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        with pytest.raises(EnvironmentConfigurationError) as caught:
            model.session.set_providers([CPU])
        assert caught.value.message.startswith(CHANGE + "The model asks for device 'cuda:0'")
        assert caught.value.help_url.endswith("#no-data-transfer-registered")
        assert model.device == torch.device("cuda:0")
        assert model.session.get_providers() == [CPU]

    def test_run_raises_chained_to_the_ep_failure(self, capsys: Any) -> None:
        """In "fail" mode onnxruntime's fallback inside run() raises, caused by the EPFail."""

        @device_guard(resolution_mode="fail")
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        with pytest.raises(EnvironmentConfigurationError) as caught:
            model.session.run(None, {"x": X})
        assert isinstance(caught.value.__cause__, EPFail)
        assert caught.value.message.startswith(CHANGE)
        assert model.device == torch.device("cuda:0")
        assert "EP Error" in capsys.readouterr().out

    def test_a_real_run_raises_chained_to_the_real_ep_failure(
        self, real_gpu_session: Callable[[], Any], capsys: Any
    ) -> None:
        """A real run() falling back in "fail" mode raises from onnxruntime's own EPFail."""
        from onnxruntime.capi.onnxruntime_pybind11_state import EPFail as RealEPFail

        @device_guard(resolution_mode="fail")
        def load() -> Model:
            return Model(real_gpu_session())

        model = load()
        with pytest.raises(EnvironmentConfigurationError) as caught:
            model.session.run(None, {"x": X})
        assert isinstance(caught.value.__cause__, RealEPFail)
        assert model.device == torch.device("cuda:0")
        assert model.session.get_providers() == [CPU]
        capsys.readouterr()

    def test_a_mode_from_the_load_scope_raises(self) -> None:
        """A guard without a mode takes "fail" from the device_policy in force at load."""

        @device_guard
        def load() -> Model:
            return Model(FallingBackSession())

        with device_policy(resolution_mode="fail"):
            model = load()
        with pytest.raises(EnvironmentConfigurationError, match="changed its providers"):
            model.session.set_providers([CPU])


class TestShapes:
    def test_a_class_method_guarded_inside(self) -> None:
        """@classmethod over @device_guard: the model it returns follows its session."""

        class Loader(Model):
            @classmethod
            @device_guard
            def from_pretrained(cls) -> Loader:
                return cls(FallingBackSession())

        model = Loader.from_pretrained()
        with recorded_logs():
            model.session.set_providers([CPU])
        assert model.device == torch.device("cpu")

    def test_a_class_method_guarded_outside(self) -> None:
        """@device_guard over @classmethod: the model it returns follows its session."""

        class Loader(Model):
            @device_guard
            @classmethod
            def from_pretrained(cls) -> Loader:
                return cls(FallingBackSession())

        model = Loader.from_pretrained()
        with recorded_logs():
            model.session.set_providers([CPU])
        assert model.device == torch.device("cpu")

    def test_a_method(self) -> None:
        """A guarded instance method's model follows its session."""

        class Hub:
            @device_guard
            def open(self) -> Model:
                return Model(FallingBackSession())

        model = Hub().open()
        with recorded_logs():
            model.session.set_providers([CPU])
        assert model.device == torch.device("cpu")

    def test_an_async_factory(self) -> None:
        """An async def factory's model follows its session once the coroutine has finished."""

        @device_guard(resolution_mode="fail")
        async def load() -> Model:
            await asyncio.sleep(0)
            return Model(FallingBackSession())

        model = asyncio.run(load())
        assert is_followed(model.session)
        with pytest.raises(EnvironmentConfigurationError, match="changed its providers"):
            model.session.set_providers([CPU])

    def test_an_async_factory_keeps_the_mode_of_its_load(self) -> None:
        """An async factory loaded inside a "fail" scope raises on a change made outside it."""

        @device_guard
        async def load() -> Model:
            await asyncio.sleep(0)
            return Model(FallingBackSession())

        with device_policy(resolution_mode="fail"):
            model = asyncio.run(load())
        with pytest.raises(EnvironmentConfigurationError, match="changed its providers"):
            model.session.set_providers([CPU])

    def test_a_guarded_class(self) -> None:
        """Instances of a guarded class follow their sessions, subclass instances too."""

        @device_guard
        class Guarded(Model):
            pass

        class Sub(Guarded):
            pass

        for cls in (Guarded, Sub):
            model = cls(FallingBackSession())
            with recorded_logs() as records:
                model.session.set_providers([CPU])
            assert model.device == torch.device("cpu")
            assert len(warning_records(records)) == 1

    def test_a_guarded_class_in_fail_mode(self) -> None:
        """An instance of a class guarded in "fail" mode makes set_providers raise."""

        @device_guard(resolution_mode="fail")
        class Strict(Model):
            pass

        model = Strict(FallingBackSession())
        with pytest.raises(EnvironmentConfigurationError, match="of a Strict changed"):
            model.session.set_providers([CPU])

    def test_a_patched_loader(self, module: types.ModuleType) -> None:
        """A loader guarded by patch() returns models that follow their sessions."""
        with patch(f"{module.__name__}:load"):
            model = module.load(FallingBackSession())
            with recorded_logs() as records:
                model.session.set_providers([CPU])
        assert model.device == torch.device("cpu")
        assert len(warning_records(records)) == 1


class TestSeveralSessions:
    def test_the_session_that_changed_is_named(self) -> None:
        """With two sessions, the one that changed moves the model and is named in the record."""

        @device_guard(session_attr=("detector", "recognizer"))
        def load() -> TwoSessions:
            return TwoSessions(FallingBackSession(), FallingBackSession())

        model = load()
        assert is_followed(model.detector)
        assert is_followed(model.recognizer)
        with recorded_logs() as records:
            model.recognizer.set_providers([CPU])
        assert model.device == torch.device("cpu")
        (warning,) = at_least_warning(records)
        assert vars(warning)["odg_changed_session"] == "recognizer"
        assert vars(warning)["odg_sessions"] == ["recognizer"]
        assert warning.getMessage().startswith(
            "The session 'recognizer' of a TwoSessions changed its providers"
        )

    def test_an_unchanged_sibling_is_left_alone(self) -> None:
        """A change of one session leaves the other's providers as they were."""

        @device_guard(session_attr=("detector", "recognizer"), resolution_mode="fail")
        def load() -> TwoSessions:
            return TwoSessions(FallingBackSession(), FallingBackSession())

        model = load()
        with pytest.raises(EnvironmentConfigurationError, match="'detector' of a TwoSessions"):
            model.detector.set_providers([CPU])
        assert model.recognizer.get_providers() == list(GPU_PROVIDERS)
        assert model.recognizer.set_calls == []

    def test_discovered_sessions_are_followed(self) -> None:
        """Sessions the guard discovered deep inside the result are followed too."""

        class Stage:
            def __init__(self) -> None:
                self.infer = FallingBackSession()

        class Pipeline:
            def __init__(self) -> None:
                self.stages = [Stage(), Stage()]
                self.device = "cuda:0"

        @device_guard
        def load() -> Pipeline:
            return Pipeline()

        model = load()
        second = model.stages[1].infer
        assert is_followed(second)
        with recorded_logs() as records:
            second.run(None, {"x": X})
        assert model.device == "cpu"
        assert len(warning_records(records)) == 1


class TestLoadTimeOptions:
    def test_a_later_fail_scope_does_not_make_a_fallback_model_raise(self) -> None:
        """A model loaded in "fallback" falls back even if the change happens in a "fail" scope."""

        @device_guard
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        with recorded_logs() as records, device_policy(resolution_mode="fail"):
            model.session.set_providers([CPU])
        assert model.device == torch.device("cpu")
        assert len(warning_records(records)) == 1

    def test_the_load_scopes_fallback_device_holds(self) -> None:
        """The fallback device in force at load wins over the one in force at the change."""

        @device_guard
        def load() -> Model:
            return Model(FallingBackSession())

        with device_policy(fallback_device="meta"):
            model = load()
        with recorded_logs(), device_policy(fallback_device="cpu"):
            model.session.set_providers([CPU])
        assert model.device == torch.device("meta")

    def test_warn_off_at_load_keeps_the_change_at_debug(self) -> None:
        """A model loaded with warn=False logs its follow-up fallback at DEBUG, not WARNING."""

        @device_guard
        def load() -> Model:
            return Model(FallingBackSession())

        with device_policy(warn=False):
            model = load()
        with recorded_logs() as records:
            model.session.set_providers([CPU])
        assert model.device == torch.device("cpu")
        assert at_least_warning(records) == []
        assert any(
            "Using 'cpu' instead." in record.getMessage()
            for record in records
            if record.levelno == logging.DEBUG
        )

    def test_warn_off_at_the_change_does_not_hide_the_warning(self) -> None:
        """A model loaded with warnings on still warns when the change happens under warn=False."""

        @device_guard
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        with recorded_logs() as records, device_policy(warn=False):
            model.session.set_providers([CPU])
        assert len(warning_records(records)) == 1

    def test_a_change_in_another_thread_uses_the_load_mode(self) -> None:
        """A change in a new thread (an empty context) raises with the "fail" mode of the load."""

        @device_guard
        def load() -> Model:
            return Model(FallingBackSession())

        with device_policy(resolution_mode="fail"):
            model = load()
        raised: list[BaseException] = []

        def change() -> None:
            try:
                model.session.set_providers([CPU])
            except BaseException as error:
                raised.append(error)

        thread = threading.Thread(target=change)
        thread.start()
        thread.join()
        (error,) = raised
        assert isinstance(error, EnvironmentConfigurationError)
        assert model.device == torch.device("cuda:0")

    def test_a_fallback_in_another_thread_moves_the_model(self) -> None:
        """onnxruntime's fallback in a worker thread moves a model loaded in the main thread."""

        @device_guard(fallback_device="meta")
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        outputs: list[Any] = []
        with recorded_logs() as records:
            thread = threading.Thread(
                target=lambda: outputs.append(model.session.run(None, {"x": X}))
            )
            thread.start()
            thread.join()
        assert outputs[0][0].tolist() == ONE
        assert model.device == torch.device("meta")
        assert len(warning_records(records)) == 1

    def test_each_load_keeps_its_own_mode(self) -> None:
        """Two models from one guard, loaded under different scopes, each keep their own mode."""

        @device_guard
        def load() -> Model:
            return Model(FallingBackSession())

        with device_policy(resolution_mode="fail"):
            strict = load()
        lenient = load()
        with recorded_logs():
            lenient.session.set_providers([CPU])
        assert lenient.device == torch.device("cpu")
        with pytest.raises(EnvironmentConfigurationError):
            strict.session.set_providers([CPU])


class TestNoDeviceAttribute:
    def test_the_device_option_is_checked_again(self) -> None:
        """A model without a device attribute is checked against device=; the record says so."""

        @device_guard(device="cuda:0")
        def load() -> NoDevice:
            return NoDevice(FallingBackSession())

        model = load()
        with recorded_logs() as records:
            model.session.set_providers([CPU])
        assert not hasattr(model, "device")
        (warning,) = at_least_warning(records)
        assert "The model has no device attribute, so it was left as it is" in (
            warning.getMessage()
        )
        assert vars(warning)["odg_applied"] is False
        assert vars(warning)["odg_requested_device"] == "cuda:0"
        assert vars(warning)["odg_changed_session"] == "session"

    def test_the_calls_device_argument_is_remembered(self) -> None:
        """The device the call asked for is what a later change is checked against."""

        @device_guard(resolution_mode="fail")
        def load(device: str = "cpu") -> NoDevice:
            return NoDevice(FallingBackSession())

        on_cpu, on_gpu = load(), load(device="cuda:0")
        on_cpu.session.set_providers([CPU])  # cpu is readable: no error
        with pytest.raises(EnvironmentConfigurationError, match="asks for device 'cuda:0'"):
            on_gpu.session.set_providers([CPU])

    def test_a_device_callable_is_not_called_again(self) -> None:
        """device= as a callable is called once, at load; a change reuses its answer."""
        calls: list[dict[str, Any]] = []

        def device_of(arguments: dict[str, Any]) -> str:
            calls.append(arguments)
            return "cuda:0"

        @device_guard(device=device_of, resolution_mode="fail")
        def load() -> NoDevice:
            return NoDevice(FallingBackSession())

        model = load()
        with pytest.raises(EnvironmentConfigurationError, match="asks for device 'cuda:0'"):
            model.session.set_providers([CPU])
        assert len(calls) == 1


class TestLifetimes:
    def test_a_collected_model_is_no_error(self) -> None:
        """After the model is collected, a change raises nothing and the hook removes itself."""

        @device_guard(resolution_mode="fail")
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        session = model.session
        del model
        gc.collect()
        with recorded_logs() as records:
            session.set_providers([CPU])
        assert at_least_warning(records) == []
        assert not is_followed(session)
        assert "set_providers" not in vars(session)

    def test_the_session_does_not_keep_the_model_alive(self) -> None:
        """A guarded model is freed by reference counting alone while its session lives on."""

        @device_guard
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        session = model.session
        gone = weakref.ref(model)
        gc.disable()
        try:
            del model
            assert gone() is None
        finally:
            gc.enable()
        assert session.get_providers() == list(GPU_PROVIDERS)

    def test_two_guards_on_one_session_install_one_hook(self) -> None:
        """Two guards whose models share a session install one hook; each model follows."""
        shared = FallingBackSession()

        @device_guard
        def load_a() -> Model:
            return Model(shared)

        @device_guard(fallback_device="meta")
        def load_b() -> Model:
            return Model(shared)

        first = load_a()
        hook = vars(shared)["set_providers"]
        second = load_b()
        assert vars(shared)["set_providers"] is hook
        with recorded_logs() as records:
            shared.set_providers([CPU])
        assert (first.device, second.device) == (torch.device("cpu"), torch.device("meta"))
        assert len(warning_records(records)) == 2

    def test_loading_again_adds_no_hook(self) -> None:
        """Guarding the same session's models many times keeps one hook and one set_providers."""
        shared = FallingBackSession()

        @device_guard
        def load() -> Model:
            return Model(shared)

        models = [load() for _ in range(3)]
        with recorded_logs() as records:
            shared.set_providers([CPU])
        assert shared.set_calls == [([CPU], None)]
        assert all(model.device == torch.device("cpu") for model in models)
        assert len(warning_records(records)) == 3

    def test_nested_guards_warn_once(self) -> None:
        """A guarded factory calling another guarded factory: one hook, one WARNING."""

        @device_guard
        def inner() -> Model:
            return Model(FallingBackSession())

        @device_guard
        def outer() -> Model:
            return inner()

        model = outer()
        with recorded_logs() as records:
            model.session.set_providers([CPU])
        assert model.device == torch.device("cpu")
        assert len(warning_records(records)) == 1

    def test_nested_guards_in_fail_mode_raise_once_and_log_nothing_else(self) -> None:
        """Nested guards in "fail" mode raise once for their one model and log no ERROR."""

        @device_guard(resolution_mode="fail")
        def inner() -> Model:
            return Model(FallingBackSession())

        @device_guard(resolution_mode="fail")
        def outer() -> Model:
            return inner()

        model = outer()
        with recorded_logs() as records, pytest.raises(EnvironmentConfigurationError):
            model.session.set_providers([CPU])
        assert at_least_warning(records) == []

    def test_nested_guards_stop_at_the_inner_guards_error(self) -> None:
        """An inner "fail" guard's error is the outcome, as at load: the outer one moves nothing."""

        @device_guard(resolution_mode="fail")
        def inner() -> Model:
            return Model(FallingBackSession())

        @device_guard(resolution_mode="fallback")
        def outer() -> Model:
            return inner()

        model = outer()
        with recorded_logs() as records, pytest.raises(EnvironmentConfigurationError):
            model.session.set_providers([CPU])
        assert model.device == torch.device("cuda:0")
        assert at_least_warning(records) == []

    def test_a_cached_model_returned_twice_is_followed_once(self) -> None:
        """A loader that returns the same cached model on every call warns once per change."""
        cache: list[Model] = []

        @device_guard
        def load() -> Model:
            if not cache:
                cache.append(Model(FallingBackSession()))
            return cache[0]

        model = load()
        assert load() is model
        with recorded_logs() as records:
            model.session.set_providers([CPU])
        assert model.device == torch.device("cpu")
        assert len(warning_records(records)) == 1


class TestSwitchingOff:
    def test_follow_false_installs_nothing(self, real_session: Callable[[], Any]) -> None:
        """follow=False leaves the session's set_providers alone; a change moves nothing."""

        @device_guard(follow=False)
        def load() -> Model:
            return Model(FallingBackSession())

        model = load()
        assert not is_followed(model.session)
        assert "set_providers" not in vars(model.session)
        with recorded_logs() as records:
            model.session.set_providers([CPU])
        assert model.device == torch.device("cuda:0")
        assert at_least_warning(records) == []

        @device_guard(follow=False)
        def load_real() -> Model:
            return Model(real_session(), "cpu")

        assert not is_followed(load_real().session)

    def test_follow_false_on_a_class_and_a_patch(self, module: types.ModuleType) -> None:
        """follow=False works the same on a guarded class and through patch()."""

        @device_guard(follow=False)
        class Unfollowed(Model):
            pass

        assert not is_followed(Unfollowed(FallingBackSession()).session)
        with patch(f"{module.__name__}:load", follow=False):
            assert not is_followed(module.load(FallingBackSession()).session)

    @pytest.mark.parametrize("value", ["yes", 1, None])
    def test_a_bad_follow_value_is_refused_at_decoration(self, value: object) -> None:
        """A follow= that is not True or False is a ModelInputError naming it, at decoration."""
        with pytest.raises(ModelInputError, match="follow must be True or False; got"):
            device_guard(follow=value)  # type: ignore[call-overload]

    def test_a_bad_follow_value_is_refused_by_patch(self, module: types.ModuleType) -> None:
        """patch() refuses a bad follow= before it replaces anything."""
        original = module.load
        with pytest.raises(ModelInputError, match="follow must be True or False; got str 'no'"):
            patch(f"{module.__name__}:load", follow="no")  # type: ignore[arg-type]
        assert module.load is original


class TestPatchUndo:
    def test_undo_removes_the_hooks(self, module: types.ModuleType) -> None:
        """undo() gives the sessions of models the patch built their set_providers back."""
        handle = patch(f"{module.__name__}:load")
        fake = module.load(FallingBackSession())
        sessions = [fake.session]
        assert is_followed(fake.session)
        handle.undo()
        assert not any(is_followed(session) for session in sessions)
        assert "set_providers" not in vars(fake.session)
        with recorded_logs() as records:
            fake.session.set_providers([CPU])
        assert fake.device == torch.device("cuda:0")
        assert records == []

    def test_undo_of_a_patched_class_removes_the_hooks(self, module: types.ModuleType) -> None:
        """Instances built while a class was patched are unfollowed once the patch is undone."""
        with patch(f"{module.__name__}:Detector", resolution_mode="fail"):
            model = module.Detector(FallingBackSession())
            assert is_followed(model.session)
        assert not is_followed(model.session)
        model.session.set_providers([CPU])  # no longer raises
        assert model.device == torch.device("cuda:0")

    def test_undo_restores_a_real_session(
        self, module: types.ModuleType, real_gpu_session: Callable[[], Any], capsys: Any
    ) -> None:
        """After undo() a real session falls back on its own and the model is not moved."""
        session = real_gpu_session()
        before = set(vars(session))
        with patch(f"{module.__name__}:load"):
            model = module.load(session)
            assert is_followed(session)
        assert set(vars(session)) == before
        assert session.run(None, {"x": X})[0].tolist() == ONE
        assert session.get_providers() == [CPU]
        assert model.device == torch.device("cuda:0")
        assert "Falling back to" in capsys.readouterr().out

    def test_realign_still_works_after_undo(self, module: types.ModuleType) -> None:
        """A model left behind by undo() is put right by realign(), by hand."""
        with patch(f"{module.__name__}:load"):
            model = module.load(FallingBackSession())
        model.session.set_providers([CPU])
        assert model.device == torch.device("cuda:0")
        with recorded_logs() as records:
            assert realign(model) == torch.device("cpu")
        assert model.device == torch.device("cpu")
        assert len(warning_records(records)) == 1

    def test_undo_keeps_hooks_another_guard_needs(self, module: types.ModuleType) -> None:
        """A session also followed by another guard keeps its hook after the patch's undo()."""
        shared = FallingBackSession()

        @device_guard
        def load_directly() -> Model:
            return Model(shared)

        kept = load_directly()
        with patch(f"{module.__name__}:load"):
            dropped = module.load(shared)
        assert is_followed(shared)
        with recorded_logs():
            shared.set_providers([CPU])
        assert kept.device == torch.device("cpu")
        assert dropped.device == torch.device("cuda:0")
