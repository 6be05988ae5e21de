"""Where the guard finds a model's sessions: dotted paths, callables, discovery."""

from __future__ import annotations

import collections
import logging
import weakref
from collections.abc import Iterator
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
)
from onnx_device_guard._discovery import MAX_ITEMS, MAX_VALUES, discover_sessions

from .guarded_models import RunnableSession, runnable_cpu_session, runnable_cuda_session
from .logs import recorded_logs
from .sessions import cpu_session, cuda_session, real_session

CPU = torch.device("cpu")


class Infer:
    """rapidocr's shape: a helper object holding the session."""

    def __init__(self, session: Any) -> None:
        self.session = session


class Stage:
    def __init__(self, session: Any) -> None:
        self.infer = Infer(session)


class OCR:
    """Three sessions, each two levels below the model, and no device attribute."""

    def __init__(self, det: Any, cls: Any, rec: Any) -> None:
        self.text_det, self.text_cls, self.text_rec = Stage(det), Stage(cls), Stage(rec)


class Magika:
    """magika's shape: one session under a private name, no device attribute."""

    def __init__(self, session: Any) -> None:
        self._onnx_session = session
        self.config = {"threshold": 0.5, "labels": ["txt", "pdf"]}


@dataclass
class WithDevice:
    """A session somewhere below, and a device attribute to write."""

    holder: Any
    device: Any


class TestDottedPaths:
    """session_attr takes dotted paths, alone or in a tuple."""

    def test_one_dotted_path(self) -> None:
        """A path through helper objects reaches the session."""

        @device_guard(session_attr="holder.session")
        def load() -> WithDevice:
            return WithDevice(Infer(cpu_session()), "cuda")

        assert load().device == "cpu"

    def test_several_dotted_paths_must_all_accept_the_device(self) -> None:
        """With a tuple of paths every session must read the device."""
        paths = ("text_det.infer.session", "text_cls.infer.session", "text_rec.infer.session")

        @device_guard(session_attr=paths, device="cuda:0", resolution_mode="fail")
        def load(rec: Any) -> OCR:
            return OCR(cuda_session(0), cuda_session(0), rec)

        assert isinstance(load(cuda_session(0)), OCR)
        with pytest.raises(EnvironmentConfigurationError, match=r"'text_rec\.infer\.session'"):
            load(cpu_session())

    def test_missing_part_of_a_path_names_it(self) -> None:
        """A path that breaks on one model (while others exist) is an error naming it."""

        @device_guard(session_attr=("holder.session", "holder.other"))
        def load() -> WithDevice:
            return WithDevice(Infer(cpu_session()), "cuda")

        with pytest.raises(DeviceGuardError, match=r"'holder\.other'"):
            load()

    def test_no_path_present_names_them_all(self) -> None:
        """When none of the named paths exists the error lists them."""

        @device_guard(session_attr=("a.session", "b.session"))
        def load() -> WithDevice:
            return WithDevice(None, "cuda")

        with pytest.raises(DeviceGuardError, match=r"'a\.session', 'b\.session'"):
            load()

    @pytest.mark.parametrize("value", ["a..b", ".a", "a.", "a.1b", ("a.b", "c d")])
    def test_malformed_paths_fail_at_decoration(self, value: Any) -> None:
        """Each part of a dotted path must be an identifier."""
        with pytest.raises(ModelInputError, match="session_attr"):
            device_guard(session_attr=value)


class TestCallableSessionAttr:
    """session_attr can be a callable: model -> one session or an iterable of them."""

    def test_callable_returning_one_session(self) -> None:
        """The session the callable returns is aligned with."""

        @device_guard(session_attr=lambda model: model.holder.session)
        def load() -> WithDevice:
            return WithDevice(Infer(cpu_session()), "cuda")

        assert load().device == "cpu"

    def test_callable_returning_a_generator_of_sessions(self) -> None:
        """An iterable (here a generator) of sessions: all must read the device."""

        def sessions(model: OCR) -> Iterator[Any]:
            for stage in (model.text_det, model.text_cls, model.text_rec):
                yield stage.infer.session

        @device_guard(session_attr=sessions, device="cuda:0", resolution_mode="fail")
        def load(rec: Any) -> OCR:
            return OCR(cuda_session(0), cuda_session(0), rec)

        load(cuda_session(0))
        with pytest.raises(EnvironmentConfigurationError, match=r"sessions\(model\)\[2\]"):
            load(cpu_session())

    def test_callable_that_raises_is_a_guard_error(self) -> None:
        """The callable's own error is chained to a DeviceGuardError naming it."""

        def broken(model: object) -> object:
            raise LookupError("no such stage")

        @device_guard(session_attr=broken)
        def load() -> WithDevice:
            return WithDevice(None, "cuda")

        with pytest.raises(DeviceGuardError, match="broken raised LookupError") as info:
            load()
        assert isinstance(info.value.__cause__, LookupError)

    def test_callable_returning_nothing_is_no_session(self) -> None:
        """None or an empty iterable means no session: an error unless require_session=False."""

        @device_guard(session_attr=lambda model: [])
        def strict() -> WithDevice:
            return WithDevice(None, "cuda")

        @device_guard(session_attr=lambda model: None, require_session=False)
        def lenient() -> WithDevice:
            return WithDevice(None, "cuda")

        with pytest.raises(DeviceGuardError, match="found no session"):
            strict()
        assert lenient().device == "cuda"


class TestDiscovery:
    """Without session_attr and without _session/session, the guard searches the model."""

    @pytest.mark.parametrize("born", [True, False])
    def test_a_dead_weak_proxy_beside_the_session_is_passed_over(self, born: bool) -> None:
        """An attribute that cannot be looked at (a `weakref.proxy` to an owner gone) is no
        session. Before: its ReferenceError escaped from the guarded load."""

        class Owner:
            pass

        class Model:
            def __init__(self, session: Any) -> None:
                self.parent, self.session, self.device = weakref.proxy(Owner()), session, "cuda"

        made = real_session()  # before the call: found by the search

        @device_guard
        def load() -> Model:
            return Model(real_session(["CUDAExecutionProvider"]) if born else made)

        with pytest.warns(DeviceFallbackWarning):
            assert load().device == "cpu"

    def test_private_name_one_level_down(self) -> None:
        """magika's `_onnx_session` is found; the call's device argument is checked."""

        @device_guard(resolution_mode="fail")
        def load(device: str = "cuda") -> Magika:
            return Magika(runnable_cpu_session())

        assert isinstance(load("cpu"), Magika)
        with pytest.raises(EnvironmentConfigurationError, match="'_onnx_session'"):
            load()

    def test_a_name_mangled_slot_is_searched(self) -> None:
        """`__slots__ = ("__session",)` is stored as `_Model__session`: found under that name."""

        class Model:
            __slots__ = ("__session", "__weakref__", "device")

            def __init__(self) -> None:
                self.__session, self.device = runnable_cpu_session(), "cuda"

        @device_guard(resolution_mode="fail")
        def load() -> Model:
            return Model()

        with pytest.raises(EnvironmentConfigurationError, match="'_Model__session'"):
            load()

    def test_three_sessions_three_levels_down(self) -> None:
        """rapidocr's `text_det.infer.session` and its two siblings are all found."""
        model = OCR(runnable_cuda_session(0), runnable_cuda_session(0), runnable_cpu_session())
        found, _, _ = discover_sessions(model)
        assert [path for path, _ in found] == [
            "text_det.infer.session",
            "text_cls.infer.session",
            "text_rec.infer.session",
        ]

    def test_real_onnxruntime_session_is_found(self, real_cpu_session: Any) -> None:
        """A real InferenceSession nested in helpers is recognised."""

        @device_guard(device=lambda arguments: "cuda" if arguments["use_cuda"] else "cpu")
        def load(use_cuda: bool = False) -> OCR:
            return OCR(real_cpu_session, real_cpu_session, real_cpu_session)

        with recorded_logs() as records:
            load(use_cuda=True)
        [warning] = [record for record in records if record.levelno == logging.WARNING]
        assert "left as it is" in warning.getMessage()
        debug = [record.getMessage() for record in records if record.levelno == logging.DEBUG]
        assert any("'text_det.infer.session'" in message for message in debug)

    def test_through_lists_tuples_and_dicts(self) -> None:
        """Sessions inside containers are found, with their keys and indices in the path."""

        class Holder:
            def __init__(self) -> None:
                self.stages = [Infer(runnable_cpu_session())]
                self.heads = {"cls": runnable_cpu_session()}
                self.pair = (None, runnable_cpu_session())

        paths = [path for path, _ in discover_sessions(Holder())[0]]
        assert paths == ["heads['cls']", "pair[1]", "stages[0].session"]

    def test_through_deques_sets_and_weak_references(self) -> None:
        """A package's cache of sessions in a deque, a set or behind a weak reference is found."""
        kept = runnable_cpu_session()

        class Holder:
            def __init__(self) -> None:
                self.queue = collections.deque([None, runnable_cpu_session()])
                self.pool = {real_session()}  # hashable, as onnxruntime's sessions are
                self.frozen = frozenset([real_session()])
                self.cache = weakref.ref(kept)
                self.gone = weakref.ref(runnable_cpu_session())  # dead: nothing to find

        paths = sorted(path for path, _ in discover_sessions(Holder())[0])
        assert paths == ["cache()", "frozen[...]", "pool[...]", "queue[1]"]

    def test_a_cached_session_in_a_set_fails_in_fail_mode(self) -> None:
        """A session made before the load (a package's cache) is found by the search, so one
        that cannot read the device raises."""
        pool = {real_session()}

        class Cached:
            def __init__(self) -> None:
                self.pool, self.device = pool, "cuda"

        with pytest.raises(EnvironmentConfigurationError, match="asks for device 'cuda'"):
            device_guard(resolution_mode="fail")(Cached)()

    def test_slots_are_searched(self) -> None:
        """Objects with __slots__ instead of a __dict__ are searched too."""

        class Slotted:
            __slots__ = ("engine", "unset")

            def __init__(self) -> None:
                self.engine = runnable_cpu_session()

        assert [path for path, _ in discover_sessions(Slotted())[0]] == ["engine"]

    def test_torch_module_children_are_searched(self) -> None:
        """An nn.Module keeps submodules in `_modules`; sessions in them are found."""

        class Head(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.ort = runnable_cpu_session()

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.head = Head()

        assert [path for path, _ in discover_sessions(Net())[0]] == ["_modules['head'].ort"]

    def test_no_property_or_getattr_runs(self) -> None:
        """Properties and __getattr__ are never called while searching."""
        calls: list[str] = []

        class Lazy:
            def __init__(self) -> None:
                self.inner = Infer(runnable_cpu_session())

            @property
            def session_property(self) -> Any:
                calls.append("property")
                return runnable_cpu_session()

            def __getattr__(self, name: str) -> Any:
                calls.append(name)
                raise AttributeError(name)

        found, _, _ = discover_sessions(Lazy())
        assert [path for path, _ in found] == ["inner.session"]
        assert calls == []

    def test_deeper_than_three_levels_is_not_searched(self) -> None:
        """`a.b.c` is found, `a.b.c.d` is not."""
        deep = Infer(Infer(Infer(runnable_cpu_session())))  # session at .session.session.session
        assert [path for path, _ in discover_sessions(deep)[0]] == ["session.session.session"]
        deeper = Infer(deep)
        assert discover_sessions(deeper)[0] == []

    def test_cycles_end(self) -> None:
        """A model that refers to itself is searched once per object."""

        class Node:
            def __init__(self) -> None:
                self.parent: Any = self
                self.children = [self, self]
                self.session_holder = Infer(runnable_cpu_session())

        node = Node()
        found, _, _ = discover_sessions(node)
        assert [path for path, _ in found] == ["session_holder.session"]

    def test_same_session_twice_is_aligned_once(self) -> None:
        """A session referred to from two places is reported under its first path."""
        session = runnable_cpu_session()

        class Shared:
            def __init__(self) -> None:
                self.a = Infer(session)
                self.b = Infer(session)

        assert [path for path, _ in discover_sessions(Shared())[0]] == ["a.session"]

    def test_huge_containers_are_bounded(self) -> None:
        """Only the first MAX_ITEMS items of a container are looked at."""

        class Vocabulary:
            def __init__(self) -> None:
                self.words = {str(number): number for number in range(100_000)}
                self.late = [None] * MAX_ITEMS + [runnable_cpu_session()]
                self.engine = runnable_cpu_session()

        found, searched, unreached = discover_sessions(Vocabulary())
        assert [path for path, _ in found] == ["engine"]
        assert searched == ("words", "late", "engine")
        assert unreached == (f"late (past the first {MAX_ITEMS} items)",)  # said, not skipped

    def test_total_work_is_bounded(self) -> None:
        """A wide object graph stops after MAX_VALUES values, without error."""

        class Wide:
            def __init__(self, depth: int) -> None:
                if depth:
                    self.items = [Wide(depth - 1) for _ in range(40)]

        found, searched, unreached = discover_sessions(Wide(3))
        assert found == []
        assert len(searched) <= MAX_VALUES
        assert unreached  # what the limits left out is said

    def test_scalar_attributes_count_as_work(self) -> None:
        """Objects full of numbers and strings use up the budget too: no search runs unbounded."""

        class Settings:
            def __init__(self) -> None:
                self.__dict__.update({f"option_{number}": number for number in range(500)})

        class Wide:
            def __init__(self) -> None:
                self.parts = [Settings() for _ in range(MAX_ITEMS)]

        found, searched, unreached = discover_sessions(Wide())
        assert found == []
        assert len(searched) <= MAX_VALUES
        assert unreached == (f"the rest of the model (past {MAX_VALUES} values)",)

    def test_a_key_whose_repr_raises_is_named_by_its_place(self) -> None:
        """A dict key of a str subclass is shown as `[...]`: its own repr never runs."""

        class Key(str):
            def __repr__(self) -> str:
                raise RuntimeError("repr")

        class Holder:
            def __init__(self) -> None:
                self.sessions = {Key("det"): runnable_cpu_session()}

        assert [path for path, _ in discover_sessions(Holder())[0]] == ["sessions[...]"]

    def test_a_simple_namespace_is_searched(self) -> None:
        """types.SimpleNamespace keeps its attributes in a __dict__ too."""
        import types

        holder = types.SimpleNamespace(parts=types.SimpleNamespace(engine=runnable_cpu_session()))
        assert [path for path, _ in discover_sessions(holder)[0]] == ["parts.engine"]

    def test_containers_whose_methods_raise_are_read_safely(self) -> None:
        """List and dict subclasses are read with the base type's methods, never their own."""

        class Hostile(dict[str, Any]):
            def items(self) -> Any:
                raise KeyError("items")

            def __iter__(self) -> Any:
                raise RuntimeError("iter")

        class Holder:
            def __init__(self) -> None:
                self.heads = Hostile(main=runnable_cpu_session())

        assert [path for path, _ in discover_sessions(Holder())[0]] == ["heads['main']"]

    def test_session_without_run_is_not_discovered(self) -> None:
        """Discovery wants both get_providers and run; a get_providers-only object is skipped."""

        @dataclass
        class Holder:
            engine: Any

        assert discover_sessions(Holder(cpu_session()))[0] == []
        assert len(discover_sessions(Holder(RunnableSession(["CPUExecutionProvider"])))[0]) == 1

    def test_error_names_the_paths_searched(self) -> None:
        """When nothing is found the message lists the attribute paths searched."""

        class Empty:
            def __init__(self) -> None:
                self.config = {"a": 1}
                self.tokenizer = Infer(None)

        @device_guard(require_session=True)
        def load() -> Empty:
            return Empty()

        with pytest.raises(DeviceGuardError) as info:
            load()
        message = info.value.message
        assert "'_session', 'session', 'config', 'tokenizer', 'tokenizer.session'" in message
        assert "checked when they are born" in message

    def test_default_names_come_before_discovery(self) -> None:
        """A `session` attribute is used as it is, and nothing else is searched."""

        @dataclass
        class Both:
            session: Any
            other: Any
            device: Any

        @device_guard
        def load() -> Both:
            return Both(cuda_session(0), Infer(runnable_cpu_session()), "cuda:0")

        assert load().device == "cuda:0"


class TestRequireSession:
    """require_session=False lets results without a session through."""

    def test_torchscript_like_result_passes_unchanged(self) -> None:
        """A loader's non-ONNX path returns a model with no session: it is left alone."""

        class TorchScriptModel(torch.nn.Module):
            device = "cuda"

        @device_guard(require_session=False)
        def load(onnx: bool = False, device: str = "cuda") -> Any:
            return Magika(runnable_cpu_session()) if onnx else TorchScriptModel()

        model = load()
        assert isinstance(model, TorchScriptModel)
        assert model.device == "cuda"
        with recorded_logs() as records:
            load(onnx=True)
        assert [record.levelno for record in records].count(logging.WARNING) == 1

    def test_default_refuses_only_what_can_never_hold_one(self) -> None:
        """Without the option, None is an error; a model that may open sessions later is not."""

        @device_guard
        def load(value: Any) -> Any:
            return value

        with pytest.raises(DeviceGuardError, match="NoneType"):
            load(None)
        assert load(WithDevice(None, "cuda")).device == "cuda"
        with pytest.raises(DeviceGuardError, match="none of the session attributes"):
            device_guard(require_session=True)(load)(WithDevice(None, "cuda"))

    def test_session_attribute_holding_none(self) -> None:
        """`session = None` counts as no session when require_session is off."""

        @device_guard(require_session=False)
        def load() -> WithDevice:
            model = WithDevice(None, "cuda")
            model.session = None  # type: ignore[attr-defined]
            return model

        assert load().device == "cuda"

    @pytest.mark.parametrize("value", [0, "no"])
    def test_option_must_be_a_bool(self, value: Any) -> None:
        """require_session takes True, False or None (the default) only."""
        with pytest.raises(ModelInputError, match="require_session"):
            device_guard(require_session=value)


class TestDiscoveryLimits:
    """The bounds on discovery's work do not hide sessions in ordinary models."""

    def test_many_attributes_are_all_read(self) -> None:
        """An object with hundreds of attributes is read in full; only containers are cut."""

        class Wide:
            def __init__(self) -> None:
                for number in range(300):
                    setattr(self, f"field_{number}", number)
                self.engine = runnable_cpu_session()

        assert [path for path, _ in discover_sessions(Wide())[0]] == ["engine"]

    def test_stdlib_objects_are_not_searched(self) -> None:
        """Paths, loggers and enums are leaves: nothing below them is read."""
        import enum
        import pathlib

        class Color(enum.Enum):
            RED = 1

        class Holder:
            def __init__(self) -> None:
                self.path = pathlib.Path("model.onnx")
                self.log = logging.getLogger("holder")
                self.color = Color.RED
                self.session_holder = Infer(runnable_cpu_session())

        found, searched, _ = discover_sessions(Holder())
        assert [path for path, _ in found] == ["session_holder.session"]
        assert not any(path.startswith(("path.", "log.", "color.")) for path in searched)


class TestDiscoveryAcrossThreads:
    """Discovery keeps no per-call state outside the call."""

    def test_many_threads_find_the_same_sessions(self) -> None:
        """Eight threads discovering on fresh models of new classes all get the right paths."""
        from concurrent.futures import ThreadPoolExecutor

        def discover(number: int) -> list[str]:
            holder_type = type(f"Holder{number}", (), {})
            holder = holder_type()
            holder.stage = Infer(runnable_cpu_session())
            holder.heads = [runnable_cpu_session()]
            return [path for path, _ in discover_sessions(holder)[0]]

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(discover, range(400)))
        assert all(paths == ["heads[0]", "stage.session"] for paths in results)
