"""A model follows its sessions' provider changes after load (`_following`).

Sessions here are real onnxruntime sessions on the tiny model (each test that
hooks one creates its own) and fakes that change providers the way
onnxruntime's `run()` does on an `EPFail`: print, `self.set_providers(...)`,
retry once. The callbacks are the two a guard uses: one that re-aligns and
writes the new device (`"fallback"`), one whose alignment raises (`"fail"`).
"""

from __future__ import annotations

import gc
import logging
import pickle
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from onnx_device_guard import (
    DeviceGuardError,
    EnvironmentConfigurationError,
    align_device_with_onnx_session,
    device_policy,
)
from onnx_device_guard._follow import (
    OnChange,
    Providers,
    describe_change,
    is_followed,
    stop_following,
    watch,
)

from .logs import recorded_logs, warning_texts
from .sessions import ProvidersOnlySession

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
AZURE = "AzureExecutionProvider"
GPU_PROVIDERS = (CUDA, CPU)

logger = logging.getLogger("onnx_device_guard")


class Follower:
    """Watches made under one origin and key, as one patch's are; `close()` stops them."""

    def __init__(self) -> None:
        self.cancelled = False

    def watch(self, model: object, sessions: Any, on_change: OnChange) -> int:
        return watch(model, sessions, on_change, key=id(self), origin=self)

    def close(self) -> None:
        self.cancelled = True
        stop_following(self)

    def __enter__(self) -> Follower:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class EPFail(Exception):  # noqa: N818 - named after onnxruntime's own
    """Stands in for onnxruntime's `EPFail`, raised when an execution provider fails."""


class FallingBackSession:
    """A session whose GPU provider fails at run time, with onnxruntime's fallback path.

    `run()` mirrors `onnxruntime.InferenceSession.run`: on an `EPFail` it
    prints two lines, calls `self.set_providers(self._fallback_providers)`,
    disables the fallback and retries once.
    """

    def __init__(self, providers: tuple[str, ...] = GPU_PROVIDERS, failures: int = 1) -> None:
        self._providers = list(providers)
        self._fallback_providers = [CPU]
        self._enable_fallback = True
        self.failures_left = failures
        self.set_calls: list[tuple[Any, ...]] = []

    def get_providers(self) -> list[str]:
        return self._providers

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {name: {"device_id": "0"} if name == CUDA else {} for name in self._providers}

    def set_providers(self, providers: Any = None, provider_options: Any = None) -> None:
        self.set_calls.append((providers, provider_options))
        self._providers = list(providers) if providers else [CPU]

    def disable_fallback(self) -> None:
        self._enable_fallback = False

    def _run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self.failures_left and CUDA in self._providers:
            self.failures_left -= 1
            raise EPFail("CUDA failure 700: an illegal memory access was encountered")
        return [feed["x"] + 1]

    def run(self, output_names: Any, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return self._run(feed)
        except EPFail as error:
            if self._enable_fallback:
                print(f"EP Error: {error!s} using {self._providers}")
                print(f"Falling back to {self._fallback_providers} and retrying.")
                self.set_providers(self._fallback_providers)
                self.disable_fallback()
                return self._run(feed)
            raise


class PicklableSession(FallingBackSession):
    """A session wrapper that pickles (as some keep a model path and re-create the session)."""


class Model:
    """A model as a factory returns it: sessions and a device."""

    def __init__(self, device: Any = "cuda:0", **sessions: Any) -> None:
        self.device = torch.device(device)
        for name, session in sessions.items():
            setattr(self, name, session)


class Calls:
    """A callback that records what it was called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, str, Providers, Providers]] = []
        self.lock = threading.Lock()

    def __call__(self, model: object, name: str, old: Providers, new: Providers) -> None:
        with self.lock:
            self.calls.append((model, name, old, new))


def realigning(mode: str, fallback_device: str = "cpu") -> OnChange:
    """The guard's callback: align again with the options fixed at load, write the device back.

    The core logs its usual fallback WARNING; the follower names the change in it.
    """

    def on_change(model: Any, name: str, old: Providers, new: Providers) -> None:
        model.device = align_device_with_onnx_session(
            getattr(model, name),
            model.device,
            "fail" if mode == "fail" else "fallback",
            fallback_device,
        )

    return on_change


@pytest.fixture
def follower() -> Iterator[Follower]:
    """A follower that is closed after the test, whatever the test did."""
    with Follower() as follower:
        yield follower


@pytest.fixture
def new_real_session(tiny_model_path: Path) -> Callable[..., Any]:
    """Makes a fresh real CPU session on the tiny model (tests hook their own)."""
    import onnxruntime

    def make(providers: list[str] | None = None) -> Any:
        return onnxruntime.InferenceSession(str(tiny_model_path), providers=providers or [CPU])

    return make


X = np.zeros((1, 4), dtype=np.float32)


class TestHook:
    def test_installed_once_per_session(self, follower: Follower) -> None:
        """Models and followers watching one session share one hook on it."""
        session = FallingBackSession()
        other = Follower()
        models = [Model(s=session) for _ in range(3)]
        try:
            assert follower.watch(models[0], [("s", session)], Calls()) == 1
            hook = vars(session)["set_providers"]
            assert follower.watch(models[1], [("s", session)], Calls()) == 1
            assert other.watch(models[2], [("s", session)], Calls()) == 1
            assert vars(session)["set_providers"] is hook
            assert is_followed(session)
        finally:
            other.close()

    def test_close_removes_the_instance_attribute(self) -> None:
        """Closing the last follower leaves no instance attribute: the class's method again."""
        session = FallingBackSession()
        model = Model(s=session)
        follower = Follower()
        follower.watch(model, [("s", session)], Calls())
        follower.close()
        assert "set_providers" not in vars(session)
        assert session.set_providers.__func__ is FallingBackSession.set_providers  # type: ignore[attr-defined]
        assert not is_followed(session)

    def test_close_puts_back_an_instance_wrapper_it_found(self) -> None:
        """A set_providers the session already had on the instance is put back, the same object."""
        session = FallingBackSession()
        seen: list[object] = []

        def theirs(providers: Any = None, provider_options: Any = None) -> None:
            seen.append(providers)
            FallingBackSession.set_providers(session, providers, provider_options)

        session.set_providers = theirs  # type: ignore[method-assign]
        model, calls = Model(s=session), Calls()
        with Follower() as follower:
            follower.watch(model, [("s", session)], calls)
            session.set_providers([CPU])
        assert seen == [[CPU]]
        assert len(calls.calls) == 1
        assert vars(session)["set_providers"] is theirs

    def test_close_keeps_the_hook_another_follower_uses(self) -> None:
        """Closing one follower leaves the hook for the other; closing both removes it."""
        session = FallingBackSession()
        first, second = Follower(), Follower()
        kept, dropped = Calls(), Calls()
        model_a, model_b = Model(s=session), Model(s=session)
        first.watch(model_a, [("s", session)], dropped)
        second.watch(model_b, [("s", session)], kept)
        first.close()
        session.set_providers([CPU])
        assert dropped.calls == []
        assert [call[0] for call in kept.calls] == [model_b]
        second.close()
        assert "set_providers" not in vars(session)

    def test_a_wrapper_put_over_the_hook_is_left_in_place(self) -> None:
        """close() does not remove a later wrapper; the inert hook under it calls no one."""
        session = FallingBackSession()
        model, calls = Model(s=session), Calls()
        follower = Follower()
        follower.watch(model, [("s", session)], calls)
        ours = session.set_providers

        def later_wrapper(providers: Any = None, provider_options: Any = None) -> None:
            ours(providers, provider_options)

        session.set_providers = later_wrapper  # type: ignore[method-assign]
        follower.close()
        assert vars(session)["set_providers"] is later_wrapper
        session.set_providers([CPU])
        assert session.get_providers() == [CPU]
        assert calls.calls == []

    def test_a_pickled_session_comes_back_unfollowed(self, follower: Follower) -> None:
        """Pickling a followed session works; the copy's set_providers changes only the copy."""
        session = PicklableSession()
        model, calls = Model(s=session), Calls()
        follower.watch(model, [("s", session)], calls)
        copy = pickle.loads(pickle.dumps(session))
        assert not is_followed(copy)
        copy.set_providers([CPU])
        assert copy.get_providers() == [CPU]
        assert session.get_providers() == list(GPU_PROVIDERS)
        assert calls.calls == []

    def test_the_session_dict_is_never_read(self, follower: Follower) -> None:
        """Hooking and unhooking go through attribute access, never the session's __dict__.

        On CPython 3.11+ reading an instance's __dict__ turns its inline
        attribute values into a dict for good, which slows every attribute
        lookup in its run(): following must not cost that.
        """

        class DictShySession(FallingBackSession):
            @property
            def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
                raise AssertionError("the session's __dict__ was read")

        session = DictShySession()
        model, calls = Model(s=session), Calls()
        assert follower.watch(model, [("s", session)], calls) == 1
        assert is_followed(session)
        session.set_providers([CPU])
        assert len(calls.calls) == 1
        follower.close()
        assert not is_followed(session)
        assert session.set_providers.__func__ is FallingBackSession.set_providers  # type: ignore[attr-defined]

    def test_closed_follower_follows_nothing(self) -> None:
        """watch() after close() (a load racing a patch's undo) installs nothing."""
        follower = Follower()
        follower.close()
        session = FallingBackSession()
        assert follower.watch(Model(s=session), [("s", session)], Calls()) == 0
        assert "set_providers" not in vars(session)

    def test_watching_twice_calls_back_once(self, follower: Follower) -> None:
        """The same model and session watched twice by one follower get one callback."""
        session = FallingBackSession()
        model, calls = Model(s=session), Calls()
        follower.watch(model, [("s", session)], calls)
        follower.watch(model, [("s", session)], calls)
        session.set_providers([CPU])
        assert len(calls.calls) == 1

    def test_run_is_not_wrapped(self, follower: Follower, new_real_session: Any) -> None:
        """Only set_providers is hooked: run() stays the class's method, costing nothing more."""
        session = new_real_session()
        model = Model(s=session)
        follower.watch(model, [("s", session)], Calls())
        assert set(vars(session)) & {"run", "run_with_iobinding", "run_with_ort_values"} == set()
        assert session.run.__func__ is type(session).run

    def test_hook_calls_a_class_method_patched_later(self, follower: Follower) -> None:
        """The hook looks the class's set_providers up at each call, so class patches apply."""

        class Session(FallingBackSession):
            pass

        session = Session()
        model = Model(s=session)
        follower.watch(model, [("s", session)], Calls())
        seen: list[object] = []

        def patched(self: Any, providers: Any = None, provider_options: Any = None) -> None:
            seen.append(providers)
            FallingBackSession.set_providers(self, providers, provider_options)

        Session.set_providers = patched  # type: ignore[method-assign]
        session.set_providers([CPU])
        assert seen == [[CPU]]


class TestChange:
    def test_callback_gets_model_name_and_providers(self, follower: Follower) -> None:
        """A change calls back with the model, the session's name and old and new providers."""
        session = FallingBackSession()
        model, calls = Model(s=session), Calls()
        follower.watch(model, [("s", session)], calls)
        session.set_providers([CPU])
        assert calls.calls == [(model, "s", GPU_PROVIDERS, (CPU,))]

    def test_no_callback_without_a_change(self, follower: Follower) -> None:
        """set_providers that leaves providers and options as they were calls no one."""
        session = FallingBackSession(providers=(CPU,))
        calls = Calls()
        model = Model(s=session)
        follower.watch(model, [("s", session)], calls)
        session.set_providers([CPU])
        assert session.set_calls == [([CPU], None)]
        assert calls.calls == []

    def test_an_options_change_counts(self, follower: Follower) -> None:
        """The same providers on another device_id is a change too."""

        class MovableSession(FallingBackSession):
            device_id = "0"

            def get_provider_options(self) -> dict[str, dict[str, str]]:
                return {CUDA: {"device_id": self.device_id}, CPU: {}}

            def set_providers(self, providers: Any = None, provider_options: Any = None) -> None:
                self.device_id = str(provider_options[0]["device_id"])

        session = MovableSession()
        calls = Calls()
        model = Model(s=session)
        follower.watch(model, [("s", session)], calls)
        session.set_providers([CUDA, CPU], [{"device_id": 1}, {}])
        assert [(call[2], call[3]) for call in calls.calls] == [(GPU_PROVIDERS, GPU_PROVIDERS)]

    def test_arguments_and_result_pass_through(self, follower: Follower) -> None:
        """The hook passes positional and keyword arguments on and returns the result."""

        class Session(FallingBackSession):
            def set_providers(self, providers: Any = None, provider_options: Any = None) -> Any:
                super().set_providers(providers, provider_options)
                return "result"

        session = Session()
        model = Model(s=session)
        follower.watch(model, [("s", session)], Calls())
        assert session.set_providers([CPU], provider_options=[{}]) == "result"
        assert session.set_calls == [([CPU], [{}])]

    def test_a_failing_set_providers_calls_no_one(self, follower: Follower) -> None:
        """An error from set_providers itself propagates, unchanged, with no callback."""

        class Session(FallingBackSession):
            def set_providers(self, providers: Any = None, provider_options: Any = None) -> None:
                raise ValueError("Unknown Provider Type: NopeExecutionProvider")

        session = Session()
        calls = Calls()
        model = Model(s=session)
        follower.watch(model, [("s", session)], calls)
        with pytest.raises(ValueError, match="NopeExecutionProvider"):
            session.set_providers(["NopeExecutionProvider"])
        assert calls.calls == []

    def test_only_the_changed_session_calls_back(self, follower: Follower) -> None:
        """A model with several sessions hears about the one that changed, by its name."""
        detector, recognizer = FallingBackSession(), FallingBackSession()
        model, calls = Model(detector=detector, recognizer=recognizer), Calls()
        assert (
            follower.watch(model, [("detector", detector), ("recognizer", recognizer)], calls) == 2
        )
        recognizer.set_providers([CPU])
        assert [call[1] for call in calls.calls] == ["recognizer"]

    def test_describe_change_names_both_provider_lists(self) -> None:
        """The one-sentence description names the session, the model class and both lists."""
        text = describe_change(Model(), "text_rec.infer.session", GPU_PROVIDERS, None)
        assert text == (
            "The session 'text_rec.infer.session' of a Model changed its providers from "
            "['CUDAExecutionProvider', 'CPUExecutionProvider'] to (unreadable)."
        )


class TestRecords:
    def test_records_in_a_callback_name_the_change(self, follower: Follower) -> None:
        """A record logged in a callback, with or without %-arguments, starts with the change."""
        session = FallingBackSession()

        def log(model: object, name: str, old: Providers, new: Providers) -> None:
            logger.warning("plain text, 100% literal")
            logger.warning("with %s, 100%% escaped", "arguments")

        model = Model(s=session)
        follower.watch(model, [("s", session)], log)
        with recorded_logs() as records:
            session.set_providers([CPU])
        change = describe_change(model, "s", GPU_PROVIDERS, (CPU,))
        assert warning_texts(records) == [
            f"{change} plain text, 100% literal",
            f"{change} with arguments, 100% escaped",
        ]

    def test_records_outside_a_callback_are_untouched(self, follower: Follower) -> None:
        """Outside a callback, in any thread, the library's records are as they were."""
        session = FallingBackSession()
        model = Model(s=session)
        follower.watch(model, [("s", session)], Calls())
        with recorded_logs() as records:
            session.set_providers([CPU])
            align_device_with_onnx_session(session, "cuda:0")
        (warning,) = [r for r in records if r.levelno == logging.WARNING]
        assert warning.getMessage().startswith("The model asks for device 'cuda:0'")
        assert "odg_changed_session" not in warning.__dict__

    def test_an_options_change_is_worded_as_such(self) -> None:
        """Providers that stay while their options change are named once."""
        text = describe_change(Model(), "s", GPU_PROVIDERS, GPU_PROVIDERS)
        assert text == (
            "The session 's' of a Model changed the options of its providers "
            "['CUDAExecutionProvider', 'CPUExecutionProvider']."
        )


class TestFallbackMode:
    def test_run_falls_back_and_the_model_follows(self, follower: Follower, capsys: Any) -> None:
        """onnxruntime's fallback in run() rewrites the device, logs one WARNING, and retries."""
        session = FallingBackSession()
        model = Model(s=session)
        follower.watch(model, [("s", session)], realigning("fallback"))
        with recorded_logs() as records:
            outputs = session.run(None, {"x": X})
        assert outputs[0].tolist() == [[1.0] * 4]
        assert model.device == torch.device("cpu")
        (warning,) = [r for r in records if r.levelno == logging.WARNING]
        assert warning.getMessage().startswith(
            "The session 's' of a Model changed its providers from "
            "['CUDAExecutionProvider', 'CPUExecutionProvider'] to ['CPUExecutionProvider']. "
            "The model asks for device 'cuda:0', but its onnxruntime session runs only "
            "['CPUExecutionProvider']"
        )
        assert "Using 'cpu' instead." in warning.getMessage()
        assert warning.__dict__["odg_changed_session"] == "s"
        assert warning.__dict__["odg_old_providers"] == list(GPU_PROVIDERS)
        assert warning.__dict__["odg_new_providers"] == [CPU]
        assert "Falling back to ['CPUExecutionProvider']" in capsys.readouterr().out

    def test_the_fallback_device_is_the_guards(self, follower: Follower) -> None:
        """The callback's own fallback device is used, whatever scope set_providers runs in."""
        session = FallingBackSession()
        model = Model(s=session)
        follower.watch(model, [("s", session)], realigning("fallback", fallback_device="meta"))
        with recorded_logs(), device_policy(fallback_device="cpu"):
            session.set_providers([CPU])
        assert model.device == torch.device("meta")

    def test_a_model_already_on_cpu_stays_quiet(self, follower: Follower) -> None:
        """A change that leaves the device readable rewrites nothing and logs no WARNING."""
        session = FallingBackSession()
        model = Model("cpu", s=session)
        follower.watch(model, [("s", session)], realigning("fallback"))
        with recorded_logs() as records:
            session.set_providers([CPU])
        assert model.device == torch.device("cpu")
        assert warning_texts(records) == []


class TestFailMode:
    def test_run_raises_chained_to_the_ep_failure(self, follower: Follower, capsys: Any) -> None:
        """In "fail" mode run() raises EnvironmentConfigurationError from the EPFail."""
        session = FallingBackSession()
        model = Model(s=session)
        follower.watch(model, [("s", session)], realigning("fail"))
        with pytest.raises(EnvironmentConfigurationError) as caught:
            session.run(None, {"x": X})
        error = caught.value
        assert isinstance(error.__cause__, EPFail)
        assert error.message.startswith(
            "The session 's' of a Model changed its providers from "
            "['CUDAExecutionProvider', 'CPUExecutionProvider'] to ['CPUExecutionProvider']. "
            "The model asks for device 'cuda:0'"
        )
        assert error.help_url.endswith("#no-data-transfer-registered")
        assert model.device == torch.device("cuda:0")
        assert session.failures_left == 0
        assert "EP Error" in capsys.readouterr().out

    def test_set_providers_raises_chained_to_the_alignment(self, follower: Follower) -> None:
        """A plain set_providers in "fail" mode raises, caused by the alignment's own error."""
        session = FallingBackSession()
        model = Model(s=session)
        follower.watch(model, [("s", session)], realigning("fail"))
        with pytest.raises(EnvironmentConfigurationError) as caught:
            session.set_providers([CPU])
        assert isinstance(caught.value.__cause__, EnvironmentConfigurationError)
        assert "changed its providers" not in caught.value.__cause__.message

    def test_other_models_are_realigned_before_the_error(self, follower: Follower) -> None:
        """One failing model does not stop the others; later failures are logged at ERROR."""
        session = FallingBackSession()
        strict_a, lenient, strict_b = Model(s=session), Model(s=session), Model(s=session)
        follower.watch(strict_a, [("s", session)], realigning("fail"))
        follower.watch(lenient, [("s", session)], realigning("fallback"))
        follower.watch(strict_b, [("s", session)], realigning("fail"))
        with recorded_logs() as records, pytest.raises(EnvironmentConfigurationError):
            session.set_providers([CPU])
        assert lenient.device == torch.device("cpu")
        assert [r.levelno for r in records if r.levelno >= logging.WARNING] == [
            logging.WARNING,
            logging.ERROR,
        ]

    def test_a_callback_bug_propagates_unchanged(self, follower: Follower) -> None:
        """An error that is not the library's comes out as it is, chained to the EPFail."""
        session = FallingBackSession()

        def broken(model: object, name: str, old: Providers, new: Providers) -> None:
            raise KeyError("device")

        model = Model(s=session)
        follower.watch(model, [("s", session)], broken)
        with pytest.raises(KeyError) as caught:
            session.run(None, {"x": X})
        assert isinstance(caught.value.__cause__, EPFail)

    def test_a_write_failure_is_a_device_guard_error(self, follower: Follower) -> None:
        """A device that cannot be written back is reported as such, naming the change."""

        class ReadOnly:
            def __init__(self, session: Any) -> None:
                self.s = session

            @property
            def device(self) -> torch.device:
                return torch.device("cuda:0")

        def rewrite(model: Any, name: str, old: Providers, new: Providers) -> None:
            try:
                model.device = "cpu"
            except AttributeError as error:
                raise DeviceGuardError(f"cannot write device: {error}") from error

        session = FallingBackSession()
        model = ReadOnly(session)
        follower.watch(model, [("s", session)], rewrite)
        with pytest.raises(DeviceGuardError, match="of a ReadOnly changed its providers"):
            session.set_providers([CPU])


class TestLifetimes:
    def test_the_session_does_not_keep_the_model_alive(self, follower: Follower) -> None:
        """A watched model is freed by reference counting alone; its session lives on."""
        session = FallingBackSession()
        model = Model(s=session)
        follower.watch(model, [("s", session)], Calls())
        gone = weakref.ref(model)
        gc.disable()
        try:
            del model
            assert gone() is None
        finally:
            gc.enable()

    def test_the_hook_does_not_keep_the_session_alive(self, follower: Follower) -> None:
        """A hooked session is freed by reference counting alone: the hook holds it weakly."""
        session = FallingBackSession()
        model = Model()  # holds no session, so only the hook could keep it
        follower.watch(model, [("s", session)], Calls())
        gone = weakref.ref(session)
        gc.disable()
        try:
            del session
            assert gone() is None
        finally:
            gc.enable()

    def test_a_collected_model_is_skipped_and_its_entry_dropped(self, follower: Follower) -> None:
        """After the model is collected, a change calls no one and the hook removes itself."""
        session = FallingBackSession()
        calls = Calls()
        follower.watch(Model(s=session), [("s", session)], calls)
        gc.collect()
        session.set_providers([CPU])
        assert calls.calls == []
        assert not is_followed(session)

    def test_close_after_the_hook_removed_itself_does_nothing(self) -> None:
        """A follower closed after its models' hook went away touches nothing and logs nothing."""
        session = FallingBackSession()
        follower = Follower()
        follower.watch(Model(s=session), [("s", session)], Calls())
        session.set_providers([CPU])  # the model is gone: the hook removes itself
        assert not is_followed(session)
        with recorded_logs() as records:
            follower.close()
        assert records == []
        assert "set_providers" not in vars(session)

    def test_dead_entries_are_dropped_when_another_model_watches(self, follower: Follower) -> None:
        """Watching a session again clears out the entries of collected models."""
        session = FallingBackSession()
        for _ in range(5):
            follower.watch(Model(s=session), [("s", session)], Calls())
        survivor = Model(s=session)
        follower.watch(survivor, [("s", session)], Calls())
        assert len(vars(session)["set_providers"]._watches) == 1

    def test_a_model_without_weakref_is_warned_about_once(self, follower: Follower) -> None:
        """A __slots__ model without __weakref__ is not followed; one WARNING per class."""

        class Slotted:
            __slots__ = ("device", "s")

        first, second = Slotted(), Slotted()
        session = FallingBackSession()
        with recorded_logs() as records:
            assert follower.watch(first, [("s", session)], Calls()) == 0
            assert follower.watch(second, [("s", session)], Calls()) == 0
        warned = warning_texts(records)
        assert len(warned) == 1
        assert "cannot follow the sessions of" in warned[0]
        assert "Slotted" in warned[0]
        assert "'__weakref__'" in warned[0]
        assert not is_followed(session)

    def test_a_session_without_instance_dict_is_warned_about_once(self, follower: Follower) -> None:
        """A __slots__ session cannot be hooked: one WARNING per class, and the load goes on."""

        class SlottedSession:
            __slots__ = ("__weakref__",)

            def get_providers(self) -> list[str]:
                return [CPU]

            def set_providers(self, providers: Any = None) -> None:
                pass

        with recorded_logs() as records:
            for _ in range(2):
                session = SlottedSession()
                assert follower.watch(Model(s=session), [("s", session)], Calls()) == 0
        warned = warning_texts(records)
        assert len(warned) == 1
        assert "SlottedSession" in warned[0]
        assert "no instance __dict__" in warned[0]

    def test_a_property_set_providers_is_not_replaced(self, follower: Follower) -> None:
        """A set_providers property is left alone (writing it would call its setter)."""
        written: list[object] = []

        class PropertySession:
            def get_providers(self) -> list[str]:
                return [CPU]

            @property
            def set_providers(self) -> Callable[..., None]:
                return lambda providers=None: None

            @set_providers.setter
            def set_providers(self, value: object) -> None:
                written.append(value)

        session = PropertySession()
        with recorded_logs() as records:
            assert follower.watch(Model(s=session), [("s", session)], Calls()) == 0
        assert written == []
        assert "is a property" in warning_texts(records)[0]

    def test_a_session_without_set_providers_is_skipped_quietly(self, follower: Follower) -> None:
        """A session with no set_providers has nothing to follow: DEBUG only."""

        class NeverWatchedBefore(ProvidersOnlySession):
            """A class of its own: the DEBUG record is said once per class."""

        session = NeverWatchedBefore([CPU])
        with recorded_logs() as records:
            assert follower.watch(Model(s=session), [("s", session)], Calls()) == 0
        assert warning_texts(records) == []
        assert any("no set_providers" in r.getMessage() for r in records)
        assert "set_providers" not in vars(session)


class TestThreads:
    def test_concurrent_watches_share_one_hook(self) -> None:
        """Threads watching models on one session at once install one hook; all hear a change."""
        session = FallingBackSession()
        calls = Calls()
        models = [Model(s=session) for _ in range(64)]
        followers = [Follower() for _ in range(4)]
        start = threading.Barrier(8)

        def work(worker: int) -> None:
            start.wait()
            for model in models[worker::8]:
                followers[worker % 4].watch(model, [("s", session)], calls)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        hook = vars(session)["set_providers"]
        assert len(hook._watches) == 64
        session.set_providers([CPU])
        assert sorted(id(call[0]) for call in calls.calls) == sorted(id(m) for m in models)
        for each in followers:
            each.close()
        assert "set_providers" not in vars(session)

    def test_concurrent_fallbacks_each_realign_their_model(self, follower: Follower) -> None:
        """Sessions falling back in several threads at once each move their own model."""
        pairs = [
            (session, Model(s=session)) for session in (FallingBackSession() for _ in range(16))
        ]
        for session, model in pairs:
            follower.watch(model, [("s", session)], realigning("fallback"))
        start = threading.Barrier(len(pairs))
        results: list[Any] = []

        def work(session: FallingBackSession) -> None:
            start.wait()
            results.append(session.run(None, {"x": X})[0])

        with recorded_logs() as records:
            threads = [threading.Thread(target=work, args=(s,)) for s, _ in pairs]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert len(results) == len(pairs)
        assert all(model.device == torch.device("cpu") for _, model in pairs)
        assert len(warning_texts(records)) == len(pairs)

    def test_close_racing_watches_leaves_no_hook(self) -> None:
        """Loads that race close() leave no hook behind once close() has returned."""
        sessions = [FallingBackSession() for _ in range(200)]
        follower = Follower()
        keep: list[Model] = []
        start = threading.Barrier(2)

        def load() -> None:
            start.wait()
            for session in sessions:
                model = Model(s=session)
                keep.append(model)
                follower.watch(model, [("s", session)], Calls())

        thread = threading.Thread(target=load)
        thread.start()
        start.wait()
        follower.close()
        thread.join()
        assert not any(is_followed(session) for session in sessions)

    def test_a_callback_may_watch_and_close(self) -> None:
        """No lock is held while calling back: a callback can watch and close followers."""
        session = FallingBackSession()
        follower, other = Follower(), Follower()
        model = Model(s=session)
        done: list[int] = []

        def reentrant(model: object, name: str, old: Providers, new: Providers) -> None:
            done.append(other.watch(model, [(name, session)], Calls()))
            follower.close()

        follower.watch(model, [("s", session)], reentrant)
        session.set_providers([CPU])
        assert done == [1]
        assert is_followed(session)
        other.close()
        assert not is_followed(session)


class TestRealSessions:
    def test_set_providers_on_a_real_session(
        self, follower: Follower, new_real_session: Any
    ) -> None:
        """InferenceSession.set_providers goes through the hook, with the real providers."""
        session = new_real_session()
        model, calls = Model(s=session), Calls()
        follower.watch(model, [("s", session)], calls)
        session.set_providers([AZURE, CPU])
        session.set_providers([AZURE, CPU])
        assert calls.calls == [(model, "s", (CPU,), (AZURE, CPU))]
        assert session.run(None, {"x": X})[0].tolist() == [[1.0] * 4]

    def test_close_restores_a_real_session(self, new_real_session: Any) -> None:
        """After close() a real session has no instance set_providers and works as before."""
        session = new_real_session()
        before = set(vars(session))
        follower = Follower()
        follower.watch(Model(s=session), [("s", session)], Calls())
        follower.close()
        assert set(vars(session)) == before
        session.set_providers([CPU])
        assert session.get_providers() == [CPU]

    @staticmethod
    def gpu_session_failing_once(session: Any) -> Any:
        """Make a real CPU session report CUDA and fail its next run with a real EPFail.

        What happens after is onnxruntime's own code: run() catches the EPFail,
        prints, calls self.set_providers(self._fallback_providers), which
        re-creates the session on CPU, and retries.
        """
        from onnxruntime.capi import onnxruntime_pybind11_state as C  # noqa: N812

        class FailsOnce:
            def __init__(self, real: Any) -> None:
                self.real, self.failed = real, False

            def fail_once(self) -> None:
                if not self.failed:
                    self.failed = True
                    raise C.EPFail("CUDA failure 700: an illegal memory access was encountered")

            def run(self, *args: Any) -> Any:
                self.fail_once()
                return self.real.run(*args)

            def run_with_ort_values(self, *args: Any) -> Any:
                self.fail_once()
                return self.real.run_with_ort_values(*args)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.real, name)

        session._sess = FailsOnce(session._sess)
        session._providers = list(GPU_PROVIDERS)
        session._provider_options = {CUDA: {"device_id": "0"}, CPU: {}}
        return C.EPFail

    def test_real_run_fallback_moves_the_model(
        self, follower: Follower, new_real_session: Any, capsys: Any
    ) -> None:
        """A real run() falling back after an EPFail moves the model to CPU and returns."""
        session = new_real_session()
        model = Model(s=session)
        follower.watch(model, [("s", session)], realigning("fallback"))
        self.gpu_session_failing_once(session)
        with recorded_logs() as records:
            outputs = session.run(None, {"x": X})
        assert outputs[0].tolist() == [[1.0] * 4]
        assert session.get_providers() == [CPU]
        assert model.device == torch.device("cpu")
        assert len(warning_texts(records)) == 1
        assert "Falling back to ['CPUExecutionProvider'] and retrying." in capsys.readouterr().out

    def test_real_run_with_ort_values_fallback_moves_the_model(
        self, follower: Follower, new_real_session: Any, capsys: Any
    ) -> None:
        """run_with_ort_values() falls back the same way, through the same hook."""
        import onnxruntime

        session = new_real_session()
        model = Model(s=session)
        follower.watch(model, [("s", session)], realigning("fallback"))
        self.gpu_session_failing_once(session)
        with recorded_logs():
            (output,) = session.run_with_ort_values(
                ["y"], {"x": onnxruntime.OrtValue.ortvalue_from_numpy(X)}
            )
        assert output.numpy().tolist() == [[1.0] * 4]
        assert model.device == torch.device("cpu")
        assert "Falling back to" in capsys.readouterr().out

    def test_real_run_fallback_fails_in_fail_mode(
        self, follower: Follower, new_real_session: Any, capsys: Any
    ) -> None:
        """In "fail" mode the real run() raises out, chained to onnxruntime's EPFail."""
        session = new_real_session()
        model = Model(s=session)
        follower.watch(model, [("s", session)], realigning("fail"))
        ep_fail = self.gpu_session_failing_once(session)
        with pytest.raises(EnvironmentConfigurationError) as caught:
            session.run(None, {"x": X})
        assert isinstance(caught.value.__cause__, ep_fail)
        assert model.device == torch.device("cuda:0")
        assert session.get_providers() == [CPU]
        capsys.readouterr()


class RacingSession(FallingBackSession):
    """A session whose next read of its providers lets another thread's change land first.

    It returns what it had before the change, as a read that happened just
    before another thread's `set_providers` would.
    """

    def __init__(self) -> None:
        super().__init__()
        self.race_on_next_read = False

    def get_providers(self) -> list[str]:
        before = super().get_providers()
        if self.race_on_next_read:
            self.race_on_next_read = False
            thread = threading.Thread(target=self.set_providers, args=([CPU],))
            thread.start()
            thread.join()
        return before


class TestRaceBetweenReadAndWatch:
    """A provider change that lands while a second model loads is never missed."""

    def test_second_model_follows_a_change_during_its_load(self) -> None:
        """The change lands between the guard's read and its watch: both models end on cpu.

        Before: the second model read CUDA, started watching after the change,
        and stayed on cuda:0 on a CPU-only session for good.
        """
        from onnx_device_guard import device_guard

        session = RacingSession()

        @device_guard(warn=False)
        def load() -> Model:
            return Model("cuda:0", session=session)

        first = load()
        assert first.device == torch.device("cuda", 0)
        session.race_on_next_read = True
        second = load()
        assert first.device == torch.device("cpu")
        assert second.device == torch.device("cpu")


class TestCostPerLoad:
    """Adding one more model to a session's watchers never walks the others."""

    def test_watch_does_not_iterate_over_existing_watches(self, follower: Follower) -> None:
        """With many models on one session, a new watch touches none of their entries.

        Before: each load pruned and scanned the whole list (88 us at 1k models,
        6.8 ms at 40k).
        """

        class NoWalking(dict):  # type: ignore[type-arg]
            def __iter__(self) -> Any:
                raise AssertionError("walked the watch list")

            def values(self) -> Any:
                raise AssertionError("walked the watch list")

            def items(self) -> Any:
                raise AssertionError("walked the watch list")

        session = FallingBackSession()
        models = [Model(s=session) for _ in range(1000)]
        for model in models:
            follower.watch(model, [("s", session)], Calls())
        hook = vars(session)["set_providers"]
        hook._watches = NoWalking(hook._watches)
        late = Model(s=session)
        assert follower.watch(late, [("s", session)], Calls()) == 1
        assert len(hook._watches) == 1001
        del models, model  # collected models leave one at a time, without a walk either
        gc.collect()
        assert len(hook._watches) == 1
        hook._watches = dict.copy(hook._watches)  # the follower's close walks it, rightly
