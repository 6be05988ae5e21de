"""Models that open their sessions at their first call, or are built without `__init__`."""

from __future__ import annotations

import asyncio
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from onnx_device_guard import (
    DeviceFallbackWarning,
    DeviceGuardError,
    EnvironmentConfigurationError,
    device_guard,
    patch,
)
from onnx_device_guard._lazy import waiting

from .guarded_models import RunnableSession, runnable_cpu_session, runnable_cuda_session
from .logs import recorded_logs


class Wrapper:
    """A package's own wrapper around a session, as OCR packages keep them."""

    def __init__(self, session: RunnableSession) -> None:
        self.session = session


class LazyEngine:
    """Opens one session at its first call; asks for the GPU through its own flag."""

    def __init__(self, use_gpu: bool = True) -> None:
        self.device = "cuda" if use_gpu else "cpu"
        self.engine: Wrapper | None = None
        self.calls = 0

    def __call__(self, image: int) -> int:
        self.calls += 1
        if self.engine is None:
            self.engine = Wrapper(runnable_cpu_session())
        return image + 1


class LazyPipeline:
    """Opens three sessions, each in a wrapper, at the first `run_ocr`; no device attribute."""

    def __init__(self, device: str = "cuda") -> None:
        self.stages: dict[str, Wrapper] = {}

    def run_ocr(self, image: int) -> int:
        if not self.stages:
            self.stages = {name: Wrapper(runnable_cpu_session()) for name in ("det", "cls", "rec")}
        return image

    def warm_up(self) -> None:
        """Opens nothing."""


class LazyStream:
    """Opens its session inside a generator method, as an embedding package does."""

    def __init__(self) -> None:
        self.device = "cuda"
        self.model: Wrapper | None = None

    def embed(self, texts: list[str]) -> Iterator[int]:
        for text in texts:
            if self.model is None:
                self.model = Wrapper(runnable_cpu_session())
            yield len(text)


class TestOpenedAtTheFirstCall:
    """With require_session=False the check comes when the sessions appear."""

    def test_checked_after_the_call_that_opened_it(self) -> None:
        """Fallback: nothing at construction, one report after the first call, device rewritten."""
        engine_class = device_guard(require_session=False)(type("Engine", (LazyEngine,), {}))
        with recorded_logs() as records:
            engine = engine_class()
        assert engine.device == "cuda"
        assert waiting(engine)
        assert [r for r in records if r.levelno >= 30] == []
        with pytest.warns(DeviceFallbackWarning) as caught:
            assert engine(1) == 2
        assert len(caught) == 1
        assert engine.device == "cpu"
        assert not waiting(engine)

    def test_fail_mode_raises_from_the_opening_call(self) -> None:
        """Fail mode: EnvironmentConfigurationError out of the call that opened the session."""
        engine_class = device_guard(require_session=False, resolution_mode="fail")(
            type("Engine", (LazyEngine,), {})
        )
        engine = engine_class()
        with pytest.raises(EnvironmentConfigurationError, match=r"engine\.session"):
            engine(1)
        assert engine.calls == 1, "the call ran: the check comes when it returns"

    def test_several_sessions_in_wrappers_and_the_calls_device(self) -> None:
        """Three sessions nested in wrappers, no device attribute: the call's device counts."""
        pipeline_class = device_guard(require_session=False, resolution_mode="fail")(
            type("Pipeline", (LazyPipeline,), {})
        )
        assert pipeline_class(device="cpu").run_ocr(1) == 1
        pipeline = pipeline_class()
        pipeline.warm_up()  # opens nothing: still waiting, nothing said
        assert waiting(pipeline)
        with pytest.raises(EnvironmentConfigurationError, match="the call's device argument"):
            pipeline.run_ocr(1)

    def test_generator_method_checked_at_its_first_item(self) -> None:
        """A session opened inside a generator is checked as soon as the first item is out."""
        stream_class = device_guard(require_session=False)(type("Stream", (LazyStream,), {}))
        stream = stream_class()
        items = stream.embed(["a", "bb"])
        with pytest.warns(DeviceFallbackWarning):
            assert next(items) == 1
        assert stream.device == "cpu"
        assert list(items) == [2]

    def test_async_method_checked_once_awaited(self) -> None:
        """An `async def` method that opens the session is checked when it has been awaited."""

        class AsyncEngine:
            def __init__(self) -> None:
                self.device = "cuda"
                self.session_holder: Wrapper | None = None

            async def predict(self) -> int:
                await asyncio.sleep(0)
                self.session_holder = Wrapper(runnable_cpu_session())
                return 1

        engine = device_guard(require_session=False)(AsyncEngine)()
        with pytest.warns(DeviceFallbackWarning):
            asyncio.run(engine.predict())
        assert engine.device == "cpu"

    def test_a_model_that_never_opens_a_session_stays_quiet(self) -> None:
        """No session ever: nothing reported, whatever is called."""
        pipeline_class = device_guard(require_session=False, resolution_mode="fail")(
            type("Pipeline", (LazyPipeline,), {})
        )
        pipeline = pipeline_class()
        with recorded_logs() as records:
            for _ in range(3):
                pipeline.warm_up()
        assert [r for r in records if r.levelno >= 30] == []

    def test_compatible_sessions_end_the_wait_quietly(self) -> None:
        """A session that reads the device: no report, and no more checks after."""

        class GPUEngine(LazyEngine):
            def __call__(self, image: int) -> int:
                if self.engine is None:
                    self.engine = Wrapper(runnable_cuda_session(0))
                return image

        engine = device_guard(require_session=False, resolution_mode="fail")(GPUEngine)()
        engine(1)
        assert engine.device == "cuda"
        assert not waiting(engine)

    def test_factory_result_waits_too(self) -> None:
        """A guarded factory's model without a session waits the same way."""

        @device_guard(require_session=False)
        def load() -> LazyEngine:
            engine: LazyEngine = type("Engine", (LazyEngine,), {})()
            return engine

        engine = load()
        with pytest.warns(DeviceFallbackWarning):
            engine(1)
        assert engine.device == "cpu"

    def test_without_the_option_the_error_says_what_to_do(self) -> None:
        """Default require_session=True: the no-session error names the option for later."""
        with pytest.raises(DeviceGuardError, match="require_session=False"):
            device_guard(type("Engine", (LazyEngine,), {}))()

    def test_patch_undo_gives_the_methods_back(self) -> None:
        """A patched class waiting for sessions gets its own methods back on undo()."""
        module = types.ModuleType("lazy_package")
        module.Engine = type("Engine", (LazyEngine,), {"__module__": "lazy_package"})  # type: ignore[attr-defined]
        sys.modules["lazy_package"] = module
        try:
            original = LazyEngine.__call__
            with patch("lazy_package:Engine", require_session=False):
                engine = module.Engine()
                assert module.Engine.__call__ is not original
            assert module.Engine.__call__ is original
            assert "__call__" not in vars(module.Engine)
            engine(1)  # no longer checked: says nothing
            assert engine.device == "cuda"
        finally:
            del sys.modules["lazy_package"]


class TestBuiltWithoutInit:
    """An alternative constructor that builds with `cls.__new__` and sets attributes itself."""

    class TTS:
        def __init__(self, path: str) -> None:
            self.sess = runnable_cpu_session()
            self.device = "cuda"

        @classmethod
        def from_session(cls, session: Any) -> Any:
            instance = cls.__new__(cls)
            instance.sess, instance.device = session, "cuda"
            return instance

    def test_patching_the_classmethod_too_covers_it(self) -> None:
        """The documented one-line fix: patch the classmethod as well as the class."""
        module = types.ModuleType("tts_package")
        module.TTS = type("TTS", (self.TTS,), {"__module__": "tts_package"})  # type: ignore[attr-defined]
        sys.modules["tts_package"] = module
        try:
            with (
                patch("tts_package:TTS", resolution_mode="fail"),
                patch("tts_package:TTS.from_session", resolution_mode="fail"),
            ):
                with pytest.raises(EnvironmentConfigurationError):
                    module.TTS("model.onnx")
                with pytest.raises(EnvironmentConfigurationError):
                    module.TTS.from_session(runnable_cpu_session())
        finally:
            del sys.modules["tts_package"]

    def test_new_returning_another_type_is_checked(self) -> None:
        """A `__new__` that returns another type skips `__init__`: the guard checks its result."""

        class Model:
            def __init__(self) -> None:
                self.session, self.device = runnable_cpu_session(), "cuda"

        @device_guard(resolution_mode="fail")
        class Factory:
            def __new__(cls) -> Any:
                return Model()

        with pytest.raises(EnvironmentConfigurationError):
            Factory()

    def test_metaclass_call_is_refused(self) -> None:
        """A metaclass `__call__` may change the instance after `__init__`: refused, clearly."""

        class Meta(type):
            def __call__(cls, *args: Any, **kwargs: Any) -> Any:
                instance = super().__call__(*args, **kwargs)
                instance.device = torch.device("cuda")
                return instance

        class Model(metaclass=Meta):
            def __init__(self) -> None:
                self.session, self.device = runnable_cpu_session(), "cpu"

        with pytest.raises(DeviceGuardError, match="Meta defines __call__"):
            device_guard(Model)
