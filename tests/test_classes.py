"""device_guard on a class: construction is guarded in place, once per instance."""

from __future__ import annotations

import copy
import inspect
import pickle
import threading
from collections.abc import Callable
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
from onnx_device_guard._guard import unguard_class

from .guarded_classes import GuardedModel, LateSessionModel
from .logs import recorded_logs
from .sessions import FakeSession, GPUSession, cpu_session, cuda_session

CPU = torch.device("cpu")


class CountingSession(FakeSession):
    """A CPU-only session that counts how often its providers are read."""

    def __init__(self) -> None:
        super().__init__(["CPUExecutionProvider"])
        self.reads = 0

    def get_providers(self) -> list[str]:
        self.reads += 1
        return super().get_providers()


def _fallbacks(records: list[Any]) -> list[Any]:
    return [record for record in records if record.levelname == "WARNING"]


def _constructed_aligned_once(construct: Callable[[], Any]) -> None:
    """`construct()` gives a model moved to the CPU, its providers read once, one fallback."""
    with recorded_logs() as records:
        model = construct()
    assert model.device == "cpu"
    assert model.session.reads == 1
    assert len(_fallbacks(records)) == 1


class TestGuardedClass:
    """The class object, its identity and its instances."""

    def test_instance_is_aligned_after_construction(self) -> None:
        """cuda:0 on a CPU-only session becomes cpu once __init__ has returned."""
        assert GuardedModel().device == CPU

    def test_returns_the_same_class(self) -> None:
        """device_guard(cls) modifies and returns the class itself, not a subclass or proxy."""

        class Model:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        assert device_guard(Model) is Model
        assert type(Model()) is Model

    def test_isinstance_and_issubclass_keep_working(self) -> None:
        """Instances are instances of the guarded class and of its bases."""
        model = LateSessionModel()
        assert isinstance(model, GuardedModel)
        assert issubclass(LateSessionModel, GuardedModel)

    def test_keeps_name_docstring_and_signature(self) -> None:
        """The wrapped __init__ keeps the signature that inspect and IDEs show."""
        assert GuardedModel.__doc__ is not None
        assert GuardedModel.__init__.__name__ == "__init__"
        assert list(inspect.signature(GuardedModel).parameters) == ["device"]

    def test_instances_and_class_pickle(self) -> None:
        """Pickling an instance and the class round-trips, by reference for the class."""
        model = GuardedModel()
        restored = pickle.loads(pickle.dumps(model))
        assert type(restored) is GuardedModel
        assert restored.device == CPU
        assert pickle.loads(pickle.dumps(GuardedModel)) is GuardedModel
        assert copy.deepcopy(model).device == CPU

    def test_a_string_device_stays_a_string(self) -> None:
        """A device stored as a string is written back as a string."""

        @device_guard
        class Model:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        assert Model().device == "cpu"

    def test_options_are_used(self) -> None:
        """device_guard(cls, ...) options apply: fail mode raises from the constructor."""

        @device_guard(resolution_mode="fail")
        class Model:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        with pytest.raises(EnvironmentConfigurationError, match="CPUExecutionProvider"):
            Model()

    def test_a_session_that_reads_the_device_changes_nothing(self) -> None:
        """A CUDA-capable session keeps the requested device."""

        @device_guard
        class Model:
            def __init__(self) -> None:
                self.session, self.device = cuda_session(0), torch.device("cuda:0")

        assert Model().device == torch.device("cuda:0")

    def test_missing_session_is_a_clear_error_when_required(self) -> None:
        """With require_session=True, an instance without a session raises, naming the class."""

        @device_guard(require_session=True)
        class NoSession:
            def __init__(self) -> None:
                self.device = "cuda"

        with pytest.raises(DeviceGuardError, match="NoSession"):
            NoSession()

    def test_an_exception_in_init_propagates_without_alignment(self) -> None:
        """A failing __init__ raises its own error, and the next construction still aligns."""

        @device_guard
        class Model:
            def __init__(self, fail: bool) -> None:
                if fail:
                    raise KeyError("boom")
                self.session, self.device = cpu_session(), "cuda"

        with pytest.raises(KeyError, match="boom"):
            Model(fail=True)
        assert Model(fail=False).device == "cpu"

    def test_class_without_its_own_init(self) -> None:
        """A class that inherits __init__ from an unguarded base is guarded too."""

        class Base:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        @device_guard
        class Model(Base):
            pass

        assert Model().device == "cpu"
        assert Base().device == "cuda"

    def test_class_without_init_still_rejects_arguments(self) -> None:
        """Guarding does not make a class without __init__ accept arguments silently."""

        @device_guard
        class Model:
            session = cpu_session()
            device = "cuda"

        with pytest.raises(TypeError, match="takes no arguments"):
            Model(1)  # type: ignore[call-arg]
        assert Model().device == "cpu"

    def test_a_class_whose_attributes_cannot_be_set_is_rejected(self) -> None:
        """Built-in classes raise ModelInputError naming the class."""
        with pytest.raises(ModelInputError, match="int"):
            device_guard(int)


class TestSubclasses:
    """Subclasses are aligned once, after their own outermost __init__."""

    def test_subclass_setting_its_session_after_super_init(self) -> None:
        """Alignment waits for the subclass's __init__, not the base's."""
        model = LateSessionModel()
        assert model.device == CPU
        assert model.extra == "set after super().__init__()"

    def test_the_device_a_subclass_hands_the_guarded_base_is_checked(self) -> None:
        """The guard reads the call its own class got, not the subclass's other words."""

        @device_guard(resolution_mode="fail")
        class Base:
            def __init__(self, path: str, device: str = "cpu") -> None:
                self.path, self.session = path, cpu_session()  # no device attribute

        class Child(Base):
            def __init__(self, use_gpu: bool = True) -> None:
                super().__init__("model.onnx", "cuda" if use_gpu else "cpu")

        with pytest.raises(EnvironmentConfigurationError, match="the call's device argument"):
            Child(use_gpu=True)
        assert Child(use_gpu=False).path == "model.onnx"

    def test_a_dataclass_subclass_hands_the_base_its_own_call(self) -> None:
        """@dataclass writes its __init__ after the guard: the base's call is still the base's."""

        @device_guard(resolution_mode="fail")
        class Base:
            def __init__(self, path: str, device: str = "cpu") -> None:
                self.path, self.session = path, cpu_session()

        @dataclass
        class Sub(Base):
            device: str = "cpu"
            path: str = "model.onnx"

            def __post_init__(self) -> None:
                super().__init__(self.path, self.device)

        assert Sub(device="cpu", path="cuda").path == "cuda"  # no 'cuda' asked: no error

    def test_subclass_defined_after_guarding_is_aligned_once(self) -> None:
        """A new subclass's __init__ is covered, and the providers are read once."""

        @device_guard
        class Base:
            def __init__(self) -> None:
                self.session: Any = None
                self.device = "cuda"

        class Sub(Base):
            def __init__(self) -> None:
                super().__init__()
                self.session = CountingSession()

        _constructed_aligned_once(Sub)

    def test_subclass_defined_before_guarding_is_covered(self) -> None:
        """Subclasses that exist when the base is guarded are wrapped too."""

        class Base:
            def __init__(self) -> None:
                self.session: Any = None
                self.device = "cuda"

        class Sub(Base):
            def __init__(self) -> None:
                super().__init__()
                self.session = cpu_session()

        device_guard(Base)
        assert Sub().device == "cpu"

    def test_own_init_subclass_still_runs(self) -> None:
        """A class's own __init_subclass__ keeps running, with its keyword arguments."""
        seen: list[tuple[str, object]] = []

        class Base:
            def __init_subclass__(cls, tag: object = None, **kwargs: Any) -> None:
                super().__init_subclass__(**kwargs)
                seen.append((cls.__name__, tag))

            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        device_guard(Base)

        class Sub(Base, tag="t"):
            pass

        assert seen == [("Sub", "t")]
        assert Sub().device == "cpu"

    def test_grandchild_is_aligned_once(self) -> None:
        """Three levels of __init__ calling super() align the instance once."""

        @device_guard
        class A:
            def __init__(self) -> None:
                self.session: Any = None
                self.device = "cuda"

        class B(A):
            def __init__(self) -> None:
                super().__init__()

        class C(B):
            def __init__(self) -> None:
                super().__init__()
                self.session = CountingSession()

        assert C().session.reads == 1

    def test_a_subclass_guarded_with_its_own_options_uses_them(self) -> None:
        """The nearest guarded class in the MRO decides; the base keeps its own options."""

        @device_guard
        class Base:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        @device_guard(resolution_mode="fail")
        class Strict(Base):
            def __init__(self) -> None:
                super().__init__()

        assert Base().device == "cpu"
        with pytest.raises(EnvironmentConfigurationError):
            Strict()

    def test_recursive_construction_aligns_each_instance(self) -> None:
        """An __init__ that builds another instance aligns both, each once."""

        @device_guard
        class Node:
            def __init__(self, depth: int) -> None:
                self.child = Node(depth - 1) if depth else None
                self.session, self.device = CountingSession(), "cuda"

        root = Node(2)
        assert root.device == "cpu"
        assert root.child is not None
        assert root.child.device == "cpu"
        assert root.session.reads == root.child.session.reads == 1

    def test_threads_construct_independently(self) -> None:
        """Instances built at once in several threads are each aligned once."""
        start = threading.Barrier(8)
        models: list[Any] = []

        @device_guard
        class Slow:
            def __init__(self) -> None:
                start.wait()
                self.session, self.device = CountingSession(), "cuda"

        def build() -> None:
            models.append(Slow())

        threads = [threading.Thread(target=build) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [(m.device, m.session.reads) for m in models] == [("cpu", 1)] * 8


class TestTwiceAndUndo:
    """Guarding again, and restoring a class exactly."""

    def test_guarding_twice_aligns_once(self) -> None:
        """A second device_guard with the same options changes nothing."""

        class Model:
            def __init__(self) -> None:
                self.session, self.device = CountingSession(), "cuda"

        device_guard(Model)
        init = Model.__dict__["__init__"]
        device_guard(Model)
        assert Model.__dict__["__init__"] is init
        _constructed_aligned_once(Model)

    def test_guarding_again_with_other_options_raises(self) -> None:
        """Other options are not silently ignored: ModelInputError names the class."""

        @device_guard
        class Model:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        with pytest.raises(ModelInputError, match="Model is already guarded"):
            device_guard(resolution_mode="fail")(Model)

    def test_unguard_restores_the_class_exactly(self) -> None:
        """unguard_class puts back __init__ and __init_subclass__, and drops its marker."""

        class Model:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        class Sub(Model):
            def __init__(self) -> None:
                super().__init__()

        before = dict(vars(Model))
        sub_before = dict(vars(Sub))
        device_guard(Model)
        assert vars(Model) != before
        unguard_class(Model)
        assert dict(vars(Model)) == before
        assert dict(vars(Sub)) == sub_before
        assert Sub().device == "cuda"

    def test_unguard_removes_what_the_class_did_not_have(self) -> None:
        """A class without its own __init__ has none again after unguarding."""

        class Base:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        class Model(Base):
            pass

        device_guard(Model)
        unguard_class(Model)
        assert "__init__" not in vars(Model)
        assert "__init_subclass__" not in vars(Model)

        class Later(Model):
            def __init__(self) -> None:
                super().__init__()

        assert Later().device == "cuda"

    def test_unguard_of_an_unguarded_class_does_nothing(self) -> None:
        """unguard_class on a plain class leaves it alone."""

        class Plain:
            pass

        before = dict(vars(Plain))
        unguard_class(Plain)
        assert dict(vars(Plain)) == before


class TestOtherClassShapes:
    """Dataclasses, slots and other ways classes are built."""

    def test_guard_above_dataclass(self) -> None:
        """@device_guard over @dataclass guards the dataclass's generated __init__."""

        @device_guard
        @dataclass
        class Model:
            session: Any
            device: str = "cuda"

        assert Model(cpu_session()).device == "cpu"

    def test_guard_below_dataclass_is_a_clear_error(self) -> None:
        """@dataclass over @device_guard would leave fields unset: the constructor says so."""

        @dataclass
        @device_guard
        class Model:
            session: Any = None
            device: str = "cuda"

        with pytest.raises(DeviceGuardError, match="Put @device_guard above @dataclass"):
            Model()

    def test_dataclass_without_init_is_guarded(self) -> None:
        """A dataclass(init=False) with its own __init__ is guarded like any class."""

        @device_guard
        @dataclass(init=False)
        class Model:
            session: Any
            device: str

            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        assert Model().device == "cpu"

    def test_a_session_replaced_in_the_subclass_is_the_one_checked(self) -> None:
        """The base's session, born in the load and let go of by the subclass, is not the
        model's. Before: the load held it, so the two "ran on different GPUs" and the model
        fell back to the CPU although its only session runs on the GPU it asked for."""

        @device_guard
        class Recognizer:
            def __init__(self, device: str = "cuda:0") -> None:
                self.session, self.device = GPUSession(device_id=0), device

        class Tuned(Recognizer):
            def __init__(self) -> None:
                super().__init__("cuda:1")
                self.session = GPUSession(device_id=1)

        assert Tuned().device == "cuda:1"

    def test_a_metaclass_with_its_own_call_is_refused(self) -> None:
        """Its `__call__` may change the instance after `__init__`: the guard could be wrong."""

        class Registering(type):
            def __call__(cls, *args: Any, **kwargs: Any) -> Any:
                return super().__call__(*args, **kwargs)

        class Model(metaclass=Registering):
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        with pytest.raises(ModelInputError, match=r"metaclass .*Registering defines __call__"):
            device_guard(Model)
        assert Model().device == "cuda"  # left as it was

    def test_slots(self) -> None:
        """A class with __slots__ (no instance __dict__) is guarded."""

        @device_guard
        class Model:
            __slots__ = ("device", "session")

            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        assert Model().device == "cpu"


class TestCustomNew:
    """A class whose __new__ (its own or a base's) runs before __init__, or instead of it."""

    @pytest.mark.parametrize("how", ["positionally", "by its default"])
    def test_a_base_with_new_keeps_the_signature_and_the_device_argument(self, how: str) -> None:
        """The __new__ wrapper shows the class's signature: `device` is read however given."""

        class Base:
            def __new__(cls, *args: Any, **kwargs: Any) -> Any:
                return super().__new__(cls)

        class Embedder(Base):
            def __init__(self, path: str, device: str = "cuda") -> None:
                self.session = cpu_session()

            @property
            def device(self) -> torch.device:  # read-only, and already on the CPU
                return CPU

        before = inspect.signature(Embedder)
        device_guard(resolution_mode="fail")(Embedder)
        assert inspect.signature(Embedder) == before
        with pytest.raises(EnvironmentConfigurationError, match="'cuda'"):
            Embedder("model.onnx", "cuda") if how == "positionally" else Embedder("model.onnx")

    @pytest.mark.parametrize("how", ["positionally", "by keyword"])
    def test_an_own_new_beside_init_leaves_the_call_to_init(self, how: str) -> None:
        """`inspect.signature` shows an own `__new__(*args, **kwargs)`; `__init__` got the call."""

        @device_guard(resolution_mode="fail")
        class Embedder:
            def __new__(cls, *args: Any, **kwargs: Any) -> Any:
                return super().__new__(cls)

            def __init__(self, path: str, device: str = "cpu") -> None:
                self.session, self.device = cpu_session(), "cpu"

        with pytest.raises(EnvironmentConfigurationError, match="'cuda'"):
            Embedder("model.onnx", "cuda") if how == "positionally" else Embedder(
                "m", device="cuda"
            )
        assert Embedder("model.onnx").device == "cpu"

    def test_an_own_new_beside_init_gives_a_device_callable_the_init_arguments(self) -> None:
        @device_guard(device=lambda call: "cuda" if call["use_cuda"] else "cpu", warn=False)
        class Tagger:
            def __new__(cls, *args: Any, **kwargs: Any) -> Any:
                return super().__new__(cls)

            def __init__(self, use_cuda: bool = False) -> None:
                self.session = cpu_session()

        Tagger()
        with recorded_logs() as records:
            Tagger(True)
        assert [vars(record)["odg_requested_device"] for record in records] == ["cuda"]

    def test_new_returning_another_type_is_aligned(self) -> None:
        """No __init__ of the class runs, so the object __new__ returned is aligned there."""

        class Loaded:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        @device_guard(warn=False)
        class Loader:
            def __new__(cls) -> Any:
                return Loaded()

        model = Loader()
        assert type(model) is Loaded
        assert model.device == "cpu"

    def test_new_returning_its_own_type_aligns_once(self) -> None:
        """__init__ still runs, and aligns; the __new__ wrapper leaves the instance to it."""

        @device_guard
        class Model:
            def __new__(cls) -> Any:
                return super().__new__(cls)

            def __init__(self) -> None:
                self.session, self.device = CountingSession(), "cuda"

        _constructed_aligned_once(Model)

    def test_an_inherited_new_is_covered(self) -> None:
        """A base's __new__ that returns another type is wrapped on the guarded class."""

        class Loaded:
            def __init__(self, device: str) -> None:
                self.session, self.device = cpu_session(), device

        class Base:
            def __new__(cls, device: str = "cuda") -> Any:
                return Loaded(device)

        @device_guard(warn=False)
        class Model(Base):
            pass

        assert Model().device == "cpu"
        assert Model(device="cpu").device == "cpu"

    def test_unguard_restores_new(self) -> None:
        """unguard_class puts the class's own __new__ back, or removes the one it added."""

        def own_new(cls: type) -> Any:
            return object.__new__(cls)

        class Own:
            __new__ = staticmethod(own_new)

            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        class Inherits(Own):
            pass

        device_guard(Own)
        device_guard(Inherits)
        assert Own.__dict__["__new__"].__func__ is not own_new
        assert "__new__" in Inherits.__dict__
        unguard_class(Inherits)
        unguard_class(Own)
        assert Own.__dict__["__new__"].__func__ is own_new
        assert "__new__" not in Inherits.__dict__
        assert Own().device == "cuda", "no guard is left to align it"
