"""device_guard on every shape of factory, its options, errors and metadata."""

from __future__ import annotations

import asyncio
import copy
import inspect
import pickle
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from onnx_device_guard import (
    DeviceFallbackWarning,
    DeviceGuardError,
    EnvironmentConfigurationError,
    ModelInputError,
    device_guard,
    device_policy,
)

from .guarded_models import Model, SubModel, load_model
from .sessions import cpu_session, cuda_session

CPU = torch.device("cpu")


@dataclass
class Plain:
    session: Any
    device: Any


@dataclass
class TwoTower:
    """A model with two sessions, as CLIP-style models have."""

    vision: Any
    text: Any
    device: Any


class TestFunction:
    """A guarded module-level function."""

    def test_bare_decorator_aligns_the_returned_model(self) -> None:
        """cuda:0 on a CPU-only session becomes cpu on the returned object."""
        assert load_model().device == CPU

    def test_same_object_is_returned(self) -> None:
        """The guard returns the factory's object, not a copy."""
        model = Plain(cpu_session(), "cpu")

        @device_guard
        def factory() -> Plain:
            return model

        assert factory() is model

    def test_compatible_device_is_left_alone(self) -> None:
        """A compatible device is neither changed nor rewritten."""
        device = torch.device("cuda", 0)

        @device_guard
        def factory() -> Plain:
            return Plain(cuda_session(0), device)

        assert factory().device is device

    def test_arguments_are_passed_through(self) -> None:
        """Positional and keyword arguments reach the factory unchanged."""

        @device_guard
        def factory(session: Any, *, device: str) -> Plain:
            return Plain(session, device)

        assert factory(cuda_session(1), device="cuda:1").device == "cuda:1"

    def test_string_device_is_written_back_as_string(self) -> None:
        """A model that stores its device as a string gets a string back."""

        @device_guard
        def factory() -> Plain:
            return Plain(cpu_session(), "cuda:0")

        assert factory().device == "cpu"

    def test_index_mismatch_moves_the_model_to_the_sessions_gpu(self) -> None:
        """A session on device_id 1 moves a cuda:0 model to cuda:1."""

        @device_guard
        def factory() -> Plain:
            return Plain(cuda_session(1), torch.device("cuda", 0))

        assert factory().device == torch.device("cuda", 1)

    def test_exception_from_factory_reaches_the_caller_unchanged(self) -> None:
        """The guard does not wrap or swallow the factory's own errors."""
        error = FileNotFoundError("weights.onnx")

        @device_guard
        def factory() -> Plain:
            raise error

        with pytest.raises(FileNotFoundError) as info:
            factory()
        assert info.value is error


class TestInstanceMethod:
    """A guarded instance method, called on an instance and through the class."""

    class Loader:
        def __init__(self, session: Any) -> None:
            self.session_for_models = session

        @device_guard
        def load(self, device: str) -> Plain:
            return Plain(self.session_for_models, device)

    def test_called_on_an_instance(self) -> None:
        """self reaches the method and the model is aligned."""
        assert self.Loader(cpu_session()).load("cuda").device == "cpu"

    def test_called_through_the_class(self) -> None:
        """Loader.load(instance, ...) works as for any method."""
        loader = self.Loader(cpu_session())
        assert self.Loader.load(loader, "cuda").device == "cpu"


class TestStaticMethod:
    """A guarded staticmethod, stacked either way round."""

    class Factories:
        @staticmethod
        @device_guard
        def inner(device: str) -> Plain:
            return Plain(cpu_session(), device)

        @device_guard
        @staticmethod
        def outer(device: str) -> Plain:
            return Plain(cpu_session(), device)

    @pytest.mark.parametrize("name", ["inner", "outer"])
    def test_through_class_and_instance(self, name: str) -> None:
        """Both stackings work called on the class and on an instance."""
        assert getattr(self.Factories, name)("cuda").device == "cpu"
        assert getattr(self.Factories(), name)("cuda").device == "cpu"


class TestClassMethod:
    """A guarded classmethod, stacked either way round (3.13 changed one of them)."""

    @pytest.mark.parametrize("name", ["from_pretrained", "from_config"])
    def test_returns_an_aligned_instance(self, name: str) -> None:
        """The class's own factory returns an aligned instance of the class."""
        model = getattr(Model, name)()
        assert type(model) is Model
        assert model.device == CPU

    @pytest.mark.parametrize("name", ["from_pretrained", "from_config"])
    def test_subclass_gets_its_own_instances(self, name: str) -> None:
        """Called on a subclass, the factory returns the subclass's instance."""
        model = getattr(SubModel, name)()
        assert type(model) is SubModel
        assert model.device == CPU

    @pytest.mark.parametrize("name", ["from_pretrained", "from_config"])
    def test_called_on_an_instance(self, name: str) -> None:
        """A classmethod called on an instance still receives the class."""
        model = getattr(SubModel(cpu_session(), "cpu"), name)("cuda:0")
        assert type(model) is SubModel
        assert model.device == CPU

    @pytest.mark.parametrize("name", ["from_pretrained", "from_config"])
    def test_arguments_are_passed_through(self, name: str) -> None:
        """Arguments after cls reach the factory."""
        assert getattr(Model, name)(device="meta").device == torch.device("meta")


class TestAsyncFactory:
    """Guarded ``async def`` factories are aligned after the await."""

    class AsyncModel(Plain):
        @classmethod
        @device_guard
        async def load(cls, device: str) -> TestAsyncFactory.AsyncModel:
            await asyncio.sleep(0)
            return cls(cpu_session(), device)

        @device_guard
        @classmethod
        async def load_outer(cls, device: str) -> TestAsyncFactory.AsyncModel:
            await asyncio.sleep(0)
            return cls(cpu_session(), device)

    def test_stays_a_coroutine_function(self) -> None:
        """inspect and asyncio still see a coroutine function."""

        @device_guard
        async def factory() -> Plain:
            return Plain(cpu_session(), "cuda")

        assert inspect.iscoroutinefunction(factory)
        assert inspect.iscoroutinefunction(self.AsyncModel.load)
        assert inspect.iscoroutinefunction(self.AsyncModel.load_outer)

    def test_model_is_aligned_after_the_await(self) -> None:
        """The awaited result is aligned."""

        @device_guard
        async def factory() -> Plain:
            await asyncio.sleep(0)
            return Plain(cpu_session(), "cuda")

        assert asyncio.run(factory()).device == "cpu"

    @pytest.mark.parametrize("name", ["load", "load_outer"])
    def test_async_classmethod(self, name: str) -> None:
        """Async classmethods work stacked either way round."""
        model = asyncio.run(getattr(self.AsyncModel, name)("cuda"))
        assert type(model) is self.AsyncModel
        assert model.device == "cpu"

    def test_policy_at_await_time_applies(self) -> None:
        """The scope active in the awaiting task decides the mode."""

        @device_guard
        async def factory() -> Plain:
            return Plain(cpu_session(), "cuda")

        async def main() -> None:
            with (
                device_policy(resolution_mode="fail"),
                pytest.raises(EnvironmentConfigurationError),
            ):
                await factory()

        asyncio.run(main())

    def test_sync_factory_returning_a_coroutine_is_reported(self) -> None:
        """A plain def returning an awaitable gets a clear DeviceGuardError."""

        async def load() -> Plain:
            return Plain(cpu_session(), "cuda")

        @device_guard
        def factory() -> Any:
            return load()

        with pytest.raises(DeviceGuardError, match="returned an awaitable"):
            factory()


class TestAttributes:
    """Which attributes the guard reads and writes."""

    def test_private_attributes_are_preferred(self) -> None:
        """_session and _device come before session and device."""

        class Wrapped:
            def __init__(self) -> None:
                self._session = cpu_session()
                self.session = cuda_session(0)
                self._device = torch.device("cuda", 0)

            @property
            def device(self) -> torch.device:
                return self._device

        @device_guard
        def factory() -> Wrapped:
            return Wrapped()

        model = factory()
        assert model._device == CPU
        assert model.device == CPU

    def test_read_only_device_property_over_private_attribute(self) -> None:
        """A read-only public device property is served through _device."""

        class Frozen:
            def __init__(self) -> None:
                self.session = cpu_session()
                self._device = "cuda"

            @property
            def device(self) -> str:
                return self._device

        @device_guard
        def factory() -> Frozen:
            return Frozen()

        assert factory().device == "cpu"

    def test_explicit_attributes(self) -> None:
        """session_attr and device_attr name the attributes to use."""

        @dataclass
        class Custom:
            ort: Any
            target: Any

        @device_guard(session_attr="ort", device_attr="target")
        def factory() -> Custom:
            return Custom(cpu_session(), "cuda:0")

        assert factory().target == "cpu"

    def test_several_sessions_must_all_be_satisfied(self) -> None:
        """With a tuple, the device must suit every session."""

        @device_guard(session_attr=("vision", "text"))
        def factory(vision: Any, text: Any) -> TwoTower:
            return TwoTower(vision, text, "cuda:0")

        assert factory(cuda_session(0), cuda_session(0)).device == "cuda:0"
        assert factory(cuda_session(0), cpu_session()).device == "cpu"
        assert factory(cpu_session(), cuda_session(0)).device == "cpu"

    def test_sessions_on_different_gpus_fall_back(self) -> None:
        """Two sessions on different GPUs leave no shared CUDA device: fallback."""

        @device_guard(session_attr=("vision", "text"))
        def factory() -> TwoTower:
            return TwoTower(cuda_session(0), cuda_session(1), "cuda:1")

        assert factory().device == "cpu"

    def test_several_sessions_in_fail_mode(self) -> None:
        """In fail mode the first session that cannot read the device raises."""

        @device_guard(session_attr=("vision", "text"), resolution_mode="fail")
        def factory() -> TwoTower:
            return TwoTower(cuda_session(0), cuda_session(1), "cuda:0")

        with pytest.raises(EnvironmentConfigurationError, match="device_id 1"):
            factory()

    def test_sessions_on_different_gpus_and_a_gpu_fallback_device(self) -> None:
        """If not even the fallback device suits every session, the guard raises."""

        @device_guard(session_attr=("vision", "text"), fallback_device="cuda:0")
        def factory() -> TwoTower:
            return TwoTower(cuda_session(0), cuda_session(1), "cuda:1")

        with pytest.raises(EnvironmentConfigurationError, match="different GPUs"):
            factory()


class TestGuardErrors:
    """What the guard cannot work with is reported as a DeviceGuardError."""

    def test_nothing_to_read(self) -> None:
        """The message names the factory, the returned type and the attributes tried."""

        @device_guard(require_session=True)
        def factory() -> object:
            return object()

        with pytest.raises(DeviceGuardError) as info:
            factory()
        message = info.value.message
        assert "factory" in message
        assert "object" in message
        assert "'_session', 'session'" in message

    def test_factory_returning_none(self) -> None:
        """None has no session: the message says NoneType."""

        @device_guard
        def factory() -> None:
            return None

        with pytest.raises(DeviceGuardError, match="NoneType"):
            factory()

    def test_missing_device_attribute(self) -> None:
        """A session without a device attribute names the device attributes tried."""

        @device_guard
        def factory() -> Any:
            return type("OnlySession", (), {"session": cpu_session()})()

        with pytest.raises(DeviceGuardError, match="'_device', 'device'"):
            factory()

    def test_missing_explicit_session_attributes(self) -> None:
        """Explicit session attributes must all be present."""

        @device_guard(session_attr=("vision", "text"))
        def factory() -> Any:
            return Plain(cpu_session(), "cpu")

        with pytest.raises(DeviceGuardError, match="'vision', 'text'"):
            factory()

    def test_missing_explicit_device_attribute(self) -> None:
        """An explicit device attribute must be present."""

        @device_guard(device_attr="target")
        def factory() -> Any:
            return Plain(cpu_session(), "cpu")

        with pytest.raises(DeviceGuardError, match="'target'"):
            factory()

    def test_read_only_device_attribute_is_reported_not_written(self) -> None:
        """A device property without a setter is left as it is, and the fallback says so."""

        class ReadOnly:
            session = cpu_session()

            @property
            def device(self) -> str:
                return "cuda"

        @device_guard
        def factory() -> ReadOnly:
            return ReadOnly()

        with pytest.warns(DeviceFallbackWarning, match="'device' is read-only") as caught:
            model = factory()
        assert model.device == "cuda"
        assert "still says 'cuda'" in str(caught[0].message)

    def test_session_attribute_holding_none_is_searched_past(self) -> None:
        """A `session` attribute holding None is no session: the error lists what was searched."""

        @device_guard(require_session=True)
        def factory() -> Plain:
            return Plain(None, "cuda")

        with pytest.raises(DeviceGuardError, match="session_attr=") as info:
            factory()
        assert "session (a NoneType, not a session)" in info.value.message

    def test_bad_device_value(self) -> None:
        """A device attribute torch cannot parse is a ModelInputError naming it."""

        @device_guard
        def factory() -> Plain:
            return Plain(cpu_session(), "gpu0")

        with pytest.raises(ModelInputError, match="'gpu0'"):
            factory()


class TestDecoratorOptions:
    """Options are validated when the decorator is applied."""

    def test_bad_mode_fails_at_decoration(self) -> None:
        """A mode typo is found at import time, not at the first call."""
        with pytest.raises(ModelInputError, match="resolution_mode"):
            device_guard(resolution_mode="strict")  # type: ignore[call-overload]

    def test_bad_fallback_device_fails_at_decoration(self) -> None:
        """An unparsable fallback device is found at decoration."""
        with pytest.raises(ModelInputError, match="fallback_device"):
            device_guard(fallback_device="gpu")

    @pytest.mark.parametrize("value", ["", "not an identifier", (), ("a", 1), 3])
    def test_bad_session_attr(self, value: Any) -> None:
        """session_attr must be a name or a tuple of names."""
        with pytest.raises(ModelInputError, match="session_attr"):
            device_guard(session_attr=value)

    @pytest.mark.parametrize("value", ["", ("a", "b"), 3])
    def test_bad_device_attr(self, value: Any) -> None:
        """device_attr must be one name."""
        with pytest.raises(ModelInputError, match="device_attr"):
            device_guard(device_attr=value)

    def test_non_callable_is_rejected(self) -> None:
        """Decorating something that is not callable is a ModelInputError."""
        with pytest.raises(ModelInputError, match="factory function or method"):
            device_guard("load")  # type: ignore[call-overload]

    def test_explicit_mode_wins_over_the_scope(self) -> None:
        """An option given to the decorator beats the enclosing device_policy."""

        @device_guard(resolution_mode="fallback")
        def factory() -> Plain:
            return Plain(cpu_session(), "cuda")

        with device_policy(resolution_mode="fail"):
            assert factory().device == "cpu"

    def test_scope_applies_when_the_option_is_not_given(self) -> None:
        """Without options, the policy in force at call time decides."""

        @device_guard
        def factory() -> Plain:
            return Plain(cpu_session(), "cuda")

        with device_policy(resolution_mode="fail"), pytest.raises(EnvironmentConfigurationError):
            factory()
        with device_policy(fallback_device="meta"):
            assert factory().device == "meta"

    def test_fallback_device_option(self) -> None:
        """fallback_device given to the decorator is used."""

        @device_guard(fallback_device=torch.device("meta"))
        def factory() -> Plain:
            return Plain(cpu_session(), torch.device("cuda"))

        assert factory().device == torch.device("meta")


class TestMetadata:
    """The guarded factory looks like the factory."""

    def test_name_doc_wrapped_and_signature(self) -> None:
        """__name__, __doc__, __wrapped__ and inspect.signature are kept."""

        def load(path: str, *, device: str = "cuda") -> Plain:
            """Load a model."""
            return Plain(cpu_session(), device)

        guarded = device_guard(load)
        assert guarded.__name__ == "load"
        assert guarded.__doc__ == "Load a model."
        assert guarded.__wrapped__ is load  # type: ignore[attr-defined]
        assert inspect.signature(guarded) == inspect.signature(load)

    def test_classmethod_metadata(self) -> None:
        """A guarded classmethod reports the method's own name and signature."""
        assert Model.from_pretrained.__name__ == "from_pretrained"
        assert Model.from_pretrained.__doc__ == "Load a model (classmethod outside the guard)."
        assert (
            str(inspect.signature(Model.from_pretrained)) == "(device: 'str' = 'cuda:0') -> 'Model'"
        )


class TestPickling:
    """Guarded module-level functions and classmethods pickle by reference."""

    def test_module_level_function(self) -> None:
        """The unpickled object is the same guarded function."""
        assert pickle.loads(pickle.dumps(load_model)) is load_model

    @pytest.mark.parametrize("name", ["from_pretrained", "from_config"])
    def test_classmethod(self, name: str) -> None:
        """A guarded classmethod comes back bound to the same class and still guards."""
        restored = pickle.loads(pickle.dumps(getattr(SubModel, name)))
        model = restored()
        assert type(model) is SubModel
        assert model.device == CPU

    def test_local_function_gives_a_clear_error(self) -> None:
        """A factory defined inside a function cannot be found by reference."""

        @device_guard
        def local() -> Plain:
            return Plain(cpu_session(), "cpu")

        with pytest.raises((pickle.PicklingError, AttributeError), match="local object"):
            pickle.dumps(local)

    def test_copy_returns_the_same_function(self) -> None:
        """copy.copy and copy.deepcopy go through the same reduction."""
        assert copy.deepcopy(load_model) is load_model
