"""Following a session's provider changes (`_follow`), through `watch` itself.

Sessions are real onnxruntime sessions of the tiny model: plain CPU ones, and
`GPUSession`, a real session that reports the providers last asked of it (its
change goes through the base class's `set_providers`, where the hook is). The
callbacks are the two a guard uses: one that aligns again and writes the
device (`"fallback"`), one whose alignment raises (`"fail"`).
"""

from __future__ import annotations

import copy
import gc
import logging
import pickle
import subprocess
import sys
import textwrap
import threading
import weakref
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import onnxruntime
import pytest
import torch

from onnx_device_guard import (
    DeviceGuardError,
    EnvironmentConfigurationError,
    align_device_with_onnx_session,
    example_model,
)
from onnx_device_guard._births import release, use
from onnx_device_guard._follow import (
    OnChange,
    Providers,
    describe_change,
    stop_following,
    watch,
)

from .helpers import is_followed
from .logs import recorded_logs, warning_texts
from .sessions import CPU, CUDA, EPFail, FakeSession, GPUSession, real_session

AZURE = "AzureExecutionProvider"
X = np.zeros((1, 4), dtype=np.float32)


class Follower:
    """Watches made under one origin and key, as one patch's are; `close()` stops them."""

    def __init__(self) -> None:
        self.cancelled = False

    def watch(self, model: object, sessions: Any, on_change: OnChange) -> None:
        watch(model, sessions, on_change, key=id(self), origin=self)

    def close(self) -> None:
        self.cancelled = True
        stop_following(self)


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


def realigning(mode: str) -> OnChange:
    """The guard's callback: align again in `mode`, write the device back."""

    def on_change(model: Any, name: str, old: Providers, new: Providers) -> None:
        session = getattr(model, name)
        chosen: Literal["fail", "fallback"] = "fail" if mode == "fail" else "fallback"
        model.device = align_device_with_onnx_session(session, model.device, chosen)

    return on_change


@pytest.fixture(autouse=True)
def hooks() -> Iterator[None]:
    """The class hooks in place during each test."""
    use()
    yield
    release()


@pytest.fixture
def follower() -> Iterator[Follower]:
    """A follower that is closed after the test, whatever the test did."""
    follower = Follower()
    yield follower
    follower.close()


class TestChange:
    """A change of providers or options calls back the session's models, once."""

    def test_the_callback_gets_model_name_and_providers(self, follower: Follower) -> None:
        """Keyword arguments pass through; a repeat that changes nothing calls no one."""
        session = real_session()
        model, calls = Model(s=session), Calls()
        follower.watch(model, [("s", session)], calls)
        assert is_followed(session)
        assert session.set_providers(providers=[AZURE, CPU], provider_options=[{}, {}]) is None
        session.set_providers([AZURE, CPU])
        assert calls.calls == [(model, "s", (CPU,), (AZURE, CPU))]
        assert session.run(None, {"x": X})[0].tolist() == [[1.0] * 4]

    def test_an_options_change_counts(self, follower: Follower) -> None:
        """A new device_id alone is a change, worded as one of the options."""
        session, calls = GPUSession(device_id=0), Calls()
        model = Model(s=session)
        follower.watch(model, [("s", session)], calls)
        session.set_providers([CUDA, CPU], [{"device_id": 1}, {}])
        assert [call[2:] for call in calls.calls] == [((CUDA, CPU), (CUDA, CPU))]
        assert describe_change(Model(), "s", (CPU,), (CPU,)).endswith(
            "changed the options of its providers ['CPUExecutionProvider']."
        )

    def test_a_failing_set_providers_calls_no_one(self, follower: Follower) -> None:
        """onnxruntime's own error propagates, and no callback runs."""
        session, calls = real_session(), Calls()
        model = Model(s=session)
        follower.watch(model, [("s", session)], calls)
        with (
            pytest.raises(RuntimeError, match="Unknown Provider Type"),
            pytest.warns(UserWarning, match="Specified provider"),
        ):
            session.set_providers(["NoSuchExecutionProvider"])
        assert calls.calls == []

    def test_only_the_changed_session_calls_back(self, follower: Follower) -> None:
        """A model with two sessions hears about the one that changed."""
        first, second, calls = real_session(), real_session(), Calls()
        model = Model(a=first, b=second)
        follower.watch(model, [("a", first), ("b", second)], calls)
        assert is_followed(first)
        assert is_followed(second)
        second.set_providers([AZURE, CPU])
        assert [call[1] for call in calls.calls] == ["b"]

    def test_nothing_is_put_on_the_session(self, follower: Follower) -> None:
        """The hook is on the class; the instance and run() are left as onnxruntime made them."""
        session = real_session()
        before = dict(vars(session))
        model = Model(s=session)
        follower.watch(model, [("s", session)], Calls())
        assert vars(session) == before
        assert "run" not in vars(type(session))

    def test_a_callback_may_change_watch_and_stop(self, follower: Follower) -> None:
        """A callback runs with no module lock held: it may watch, stop and change again."""
        session, calls, late = real_session(), Calls(), Model()

        def on_change(model: object, name: str, old: Providers, new: Providers) -> None:
            calls(model, name, old, new)
            watch(late, [("s", session)], calls)
            if new == (AZURE, CPU):
                session.set_providers([CPU])  # the session's own lock is re-entrant
            stop_following(follower)

        model = Model(s=session)
        follower.watch(model, [("s", session)], on_change)
        session.set_providers([AZURE, CPU])
        assert [call[3] for call in calls.calls] == [(AZURE, CPU), (CPU,), (CPU,)]


class TestRecords:
    """Records logged during a callback name the change; others are left alone."""

    def test_records_in_a_callback_name_the_change(self, follower: Follower) -> None:
        """The message starts with the change, and carries the odg_* fields of it."""
        session = GPUSession()
        logger = logging.getLogger("onnx_device_guard")
        model = Model(s=session)
        follower.watch(model, [("s", session)], lambda *_: logger.warning("at %d", 5))
        with recorded_logs() as records:
            session.set_providers([CPU])
            logger.warning("outside")
        inside, outside = warning_texts(records)
        assert inside == (
            "The session 's' of a Model changed its providers from "
            "['CUDAExecutionProvider', 'CPUExecutionProvider'] to ['CPUExecutionProvider']. at 5"
        )
        assert outside == "outside"
        fields = vars(next(r for r in records if r.getMessage() == inside))
        assert fields["odg_changed_session"] == "s"
        assert (fields["odg_old_providers"], fields["odg_new_providers"]) == ([CUDA, CPU], [CPU])


class TestErrors:
    """A callback's error comes out of the call that changed the providers."""

    def test_fail_mode_raises_from_set_providers_with_the_change(self, follower: Follower) -> None:
        """A library error gets the change in front, its own type and help_url kept."""
        session = GPUSession()
        model = Model(s=session)
        follower.watch(model, [("s", session)], realigning("fail"))
        with pytest.raises(EnvironmentConfigurationError) as caught:
            session.set_providers([CPU])
        assert caught.value.message.startswith("The session 's' of a Model changed its providers")
        assert isinstance(caught.value.__cause__, EnvironmentConfigurationError)
        assert model.device == torch.device("cuda:0")

    def test_a_run_fallback_raises_chained_to_the_ep_failure(
        self, follower: Follower, capsys: Any
    ) -> None:
        """onnxruntime's fallback inside run() raises out, caused by its real EPFail."""
        session = GPUSession(fail_next_run=True)
        model = Model(s=session)
        follower.watch(model, [("s", session)], realigning("fail"))
        with pytest.raises(EnvironmentConfigurationError) as caught:
            session.run(None, {"x": X})
        assert isinstance(caught.value.__cause__, EPFail)
        assert session.get_providers() == [CPU]
        assert "Falling back to" in capsys.readouterr().out

    def test_every_model_is_called_back_before_the_first_error(self, follower: Follower) -> None:
        """The first error propagates once all were called back; later ones are logged."""
        session = GPUSession()
        strict, other, lenient = Model(s=session), Model(s=session), Model(s=session)
        for model, mode in ((strict, "fail"), (other, "fail"), (lenient, "fallback")):
            follower.watch(model, [("s", session)], realigning(mode))
        with recorded_logs() as records, pytest.raises(EnvironmentConfigurationError):
            session.set_providers([CPU])
        assert lenient.device == torch.device("cpu")
        assert [r.levelno for r in records].count(logging.ERROR) == 1

    def test_a_callback_bug_propagates_unchanged(self, follower: Follower) -> None:
        """An error that is not the library's comes out as it was raised."""
        session = real_session()

        def broken(*change: object) -> None:
            raise KeyError("bug")

        model = Model(s=session)
        follower.watch(model, [("s", session)], broken)
        with pytest.raises(KeyError, match="bug") as caught:
            session.set_providers([AZURE, CPU])
        assert not isinstance(caught.value, DeviceGuardError)


class TestLifetimes:
    """Nothing kept here holds a session, a model or a class alive."""

    def test_neither_session_nor_model_is_kept_alive(self, follower: Follower) -> None:
        """A model dies with its last reference; a session too, and the watch goes with it."""
        session = real_session()
        model = Model(s=session)
        follower.watch(model, [("s", session)], Calls())
        gone_model, gone_session = weakref.ref(model), weakref.ref(session)
        del model
        assert gone_model() is None
        assert not is_followed(session)
        del session
        gc.collect()
        assert gone_session() is None

    def test_classes_warned_about_are_not_kept_alive(self, follower: Follower) -> None:
        """A model class without __weakref__ is warned about once, and then still collected."""

        def load() -> weakref.ref[type]:
            class Slotted:
                __slots__ = ("s",)

            session = real_session()
            with recorded_logs() as records:
                follower.watch(Slotted(), [("s", session)], Calls())
                follower.watch(Slotted(), [("s", session)], Calls())
            assert len(warning_texts(records)) == 1
            assert not is_followed(session)
            return weakref.ref(Slotted)

        gone = load()
        gc.collect()
        assert gone() is None

    def test_a_duck_typed_session_is_not_followed(self, follower: Follower) -> None:
        """Only an InferenceSession is followed; anything else is aligned at load only."""
        fake = FakeSession([CPU])
        with recorded_logs() as records:
            follower.watch(Model(s=fake), [("s", fake)], Calls())
        assert not is_followed(fake)
        assert all(record.levelno == logging.DEBUG for record in records)

    def test_an_unhashable_session_subclass_is_followed(self, follower: Follower) -> None:
        """A subclass with __eq__ but no __hash__ is followed: watches are keyed by its id."""

        class ComparableSession(onnxruntime.InferenceSession):  # type: ignore[misc]
            def __eq__(self, other: object) -> bool:
                return self is other

        session = ComparableSession(example_model(), providers=[CPU])
        model, calls = Model(s=session), Calls()
        with recorded_logs() as records:
            follower.watch(model, [("s", session)], calls)
        assert is_followed(session)
        assert not records
        session.set_providers([AZURE, CPU])
        assert calls.calls == [(model, "s", (CPU,), (AZURE, CPU))]

    def test_a_model_followed_already_keeps_its_first_watch(self, follower: Follower) -> None:
        """Watched again with the same key (each load of it): nothing is added."""
        session, first, again = real_session(), Calls(), Calls()
        model = Model(s=session)
        follower.watch(model, [("s", session)], first)
        follower.watch(model, [("s", session)], again)
        session.set_providers([AZURE, CPU])
        assert [call[0] for call in first.calls] == [model]
        assert not again.calls

    def test_loads_racing_a_stop_leave_no_watch(self, follower: Follower) -> None:
        """A followed model watched again in threads (read without the lock) while its follower
        closes: no watch is left."""
        session = real_session()
        model, start = Model(s=session), threading.Barrier(5)
        follower.watch(model, [("s", session)], Calls())

        def load() -> None:
            start.wait()
            for _ in range(2000):
                follower.watch(model, [("s", session)], Calls())

        threads = [threading.Thread(target=load) for _ in range(4)]
        for thread in threads:
            thread.start()
        start.wait()
        follower.close()
        for thread in threads:
            thread.join()
        assert not is_followed(session)

    def test_stop_following_forgets_the_origin_only(self, follower: Follower) -> None:
        """Closing one follower leaves another's watch on the same session."""
        session, other, calls = real_session(), Follower(), Calls()
        model = Model(s=session)
        follower.watch(model, [("s", session)], Calls())
        kept = Model(s=session)
        other.watch(kept, [("s", session)], calls)
        follower.close()
        session.set_providers([AZURE, CPU])
        assert [call[0] for call in calls.calls] == [kept]
        other.close()
        assert not is_followed(session)
        follower.watch(Model(s=session), [("s", session)], calls)  # cancelled: no watch
        assert not is_followed(session)

    def test_a_followed_session_still_pickles_and_copies(self, follower: Follower) -> None:
        """Nothing is on the instance: a session that pickles comes back as it was, unfollowed."""
        session = PicklableSession(example_model(), providers=[CPU])
        model = Model(s=session)
        follower.watch(model, [("s", session)], Calls())
        for copied in (pickle.loads(pickle.dumps(session)), copy.deepcopy(session)):
            assert type(copied) is PicklableSession
            assert not is_followed(copied)
            assert copied.run(None, {"x": X})[0].tolist() == [[1.0] * 4]
        assert is_followed(session)

    def test_a_copied_model_is_not_followed(self, follower: Follower) -> None:
        """The documented limit: a copy.copy of a model shares its session but does not follow."""
        session = GPUSession()
        model = Model(s=session)
        follower.watch(model, [("s", session)], realigning("fallback"))
        twin = copy.copy(model)
        with recorded_logs():
            session.set_providers([CPU])
        assert (model.device, twin.device) == (torch.device("cpu"), torch.device("cuda:0"))


class PicklableSession(onnxruntime.InferenceSession):  # type: ignore[misc]
    """A session that pickles by making itself again from its model (as some wrappers do)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._model_path, None, self.get_providers()))


class TestClassHook:
    """The hook is on InferenceSession, put there and taken away with the birth hooks."""

    def test_the_last_release_restores_set_providers_by_identity(self) -> None:
        """While a watch is in force set_providers is wrapped; after the last undo() it is not."""
        script = textwrap.dedent(
            """
            import onnxruntime
            from onnxruntime.capi.onnxruntime_inference_collection import Session
            from onnx_device_guard import watch_sessions
            with watch_sessions():
                assert "set_providers" in vars(onnxruntime.InferenceSession)
            assert "set_providers" not in vars(onnxruntime.InferenceSession)
            assert onnxruntime.InferenceSession.set_providers is Session.set_providers
            print("restored")
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=False
        )
        assert done.stdout.strip() == "restored", done.stderr

    def test_a_watch_without_the_hooks_is_not_followed(self) -> None:
        """is_followed tells the truth: a watch that no hook can hear is not following."""
        session = GPUSession()
        model = Model(s=session)
        watch(model, [("s", session)], Calls())
        original = vars(onnxruntime.InferenceSession)["set_providers"]
        del onnxruntime.InferenceSession.set_providers
        try:
            assert not is_followed(session)
        finally:
            onnxruntime.InferenceSession.set_providers = original
        assert is_followed(session)


class TestThreads:
    """Watches and changes from many threads."""

    def test_concurrent_watches_are_all_called_back(self, follower: Follower) -> None:
        """Eight threads watching one session at once: one change calls back every model."""
        session, calls = real_session(), Calls()
        models = [Model(s=session) for _ in range(400)]
        barrier = threading.Barrier(8)

        def watch_some(part: list[Model]) -> None:
            barrier.wait()
            for model in part:
                follower.watch(model, [("s", session)], calls)

        threads = [threading.Thread(target=watch_some, args=(models[i::8],)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        session.set_providers([AZURE, CPU])
        assert len(calls.calls) == len(models)
