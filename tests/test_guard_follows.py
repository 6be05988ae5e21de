"""Guarded models follow their sessions' provider changes, through the public API.

`device_guard` (on functions, methods, class methods, `async def` factories
and classes) and `patch()` keep every model they return in line with its
sessions after load. The sessions are real: `GPUSession` (a real CPU session
of the tiny model that reports the providers last asked of it, as a GPU
machine's would), whose `run()` can raise onnxruntime's real `EPFail` once
and take onnxruntime's own fallback path, and plain CPU sessions.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import random
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
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

from .helpers import is_followed
from .logs import recorded_logs, warning_records
from .sessions import CPU, CUDA, EPFail, GPUBuildSession, GPUSession, fail_next_run_of, real_session

AZURE = "AzureExecutionProvider"
CHANGE = (
    "The session 'session' of a Model changed its providers from "
    "['CUDAExecutionProvider', 'CPUExecutionProvider'] to ['CPUExecutionProvider']. "
)
X = np.zeros((1, 4), dtype=np.float32)
ONE = [[1.0] * 4]
CPU_DEVICE = torch.device("cpu")
_module_names = itertools.count()


class Model:
    """A model as a factory returns it: one session and a device."""

    def __init__(self, session: Any = None, device: Any = "cuda:0") -> None:
        self.session = GPUSession() if session is None else session
        self.device = torch.device(device) if isinstance(device, str) else device


class NoDevice:
    """A model that keeps a session but no device attribute."""

    def __init__(self, session: Any = None) -> None:
        self.session = GPUSession() if session is None else session


def fresh(cls: type) -> type:
    """A new subclass of `cls` with its name, to guard without changing `cls` itself."""
    return type(cls.__name__, (cls,), {})


def loud(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    """The records at WARNING or above."""
    return [record for record in records if record.levelno >= logging.WARNING]


def to_cpu(model: Any) -> list[logging.LogRecord]:
    """Move `model.session` to the CPU; the records logged meanwhile."""
    with recorded_logs() as records:
        model.session.set_providers([CPU])
    return records


@device_guard
def load(session: Any = None, device: str = "cuda:0") -> Model:
    return Model(session, device)


@device_guard(resolution_mode="fail")
def load_strictly(session: Any = None) -> Model:
    return Model(session)


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    """A module in `sys.modules` with a loader `load` and a class `Detector` to patch."""
    created = types.ModuleType(f"odg_follow_target_{next(_module_names)}")
    created.load = lambda session=None, device="cuda:0": Model(session, device)  # type: ignore[attr-defined]
    created.Detector = type("Detector", (Model,), {})  # type: ignore[attr-defined]
    sys.modules[created.__name__] = created
    yield created
    del sys.modules[created.__name__]


class TwoSessions:
    """A model with two sessions made as on a GPU build, on `cuda:0`."""

    def __init__(self) -> None:
        self.vision, self.text, self.device = GPUBuildSession(), GPUBuildSession(), "cuda:0"


class TestOnnxruntimesOwnFallback:
    """A GPU provider that fails in `run()` drops the session to the CPU: what it asked for
    at birth still counts, as onnxruntime's `set_providers` there is no choice of the caller."""

    @pytest.mark.parametrize("mode", ["fallback", "fail"])
    def test_one_of_two_sessions_falling_back_moves_the_model(self, mode: Any) -> None:
        model = device_guard(resolution_mode=mode)(fresh(TwoSessions))()
        fail_next_run_of(model.text)
        with recorded_logs() as records:
            if mode == "fail":
                with pytest.raises(EnvironmentConfigurationError, match="'text'"):
                    model.text.run(None, {"x": X})
            else:
                model.text.run(None, {"x": X})
        assert model.text.get_providers() == [CPU]
        if mode == "fallback":
            assert model.device == "cpu"
            assert len(loud(records)) == 1

    def test_a_model_asking_through_its_providers_alone_raises_in_fail_mode(self) -> None:
        model = device_guard(resolution_mode="fail")(lambda: NoDevice(GPUBuildSession()))()
        fail_next_run_of(model.session)
        with pytest.raises(EnvironmentConfigurationError, match="asks for device 'cuda:0'"):
            model.session.run(None, {"x": X})

    def test_a_session_moved_to_the_cpu_on_purpose_beside_a_gpu_one_is_left_alone(self) -> None:
        model = device_guard(fresh(TwoSessions))()
        with recorded_logs() as records:
            model.text.set_providers([CPU])
        assert (model.device, loud(records)) == ("cuda:0", [])

    def test_tensorrt_dropped_leaves_the_cuda_gpu_asked_for(self) -> None:
        """TensorRT (on GPU 0 by default) did not load; CUDA, asked for GPU 1, runs there."""
        trt = "TensorrtExecutionProvider"
        providers = [trt, (CUDA, {"device_id": 1}), CPU]

        @device_guard(resolution_mode="fail")
        def load_on_1() -> NoDevice:
            return NoDevice(GPUBuildSession(providers))

        model = load_on_1()
        assert model.session.get_providers() == [CUDA, CPU]
        assert device_guard(resolution_mode="fail", device="cuda:1")(load_on_1)() is not None


class TestFallbackMode:
    """In "fallback" mode a change rewrites the device and reports it once."""

    def test_set_providers_rewrites_the_device_with_one_warning(self) -> None:
        """One WARNING names the old and new providers, with the usual odg_* fields."""
        model = load()
        assert model.device == torch.device("cuda:0")
        (warning,) = loud(to_cpu(model))
        assert model.device == CPU_DEVICE
        assert warning.levelno == logging.WARNING
        assert warning.getMessage().startswith(
            CHANGE + "The model asks for device 'cuda:0', but its onnxruntime session runs "
            "only ['CPUExecutionProvider']"
        )
        assert "Using 'cpu' instead." in warning.getMessage()
        fields = vars(warning)
        assert fields["odg_changed_session"] == "session"
        assert (fields["odg_old_providers"], fields["odg_new_providers"]) == ([CUDA, CPU], [CPU])
        assert (fields["odg_event"], fields["odg_reason"]) == ("fallback", "no_gpu_provider")
        assert (fields["odg_requested_device"], fields["odg_aligned_device"]) == ("cuda:0", "cpu")
        assert fields["odg_applied"] is True
        assert fields["odg_device_attr"] == "device"
        assert "load" in fields["odg_factory"]

    @pytest.mark.parametrize("call", ["run", "run_with_ort_values"])
    def test_a_real_run_fallback_rewrites_the_device_and_retries(
        self, call: str, capsys: Any
    ) -> None:
        """onnxruntime's own fallback after a real EPFail moves the model; the retry answers."""
        import onnxruntime

        model = load(GPUSession(fail_next_run=True))
        with recorded_logs() as records:
            if call == "run":
                answer = model.session.run(None, {"x": X})[0].tolist()
            else:
                feed = {"x": onnxruntime.OrtValue.ortvalue_from_numpy(X)}
                answer = model.session.run_with_ort_values(["y"], feed)[0].numpy().tolist()
        assert answer == ONE
        assert model.session.get_providers() == [CPU]
        assert model.device == CPU_DEVICE
        (warning,) = loud(records)
        assert warning.getMessage().startswith(CHANGE)
        assert "Falling back to ['CPUExecutionProvider'] and retrying." in capsys.readouterr().out

    def test_a_string_device_and_the_guards_fallback_device(self) -> None:
        """A string device is rewritten as a string, to the guard's fallback_device."""

        @device_guard(fallback_device="meta")
        def load_to_meta() -> Model:
            model = Model()
            model.device = "cuda:0"
            return model

        model = load_to_meta()
        to_cpu(model)
        assert model.device == "meta"

    def test_a_change_the_device_survives_is_quiet(self) -> None:
        """A CPU model on a real CPU session: a change is followed, logged at DEBUG only."""
        model = load(real_session(), "cpu")
        assert is_followed(model.session)
        with recorded_logs() as records:
            model.session.set_providers([AZURE, CPU])
        assert model.device == CPU_DEVICE
        assert loud(records) == []
        assert any(
            "changed its providers from ['CPUExecutionProvider'] to "
            "['AzureExecutionProvider', 'CPUExecutionProvider']. Aligning the model again."
            in record.getMessage()
            for record in records
        )
        assert model.session.run(None, {"x": X})[0].tolist() == ONE

    def test_a_change_a_fallen_back_model_survives_is_quiet(self) -> None:
        """Asked for cuda, moved to cpu at load (one warning); a CPU-only change says no more."""
        with recorded_logs() as records:
            model = load(real_session(), "cuda")
        assert model.device == CPU_DEVICE
        assert len(warning_records(records)) == 1
        with recorded_logs() as records:
            model.session.set_providers([AZURE, CPU])
        assert model.device == CPU_DEVICE
        assert loud(records) == []

    def test_moving_back_to_the_gpu_keeps_the_fallback_device(self) -> None:
        """A model moved to CPU stays there when the session regains CUDA: CPU reads it."""
        model = load()
        records = to_cpu(model)
        with recorded_logs() as more:
            model.session.set_providers([CUDA, CPU])
        assert model.device == CPU_DEVICE
        assert len(warning_records(records + more)) == 1

    def test_a_new_device_id_moves_the_model_to_that_gpu(self) -> None:
        """A change of the CUDA provider's device_id alone moves the model to the session's GPU."""
        model = load()
        with recorded_logs() as records:
            model.session.set_providers([CUDA, CPU], [{"device_id": 1}, {}])
        assert model.device == torch.device("cuda:1")
        (warning,) = loud(records)
        assert vars(warning)["odg_reason"] == "device_id_mismatch"
        assert warning.getMessage().startswith(
            "The session 'session' of a Model changed the options of its providers"
        )

    def test_a_private_device_behind_a_read_only_property_is_rewritten(self) -> None:
        """A model exposing `device` read-only over `_device` gets `_device` rewritten."""

        class Wrapped:
            def __init__(self) -> None:
                self.session, self._device = GPUSession(), torch.device("cuda:0")

            @property
            def device(self) -> torch.device:
                return self._device

        model = device_guard(Wrapped)()
        to_cpu(model)
        assert model.device == CPU_DEVICE


class TestFailMode:
    """In "fail" mode the call that changed the providers raises; the device stays."""

    def test_set_providers_raises_naming_the_change(self) -> None:
        """The message starts with the change; the help_url is the usual one."""
        model = load_strictly()
        with pytest.raises(EnvironmentConfigurationError) as caught:
            to_cpu(model)
        assert caught.value.message.startswith(CHANGE + "The model asks for device 'cuda:0'")
        assert caught.value.help_url.endswith("#no-data-transfer-registered")
        assert model.device == torch.device("cuda:0")
        assert model.session.get_providers() == [CPU]

    def test_a_real_run_raises_chained_to_the_real_ep_failure(self, capsys: Any) -> None:
        """A real run() falling back raises from onnxruntime's own EPFail, without a retry."""
        model = load_strictly(GPUSession(fail_next_run=True))
        with pytest.raises(EnvironmentConfigurationError) as caught:
            model.session.run(None, {"x": X})
        assert isinstance(caught.value.__cause__, EPFail)
        assert caught.value.message.startswith(CHANGE)
        assert model.device == torch.device("cuda:0")
        assert "EP Error" in capsys.readouterr().out

    def test_a_mode_from_the_load_scope_raises(self) -> None:
        """A guard without a mode takes "fail" from the device_policy in force at load."""
        with device_policy(resolution_mode="fail"):
            model = load()
        with pytest.raises(EnvironmentConfigurationError, match="changed its providers"):
            to_cpu(model)


def shapes() -> dict[str, Callable[[], Any]]:
    """Each shape `device_guard` takes, as a call that loads a model on a GPUSession."""

    class Inside(Model):
        @classmethod
        @device_guard
        def from_pretrained(cls) -> Inside:
            return cls()

    class Outside(Model):
        @device_guard
        @classmethod
        def from_pretrained(cls) -> Outside:
            return cls()

    class Hub:
        @device_guard
        def open(self) -> Model:
            return Model()

    @device_guard
    async def load_async() -> Model:
        await asyncio.sleep(0)
        return Model()

    guarded = device_guard(fresh(Model))
    return {
        "class method inside": Inside.from_pretrained,
        "class method outside": Outside.from_pretrained,
        "method": Hub().open,
        "async factory": lambda: asyncio.run(load_async()),
        "guarded class": guarded,
        "subclass of a guarded class": type("Sub", (guarded,), {}),
    }


class TestShapes:
    """Whatever the guard wraps, the model it hands out follows its session."""

    @pytest.mark.parametrize("shape", list(shapes()))
    def test_each_shape_follows(self, shape: str) -> None:
        """The model moves to the CPU with its session, with one WARNING."""
        model = shapes()[shape]()
        assert is_followed(model.session)
        assert len(warning_records(to_cpu(model))) == 1
        assert model.device == CPU_DEVICE

    def test_an_async_factory_keeps_the_mode_of_its_load(self) -> None:
        """An async factory loaded inside a "fail" scope raises on a change made outside it."""
        with device_policy(resolution_mode="fail"):
            model = shapes()["async factory"]()
        with pytest.raises(EnvironmentConfigurationError, match="changed its providers"):
            to_cpu(model)

    def test_a_patched_loader_and_class(self, module: types.ModuleType) -> None:
        """A loader or class guarded by patch() hands out models that follow their sessions."""
        with patch(f"{module.__name__}:load"), patch(f"{module.__name__}:Detector"):
            models = [module.load(), module.Detector()]
            for model in models:
                assert len(warning_records(to_cpu(model))) == 1
        assert [model.device for model in models] == [CPU_DEVICE, CPU_DEVICE]


class TestSeveralSessions:
    """A model with several sessions follows each one."""

    def test_the_session_that_changed_is_named_and_the_other_left_alone(self) -> None:
        """The recognizer's change moves the model and names it; the detector is untouched."""

        class TwoSessions:
            def __init__(self) -> None:
                self.detector, self.recognizer = GPUSession(), GPUSession()
                self.device = torch.device("cuda:0")

        model = device_guard(session_attr=("detector", "recognizer"))(TwoSessions)()
        assert is_followed(model.detector)
        assert is_followed(model.recognizer)
        with recorded_logs() as records:
            model.recognizer.set_providers([CPU])
        assert model.device == CPU_DEVICE
        (warning,) = loud(records)
        assert vars(warning)["odg_changed_session"] == "recognizer"
        assert vars(warning)["odg_sessions"] == ["recognizer"]
        assert model.detector.get_providers() == [CUDA, CPU]

    def test_sessions_made_before_the_load_are_followed(self) -> None:
        """Sessions found deep inside the result, made before the call, are followed too."""

        class Pipeline:
            def __init__(self, stages: list[NoDevice]) -> None:
                self.stages, self.device = stages, "cuda:0"

        stages = [NoDevice(), NoDevice()]

        @device_guard
        def load_pipeline() -> Pipeline:
            return Pipeline(stages)

        model = load_pipeline()
        second = model.stages[1].session
        assert is_followed(second)
        with recorded_logs() as records:
            second.set_providers([CPU])
        assert model.device == "cpu"
        assert len(warning_records(records)) == 1


class TestLoadTimeOptions:
    """A change is aligned with the options in force at load, not at the change."""

    def test_a_later_fail_scope_does_not_make_a_fallback_model_raise(self) -> None:
        """A model loaded in "fallback" falls back even if the change happens in a "fail" scope."""
        model = load()
        with device_policy(resolution_mode="fail"):
            records = to_cpu(model)
        assert model.device == CPU_DEVICE
        assert len(warning_records(records)) == 1

    def test_the_load_scopes_fallback_device_holds(self) -> None:
        """The fallback device in force at load wins over the one in force at the change."""
        with device_policy(fallback_device="meta"):
            model = load()
        with device_policy(fallback_device="cpu"):
            to_cpu(model)
        assert model.device == torch.device("meta")

    def test_warn_off_at_load_keeps_the_change_at_debug(self) -> None:
        """A model loaded with warn=False logs its follow-up fallback at DEBUG; not the reverse."""
        with device_policy(warn=False):
            quiet = load()
        records = to_cpu(quiet)
        assert quiet.device == CPU_DEVICE
        assert loud(records) == []
        assert any("Using 'cpu' instead." in record.getMessage() for record in records)
        loud_one = load()
        with device_policy(warn=False):
            assert len(warning_records(to_cpu(loud_one))) == 1

    def test_each_load_keeps_its_own_mode(self) -> None:
        """Two models from one guard, loaded under different scopes, each keep their own mode."""
        with device_policy(resolution_mode="fail"):
            strict = load()
        lenient = load()
        to_cpu(lenient)
        assert lenient.device == CPU_DEVICE
        with pytest.raises(EnvironmentConfigurationError):
            to_cpu(strict)


class TestNoDeviceAttribute:
    """A model without a device attribute is checked against the device its load asked for."""

    def test_the_device_option_is_checked_again(self) -> None:
        """device= is checked again; the record says the model was left as it is."""
        model = device_guard(device="cuda:0")(fresh(NoDevice))()
        (warning,) = loud(to_cpu(model))
        assert not hasattr(model, "device")
        assert "The model has no device attribute, so it was left as it is" in (
            warning.getMessage()
        )
        assert vars(warning)["odg_applied"] is False
        assert vars(warning)["odg_requested_device"] == "cuda:0"

    def test_the_calls_device_argument_is_remembered(self) -> None:
        """The device the call asked for is what a later change is checked against."""

        @device_guard(resolution_mode="fail")
        def load_bare(device: str = "cpu") -> NoDevice:
            return NoDevice()

        on_cpu, on_gpu = load_bare(), load_bare(device="cuda:0")
        to_cpu(on_cpu)  # cpu is readable: no error
        with pytest.raises(EnvironmentConfigurationError, match="asks for device 'cuda:0'"):
            to_cpu(on_gpu)

    def test_a_device_callable_is_not_called_again(self) -> None:
        """device= as a callable is called once, at load; a change reuses its answer."""
        calls: list[object] = []

        def device_of(arguments: dict[str, Any]) -> str:
            calls.append(arguments)
            return "cuda:0"

        model = device_guard(device=device_of, resolution_mode="fail")(fresh(NoDevice))()
        with pytest.raises(EnvironmentConfigurationError, match="asks for device 'cuda:0'"):
            to_cpu(model)
        assert len(calls) == 1


class TestLifetimes:
    """Following keeps nothing alive, and follows each model once."""

    def test_the_session_does_not_keep_the_model_alive(self) -> None:
        """A model is freed by reference counting alone; a change then reaches no one."""
        model = load_strictly()
        session, gone = model.session, weakref.ref(model)
        gc.disable()
        try:
            del model
            assert gone() is None
        finally:
            gc.enable()
        assert not is_followed(session)
        assert loud(to_cpu(types.SimpleNamespace(session=session))) == []

    @pytest.mark.parametrize("session", [real_session, lambda: None], ids=["followed", "waiting"])
    def test_a_guarded_method_returning_self_is_freed(self, session: Any) -> None:
        """`model.to(device)` returns the model: the load keeps neither it nor its arguments."""

        class Pipeline(Model):
            @device_guard
            def to(self, device: Any) -> Any:
                self.device = device
                return self

        model = Pipeline(session(), "cpu").to("cpu")
        gone = weakref.ref(model)
        del model
        gc.collect()
        assert gone() is None

    def test_a_patched_method_returning_self_is_freed(self, module: types.ModuleType) -> None:
        """The same through `patch`, whose wrapper hands the guard a bound method."""
        module.Detector.load = lambda self, device="cpu": self
        with patch(f"{module.__name__}:Detector.load"):
            model = module.Detector(real_session(), "cpu").load()
            gone = weakref.ref(model)
            del model
            gc.collect()
            assert gone() is None

    def test_models_sharing_a_session_each_follow_once(self) -> None:
        """Two guards and a guard called three times on one session: one report per model."""
        shared = GPUSession()
        cache: list[Model] = []

        @device_guard(fallback_device="meta")
        def load_cached() -> Model:
            cache[:] = cache or [Model(shared)]
            return cache[0]

        models = [load(shared) for _ in range(3)]
        cached = load_cached()
        assert load_cached() is cached
        records = to_cpu(cached)
        assert [model.device for model in models] == [CPU_DEVICE] * 3
        assert cached.device == torch.device("meta")
        assert len(warning_records(records)) == 4

    @pytest.mark.parametrize(
        ("inner_mode", "outer_mode"),
        [("fallback", "fallback"), ("fail", "fail"), ("fail", "fallback")],
    )
    def test_nested_guards_report_once(self, inner_mode: Any, outer_mode: Any) -> None:
        """A guarded factory calling another: one WARNING, or one error and no more, as at load."""
        inner = device_guard(resolution_mode=inner_mode)(fresh(Model))

        @device_guard(resolution_mode=outer_mode)
        def outer() -> Any:
            return inner()

        model = outer()
        if inner_mode == "fallback":
            assert len(loud(to_cpu(model))) == 1
            assert model.device == CPU_DEVICE
            return
        with recorded_logs() as records, pytest.raises(EnvironmentConfigurationError):
            model.session.set_providers([CPU])
        assert model.device == torch.device("cuda:0")
        assert loud(records) == []


class TestThreads:
    """Changes made in other threads, and at once in several."""

    def test_a_change_in_another_thread_uses_the_load_mode(self) -> None:
        """A change in a new thread (an empty context) raises with the "fail" mode of the load."""
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
        assert [type(error) for error in raised] == [EnvironmentConfigurationError]
        assert model.device == torch.device("cuda:0")

    def test_a_fallback_in_a_worker_thread_moves_the_model(self) -> None:
        """onnxruntime's fallback in a worker thread moves a model loaded in the main thread."""
        model = load(GPUSession(fail_next_run=True))
        outputs: list[Any] = []
        with recorded_logs() as records:
            thread = threading.Thread(
                target=lambda: outputs.extend(model.session.run(None, {"x": X}))
            )
            thread.start()
            thread.join()
        assert outputs[0].tolist() == ONE
        assert model.device == CPU_DEVICE
        assert len(warning_records(records)) == 1

    def test_two_threads_moving_one_session_leave_the_model_on_its_gpu(self) -> None:
        """Issue 25 item 6: moves to device_id 1 and 2 at once end with the model on the session's.

        Before: each thread re-aligned the model on its own, so the one whose
        write landed last won, and the model could stay on cuda:1 while the
        session ran on 2. A write that takes a moment makes the overlap likely.
        """

        class SlowWrites(Model):
            @property
            def device(self) -> Any:
                return self._device

            @device.setter
            def device(self, value: Any) -> None:
                time.sleep(random.random() / 500)
                self._device = value

        model = device_guard(warn=False)(SlowWrites)()
        for _ in range(30):
            barrier = threading.Barrier(2)

            def move(device_id: int, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                model.session.set_providers([CUDA, CPU], [{"device_id": device_id}, {}])

            threads = [threading.Thread(target=move, args=(index,)) for index in (1, 2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            runs_on = model.session.get_provider_options()[CUDA]["device_id"]
            assert model.device == torch.device("cuda", int(runs_on))


class TestSwitchingOff:
    """follow=False aligns at load only; a bad follow= is refused."""

    def test_follow_false_follows_nothing(self, module: types.ModuleType) -> None:
        """On a function, a class and a patch: a change moves nothing; realign() does."""
        models = [
            device_guard(follow=False)(fresh(Model))(),
            device_guard(follow=False)(lambda: Model())(),
        ]
        with patch(f"{module.__name__}:load", follow=False):
            models.append(module.load())
        for model in models:
            assert not is_followed(model.session)
            assert loud(to_cpu(model)) == []
            assert model.device == torch.device("cuda:0")
        with recorded_logs():
            assert realign(models[0]) == CPU_DEVICE

    @pytest.mark.parametrize("value", ["yes", 1, None])
    def test_a_bad_follow_value_is_refused(self, module: types.ModuleType, value: object) -> None:
        """A follow= that is not True or False is a ModelInputError, before anything is patched."""
        original = module.load
        with pytest.raises(ModelInputError, match="follow must be True or False; got"):
            device_guard(follow=value)  # type: ignore[call-overload]
        with pytest.raises(ModelInputError, match="follow must be True or False; got"):
            patch(f"{module.__name__}:load", follow=value)  # type: ignore[arg-type]
        assert module.load is original


class TestPatchUndo:
    """A patch's undo() stops its models following; other guards' models keep on."""

    def test_undo_stops_following(self, module: types.ModuleType, capsys: Any) -> None:
        """After undo() a real fallback moves no model; realign() puts it right by hand."""
        with patch(f"{module.__name__}:load"), patch(f"{module.__name__}:Detector"):
            models = [module.load(GPUSession(fail_next_run=True)), module.Detector()]
            assert all(is_followed(model.session) for model in models)
        assert not any(is_followed(model.session) for model in models)
        with recorded_logs() as records:
            assert models[0].session.run(None, {"x": X})[0].tolist() == ONE
            models[1].session.set_providers([CPU])
        assert records == []
        assert [model.device for model in models] == [torch.device("cuda:0")] * 2
        assert "Falling back to" in capsys.readouterr().out
        with recorded_logs() as records:
            assert realign(models[0]) == CPU_DEVICE
        assert len(warning_records(records)) == 1

    def test_undo_keeps_what_another_guard_follows(self, module: types.ModuleType) -> None:
        """A session also followed by a decorated factory's model keeps moving that model."""
        shared = GPUSession()
        kept = load(shared)
        with patch(f"{module.__name__}:load"):
            dropped = module.load(shared)
        assert is_followed(shared)
        to_cpu(kept)
        assert (kept.device, dropped.device) == (CPU_DEVICE, torch.device("cuda:0"))
