"""Where the guard reads the device: the model's attribute, the device= option, the call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from onnx_device_guard import (
    DeviceGuardError,
    EnvironmentConfigurationError,
    ModelInputError,
    device_guard,
)

from .logs import recorded_logs, warning_records
from .sessions import cpu_session, cuda_session


@dataclass
class NoDevice:
    """A loader's result that keeps a session but no device."""

    session: Any


class TestDeviceAttribute:
    """A model with a device attribute: it is read and the aligned device written back."""

    def test_attribute_wins_over_the_call_argument(self) -> None:
        """The model's own device is what it uses, whatever the call said."""

        @dataclass
        class Model:
            session: Any
            device: Any

        @device_guard
        def load(device: str = "cpu") -> Model:
            return Model(cpu_session(), "cuda:0")

        assert load().device == "cpu"

    def test_device_attr_and_device_option_go_together(self) -> None:
        """device_attr= says where the device is written, device= what was asked: both fine."""
        device_guard(device_attr="target", device="cuda")


class TestCallArgument:
    """Without a device attribute, the factory call's own `device` argument is checked."""

    @pytest.mark.parametrize(
        ("call", "expected_warning"),
        [
            (lambda load: load("model.onnx", "cuda:0"), True),  # positional
            (lambda load: load("model.onnx", device="cuda:0"), True),  # keyword
            (lambda load: load("model.onnx"), True),  # the default
            (lambda load: load("model.onnx", device="cpu"), False),
        ],
        ids=["positional", "keyword", "default", "cpu"],
    )
    def test_bound_through_the_signature(self, call: Any, expected_warning: bool) -> None:
        """Positional, keyword and default values all count."""

        @device_guard
        def load(path: str, device: str = "cuda") -> NoDevice:
            return NoDevice(cpu_session())

        with recorded_logs() as records:
            model = call(load)
        assert isinstance(model, NoDevice)
        assert len(warning_records(records)) == int(expected_warning)

    def test_checked_not_rewritten_in_fallback_mode(self) -> None:
        """The warning says what a fallback would be; the model is not touched."""

        @device_guard
        def load(device: str = "cuda") -> NoDevice:
            return NoDevice(cpu_session())

        with recorded_logs() as records:
            model = load()
        assert vars(model) == {"session": model.session}
        [record] = warning_records(records)
        message = record.getMessage()
        assert "left as it is; a fallback would use 'cpu'" in message
        assert "device argument" in message
        assert vars(record)["odg_applied"] is False
        assert vars(record)["odg_device_attr"] is None

    def test_fail_mode_raises_naming_the_model_and_factory(self) -> None:
        """In fail mode the model without a device attribute raises like any other."""

        @device_guard(resolution_mode="fail")
        def load_detector(device: str = "cuda") -> NoDevice:
            return NoDevice(cpu_session())

        with pytest.raises(EnvironmentConfigurationError) as info:
            load_detector()
        assert "model NoDevice, returned by the factory" in info.value.message
        assert "load_detector" in info.value.message

    def test_keyword_collected_by_var_keyword(self) -> None:
        """A `device` passed through **kwargs is found."""

        @device_guard(resolution_mode="fail")
        def load(path: str, **options: Any) -> NoDevice:
            return NoDevice(cpu_session())

        load("model.onnx", device="cpu")
        with pytest.raises(EnvironmentConfigurationError):
            load("model.onnx", device="cuda")

    def test_classmethod_factory_binds_without_cls(self) -> None:
        """On a classmethod the bound arguments start after cls."""

        class Loader(NoDevice):
            @classmethod
            @device_guard(resolution_mode="fail")
            def load(cls, device: str = "cuda") -> Loader:
                return cls(cpu_session())

        assert isinstance(Loader.load("cpu"), Loader)
        with pytest.raises(EnvironmentConfigurationError):
            Loader.load()

    def test_torch_device_argument(self) -> None:
        """A torch.device argument is used as it is."""

        @device_guard(resolution_mode="fail")
        def load(device: torch.device) -> NoDevice:
            return NoDevice(cuda_session(1))

        load(torch.device("cuda", 1))
        with pytest.raises(EnvironmentConfigurationError, match="device_id 1"):
            load(torch.device("cuda", 0))

    def test_no_device_anywhere(self) -> None:
        """No attribute, no device parameter, no option: a clear error saying what to pass."""

        @device_guard
        def load(path: str) -> NoDevice:
            return NoDevice(cpu_session())

        with pytest.raises(DeviceGuardError) as info:
            load("model.onnx")
        message = info.value.message
        assert "'_device', 'device'" in message
        assert "no device parameter" in message
        assert "device=" in message

    def test_none_device_argument_is_an_error(self) -> None:
        """`device=None` ("pick one for me") names no device: the guard asks for device=."""

        @device_guard
        def load(device: str | None = None) -> NoDevice:
            return NoDevice(cpu_session())

        with pytest.raises(DeviceGuardError, match="Pass device="):
            load()

    @pytest.mark.parametrize("value", [True, 1.5, ["cuda"]])
    def test_unusable_device_argument(self, value: Any) -> None:
        """A device argument that is not a device or string is a ModelInputError naming it."""

        @device_guard
        def load(device: Any) -> NoDevice:
            return NoDevice(cpu_session())

        with pytest.raises(ModelInputError, match="call's device argument"):
            load(value)

    def test_unparsable_device_argument(self) -> None:
        """A string torch cannot parse is a ModelInputError naming it."""

        @device_guard
        def load(device: str) -> NoDevice:
            return NoDevice(cpu_session())

        with pytest.raises(ModelInputError, match="'gpu0'"):
            load("gpu0")


class TestDeviceOption:
    """device= gives the device instead of the call."""

    def test_fixed_device(self) -> None:
        """A fixed device is checked for a factory without a device parameter."""

        @device_guard(device="cuda", resolution_mode="fail")
        def load() -> NoDevice:
            return NoDevice(cpu_session())

        with pytest.raises(EnvironmentConfigurationError, match="device= option"):
            load()

    def test_callable_of_the_call_arguments(self) -> None:
        """A callable gets the bound arguments, defaults and **kwargs entries included."""
        seen: list[dict[str, Any]] = []

        def from_flag(arguments: dict[str, Any]) -> str:
            seen.append(arguments)
            return "cuda" if arguments["use_cuda"] else "cpu"

        @device_guard(device=from_flag, resolution_mode="fail")
        def load(path: str, use_cuda: bool = False, **extra: Any) -> NoDevice:
            return NoDevice(cpu_session())

        load("model.onnx", threads=2)
        assert seen == [
            {"path": "model.onnx", "use_cuda": False, "extra": {"threads": 2}, "threads": 2}
        ]
        with pytest.raises(EnvironmentConfigurationError, match="from_flag"):
            load("model.onnx", use_cuda=True)

    def test_callable_that_raises(self) -> None:
        """The callable's error becomes a DeviceGuardError naming it, chained."""

        @device_guard(device=lambda arguments: arguments["missing"])
        def load() -> NoDevice:
            return NoDevice(cpu_session())

        with pytest.raises(DeviceGuardError, match="KeyError") as info:
            load()
        assert isinstance(info.value.__cause__, KeyError)

    def test_the_option_speaks_for_the_call(self) -> None:
        """With device= the call's own device argument is not read: it may be the package's word."""

        def load(device: str = "gpu") -> NoDevice:
            return NoDevice(cpu_session())

        assert isinstance(device_guard(device="cpu", resolution_mode="fail")(load)(), NoDevice)
        with pytest.raises(EnvironmentConfigurationError, match="the device= option"):
            device_guard(device="cuda", resolution_mode="fail")(load)("gpu")

    @pytest.mark.parametrize("value", ["gpu", 3.5, True, object()])
    def test_bad_option_fails_at_decoration(self, value: Any) -> None:
        """An unusable device= is a ModelInputError when the decorator is applied."""
        with pytest.raises(ModelInputError, match="device"):
            device_guard(device=value)


class TestAsyncFactoryDevice:
    """An async factory's call is read the same way, once the model is awaited."""

    def test_call_argument_of_an_async_factory(self) -> None:
        """The coroutine function's own device argument is checked after the await."""
        import asyncio

        @device_guard(resolution_mode="fail")
        async def load(device: str = "cuda") -> NoDevice:
            await asyncio.sleep(0)
            return NoDevice(cpu_session())

        assert isinstance(asyncio.run(load("cpu")), NoDevice)
        with pytest.raises(EnvironmentConfigurationError, match="device argument"):
            asyncio.run(load())
