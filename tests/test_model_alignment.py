"""Aligning a model object: write-back before the log, log fields, errors, realign."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from onnx_device_guard import (
    DeviceGuardError,
    EnvironmentConfigurationError,
    ModelInputError,
    align_device_with_onnx_session,
    aligned_device,
    device_guard,
    realign,
)

from .guarded_models import runnable_cpu_session
from .logs import recorded_logs
from .sessions import FakeSession, cpu_session, cuda_session

FIELDS = {
    "odg_event",
    "odg_reason",
    "odg_requested_device",
    "odg_aligned_device",
    "odg_applied",
    "odg_providers",
    "odg_sessions",
    "odg_factory",
    "odg_device_attr",
    "odg_help_url",
}


@dataclass
class Model:
    session: Any
    device: Any


@dataclass
class TwoTower:
    vision: Any
    text: Any
    device: Any


class TestWriteBackBeforeLog:
    """The fallback is logged only once the device has been written back."""

    def test_refused_write_logs_nothing(self) -> None:
        """A setter that raises gives a clear error and no "Using 'cpu' instead" record."""

        class Refusing:
            session = cpu_session()

            @property
            def device(self) -> str:
                return "cuda"

            @device.setter
            def device(self, value: str) -> None:
                raise ValueError("fixed at construction")

        @device_guard
        def load() -> Refusing:
            return Refusing()

        with recorded_logs() as records, pytest.raises(DeviceGuardError, match="cannot be set"):
            load()
        assert [record for record in records if "instead" in record.getMessage()] == []

    def test_log_comes_after_the_write(self) -> None:
        """A handler sees the model's device already changed by the time of the fallback record."""
        seen: list[object] = []
        model = Model(cpu_session(), "cuda")

        class Spy(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if getattr(record, "odg_event", None) == "fallback":
                    seen.append(model.device)

        @device_guard
        def load() -> Model:
            return model

        logger = logging.getLogger("onnx_device_guard")
        spy = Spy()
        logger.addHandler(spy)
        try:
            with recorded_logs():
                load()
        finally:
            logger.removeHandler(spy)
        assert seen == ["cpu"]


class TestStructuredFields:
    """Every fallback record carries odg_* fields, so handlers need not parse the message."""

    def test_core_fallback_fields(self) -> None:
        """The core's record: reason, devices, providers, help_url; no factory or session."""
        with recorded_logs() as records:
            align_device_with_onnx_session(cpu_session(), "cuda:0")
        [record] = records
        fields = {name: getattr(record, name) for name in FIELDS}
        assert fields == {
            "odg_event": "fallback",
            "odg_reason": "no_gpu_provider",
            "odg_requested_device": "cuda:0",
            "odg_aligned_device": "cpu",
            "odg_applied": True,
            "odg_providers": ["CPUExecutionProvider"],
            "odg_sessions": [],
            "odg_factory": None,
            "odg_device_attr": None,
            "odg_help_url": (
                "https://onnx-device-guard.readthedocs.io/en/latest/troubleshooting/"
                "#no-data-transfer-registered"
            ),
        }
        json.dumps(fields)  # a JSON handler can write them as they are

    def test_guard_fields_name_the_factory_and_attribute(self) -> None:
        """A guarded factory's record names it and the attribute written."""

        @device_guard
        def load_model() -> Model:
            return Model(cuda_session(1), torch.device("cuda", 0))

        with recorded_logs() as records:
            load_model()
        [record] = records
        assert vars(record)["odg_reason"] == "device_id_mismatch"
        assert vars(record)["odg_aligned_device"] == "cuda:1"
        assert vars(record)["odg_factory"].endswith("load_model")
        assert vars(record)["odg_device_attr"] == "device"
        assert vars(record)["odg_applied"] is True

    def test_sessions_disagree_reason(self) -> None:
        """Sessions on different GPUs give the reason sessions_disagree."""

        @device_guard(session_attr=("vision", "text"))
        def load() -> TwoTower:
            return TwoTower(cuda_session(0), cuda_session(1), "cuda:1")

        with recorded_logs() as records:
            assert load().device == "cpu"
        [record] = records
        assert vars(record)["odg_reason"] == "sessions_disagree"
        assert vars(record)["odg_sessions"] == ["vision"]
        assert "'vision'" in record.getMessage()

    def test_debug_level_records_carry_them_too(self) -> None:
        """warn=False moves the record to DEBUG with the same fields."""
        with recorded_logs() as records, aligned_device(cpu_session(), "cuda", warn=False):
            pass
        [record] = records
        assert record.levelno == logging.DEBUG
        assert set(vars(record)) >= FIELDS

    def test_fields_do_not_clash_with_log_record_attributes(self) -> None:
        """logging refuses extra keys that a LogRecord has; these are all new."""
        plain = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
        assert not FIELDS & set(vars(plain))


class TestSeveralSessions:
    """With several sessions, messages name the session at fault."""

    def test_one_warning_naming_each_session_at_fault(self) -> None:
        """One record per alignment, naming the sessions, saying the final device only."""

        @device_guard(session_attr=("vision", "text"))
        def load() -> TwoTower:
            return TwoTower(cuda_session(1), cpu_session(), torch.device("cuda", 0))

        with recorded_logs() as records:
            assert load().device == torch.device("cpu")
        [record] = records
        message = record.getMessage()
        assert "session 'vision'" in message
        assert "session 'text'" in message
        assert "Using 'cpu' instead" in message
        assert "Using 'cuda:1'" not in message
        assert vars(record)["odg_sessions"] == ["vision", "text"]

    def test_sessions_on_the_same_other_gpu_are_all_named(self) -> None:
        """Both sessions run on GPU 1 and the model asks for GPU 0: both are at fault."""

        @device_guard(session_attr=("vision", "text"))
        def load() -> TwoTower:
            return TwoTower(cuda_session(1), cuda_session(1), "cuda:0")

        with recorded_logs() as records:
            assert load().device == "cuda:1"
        [record] = [record for record in records if record.levelno == logging.WARNING]
        assert vars(record)["odg_sessions"] == ["vision", "text"]
        assert "session 'vision''s" in record.getMessage()
        assert "session 'text''s" in record.getMessage()

    def test_sessions_on_the_cpu_alike_are_named_in_one_sentence(self) -> None:
        """Three sessions that run only the CPU: one sentence names them all, and
        `odg_sessions` lists them. Before: the same sentence came once per session."""

        @device_guard(session_attr=("vision", "text"))
        def load() -> TwoTower:
            return TwoTower(cpu_session(), cpu_session(), "cuda")

        with recorded_logs() as records:
            assert load().device == "cpu"
        [record] = [record for record in records if record.levelno == logging.WARNING]
        message = record.getMessage()
        assert "its onnxruntime sessions 'vision', 'text' run only" in message
        assert message.count("The model asks for device") == 1
        assert vars(record)["odg_sessions"] == ["vision", "text"]

    def test_fail_names_the_session(self) -> None:
        """The error names the attribute path of the session that cannot read the device."""

        @device_guard(session_attr=("vision", "text"), resolution_mode="fail")
        def load() -> TwoTower:
            return TwoTower(cuda_session(0), cpu_session(), "cuda:0")

        with pytest.raises(EnvironmentConfigurationError, match="session 'text' runs only"):
            load()

    def test_single_session_message_is_unchanged(self) -> None:
        """One session: the core's wording, with the model and attribute at the end."""

        @device_guard(resolution_mode="fail")
        def load() -> Model:
            return Model(cpu_session(), "cuda:0")

        with pytest.raises(EnvironmentConfigurationError) as info:
            load()
        message = info.value.message
        assert message.startswith("The model asks for device 'cuda:0', but its onnxruntime")
        assert "session 'session'" in message
        assert "device attribute 'device'" in message


class TestAttributeReadErrors:
    """Errors raised while reading the model's own attributes become DeviceGuardError."""

    class EmptyModule(torch.nn.Module):
        """An ONNX-backed module with no parameters: its device property raises."""

        def __init__(self) -> None:
            super().__init__()
            self.session = cpu_session()

        @property
        def device(self) -> torch.device:
            return next(self.parameters()).device

    class KeyErrorGetattr:
        """A config-backed object whose __getattr__ raises KeyError."""

        def __init__(self) -> None:
            self.session = cpu_session()

        def __getattr__(self, name: str) -> Any:
            options: dict[str, Any] = {}
            return options[name]

    @pytest.mark.parametrize(
        ("model_type", "original", "attribute"),
        [(EmptyModule, StopIteration, "'device'"), (KeyErrorGetattr, KeyError, "'_session'")],
    )
    def test_sync_factory(self, model_type: type, original: type, attribute: str) -> None:
        """The error names the factory, the attribute and the original error, chained."""

        @device_guard
        def load_model() -> Any:
            return model_type()

        with pytest.raises(DeviceGuardError) as info:
            load_model()
        message = info.value.message
        assert "load_model" in message
        assert f"reading its attribute {attribute} raised" in message
        assert original.__name__ in message
        assert isinstance(info.value.__cause__, original)

    @pytest.mark.parametrize(
        ("model_type", "original"),
        [(EmptyModule, StopIteration), (KeyErrorGetattr, KeyError)],
    )
    def test_async_factory(self, model_type: type, original: type) -> None:
        """Also in a coroutine, where a bare StopIteration would become RuntimeError."""

        @device_guard
        async def load_model() -> Any:
            await asyncio.sleep(0)
            return model_type()

        with pytest.raises(DeviceGuardError) as info:
            asyncio.run(load_model())
        assert not isinstance(info.value, RuntimeError)
        assert isinstance(info.value.__cause__, original)

    def test_session_property_that_raises(self) -> None:
        """A session attribute that raises is reported the same way."""

        class Broken:
            device = "cuda"

            @property
            def session(self) -> Any:
                raise KeyError("session")

        @device_guard
        def load() -> Broken:
            return Broken()

        with pytest.raises(DeviceGuardError, match="'session' raised KeyError"):
            load()

    def test_dotted_path_part_that_raises_is_named(self) -> None:
        """A part of a dotted path that raises names the path up to it."""

        class Holder:
            @property
            def infer(self) -> Any:
                raise StopIteration

        @dataclass
        class Outer:
            det: Any
            device: Any

        @device_guard(session_attr="det.infer.session")
        def load() -> Outer:
            return Outer(Holder(), "cuda")

        with pytest.raises(DeviceGuardError, match=r"'det\.infer' raised StopIteration"):
            load()


class TestRealign:
    """realign aligns an existing model again, with the guard's discovery."""

    def test_after_providers_change(self) -> None:
        """A model whose session lost its GPU provider is moved to the fallback device."""
        session = FakeSession(["CUDAExecutionProvider", "CPUExecutionProvider"])
        model = Model(session, torch.device("cuda"))
        assert realign(model) == torch.device("cuda")
        session.providers = ["CPUExecutionProvider"]
        with recorded_logs() as records:
            assert realign(model) == torch.device("cpu")
        assert model.device == torch.device("cpu")
        [record] = records
        assert vars(record)["odg_factory"] is None
        assert vars(record)["odg_device_attr"] == "device"

    def test_discovery_and_fixed_device(self) -> None:
        """A model without a device attribute is checked against device=."""

        class Holder:
            def __init__(self) -> None:
                self._onnx_session = runnable_cpu_session()

        with pytest.raises(EnvironmentConfigurationError, match="model Holder"):
            realign(Holder(), device="cuda", resolution_mode="fail")
        assert realign(Holder(), device="cpu") == torch.device("cpu")

    def test_no_device_is_an_error(self) -> None:
        """Without a device attribute or device=, realign says what to pass."""

        class Holder:
            def __init__(self) -> None:
                self._onnx_session = runnable_cpu_session()

        with pytest.raises(DeviceGuardError, match="device="):
            realign(Holder())

    def test_no_device_is_an_error_for_a_session_born_under_a_watch_too(self) -> None:
        """What realign says does not hang on whether a watch saw the session born."""
        import onnxruntime

        from onnx_device_guard import example_model, watch_sessions

        class Holder:
            def __init__(self) -> None:
                self.s = onnxruntime.InferenceSession(
                    example_model(), providers=["CPUExecutionProvider"]
                )

        with watch_sessions():
            watched = Holder()
        for model in (Holder(), watched):
            with pytest.raises(DeviceGuardError, match="device="):
                realign(model, resolution_mode="fail")

    def test_callable_device_is_refused(self) -> None:
        """There is no call whose arguments a device= callable could read."""

        class Holder:
            def __init__(self) -> None:
                self.session = cpu_session()

        with pytest.raises(ModelInputError, match="no call"):
            realign(Holder(), device=lambda arguments: "cuda")  # type: ignore[arg-type]

    def test_require_session_false_returns_none(self) -> None:
        """A model without a session returns None and is left alone."""
        assert realign(object(), require_session=False) is None

    def test_bad_option(self) -> None:
        """Options are checked as for device_guard."""
        with pytest.raises(ModelInputError, match="resolution_mode"):
            realign(Model(cpu_session(), "cpu"), resolution_mode="strict")  # type: ignore[arg-type]


class TestAlignedDeviceWithSeveralSessions:
    """aligned_device takes a list or tuple of sessions."""

    def test_all_must_read_the_device(self) -> None:
        """One block for a pipeline: the device suits every session."""
        with aligned_device([cuda_session(0), cuda_session(0)], "cuda:0") as device:
            assert device == torch.device("cuda", 0)
        with (
            recorded_logs() as records,
            aligned_device((cuda_session(0), cpu_session()), "cuda:0") as device,
        ):
            assert device == torch.device("cpu")
        [record] = records
        assert vars(record)["odg_sessions"] == ["sessions[1]"]

    def test_fail_names_the_session(self) -> None:
        """In fail mode the error names the position of the session at fault."""
        sessions = [cuda_session(0), cpu_session()]
        with (
            pytest.raises(EnvironmentConfigurationError, match=r"'sessions\[1\]'"),
            aligned_device(sessions, "cuda", resolution_mode="fail"),
        ):
            pass

    def test_empty_list_is_refused(self) -> None:
        """An empty list is a ModelInputError."""
        with pytest.raises(ModelInputError, match="empty list"), aligned_device([], "cuda"):
            pass

    def test_real_sessions(self, real_cpu_session: Any, real_dropped_cuda_session: Any) -> None:
        """Two real CPU sessions (one whose CUDA provider was dropped) give cpu."""
        with aligned_device([real_cpu_session, real_dropped_cuda_session], "cuda", warn=False) as d:
            assert d == torch.device("cpu")


class TestTheSessionAtFaultIsNamed:
    """When sessions disagree, the one that parts from the device asked for is named."""

    @pytest.mark.parametrize(("asked", "at_fault"), [("cuda:0", "text"), ("cuda:1", "vision")])
    def test_whichever_gpu_is_asked_for(self, asked: str, at_fault: str) -> None:
        @device_guard(session_attr=("vision", "text"))
        def load() -> TwoTower:
            return TwoTower(cuda_session(0), cuda_session(1), asked)

        with recorded_logs() as records:
            assert load().device == "cpu"
        [record] = records
        assert vars(record)["odg_sessions"] == [at_fault]
        assert f"'{at_fault}' cannot read the GPU the others run on" in record.getMessage()

    def test_in_aligned_device_too(self) -> None:
        with recorded_logs() as records, aligned_device([cuda_session(0), cuda_session(1)], 0):
            pass
        assert vars(records[-1])["odg_sessions"] == ["sessions[1]"]


class TestSessionsOnDifferentGPUsError:
    """When not even the fallback device suits every session, the error names them."""

    def test_error_names_the_sessions_at_fault(self) -> None:
        """The sessions that cannot read the GPU the others run on are named."""

        @device_guard(session_attr=("vision", "text"), fallback_device="cuda:0")
        def load() -> TwoTower:
            return TwoTower(cuda_session(0), cuda_session(1), "cuda:1")

        with pytest.raises(EnvironmentConfigurationError, match="'vision' cannot read") as info:
            load()
        assert "model TwoTower" in info.value.message
