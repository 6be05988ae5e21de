"""patch(): guarding factories in small packages written to disk and imported."""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import itertools
import pickle
import re
import sys
import textwrap
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from onnx_device_guard import (
    EnvironmentConfigurationError,
    ModelInputError,
    device_guard,
    device_policy,
    patch,
)
from onnx_device_guard._guard import unguard_class

from .logs import recorded_logs

_names = itertools.count()

MODELS = """
class CPUSession:
    def get_providers(self):
        return ["CPUExecutionProvider"]

    def run(self, outputs, feeds):
        return [feeds]


class Model:
    def __init__(self, device="cuda"):
        self.session = CPUSession()
        self.device = device


def load(device="cuda"):
    return Model(device)


class Loader:
    @classmethod
    def from_pretrained(cls, device="cuda"):
        return Model(device)

    @staticmethod
    def build(device="cuda"):
        return Model(device)

    def open(self, device="cuda"):
        return Model(device)


class SubLoader(Loader):
    pass


class Pipeline:
    def __init__(self, device="cuda"):
        self.session = CPUSession()
        self.device = device

NOT_A_FACTORY = 3
"""

LAZY_INIT = """
import importlib
import sys
import types


class LazyModule(types.ModuleType):
    def __getattr__(self, name):
        if name == "Loader":
            return importlib.import_module(".models", __name__).Loader
        raise AttributeError(name)


lazy = LazyModule(__name__)
lazy.__path__, lazy.__spec__ = __path__, __spec__
sys.modules[__name__] = lazy
"""

INIT = """
from {name}.models import load, Pipeline
from {name} import models
"""

APP = """
from {name}.models import load as load_model
from {name}.models import load
"""

LATE = """
from {name}.models import load as late_load
"""


@dataclass
class FakePackage:
    """A package on sys.path: `<name>/__init__.py`, `models.py`, `app.py` and `late.py`."""

    name: str

    def module(self, suffix: str = "") -> types.ModuleType:
        """Import the package or one of its modules (`suffix` like `.models`)."""
        return importlib.import_module(self.name + suffix)

    def target(self, spec: str) -> str:
        """A target in this package: `target('.models:load')`."""
        return self.name + spec

    def aliases(self) -> list[Any]:
        """Every name the loaded modules give `models.load`."""
        return [
            self.module().load,
            self.module(".models").load,
            self.module(".app").load_model,
            self.module(".app").load,
        ]


@pytest.fixture
def fake_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePackage]:
    """A fresh, not yet imported package of loaders; removed from sys.modules afterwards."""
    name = f"fake_loaders_{next(_names)}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text(textwrap.dedent(INIT.format(name=name)))
    (root / "models.py").write_text(MODELS)
    (root / "app.py").write_text(APP.format(name=name))
    (root / "late.py").write_text(LATE.format(name=name))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield FakePackage(name)
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


@pytest.fixture
def loaded_package(fake_package: FakePackage) -> FakePackage:
    """The fake package, with its package, `models` and `app` modules imported."""
    fake_package.module(".app")
    return fake_package


@pytest.fixture
def undo_later() -> Iterator[Callable[[Any], Any]]:
    """Register handles to undo at the end of the test, even when it fails."""
    handles: list[Any] = []

    def later(handle: Any) -> Any:
        handles.append(handle)
        return handle

    yield later
    for handle in reversed(handles):
        handle.undo()


def _warnings(records: list[Any]) -> list[Any]:
    return [record for record in records if record.levelname == "WARNING"]


class TestFunction:
    """A module-level function and its aliases."""

    def test_every_alias_is_guarded(self, loaded_package: FakePackage) -> None:
        """The defining module and every `from x import f` copy call the guarded loader."""
        original = loaded_package.module(".models").load
        with patch(loaded_package.target(".models:load")):
            aliases = loaded_package.aliases()
            assert all(alias is aliases[0] for alias in aliases)
            assert aliases[0] is not original
            with recorded_logs() as records:
                assert [alias().device for alias in aliases] == ["cpu"] * 4
            assert len(_warnings(records)) == 4

    def test_undo_restores_every_alias(self, loaded_package: FakePackage) -> None:
        """After undo() every alias is the original function object again."""
        original = loaded_package.module(".models").load
        handle = patch(loaded_package.target(".models:load"))
        handle.undo()
        assert all(alias is original for alias in loaded_package.aliases())
        assert original().device == "cuda"

    def test_a_copy_taken_while_patched_passes_calls_through_after_undo(
        self, loaded_package: FakePackage
    ) -> None:
        """A registry that kept the patched loader, or a method bound meanwhile, calls the
        loader as it is once the patch is undone. Before: it went on guarding, in "fail" mode."""
        models = loaded_package.module(".models")
        with (
            patch(loaded_package.target(".models:load"), resolution_mode="fail"),
            patch(loaded_package.target(".models:Loader.open"), resolution_mode="fail"),
        ):
            kept = [models.load, models.Loader().open]
            for call in kept:
                with pytest.raises(EnvironmentConfigurationError):
                    call()
        assert [call().device for call in kept] == ["cuda", "cuda"]

    def test_a_patched_loader_copies_as_itself(self, loaded_package: FakePackage) -> None:
        """`copy.copy` and `copy.deepcopy` of a patched function or method (bound, class or
        static) give it back. Before: a method's raised wrapt's NotImplementedError."""
        models = loaded_package.module(".models")
        names = [".models:load", ".models:Loader.from_pretrained", ".models:Loader.build"]
        with contextlib.ExitStack() as patches:
            for name in [*names, ".models:Loader.open"]:
                patches.enter_context(patch(loaded_package.target(name)))
            loader = models.Loader
            for patched in (models.load, loader.from_pretrained, loader.build, loader().open):
                assert copy.copy(patched) is patched
                assert copy.deepcopy(patched) is patched

    def test_undo_leaves_a_rebound_name_alone(self, loaded_package: FakePackage) -> None:
        """A name the user rebound while patched keeps the user's value."""
        app = loaded_package.module(".app")

        def mine() -> None:
            return None

        with patch(loaded_package.target(".models:load")):
            setattr(app, "load", mine)  # noqa: B010 - a module attribute mypy cannot see
        assert app.load is mine
        assert app.load_model is loaded_package.module(".models").load

    def test_modules_imported_while_patched_are_restored(self, loaded_package: FakePackage) -> None:
        """A module imported after patch() gets the guarded loader, and the original back."""
        original = loaded_package.module(".models").load
        with patch(loaded_package.target(".models:load")):
            late = loaded_package.module(".late")
            assert late.late_load().device == "cpu"
        assert late.late_load is original

    def test_a_target_through_the_package_is_patched_where_it_is_held(
        self, loaded_package: FakePackage
    ) -> None:
        """'pkg:load' patches the function object, so the defining module sees it too."""
        with patch(loaded_package.target(":load")):
            assert loaded_package.module(".models").load().device == "cpu"

    def test_options_are_forwarded(self, loaded_package: FakePackage) -> None:
        """device_guard's options apply: fail mode raises out of the loader."""
        with (
            patch(loaded_package.target(".models:load"), resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="CPUExecutionProvider"),
        ):
            loaded_package.module(".app").load_model()

    def test_pickles_by_reference(self, loaded_package: FakePackage) -> None:
        """The patched function pickles, with pickle and cloudpickle, to the patched one."""
        with patch(loaded_package.target(".models:load")):
            guarded = loaded_package.module(".models").load
            assert pickle.loads(pickle.dumps(guarded)) is guarded
            assert cloudpickle.loads(cloudpickle.dumps(guarded)) is guarded
            model = pickle.loads(pickle.dumps(guarded()))
            assert model.device == "cpu"

    def test_a_missing_target_says_so_on_unpickling(
        self, loaded_package: FakePackage, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Where the target is not found, unpickling names it (before: wrapt's own error)."""
        target = loaded_package.target(".models:load")
        with patch(target):
            shipped = pickle.dumps(loaded_package.module(".models").load)
        monkeypatch.delattr(loaded_package.module(".models"), "load")
        with pytest.raises(ModelInputError, match=rf"patched as '{target}'.*no such target"):
            pickle.loads(shipped)
        unimported = types.ModuleType("no_such_loaders")  # made here: no import finds it
        unimported.load = lambda: None  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "no_such_loaders", unimported)
        with patch("no_such_loaders:load"):
            shipped = pickle.dumps(unimported.load)
        monkeypatch.delitem(sys.modules, "no_such_loaders")
        with pytest.raises(ModelInputError, match=r"'no_such_loaders:load'.*no such target"):
            pickle.loads(shipped)

    def test_unreadable_modules_are_skipped(
        self, loaded_package: FakePackage, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A module whose attribute access raises (a lazy module, say) does not break patch()."""

        class Hostile(types.ModuleType):
            def __getattribute__(self, name: str) -> Any:
                raise RuntimeError(f"lazy module: {name}")

            def __getattr__(self, name: str) -> Any:
                raise RuntimeError(f"lazy module: {name}")

        monkeypatch.setitem(sys.modules, "hostile_lazy_module", Hostile("hostile_lazy_module"))
        monkeypatch.setitem(sys.modules, "not_a_module", object())
        with patch(loaded_package.target(".models:load")):
            assert loaded_package.module(".app").load().device == "cpu"


class TestMethods:
    """Methods are patched on their class, so subclasses see them."""

    @pytest.mark.parametrize("method", ["from_pretrained", "build"])
    def test_class_and_static_methods(self, loaded_package: FakePackage, method: str) -> None:
        """Class and static methods are guarded on the class and on its subclasses."""
        models = loaded_package.module(".models")
        raw = vars(models.Loader)[method]
        with patch(loaded_package.target(f".models:Loader.{method}")):
            assert getattr(models.Loader, method)().device == "cpu"
            assert getattr(models.SubLoader, method)().device == "cpu"
        assert vars(models.Loader)[method] is raw
        assert getattr(models.Loader, method)().device == "cuda"

    def test_instance_method(self, loaded_package: FakePackage) -> None:
        """An instance method is guarded for every instance, and restored."""
        models = loaded_package.module(".models")
        raw = vars(models.Loader)["open"]
        with patch(loaded_package.target(".models:Loader.open")):
            assert models.Loader().open().device == "cpu"
            assert models.SubLoader().open().device == "cpu"
        assert vars(models.Loader)["open"] is raw

    @pytest.mark.parametrize(
        "dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"]
    )
    @pytest.mark.parametrize(
        ("method", "on_instance"),
        [("from_pretrained", False), ("build", False), ("build", True), ("open", True)],
        ids=["class method", "static method", "static method of an instance", "bound method"],
    )
    def test_a_patched_method_arrives_guarded(
        self, loaded_package: FakePackage, method: str, on_instance: bool, dumps: Any
    ) -> None:
        """Pickled (by Ray's and Dask's cloudpickle too), it still guards; unpatched, it does."""
        models = loaded_package.module(".models")
        owner = models.Loader() if on_instance else models.Loader
        with patch(loaded_package.target(f".models:Loader.{method}")):
            shipped = dumps(getattr(owner, method))
            assert pickle.loads(shipped)().device == "cpu"
        # Where the target is not patched (a worker), it arrives patched with its options.
        assert pickle.loads(shipped)().device == "cpu"
        assert getattr(owner, method)().device == "cuda"

    @pytest.mark.parametrize("method", ["build", "from_pretrained"])
    def test_a_static_or_class_method_travels_without_the_instance(
        self, loaded_package: FakePackage, method: str
    ) -> None:
        """Taken from an instance that cannot be pickled, it pickles all the same, guarded."""
        models = loaded_package.module(".models")
        loader = models.Loader()
        loader.lock = threading.Lock()  # what a real loader may hold: no pickle takes it
        with patch(loaded_package.target(f".models:Loader.{method}")):
            shipped = cloudpickle.dumps(getattr(loader, method))
        assert pickle.loads(shipped)().device == "cpu"

    @pytest.mark.parametrize(
        "call",
        [
            lambda module: module.Loader.from_pretrained("cuda"),
            lambda module: module.Loader().from_pretrained("cuda"),
            lambda module: module.Loader.build("cuda"),
            lambda module: module.Loader().build("cuda"),
            lambda module: module.Loader().open("cuda"),
            lambda module: module.Loader.open(module.Loader(), "cuda"),
            lambda module: module.load("cuda"),
        ],
        ids=[
            "class method",
            "class method of an instance",
            "static method",
            "static of an instance",
            "bound",
            "on the class",
            "function",
        ],
    )
    def test_a_positional_device_is_read_in_every_shape(
        self, monkeypatch: pytest.MonkeyPatch, call: Callable[[Any], object]
    ) -> None:
        """The device passed by position is the call's, past `self` or `cls` where bound."""
        module = types.ModuleType("positional_loaders")
        exec(MODELS.replace("        self.device = device\n", ""), module.__dict__)  # no attribute
        monkeypatch.setitem(sys.modules, module.__name__, module)
        targets = ("Loader.from_pretrained", "Loader.build", "Loader.open", "load")
        handles = [patch(f"{module.__name__}:{t}", resolution_mode="fail") for t in targets]
        try:
            with pytest.raises(EnvironmentConfigurationError, match="call's device argument"):
                call(module)
        finally:
            for handle in handles:
                handle.undo()

    def test_inherited_method_is_patched_on_the_named_class(
        self, loaded_package: FakePackage
    ) -> None:
        """'SubLoader.build' guards the subclass only, and undo removes what it added."""
        models = loaded_package.module(".models")
        with patch(loaded_package.target(".models:SubLoader.build")):
            assert models.SubLoader.build().device == "cpu"
            assert models.Loader.build().device == "cuda"
        assert "build" not in vars(models.SubLoader)


class TestClass:
    """A class target is guarded in place."""

    def test_class_is_guarded_in_place_and_restored(self, loaded_package: FakePackage) -> None:
        """Every name of the class sees the guard; undo restores its namespace exactly."""
        models = loaded_package.module(".models")
        before = dict(vars(models.Pipeline))
        with patch(loaded_package.target(".models:Pipeline")):
            assert loaded_package.module().Pipeline is models.Pipeline
            assert models.Pipeline().device == "cpu"
        assert dict(vars(models.Pipeline)) == before
        assert models.Pipeline().device == "cuda"

    def test_a_class_held_by_a_class_is_guarded_in_place(self) -> None:
        """`module:Outer.Inner` is guarded as a class: the same object, its subclasses too."""
        module: Any = types.ModuleType(f"nested_{next(_names)}")
        exec(MODELS, vars(module))  # the test module's own source
        module.Outer = type("Outer", (), {"Inner": module.Pipeline})
        sys.modules[module.__name__] = module
        try:
            inner = module.Outer.Inner
            with patch(f"{module.__name__}:Outer.Inner"):
                assert module.Outer.Inner is inner
                assert type("Sub", (inner,), {})().device == "cpu"
            assert module.Outer.Inner().device == "cuda"
        finally:
            del sys.modules[module.__name__]

    def test_a_class_guarded_in_its_source_stays_guarded_after_undo(
        self, loaded_package: FakePackage
    ) -> None:
        """A patch on a class device_guard already guards adds nothing, and undo removes nothing."""
        models = loaded_package.module(".models")
        device_guard(models.Pipeline)
        guarded = dict(vars(models.Pipeline))
        try:
            with patch(loaded_package.target(".models:Pipeline")):
                assert dict(vars(models.Pipeline)) == guarded
            assert dict(vars(models.Pipeline)) == guarded
            with device_policy(warn=False):
                assert models.Pipeline().device == "cpu"
        finally:
            unguard_class(models.Pipeline)

    def test_a_subclass_guarded_in_source_stays_guarded_after_the_base_patch_ends(
        self, loaded_package: FakePackage
    ) -> None:
        """Undoing a base class's patch leaves the __init__ wrapper a guarded subclass needs."""
        models = loaded_package.module(".models")
        handle = patch(loaded_package.target(".models:Pipeline"))

        @device_guard(fallback_device="meta")
        class Mine(models.Pipeline):  # type: ignore[name-defined,misc]
            def __init__(self, device: str = "cuda") -> None:
                super().__init__(device)

        handle.undo()
        with device_policy(warn=False):
            assert Mine().device == "meta"
            assert models.Pipeline().device == "cuda"
        unguard_class(Mine)
        assert "__init__" in vars(Mine)
        assert Mine().device == "cuda"

    def test_a_patched_subclass_stays_patched_after_its_base_patch_ends(
        self, loaded_package: FakePackage
    ) -> None:
        models = loaded_package.module(".models")

        class Sub(models.Pipeline):  # type: ignore[name-defined,misc]
            def __init__(self, device: str = "cuda") -> None:
                super().__init__(device)

        models.Sub = Sub  # type: ignore[attr-defined]
        base = patch(loaded_package.target(".models:Pipeline"))
        with patch(loaded_package.target(".models:Sub"), fallback_device="meta"):
            base.undo()
            with device_policy(warn=False):
                assert Sub().device == "meta"
        assert Sub().device == "cuda"

    def test_device_guard_after_a_patch_outlives_the_patch(
        self, loaded_package: FakePackage
    ) -> None:
        """device_guard on a class a patch guards (same options) keeps the guard after undo."""
        models = loaded_package.module(".models")
        with patch(loaded_package.target(".models:Pipeline")):
            device_guard(models.Pipeline)
        try:
            with device_policy(warn=False):
                assert models.Pipeline().device == "cpu"
        finally:
            unguard_class(models.Pipeline)


class TestNotYetImported:
    """Targets whose module is imported after patch()."""

    def test_patched_on_import(self, fake_package: FakePackage) -> None:
        """The module is patched as it is imported, aliases made by that import included."""
        assert fake_package.name not in sys.modules
        with patch(fake_package.target(".models:load")):
            app = fake_package.module(".app")
            assert app.load_model().device == "cpu"
            assert fake_package.module().load is app.load
        assert app.load().device == "cuda"

    def test_undo_before_import_cancels(self, fake_package: FakePackage) -> None:
        """A patch undone before its module is imported never applies."""
        patch(fake_package.target(".models:load")).undo()
        assert fake_package.module(".app").load().device == "cuda"

    def test_missing_target_raises_at_import(self, fake_package: FakePackage) -> None:
        """A target that turns out missing raises ModelInputError out of the import."""
        handle = patch(fake_package.target(".models:lod"))
        try:
            with pytest.raises(ModelInputError, match="'lod'"):
                fake_package.module(".models")
            assert fake_package.target(".models") not in sys.modules
        finally:
            handle.undo()

    def test_two_names_patched_before_import_wrap_once(self, fake_package: FakePackage) -> None:
        """Two names of one loader, both patched before the import, share one wrapper."""
        with patch(fake_package.target(".models:load")), patch(fake_package.target(":load")):
            package = fake_package.module()
            guarded = package.models.load
            assert package.load is guarded
            assert guarded.__wrapped__ is not guarded
            assert not hasattr(guarded.__wrapped__, "__wrapped__")
        assert package.load is package.models.load

    def test_two_names_patched_before_import_hold_until_both_are_undone(
        self, fake_package: FakePackage
    ) -> None:
        """The second name's handle is on the first name's patch, as when both were imported:
        undoing the first leaves the loader guarded until the second is undone too.

        Before: the second name kept a patch of its own that never applied, so undoing the
        first left the loader unguarded behind a handle that said it was active.
        """
        first = patch(fake_package.target(".models:load"))
        second = patch(fake_package.target(":load"))
        package = fake_package.module()
        original = package.models.load.__wrapped__
        first.undo()
        assert second.active
        assert package.load().device == "cpu"
        second.undo()
        assert package.load is original
        assert package.models.load is original
        assert package.load().device == "cuda"

    def test_two_names_with_other_options_before_import(self, fake_package: FakePackage) -> None:
        """Other options under a second name raise out of the import."""
        first = patch(fake_package.target(".models:load"))
        second = patch(fake_package.target(":load"), resolution_mode="fail")
        try:
            with pytest.raises(ModelInputError, match="already patched as"):
                fake_package.module()
        finally:
            second.undo()
            first.undo()

    def test_a_class_target_on_import(self, fake_package: FakePackage) -> None:
        """A class is guarded in place when its module is imported."""
        with patch(fake_package.target(".models:Pipeline")):
            assert fake_package.module(".models").Pipeline().device == "cpu"


class TestReload:
    """``importlib.reload`` of a patched module: the patch is applied again, never lost silently.

    Issue 17, break 5: the reloaded module held its plain loader again while
    the handle still said ``active``.
    """

    def test_a_function_stays_guarded(self, loaded_package: FakePackage) -> None:
        """The reloaded function is guarded; undo puts back the reloaded original."""
        models = loaded_package.module(".models")
        app = loaded_package.module(".app")
        first = models.load
        with patch(loaded_package.target(".models:load")) as handle:
            importlib.reload(models)
            reloaded = models.load.__wrapped__
            assert reloaded is not first
            assert models.load().device == "cpu"
            assert app.load_model().device == "cpu"  # the copy made before the reload
            assert handle.active
        assert models.load is reloaded
        assert app.load_model is first
        assert models.load().device == "cuda"

    def test_a_class_stays_guarded(self, loaded_package: FakePackage) -> None:
        """The reloaded class is guarded in place; undo restores both classes."""
        models = loaded_package.module(".models")
        first = models.Pipeline
        with patch(loaded_package.target(".models:Pipeline")) as handle:
            importlib.reload(models)
            assert models.Pipeline is not first
            assert models.Pipeline().device == "cpu"
            assert first().device == "cpu"
            assert handle.active
        assert models.Pipeline().device == "cuda"
        assert first().device == "cuda"
        assert not any(name.startswith("__onnx_device_guard") for name in vars(models.Pipeline))

    def test_a_method_stays_guarded(self, loaded_package: FakePackage) -> None:
        """A method target is wrapped again on the reloaded class."""
        models = loaded_package.module(".models")
        with patch(loaded_package.target(".models:Loader.from_pretrained")):
            importlib.reload(models)
            assert models.Loader.from_pretrained().device == "cpu"
            assert models.SubLoader.from_pretrained().device == "cpu"
        assert models.Loader.from_pretrained().device == "cuda"

    def test_reloading_a_package_that_reexports_wraps_nothing_twice(
        self, loaded_package: FakePackage
    ) -> None:
        """``pkg:load`` held through the package: the reload re-imports the same wrapper."""
        package = loaded_package.module()
        with patch(loaded_package.target(":load")):
            guarded = package.load
            importlib.reload(package)
            assert package.load is guarded
            assert not hasattr(guarded.__wrapped__, "__wrapped__")
        assert package.load().device == "cuda"

    def test_imported_again_it_is_patched_again(self, loaded_package: FakePackage) -> None:
        """A module deleted from sys.modules and imported again gets the patch too."""
        name = loaded_package.target(".models")
        with patch(name + ":load"):
            del sys.modules[name]
            again = importlib.import_module(name)
            assert again.load().device == "cpu"
        assert again.load().device == "cuda"

    def test_imported_again_without_the_target_says_the_patch_is_lost(
        self, loaded_package: FakePackage, tmp_path: Path
    ) -> None:
        """The import raises ModelInputError naming the target; the handle is no longer active.

        (A reload keeps the names the new code no longer defines: it re-runs the
        module in its old namespace, where the guarded loader still is.)
        """
        name = loaded_package.target(".models")
        handle = patch(name + ":load")
        try:
            source = tmp_path / loaded_package.name / "models.py"
            source.write_text(MODELS.replace("def load(", "def renamed_load("))
            importlib.invalidate_caches()
            del sys.modules[name]
            with pytest.raises(ModelInputError, match="'load'"):
                importlib.import_module(name)
            assert not handle.active
            assert "(lost)" in repr(handle)
        finally:
            handle.undo()

    def test_other_modules_are_left_to_the_other_finders(self) -> None:
        """The finder answers only for modules with a patch in place."""
        from onnx_device_guard._patch import _ImportFinder

        assert any(isinstance(finder, _ImportFinder) for finder in sys.meta_path)
        assert _ImportFinder().find_spec("json") is None
        assert importlib.reload(importlib.import_module("json")).__loader__ is not None

    def test_a_lazy_package_is_patched_as_it_is_imported(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A package that puts a lazy module in its place (Hugging Face's _LazyModule).

        Before, the patch looked in the module object that ran the code, which
        holds none of the lazy names, and failed the import: "no attribute".
        """
        name = f"lazy_loaders_{next(_names)}"
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(LAZY_INIT)
        (tmp_path / name / "models.py").write_text(MODELS)
        monkeypatch.syspath_prepend(str(tmp_path))
        try:
            with patch(f"{name}:Loader.build", warn=False):
                package = importlib.import_module(name)
                assert type(package).__name__ == "LazyModule"
                assert package.Loader.build().device == "cpu"
        finally:
            for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[module]

    def test_a_loader_without_exec_module_is_said_not_patched(self) -> None:
        """A loader from before Python 3.4 runs nothing after it: a WARNING says so."""

        class LegacyLoader:
            def load_module(self, fullname: str) -> types.ModuleType:
                module = sys.modules[fullname] = types.ModuleType(fullname)
                module.load = lambda: None  # type: ignore[attr-defined]
                return module

        class LegacyFinder:
            def find_spec(self, fullname: str, path: object, target: object = None) -> Any:
                if fullname != "legacy_loaded":
                    return None
                return importlib.machinery.ModuleSpec(fullname, LegacyLoader())  # type: ignore[arg-type]

        finder = LegacyFinder()
        sys.meta_path.append(finder)
        try:
            warns = pytest.warns(ImportWarning)  # Python's own, for load_module
            with patch("legacy_loaded:load"), recorded_logs() as records, warns:
                importlib.import_module("legacy_loaded")
            [record] = [r for r in records if "exec_module" in r.getMessage()]
            assert "Import legacy_loaded before calling patch()" in record.getMessage()
        finally:
            sys.meta_path.remove(finder)
            sys.modules.pop("legacy_loaded", None)


class TestIdempotence:
    """Patching a target again wraps nothing twice."""

    def test_same_options_share_one_patch(self, loaded_package: FakePackage) -> None:
        """A second patch() installs nothing new; the patch stays until both are undone."""
        models = loaded_package.module(".models")
        original = models.load
        first = patch(loaded_package.target(".models:load"))
        guarded = models.load
        second = patch(loaded_package.target(".models:load"))
        assert models.load is guarded
        with recorded_logs() as records:
            models.load()
        assert len(_warnings(records)) == 1
        first.undo()
        assert models.load is guarded
        second.undo()
        assert models.load is original

    def test_another_name_for_the_same_target_shares_the_patch(
        self, loaded_package: FakePackage
    ) -> None:
        """'pkg:load' after 'pkg.models:load' is the same patch, not a second wrapper."""
        models = loaded_package.module(".models")
        with patch(loaded_package.target(".models:load")):
            guarded = models.load
            with patch(loaded_package.target(":load")):
                assert models.load is guarded
            assert models.load is guarded

    def test_other_options_are_refused(
        self, loaded_package: FakePackage, undo_later: Callable[[Any], Any]
    ) -> None:
        """Patching again with other options raises instead of ignoring them."""
        undo_later(patch(loaded_package.target(".models:load")))
        with pytest.raises(ModelInputError, match="already patched with other options"):
            patch(loaded_package.target(".models:load"), resolution_mode="fail")

    def test_concurrent_patches_install_one_wrapper(self, loaded_package: FakePackage) -> None:
        """Threads patching one target at once share one wrapper, removed by the last undo."""
        models = loaded_package.module(".models")
        original = models.load
        start = threading.Barrier(8)
        handles: list[Any] = []

        def patch_it() -> None:
            start.wait()
            handles.append(patch(loaded_package.target(".models:load")))

        threads = [threading.Thread(target=patch_it) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(handles) == 8
        assert models.load is not original
        assert models.load.__wrapped__ is original
        for handle in handles:
            handle.undo()
        assert models.load is original

    def test_undo_twice_is_harmless(self, loaded_package: FakePackage) -> None:
        """A handle undone twice does not undo another handle's patch."""
        models = loaded_package.module(".models")
        first = patch(loaded_package.target(".models:load"))
        second = patch(loaded_package.target(".models:load"))
        first.undo()
        first.undo()
        assert first.active is False
        assert second.active is True
        assert models.load().device == "cpu"
        second.undo()


class TestErrors:
    """Bad targets and options fail at once, naming the bad value."""

    @pytest.mark.parametrize(
        "target", ["pkg.module", "pkg.module:", ":load", "a:b:c", "pkg module:f", "pkg:f()", ""]
    )
    def test_malformed_target(self, target: str) -> None:
        """A malformed target string is a ModelInputError quoting it."""
        with pytest.raises(ModelInputError, match=re.escape(f"got {target!r}")):
            patch(target)

    def test_a_target_that_is_not_a_string(self) -> None:
        """A function object instead of a target string is refused."""
        with pytest.raises(ModelInputError, match=re.escape("package.module:function")):
            patch(print)  # type: ignore[arg-type]

    @pytest.mark.parametrize("spec", [".models:lod", ".models:Loader.nope", ".models:Nope.build"])
    def test_missing_target_in_a_loaded_module(
        self, loaded_package: FakePackage, spec: str
    ) -> None:
        """A target missing from a loaded module is a ModelInputError naming it, at once."""
        with pytest.raises(ModelInputError, match=spec.rsplit(".", 1)[-1].split(":")[-1]):
            patch(loaded_package.target(spec))

    @pytest.mark.parametrize(
        "target",
        ["math:sqrt", "builtins:len", "collections:OrderedDict.fromkeys", "builtins:str.upper"],
    )
    def test_builtins_and_c_functions_are_refused(self, target: str) -> None:
        """A builtin is the same object in every module: patching it would reach them all."""
        import math

        sqrt = math.sqrt
        with pytest.raises(ModelInputError, match="written in C"):
            patch(target)
        assert math.sqrt is sqrt
        assert sys.modules["math"].sqrt is sqrt

    def test_a_python_callable_object_is_patched(self, loaded_package: FakePackage) -> None:
        """An instance of a Python class with ``__call__`` is Python code: it can be patched."""
        models = loaded_package.module(".models")

        class CallableLoader:
            def __call__(self, device: str = "cuda") -> Any:
                return models.Model(device)

        models.callable_load = CallableLoader()  # type: ignore[attr-defined]
        with patch(loaded_package.target(".models:callable_load")):
            assert models.callable_load().device == "cpu"
        assert models.callable_load().device == "cuda"

    def test_a_cached_loader_is_patched(self, loaded_package: FakePackage) -> None:
        """``functools.lru_cache`` makes a C object, but around Python code: it can be patched."""
        models = loaded_package.module(".models")
        models.cached_load = functools.lru_cache(models.load)  # type: ignore[attr-defined]
        with patch(loaded_package.target(".models:cached_load")):
            assert models.cached_load().device == "cpu"
        models.cached_load.cache_clear()
        assert models.cached_load().device == "cuda"

    def test_a_package_that_is_not_installed_is_refused_at_once(self) -> None:
        """Waiting for ``nosuchpkg_xyz`` would wait forever: the error names it."""
        from onnx_device_guard._patch import _installed

        with pytest.raises(ModelInputError, match="no module named 'nosuchpkg_xyz'"):
            patch("nosuchpkg_xyz:load")
        assert "nosuchpkg_xyz:load" not in _installed

    def test_a_missing_submodule_of_an_imported_package_is_refused(
        self, fake_package: FakePackage
    ) -> None:
        """The imported package shows the submodule does not exist: refused at once (issue 25)."""
        fake_package.module()
        with pytest.raises(ModelInputError, match="no module named"):
            patch(fake_package.target(".later:load"))

    def test_a_submodule_of_a_package_not_imported_yet_waits(
        self, fake_package: FakePackage
    ) -> None:
        """Nothing is imported to check: the patch waits for the submodule's import."""
        with patch(fake_package.target(".late:late_load")) as handle:
            assert handle.active
            assert fake_package.name not in sys.modules
            assert fake_package.module(".late").late_load().device == "cpu"
        assert not handle.active

    def test_a_missing_submodule_of_a_package_not_imported_yet_is_refused(
        self, fake_package: FakePackage
    ) -> None:
        """Found by path, importing nothing: a misspelt submodule would have waited forever.

        Before: only the first part not imported was looked for, so `.later` (there is no
        such module) made a patch that stayed active and never patched anything.
        """
        with pytest.raises(ModelInputError, match=r"\.later' is installed.*Did you mean 'late'"):
            patch(fake_package.target(".later:load"))
        with pytest.raises(ModelInputError, match=r"\.models\.deeper' is installed"):
            patch(fake_package.target(".models.deeper:load"))  # a module holds no submodule
        assert fake_package.name not in sys.modules

    def test_a_namespace_that_extends_its_path_is_left_to_its_import(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """pkgutil's `extend_path` finds submodules in other folders only when it is imported:
        the patch waits. Before the path check was bounded so, it refused `ns.two`."""
        for folder, sub in (("a", "one"), ("b", "two")):
            package = tmp_path / folder / "ns_extended"
            (package / sub).mkdir(parents=True)
            (package / "__init__.py").write_text(
                "from pkgutil import extend_path\n__path__ = extend_path(__path__, __name__)\n"
            )
            (package / sub / "__init__.py").write_text("def load():\n    return None\n")
        monkeypatch.syspath_prepend(str(tmp_path / "b"))
        monkeypatch.syspath_prepend(str(tmp_path / "a"))
        with patch("ns_extended.two:load") as handle:
            assert handle.active
        for name in [m for m in sys.modules if m.startswith("ns_extended")]:
            del sys.modules[name]

    def test_a_misspelt_top_level_package_gets_a_hint(self) -> None:
        with pytest.raises(ModelInputError, match="Did you mean 'onnxruntime'"):
            patch("onnxruntim:InferenceSession")

    def test_not_a_factory(self, loaded_package: FakePackage) -> None:
        """A target that is neither function, class nor method is refused."""
        with pytest.raises(ModelInputError, match="int, not a function"):
            patch(loaded_package.target(".models:NOT_A_FACTORY"))

    def test_unknown_option(self, loaded_package: FakePackage) -> None:
        """An option device_guard does not take is refused as Python refuses it, by name."""
        with pytest.raises(TypeError, match="resolution"):
            patch(loaded_package.target(".models:load"), resolution="fail")  # type: ignore[call-arg]

    def test_bad_option_value(self, loaded_package: FakePackage) -> None:
        """An option value device_guard refuses is refused by patch() too."""
        with pytest.raises(ModelInputError, match="'sometimes'"):
            patch(loaded_package.target(".models:load"), resolution_mode="sometimes")  # type: ignore[arg-type]
        assert loaded_package.module(".models").load().device == "cuda"
