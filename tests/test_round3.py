"""Regression tests for the third round of hostile inputs (issue 25), one per item."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import pytest
import torch

from onnx_device_guard import (
    EnvironmentConfigurationError,
    align_device_with_onnx_session,
    device_guard,
    device_policy,
)
from onnx_device_guard._messages import short_repr

from .logs import recorded_logs
from .sessions import FakeSession, cpu_session


class TestAnUnreadableFallback:
    def test_a_cuda_fallback_the_session_cannot_read_is_refused(self) -> None:
        """fallback_device='cuda:1' for a CPU-only session raises instead of being returned."""
        with pytest.raises(EnvironmentConfigurationError, match="'cuda:1' either"):
            align_device_with_onnx_session(cpu_session(), "cuda:0", fallback_device="cuda:1")

    def test_the_same_from_a_policy_and_for_a_guarded_model(self) -> None:
        """A device_policy's fallback is refused alike, and the model keeps no wrong device."""

        class Model:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda:0"

        with device_policy(fallback_device="cuda:1"):
            with pytest.raises(EnvironmentConfigurationError):
                align_device_with_onnx_session(cpu_session(), "cuda:0")
            with pytest.raises(EnvironmentConfigurationError):
                device_guard(Model)()


class TestScopesThatEndEarly:
    def test_an_async_call_method_runs_inside_the_scope(self) -> None:
        """@device_policy on an object whose __call__ is async def holds while it runs."""

        class Loader:
            async def __call__(self) -> torch.device:
                return align_device_with_onnx_session(cpu_session(), "cuda")

        scoped = device_policy(resolution_mode="fail")(Loader())
        with pytest.raises(EnvironmentConfigurationError):
            asyncio.run(scoped())


class TestWritesThatDidNotHappen:
    def test_a_setter_that_ignores_the_write_is_reported_as_such(self) -> None:
        """The report says what is true, and odg_applied is False."""

        class Stubborn:
            def __init__(self) -> None:
                self.session = cpu_session()

            @property
            def device(self) -> str:
                return "cuda"

            @device.setter
            def device(self, value: object) -> None:
                pass  # ignores the write

        with recorded_logs() as records:
            model = device_guard(Stubborn)()
        assert model.device == "cuda"
        (record,) = [r for r in records if r.levelno == logging.WARNING]
        assert "did not take the write" in record.getMessage()
        assert record.odg_applied is False  # type: ignore[attr-defined]


class TestClassesThatCannotBeBuilt:
    def test_a_partialmethod_init_is_guarded(self) -> None:
        """A guarded class whose __init__ is a functools.partialmethod constructs."""

        class Model:
            def _setup(self, device: str) -> None:
                self.session, self.device = cpu_session(), device

            __init__ = functools.partialmethod(_setup, "cuda")

        assert device_guard(Model)().device == "cpu"


class TestNothingKeptAlive:
    @pytest.mark.parametrize("slots", [False, True], ids=["plain", "slots"])
    def test_classes_made_per_load_are_collected(self, slots: bool) -> None:
        """Models waiting for sessions opened later, and __slots__ ones, keep no class alive."""
        import gc
        import weakref

        classes: list[weakref.ref[type]] = []

        def load() -> Any:
            namespace: dict[str, Any] = {"__slots__": ("device",)} if slots else {}
            cls = type("PerLoad", (), namespace)
            classes.append(weakref.ref(cls))
            model = cls()
            model.device = "cuda"
            return model

        guarded = device_guard(load)
        with recorded_logs():
            for _ in range(50):
                guarded()
        gc.collect()
        assert [reference for reference in classes if reference() is not None] == []


class TestTextFromOutside:
    def test_a_huge_value_is_cut_before_it_is_written(self) -> None:
        """A list of 200 one-megabyte names is cut while its repr is written."""
        text = short_repr(["x" * 1_000_000] * 200, 400)
        assert len(text) <= 400

    def test_control_characters_are_escaped(self, caplog: Any) -> None:
        """A session's own error text cannot forge a log line."""

        class Forging(FakeSession):
            def get_provider_options(self) -> Any:
                raise RuntimeError("bad\nCRITICAL:root:forged record")

        session = Forging(["CUDAExecutionProvider"])
        with recorded_logs() as records:
            align_device_with_onnx_session(session, "cuda:0")
        assert all("\n" not in record.getMessage() for record in records)
        assert any("bad\\nCRITICAL" in record.getMessage() for record in records)


class TestPatchesThatNeverApply:
    def test_a_misspelt_submodule_is_refused_at_once(self) -> None:
        """json.decodr does not exist in the imported json package: refused, closest named."""
        from onnx_device_guard import ModelInputError, patch

        with pytest.raises(ModelInputError, match=r"'json\.decodr'.*Did you mean 'decoder'"):
            patch("json.decodr:JSONDecoder")

    def test_a_missing_attribute_is_named_plainly_at_import(
        self, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """patch("pkg:lod") before the import: the import says what is missing, and the
        handle is no longer active."""
        import importlib
        import sys

        from onnx_device_guard import ModelInputError, patch

        (tmp_path / "round3_pkg").mkdir()
        (tmp_path / "round3_pkg" / "__init__.py").write_text("def load():\n    return None\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        handle = patch("round3_pkg:lod")
        try:
            with pytest.raises(ModelInputError, match=r"no attribute 'lod' \(did you mean 'load'"):
                importlib.import_module("round3_pkg")
            assert not handle.active
        finally:
            handle.undo()
            sys.modules.pop("round3_pkg", None)

    def test_a_patch_whose_import_failed_releases_the_hooks_once(
        self, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """undo() after a failed import does not release the session hooks a second time."""
        import importlib
        import sys

        from onnx_device_guard import ModelInputError, _births, patch

        (tmp_path / "round3_twice").mkdir()
        (tmp_path / "round3_twice" / "__init__.py").write_text("x = 1\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        users = _births._users
        handle = patch("round3_twice:load")
        with pytest.raises(ModelInputError):
            importlib.import_module("round3_twice")
        handle.undo()
        sys.modules.pop("round3_twice", None)
        assert _births._users == users


class TestTheWarningsLine:
    def test_an_async_factory_run_through_gather_points_at_the_users_file(self) -> None:
        """asyncio's own frames are skipped: the warning names this file, not asyncio's."""
        import warnings

        from onnx_device_guard import DeviceFallbackWarning

        class Model:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        @device_guard
        async def load() -> Model:
            return Model()

        async def main() -> None:
            await asyncio.gather(load())

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            asyncio.run(main())
        (warning,) = [w for w in caught if w.category is DeviceFallbackWarning]
        assert warning.filename == __file__
