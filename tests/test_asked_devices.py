"""Every device that was asked for is checked: the call's, the device= option's, the model's."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from onnx_device_guard import (
    DeviceFallbackWarning,
    EnvironmentConfigurationError,
    ModelInputError,
    device_guard,
    patch,
)

from .logs import recorded_logs
from .sessions import cpu_session, cuda_session


class SaysCPU:
    """A model that reports the device its CPU session runs on, whatever was asked.

    Like an embedding library's ONNX backend: `device="cuda"` is accepted, the
    session runs on CPU, and the read-only `device` property answers `cpu`.
    """

    def __init__(self, device: str = "cuda") -> None:
        self.session = cpu_session()

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")


class Plain:
    """A model with a writable device attribute."""

    def __init__(self, session: Any, device: Any) -> None:
        self.session, self.device = session, device


class Inner:
    """What a backend forwards to: the real session and device."""

    def __init__(self) -> None:
        self.session, self.device = cpu_session(), "cuda:0"


class Backend:
    """A detection package's backend: `device` and `session` forwarded from `backend`."""

    def __init__(self) -> None:
        self.backend = Inner()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["backend"], name)


def fallbacks(records: list[Any]) -> list[Any]:
    return [record for record in records if getattr(record, "odg_event", None) == "fallback"]


class TestTheCallersDevice:
    """The call's own `device` argument is checked even when the model says it is fine."""

    def test_cuda_asked_cpu_reported_is_a_fallback(self) -> None:
        """The model says cpu, the caller asked cuda: one warning naming the call's argument."""
        load = device_guard(SaysCPU)
        with recorded_logs() as records, pytest.warns(DeviceFallbackWarning) as caught:
            model = load(device="cuda")
        assert model.device == torch.device("cpu")
        assert len(caught) == 1
        assert "the call's device argument" in str(caught[0].message)
        assert len(fallbacks(records)) == 1

    def test_fail_mode_raises_naming_the_request_and_its_source(self) -> None:
        """In fail mode the caller's cuda is an error, not a quiet cpu."""

        @device_guard(resolution_mode="fail")
        def load(device: str = "cuda") -> SaysCPU:
            return SaysCPU(device)

        with pytest.raises(EnvironmentConfigurationError) as info:
            load()
        assert "'cuda'" in info.value.message
        assert "the factory's default device argument" in info.value.message  # not passed
        with pytest.raises(EnvironmentConfigurationError, match="the call's device argument"):
            load("cuda")
        assert load("cpu").device == torch.device("cpu")

    def test_none_is_judged_by_the_model(self) -> None:
        """`device=None` lets the package choose: its attribute alone is checked."""

        @device_guard(resolution_mode="fail")
        def load(device: str | None = None) -> Plain:
            return Plain(cpu_session(), "cpu")

        assert load().device == "cpu"

    def test_a_value_that_is_no_device_is_left_to_the_package(self) -> None:
        """`device="auto"` (the package's own word) is not an error when the model says more."""

        @device_guard(resolution_mode="fail")
        def load(device: Any = "auto") -> Plain:
            return Plain(cpu_session(), "cpu")

        assert load().device == "cpu"
        assert load(device="gpu").device == "cpu"

    @pytest.mark.parametrize("device", ["cuda:256", 200])
    def test_an_index_torch_cannot_address_is_an_error_beside_an_attribute(
        self, device: object
    ) -> None:
        """torch reads "cuda:256" as cuda:0: the model's own word never excuses it."""

        @device_guard(resolution_mode="fail")
        def load(device: Any = "auto") -> Plain:
            return Plain(cpu_session(), "cpu")

        with pytest.raises(ModelInputError, match="which torch cannot address"):
            load(device=device)

    def test_an_int_argument_is_a_cuda_index(self) -> None:
        """`device=0` is torch's cuda:0, so "fail" mode does not let the model through."""

        @device_guard(resolution_mode="fail")
        def load(device: Any = "auto") -> Plain:
            return Plain(cpu_session(), "cpu")

        with pytest.raises(EnvironmentConfigurationError, match="'cuda:0'"):
            load(device=0)

    def test_patched_class_checks_the_constructor_argument(self) -> None:
        """The issue's case, through patch: a model that says cpu no longer hides the request."""
        import sys
        import types

        module = types.ModuleType("says_cpu_package")
        module.SaysCPU = type(  # type: ignore[attr-defined]
            "SaysCPU", (SaysCPU,), {"__module__": "says_cpu_package"}
        )
        sys.modules["says_cpu_package"] = module
        try:
            with patch("says_cpu_package:SaysCPU", resolution_mode="fail"):
                with pytest.raises(EnvironmentConfigurationError, match="device argument"):
                    module.SaysCPU(device="cuda")
                assert module.SaysCPU(device="cpu").device == torch.device("cpu")
        finally:
            del sys.modules["says_cpu_package"]


class TestTheDeviceOption:
    """`device=` is checked beside the model's own attribute, not instead of it."""

    def test_option_checked_when_the_model_has_an_attribute(self) -> None:
        """Before: device= was ignored whenever the model had a device attribute."""

        @device_guard(device="cuda", resolution_mode="fail")
        def load() -> Plain:
            return Plain(cpu_session(), "cpu")

        with pytest.raises(EnvironmentConfigurationError, match="the device= option"):
            load()

    def test_option_and_device_attr_together(self) -> None:
        """device_attr= names where to write; device= says what was asked."""

        class Named:
            def __init__(self) -> None:
                self.session, self.target = cpu_session(), "cuda"

        @device_guard(device="cuda", device_attr="target")
        def load() -> Named:
            return Named()

        with pytest.warns(DeviceFallbackWarning):
            assert load().target == "cpu"

    def test_one_report_for_several_requests(self) -> None:
        """Call, option and attribute all asking cuda on a CPU session: one warning, one record."""

        @device_guard(device="cuda")
        def load(device: str = "cuda") -> Plain:
            return Plain(cpu_session(), "cuda")

        with recorded_logs() as records, pytest.warns(DeviceFallbackWarning) as caught:
            assert load().device == "cpu"
        assert len(caught) == 1
        assert len(fallbacks(records)) == 1

    def test_compatible_requests_say_nothing(self) -> None:
        """Every request the session reads: no warning, the device as it was."""

        @device_guard(device="cuda:0", resolution_mode="fail")
        def load(device: str = "cuda:0") -> Plain:
            return Plain(cuda_session(0), "cuda:0")

        with recorded_logs() as records:
            assert load().device == "cuda:0"
        assert fallbacks(records) == []


class TestWriteBack:
    """The aligned device is written to the attribute that holds it, where it can be."""

    def test_read_only_attribute_is_not_written_and_the_record_says_so(self) -> None:
        """A property without a setter: no crash; the record says it still says cuda."""

        class ReadOnly:
            session = cpu_session()

            @property
            def device(self) -> str:
                return "cuda"

        with recorded_logs() as records, pytest.warns(DeviceFallbackWarning, match="read-only"):
            model = device_guard(ReadOnly)()
        assert model.device == "cuda"
        (record,) = fallbacks(records)
        assert "still says 'cuda'" in record.getMessage()
        assert getattr(record, "odg_device_attr", None) == "device"

    def test_forwarded_attributes_are_written_where_they_live(self) -> None:
        """A backend forwarding `device` and `session` from an inner object: all views agree."""

        with pytest.warns(DeviceFallbackWarning, match=r"'backend\.device'"):
            outer = device_guard(type("Backend", (Backend,), {}))()
        assert outer.device == outer.backend.device == "cpu"
        assert "device" not in vars(outer)

    def test_forwarded_session_is_named_by_its_real_path(self) -> None:
        """The fail-mode message names `backend.session`, where the session lives."""

        with pytest.raises(EnvironmentConfigurationError, match=r"session 'backend\.session'"):
            device_guard(resolution_mode="fail")(type("Backend", (Backend,), {}))()
