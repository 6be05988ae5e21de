"""Sessions observed where they are born: real onnxruntime sessions on this CPU-only build.

Asking this build for ``CUDAExecutionProvider`` gives a session that runs on
the CPU, without an error: the very drop the library exists for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import gc
import importlib
import itertools
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import types
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnxruntime
import pytest
import torch

from onnx_device_guard import (
    DeviceFallbackWarning,
    DeviceGuardError,
    EnvironmentConfigurationError,
    align_device_with_onnx_session,
    device_guard,
    device_policy,
    example_model,
    patch,
    realign,
    watch_sessions,
)
from onnx_device_guard._births import birth_of

from .logs import recorded_logs
from .sessions import GPUBuildSession

CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]
CPU = ["CPUExecutionProvider"]
_names = itertools.count()


def session(providers: Any = CUDA, **kwargs: Any) -> Any:
    """A real session on the tiny model; onnxruntime's own UserWarning silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Specified provider", UserWarning)
        return onnxruntime.InferenceSession(example_model(), providers=providers, **kwargs)


def quiet_session(providers: Any, **kwargs: Any) -> Any:
    """`session`, with onnxruntime's own complaints about odd providers kept off the output."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return session(providers, **kwargs)


def fallbacks(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DeviceFallbackWarning)]


def assert_prints(script: str, last_words: str) -> None:
    """Run `script` in a fresh interpreter (its own hooks); it must print `last_words`."""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.stdout.strip() == last_words, done.stderr


@pytest.fixture
def caught() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        yield records


class TestWatch:
    def test_a_dropped_provider_is_reported_once_with_the_file_and_why(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """One warning at the user's line and one WARNING record name file, provider, cause."""
        with recorded_logs() as records, watch_sessions():
            session()
        (text,) = fallbacks(caught)
        assert "CUDAExecutionProvider" in text
        assert "tiny.onnx" in text
        assert "has no CUDAExecutionProvider" in text  # the why: this build lacks it
        assert caught[-1].filename == __file__
        (record,) = [r for r in records if r.levelname == "WARNING"]
        assert record.odg_reason == "provider_dropped"  # type: ignore[attr-defined]
        assert record.odg_model_file.endswith("tiny.onnx")  # type: ignore[attr-defined]

    def test_fail_mode_raises_out_of_the_constructor(self) -> None:
        """In "fail" mode the constructor itself raises EnvironmentConfigurationError."""
        with (
            watch_sessions(resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="dropped CUDAExecutionProvider"),
        ):
            session()

    def test_a_watch_given_options_sets_them_under_one_given_none(self) -> None:
        """`run`'s own watch takes no options: a program's strict watch still raises."""
        with (
            watch_sessions(),
            watch_sessions(resolution_mode="fail"),
            watch_sessions(resolution_mode="fallback"),
            pytest.raises(EnvironmentConfigurationError),
        ):
            session()

    def test_each_option_is_the_oldest_watchs_that_was_given_it(self) -> None:
        """A library's quiet watch leaves a later strict one strict. Before: the oldest watch
        given any option set all three, so the drop was said at DEBUG only."""
        with (
            watch_sessions(warn=False),
            watch_sessions(resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError),
        ):
            session()

    def test_a_fallback_device_the_session_cannot_read_raises_as_in_the_core(self) -> None:
        """fallback_device='cuda:0' for a session on the CPU raises, in the core's words."""
        with pytest.raises(EnvironmentConfigurationError) as core:
            align_device_with_onnx_session(session(CPU), "cuda:0", fallback_device="cuda:0")
        with (
            watch_sessions(fallback_device="cuda:0"),
            pytest.raises(EnvironmentConfigurationError) as watched,
        ):
            session()
        assert watched.value.message == core.value.message
        assert "cannot read the fallback device 'cuda:0'" in watched.value.message

    def test_a_session_that_asked_for_the_cpu_is_not_reported(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """Asking for the CPU only is no fallback."""
        with watch_sessions(resolution_mode="fail"):
            session(CPU)
        assert fallbacks(caught) == []

    def test_provider_and_options_pairs_and_device_id_are_read(self) -> None:
        """(name, options) pairs and provider_options give the asked device_id."""
        with watch_sessions(warn=False):
            pair = session([("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"])
            listed = session(CUDA, provider_options=[{"device_id": "2"}, {}])
        assert birth_of(pair).device == "cuda:1"  # type: ignore[union-attr]
        assert birth_of(listed).device == "cuda:2"  # type: ignore[union-attr]

    @pytest.mark.parametrize(
        ("providers", "options"),
        [
            (CUDA, [{"device_id": "0"}]),  # fewer options than providers
            ([("CUDAExecutionProvider", None), "CPUExecutionProvider"], None),
            ([("CUDAExecutionProvider",), "CPUExecutionProvider"], None),
        ],
        ids=["short-options-list", "pair-with-none", "pair-without-options"],
    )
    def test_what_onnxruntime_takes_odd_is_still_read(self, providers: Any, options: Any) -> None:
        """Arguments onnxruntime accepts, or refuses by falling back to the CPU, are read."""
        with watch_sessions(resolution_mode="fail"), pytest.raises(EnvironmentConfigurationError):
            quiet_session(providers, provider_options=options)

    @pytest.mark.parametrize("device_id", [300, -1, "abc", 1.0])
    def test_a_device_id_that_is_no_gpu_index_is_said(self, device_id: object) -> None:
        """A device_id torch cannot address is named in a WARNING, not taken as 0 in silence."""
        with recorded_logs() as records, watch_sessions(warn=False):
            made = quiet_session([("CUDAExecutionProvider", {"device_id": device_id})])
        assert birth_of(made).device == "cuda:0"  # type: ignore[union-attr]
        (record,) = [r for r in records if r.levelname == "WARNING"]
        assert f"device_id={device_id!r}, which is no GPU index" in record.getMessage()

    def test_a_pair_written_as_a_list_is_read(self) -> None:
        """onnxruntime refuses `[name, options]` and falls back to the CPU: a drop, reported."""
        with watch_sessions(resolution_mode="fail"), pytest.raises(EnvironmentConfigurationError):
            session([["CUDAExecutionProvider", {"device_id": 1}], "CPUExecutionProvider"])

    @pytest.mark.parametrize("how", ["positional", "keyword"])
    def test_providers_given_as_an_iterator_are_read_and_reported(self, how: str) -> None:
        """onnxruntime refuses an iterator and runs on the CPU; the record still reads it."""
        make = session if how == "keyword" else onnxruntime.InferenceSession
        arguments = (iter(CUDA),) if how == "keyword" else (example_model(), None, iter(CUDA))
        with watch_sessions(resolution_mode="fail"), pytest.raises(EnvironmentConfigurationError):
            make(*arguments)
        with watch_sessions(warn=False):
            made = session(iter(CPU))
        assert made.get_providers() == CPU  # onnxruntime got the providers as given
        assert birth_of(made).asked == ()  # type: ignore[union-attr]

    def test_set_providers_renews_what_the_session_asks_for(self) -> None:
        """A session moved to the CPU on purpose asks for the CPU: no model on it is blamed."""
        with watch_sessions(warn=False):
            made = session()
            made.set_providers(CPU)
            assert birth_of(made).asked == ()  # type: ignore[union-attr]
            model = types.SimpleNamespace(session=made, device="cpu")
            assert realign(model, resolution_mode="fail") == torch.device("cpu")

    def test_a_drop_by_set_providers_is_the_watchs_to_report(self) -> None:
        """set_providers asking for a GPU onnxruntime drops is reported like a birth's drop."""
        with watch_sessions(resolution_mode="fail"), warnings.catch_warnings():
            made = session(CPU)
            warnings.simplefilter("ignore")
            with pytest.raises(EnvironmentConfigurationError, match="dropped CUDA"):
                made.set_providers(CUDA)

    def test_a_session_made_before_any_check_is_checked_at_set_providers(self) -> None:
        """What `set_providers` asks for becomes the record of a session born unobserved.

        Before: it had no record, so a GPU provider it asked for and lost there was never
        said, under a strict guard or a strict watch alike."""
        script = textwrap.dedent(
            """
            import warnings, onnxruntime, types
            from onnx_device_guard import (
                EnvironmentConfigurationError, device_guard, example_model, watch_sessions
            )
            CPU, CUDA = ["CPUExecutionProvider"], ["CUDAExecutionProvider", "CPUExecutionProvider"]
            warnings.simplefilter("ignore")
            made = [onnxruntime.InferenceSession(example_model(), providers=CPU) for _ in "ab"]
            load = device_guard(resolution_mode="fail")(lambda: types.SimpleNamespace(
                session=made[0], device="cpu"
            ))
            model = load()
            for early, scope in zip(made, (warnings.catch_warnings(), watch_sessions("fail"))):
                with scope:
                    try:
                        early.set_providers(CUDA)
                    except EnvironmentConfigurationError:
                        print("raised")
            """
        )
        assert_prints(script, "raised\nraised")

    def test_a_drop_a_following_model_survives_is_its_loads_to_report(self) -> None:
        """A model already on the CPU, its session asked for CUDA again (optimum's `.to()`):
        the providers do not change, but the drop is reported with the load's settings."""
        script = textwrap.dedent(
            """
            import warnings, onnxruntime, torch
            from onnx_device_guard import (
                EnvironmentConfigurationError, device_guard, example_model, watch_sessions
            )
            CPU = ["CPUExecutionProvider"]
            warnings.simplefilter("ignore")

            class Model:
                def __init__(self):
                    self.device = torch.device("cpu")
                    self.session = onnxruntime.InferenceSession(example_model(), providers=CPU)

            for mode, watched in (("fail", False), ("fallback", True)):
                watch = watch_sessions(resolution_mode="fail" if watched else None)
                with watch:  # a guarded model's session is its load's to report
                    model = device_guard(resolution_mode=mode)(lambda: Model())()
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        try:
                            model.session.set_providers(["CUDAExecutionProvider", *CPU])
                            said = [str(warning.message)[:30] for warning in caught]
                            print(mode, [text for text in said if "dropped" in text])
                        except EnvironmentConfigurationError:
                            print(mode, "raised")
            """
        )
        assert_prints(script, "fail raised\nfallback ['onnxruntime dropped CUDAExecut']")

    def test_a_subclass_is_observed_once(self, caught: list[warnings.WarningMessage]) -> None:
        """A subclass of InferenceSession calling super().__init__ is one birth."""

        class Mine(onnxruntime.InferenceSession):  # type: ignore[misc]
            def __init__(self, path: str) -> None:
                super().__init__(path, providers=CUDA)

        with watch_sessions(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Specified provider", UserWarning)
            Mine(example_model())
        assert len(fallbacks(caught)) == 1

    def test_a_subclass_whose_get_providers_needs_its_own_init_is_checked(self) -> None:
        """What a session got is read with onnxruntime's get_providers, not the subclass's."""

        class Tagged(onnxruntime.InferenceSession):  # type: ignore[misc]
            def __init__(self, path: str) -> None:
                super().__init__(path, providers=CUDA)
                self.tag = "ocr"

            def get_providers(self) -> list[str]:
                return list(super().get_providers()) if self.tag else []

        with (
            watch_sessions(resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="dropped CUDAExecutionProvider"),
        ):
            quietly(Tagged, example_model())

    def test_a_birth_that_cannot_be_read_is_said_not_checked(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A session whose providers cannot be read at birth gets a WARNING naming its class."""

        def unreadable(self: object) -> list[str]:
            raise RuntimeError("no providers yet")

        monkeypatch.setattr(onnxruntime.InferenceSession, "get_providers", unreadable)
        with recorded_logs() as records, watch_sessions(resolution_mode="fail"):
            made = session()
        assert birth_of(made) is None
        (record,) = [r for r in records if r.levelname == "WARNING"]
        assert "InferenceSession" in record.getMessage()
        assert "not checked" in record.getMessage()
        assert "no providers yet" in record.getMessage()

    def test_session_options_providers_are_what_was_asked(self, monkeypatch: Any) -> None:
        """Providers added to SessionOptions count when providers= is not given."""
        with watch_sessions(warn=False):
            options = onnxruntime.SessionOptions()
            options.add_provider("CPUExecutionProvider", {})
            made = onnxruntime.InferenceSession(example_model(), sess_options=options)
        birth = birth_of(made)
        assert birth is not None
        assert birth.asked == ()
        assert not birth.dropped

    def test_two_watches_give_one_report(self, caught: list[warnings.WarningMessage]) -> None:
        """Watching twice is idempotent: still one report per session."""
        with watch_sessions(), watch_sessions():
            session()
        assert len(fallbacks(caught)) == 1

    def test_the_session_is_left_as_made_and_not_kept_alive(self) -> None:
        """The session keeps onnxruntime's providers and is collected once dropped."""
        with watch_sessions(warn=False):
            made = session()
        assert made.get_providers() == CPU
        reference = weakref.ref(made)
        del made
        gc.collect()
        assert reference() is None

    def test_another_instrumentors_wrapper_over_ours_is_unwrapped_cleanly(self) -> None:
        """Wrapped over by someone while hooked, unhooked under them, unwrapped by them: the
        class is its own again, and hooking anew reports a drop once.

        Before: our wrapper stayed on the class once they unwrapped, and the next hook wrapped
        over it, so each drop was reported twice.
        """
        script = textwrap.dedent(
            """
            import warnings, onnxruntime, wrapt
            from onnx_device_guard import DeviceFallbackWarning, example_model, watch_sessions
            cls = onnxruntime.InferenceSession
            own = vars(cls)["__init__"]
            watch = watch_sessions()
            wrapt.wrap_function_wrapper(cls, "__init__", lambda w, i, a, k: w(*a, **k))
            watch.undo()
            cls.__init__ = cls.__init__.__wrapped__  # their unwrap, as instrumentors do it
            assert vars(cls)["__init__"] is own
            with watch_sessions(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                kept = cls(example_model(), providers=["CUDAExecutionProvider"])
            assert [w.category for w in caught].count(DeviceFallbackWarning) == 1
            assert vars(cls)["__init__"] is own
            print("restored")
            """
        )
        assert_prints(script, "restored")

    def test_a_base_class_wrapper_made_while_unhooked_is_called_once_hooked_again(self) -> None:
        """set_providers is onnxruntime's Session's: wrapped there by someone while the hooks
        were off, it is what the hooks wrap next. Before: a wrapper made earlier was reused,
        which went round theirs."""
        script = textwrap.dedent(
            """
            import onnxruntime, wrapt
            from onnxruntime.capi.onnxruntime_inference_collection import Session
            from onnx_device_guard import example_model, watch_sessions
            calls = []
            watch_sessions().undo()
            wrapt.wrap_function_wrapper(
                Session, "set_providers", lambda w, i, a, k: calls.append(1) or w(*a, **k)
            )
            with watch_sessions():
                made = onnxruntime.InferenceSession(
                    example_model(), providers=["CPUExecutionProvider"]
                )
                made.set_providers(["CPUExecutionProvider"])
            assert calls == [1], calls
            assert "set_providers" not in vars(onnxruntime.InferenceSession)
            print("theirs ran")
            """
        )
        assert_prints(script, "theirs ran")

    def test_a_model_that_starts_waiting_while_the_hooks_go_keeps_them(self) -> None:
        """A load ending in one thread takes the hooks away just as another thread's model
        begins to wait for its sessions: the hooks come back for it.

        Before: the waiting model was left without hooks, so the session it opened later went
        unchecked and it stayed on CUDA.
        """
        script = textwrap.dedent(
            """
            import sys, threading, onnxruntime
            from onnx_device_guard import _births, _follow, device_guard, example_model
            paused, go = threading.Event(), threading.Event()
            def pause_in_the_unhook(frame, event, arg):
                if event == "call" and frame.f_code is _follow.following.__code__:
                    paused.set(); go.wait(10)
            def session(providers):
                return onnxruntime.InferenceSession(example_model(), providers=providers)
            class Plain:
                def __init__(self):
                    self.session, self.device = session(["CPUExecutionProvider"]), "cpu"
            class Lazy:
                def __init__(self):
                    self.session, self.device = None, "cuda"
                def open(self):
                    self.session = session(["CUDAExecutionProvider"])
            def ending():
                sys.settrace(pause_in_the_unhook)
                device_guard(follow=False)(Plain)()
                sys.settrace(None)
            made = {}
            first = threading.Thread(target=ending); first.start(); paused.wait(10)
            second = threading.Thread(target=lambda: made.setdefault("lazy", device_guard(
                warn=False)(Lazy)()))
            second.start()
            while not _births._PENDING: pass
            go.set(); first.join(); second.join()
            made["lazy"].open()
            print(made["lazy"].device)
            """
        )
        assert_prints(script, "cpu")

    @pytest.mark.parametrize(
        "case",
        ["imported later", "left from under", "plain wrapper over ours", "bare __new__"],
    )
    def test_the_hooks_hold_up_beside_other_code(self, case: str) -> None:
        """Cases a review of the hooks' comings and goings found (each failed before):

        - imported later: a model waiting before onnxruntime is imported, after a watch came
          and went, got no hooks when it was imported, so its later session went unchecked;
        - left from under: an instrumentor under ours that unwraps itself was put back on the
          class when ours went;
        - plain wrapper over ours: a monkeypatch over ours kept ours inside it, and hooking
          anew reported each drop twice;
        - bare __new__: a guarded class's `__new__` called alone (as pickle does) left the
          hooks in place with nothing needing them.
        """
        script = textwrap.dedent(
            """
            import gc, sys, warnings
            case = sys.argv[1]
            from onnx_device_guard import (
                DeviceFallbackWarning, device_guard, example_model, watch_sessions
            )
            from onnx_device_guard import _births
            CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]
            def dropped():
                import onnxruntime
                return onnxruntime.InferenceSession(example_model(), providers=CUDA)
            class Lazy:
                def __init__(self):
                    self.session, self.device = None, "cuda"
                def open(self):
                    self.session = dropped()
            def reports(step):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    kept = step()
                return [w.category for w in caught].count(DeviceFallbackWarning)
            if case == "imported later":
                lazy = device_guard(warn=False)(Lazy)()
                watch_sessions().undo()
                import onnxruntime
                lazy.open()
                assert lazy.device == "cpu", lazy.device
            import onnxruntime, wrapt
            cls = onnxruntime.InferenceSession
            own = vars(cls)["__init__"]
            if case == "left from under":
                theirs = wrapt.wrap_function_wrapper(cls, "__init__", lambda w, i, a, k: w(*a, **k))
                watch = watch_sessions()
                wrapt.unwrap_object(cls, "__init__", theirs)
                watch.undo()
                assert vars(cls)["__init__"] is own
            if case == "plain wrapper over ours":
                lazy = device_guard(Lazy)()
                inner = cls.__init__
                cls.__init__ = lambda self, *a, **k: inner(self, *a, **k)
                del lazy
                gc.collect()
                lazy = device_guard(Lazy)()
                assert reports(dropped) == 1
            if case == "bare __new__":
                @device_guard
                class Model:
                    def __new__(cls, *args, **kwargs):
                        return super().__new__(cls)
                Model.__new__(Model)
                assert not _births._hooks and vars(cls)["__init__"] is own
            print("held up")
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script, case], capture_output=True, text=True, check=False
        )
        assert done.stdout.strip() == "held up", done.stderr

    def test_a_warnings_filter_that_errors_leaves_the_loads_own_error(self) -> None:
        """Under `warnings.simplefilter("error")`, a load that raises raises its own error:
        the report of a session it made must not. Before: the DeviceFallbackWarning did."""
        kept: list[Any] = []

        def load() -> Any:
            kept.append(session())
            raise OSError("no such model")

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(OSError, match="no such model"):
                device_guard(load)()

    def test_undo_restores_onnxruntime_by_identity(self) -> None:
        """After the last undo(), InferenceSession.__init__ is onnxruntime's own again."""
        script = textwrap.dedent(
            """
            import onnxruntime
            original = onnxruntime.InferenceSession.__init__
            from onnx_device_guard import watch_sessions
            first, second = watch_sessions(), watch_sessions()
            assert onnxruntime.InferenceSession.__init__ is not original
            first.undo()
            assert onnxruntime.InferenceSession.__init__ is not original
            second.undo(); second.undo()
            assert onnxruntime.InferenceSession.__init__ is original
            assert onnxruntime.SessionOptions.add_provider.__name__ == "add_provider"
            print("restored")
            """
        )
        assert_prints(script, "restored")


class TestRunCommand:
    SCRIPT = textwrap.dedent(
        """
        import sys, warnings
        warnings.filterwarnings("ignore", "Specified provider", UserWarning)
        print("torch before onnxruntime:", "torch" in sys.modules, "wrapt:", "wrapt" in sys.modules)
        import onnxruntime
        from onnx_device_guard import example_model
        onnxruntime.InferenceSession(example_model(), providers=["CUDAExecutionProvider"])
        print("made")
        sys.exit(7)
        """
    )

    def run(self, tmp_path: Path, *options: str, python: tuple[str, ...] = ()) -> Any:
        script = tmp_path / "app.py"
        script.write_text(self.SCRIPT)
        command = [sys.executable, "-m", "onnx_device_guard", "run", *options, "--"]
        return subprocess.run(
            [*command, sys.executable, *python, str(script)],
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
        )

    def test_an_unmodified_program_is_watched_and_keeps_its_exit_status(
        self, tmp_path: Path
    ) -> None:
        """The program's own status comes back; its fallback is heard; torch waits."""
        done = self.run(tmp_path)
        assert done.returncode == 7, done.stderr
        assert "torch before onnxruntime: False wrapt: False" in done.stdout
        assert "DeviceFallbackWarning: onnxruntime dropped CUDAExecutionProvider" in done.stderr
        assert "app.py:7" in done.stderr  # the program's line, not the library's

    def test_strict_raises_in_the_program(self, tmp_path: Path) -> None:
        """--strict turns the fallback into EnvironmentConfigurationError."""
        done = self.run(tmp_path, "--strict")
        assert done.returncode == 1
        assert "EnvironmentConfigurationError" in done.stderr
        assert "made" not in done.stdout

    def test_no_warn_and_a_bad_fallback_device(self, tmp_path: Path) -> None:
        """--no-warn silences; a bad --fallback-device is one line and status 2."""
        quiet = self.run(tmp_path, "--no-warn")
        assert quiet.returncode == 7
        assert "DeviceFallbackWarning" not in quiet.stderr
        for device in ("gpu0", "", " "):  # before: an empty one ran with the default cpu
            bad = self.run(tmp_path, "--fallback-device", device)
            assert bad.returncode == 2
            assert f"--fallback-device={device.strip()!r}" in bad.stderr
            assert bad.stderr.count("\n") == 1

    def test_a_probe_for_onnxruntime_keeps_the_watch(self, tmp_path: Path) -> None:
        """`importlib.util.find_spec("onnxruntime")` (an "is it installed?" check) first.

        Before: the probe took the spec whose loader starts the watch, and the import that
        followed ran unwatched: no report, and `--strict` exited 0.
        """
        self.SCRIPT = "import importlib.util\nimportlib.util.find_spec('onnxruntime')\n" + (
            self.SCRIPT
        )
        done = self.run(tmp_path, "--strict")
        assert "EnvironmentConfigurationError" in done.stderr
        assert done.returncode == 1

    def test_a_python_without_the_package_is_told_so(self, tmp_path: Path) -> None:
        """A program whose Python cannot import onnx_device_guard: said, its import kept;
        `--strict` refuses the import. Before: `import onnxruntime` itself failed."""
        hidden = tmp_path / "hidden"  # a sitecustomize that hides the package, as another venv
        hidden.mkdir()
        (hidden / "sitecustomize.py").write_text(  # in the program only, where run's finder is
            "import sys\n"
            "if any(type(f).__name__ == '_WatchOnImport' for f in sys.meta_path):\n"
            "    sys.modules['onnx_device_guard'] = None\n"
        )
        script = tmp_path / "plain.py"
        script.write_text("import onnxruntime\nprint('imported')\n")
        command = [sys.executable, "-m", "onnx_device_guard", "run"]
        path = os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")]))
        environ = {**os.environ, "PYTHONPATH": path}
        for options, status in (((), 0), (("--strict",), 1)):
            done = subprocess.run(
                [*command, *options, "--", sys.executable, str(script)],
                capture_output=True,
                text=True,
                check=False,
                env=environ,
            )
            assert done.returncode == status, done.stderr
            assert "cannot import onnx_device_guard" in done.stderr
            assert ("imported" in done.stdout) is (status == 0)

    def test_the_programs_own_sitecustomize_is_the_one_imported(self, tmp_path: Path) -> None:
        """It runs, and `import sitecustomize` gives it, not run's (which it gave before)."""
        own = tmp_path / "own"
        own.mkdir()
        (own / "sitecustomize.py").write_text("SENTINEL = 42\n")
        script = tmp_path / "app.py"
        script.write_text("import sitecustomize\nprint(sitecustomize.SENTINEL)\n")
        path = os.pathsep.join(filter(None, [str(own), os.environ.get("PYTHONPATH")]))
        done = subprocess.run(
            [sys.executable, "-m", "onnx_device_guard", "run", "--", sys.executable, str(script)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": path},
        )
        assert done.stdout == "42\n", done.stderr

    def test_a_program_that_cannot_be_run(self, tmp_path: Path) -> None:
        """126 for a program found but not runnable, 127 for none: as a shell says it."""
        script = tmp_path / "app.py"
        script.write_text("print('ran')\n")
        command = [sys.executable, "-m", "onnx_device_guard", "run", "--"]
        found = subprocess.run([*command, str(script)], capture_output=True, check=False)
        missing = subprocess.run([*command, str(tmp_path / "no")], capture_output=True, check=False)
        assert (found.returncode, missing.returncode) == (126, 127)

    def test_an_empty_program_name_is_one_not_found(self, tmp_path: Path) -> None:
        """`run -- ""`: one line and 127, as a shell gives. Before: execve's ValueError, a
        traceback and status 1."""
        command = [sys.executable, "-m", "onnx_device_guard", "run", "--", ""]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        assert (done.returncode, done.stderr.count("\n")) == (127, 1), done.stderr
        assert "cannot run ''" in done.stderr

    @pytest.mark.parametrize(
        ("variable", "value"),
        [
            ("ONNX_DEVICE_GUARD_RESOLUTION_MODE", "bogus"),
            ("ONNX_DEVICE_GUARD_WARN", "maybe"),
            ("ONNX_DEVICE_GUARD_FALLBACK_DEVICE", "gpu0"),
        ],
    )
    def test_a_bad_inherited_variable_is_refused_before_the_program_starts(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
    ) -> None:
        """One line naming the variable, status 2, the program never started. Before: it
        started and died at its first dropped session with a traceback."""
        monkeypatch.setenv(variable, value)
        script = tmp_path / "app.py"
        script.write_text(self.SCRIPT)
        command = [sys.executable, "-m", "onnx_device_guard", "run", "--", sys.executable]
        done = subprocess.run([*command, str(script)], capture_output=True, text=True, check=False)
        assert (done.returncode, done.stdout, done.stderr.count("\n")) == (2, "", 1)
        assert variable in done.stderr
        assert "Traceback" not in done.stderr

    def test_the_usual_spellings_are_the_librarys(self) -> None:
        """What run reads without torch, the library reads alike (`SWITCH_WORDS`, in any case)."""
        from onnx_device_guard._cli import _USUAL
        from onnx_device_guard._policy import SWITCH_WORDS, read_environment

        samples = {
            "ONNX_DEVICE_GUARD_RESOLUTION_MODE": ["fallback", "fail"],
            "ONNX_DEVICE_GUARD_FALLBACK_DEVICE": ["cpu", "meta", "mps", "cuda", "cuda:127"],
            "ONNX_DEVICE_GUARD_WARN": [*SWITCH_WORDS, *map(str.upper, SWITCH_WORDS), "yEs"],
        }
        for name, values in samples.items():
            for value in values:
                assert re.fullmatch(_USUAL[name], value), (name, value)
                read_environment({name: f" {value} "})
        long_s = "ye\u017f"  # matches "yes" ignoring case in Unicode, which .lower() does not
        assert not re.fullmatch(_USUAL["ONNX_DEVICE_GUARD_WARN"], long_s)

    def test_the_usual_values_are_read_without_torch(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`run --fallback-device cuda:1` and the variables' usual spellings, spaces around
        them (as the variables take them), start the program without importing torch first.
        Before: `--fallback-device " cpu "` was refused."""
        monkeypatch.setenv("ONNX_DEVICE_GUARD_RESOLUTION_MODE", " fallback ")
        monkeypatch.setenv("ONNX_DEVICE_GUARD_WARN", " Yes ")
        script = tmp_path / "app.py"
        script.write_text("print('ran')\n")
        command = [sys.executable, "-X", "importtime", "-m", "onnx_device_guard", "run"]
        for device in ("cuda:1", " cpu "):
            done = subprocess.run(
                [*command, "--fallback-device", device, "--", sys.executable, str(script)],
                capture_output=True,
                text=True,
                check=False,
            )
            assert done.stdout == "ran\n", done.stderr
            assert re.search(r"\| +torch$", done.stderr, re.MULTILINE) is None

    @pytest.mark.parametrize("flag", ["-I", "-E", "-S", "-sE"])
    def test_a_python_that_skips_the_watch_is_told_so(self, tmp_path: Path, flag: str) -> None:
        """python -I, -E and -S cannot be watched: run says so instead of running unwatched."""
        done = self.run(tmp_path, python=(flag,))
        assert done.returncode == 2
        assert "cannot start" in done.stderr
        assert "made" not in done.stdout

    @pytest.mark.parametrize(
        "line",
        [
            "#!{python} -I",
            "#!/usr/bin/env -S {python} -sE",
            "#!/usr/bin/env -S -u X {python} -I",  # env's -u takes a value
            "#!{python}",
        ],
    )
    def test_a_script_is_read_for_the_options_of_its_interpreter_line(
        self, tmp_path: Path, line: str
    ) -> None:
        """`run -- ./app.py` reads app.py's `#!` line as it reads a `python ...` command line."""
        script = tmp_path / "app.py"
        script.write_text(line.format(python=sys.executable) + "\n" + self.SCRIPT)
        script.chmod(0o755)
        done = subprocess.run(
            [sys.executable, "-m", "onnx_device_guard", "run", "--", "./app.py"],
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
        )
        if line == "#!{python}":
            assert done.returncode == 7, done.stderr
            assert "DeviceFallbackWarning" in done.stderr
        else:
            assert done.returncode == 2
            assert re.search(r"-s?[IE] in its #! line ignores PYTHONPATH", done.stderr), done.stderr
            assert "made" not in done.stdout


PACKAGE = """
import onnxruntime

CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def _providers(device):
    return CUDA if device in ("gpu", 0, "cuda") else ["CPUExecutionProvider"]


class Detector:
    def __init__(self, path, device="gpu"):
        self.device = "cuda" if device == "gpu" else "cpu"
        self.parts = types.SimpleNamespace(
            stages={{"k%d" % n: None for n in range(70)}}
        )
        made = onnxruntime.InferenceSession(path, providers=_providers(device))
        self.parts.stages["k69"] = [made]


class Lazy:
    def __init__(self, path, providers):
        self.path, self.providers, self.session = path, providers, None

    def embed(self):
        if self.session is None:
            self.session = onnxruntime.InferenceSession(self.path, providers=self.providers)
        return "embedded"


class Mixed:
    def __init__(self, path):
        self.gpu = onnxruntime.InferenceSession(path, providers=CUDA)
        self.cpu = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])


class OnCPU:  # magika's shape: a session asked for the CPU, and no device
    def __init__(self, path):
        self._onnx_session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])


class Pipeline:  # it builds a Detector itself, beside a session of its own
    def __init__(self, path):
        self.detector = Detector(path)
        self.session = onnxruntime.InferenceSession(path, providers=CUDA)
        self.device = "cuda"


def load(path, device="gpu"):
    return Detector(path, device)


def main(path):  # the package's own code, calling its loader
    return load(path)


def load_lazy(path, providers=CUDA):
    return Lazy(path, providers)


def load_mixed(path):
    return Mixed(path)


def load_in_threads(path):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        made = list(pool.map(lambda _: onnxruntime.InferenceSession(path, providers=CUDA), [0]))
    model = Lazy(path, CUDA)
    model.session = made[0]
    return model
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """A package-shaped module on disk, imported fresh: it asks for the GPU its own way."""
    name = f"births_pkg_{next(_names)}"
    (tmp_path / f"{name}.py").write_text("import concurrent.futures, types\n" + PACKAGE.format())
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    yield module
    sys.modules.pop(name, None)


def quietly(call: Any, *args: Any) -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Specified provider", UserWarning)
        return call(*args)


class TestPatchAlone:
    @pytest.mark.parametrize("undone", [False, True])
    def test_a_strict_class_built_by_a_patched_loader_keeps_its_own_check(
        self, monkeypatch: pytest.MonkeyPatch, undone: bool
    ) -> None:
        """A session a guarded class's instance opens later is checked with the class's own
        settings, the nearest guard's, when a patched loader built it; after the patch's
        `undo()` too.

        Before: the loader's load took the model over with its own defaults, so the class's
        "fail" only warned, and after `undo()` the session was not checked at all.
        """

        @device_guard(resolution_mode="fail")
        class LazyModel:
            def __init__(self) -> None:
                self.device, self.session = "cuda", None

            def open(self) -> None:
                self.session = session()

        module = types.ModuleType("lazy_package")
        module.load = lambda: LazyModel()  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "lazy_package", module)
        with patch("lazy_package:load") as patched:
            model = module.load()
            if undone:
                patched.undo()
            with pytest.raises(EnvironmentConfigurationError, match="opened after the load"):
                model.open()

    @pytest.mark.parametrize("undone", [False, True])
    def test_a_strict_guard_around_a_patched_loader_checks_later_sessions(
        self, monkeypatch: pytest.MonkeyPatch, undone: bool
    ) -> None:
        """Each guard around a model checks what it opens later, the nearest first, as at its
        load: the patch's warns, the strict one around it raises; after the patch's `undo()`,
        the strict one alone.

        Before the fix above only the nearest checked it (the patch's: no error), and after
        `undo()` nothing did."""

        class LazyModel:
            def __init__(self) -> None:
                self.device, self.session = "cuda", None

            def open(self) -> None:
                self.session = session()

        module = types.ModuleType("lazy_package")
        module.load = lambda: LazyModel()  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "lazy_package", module)
        with patch("lazy_package:load") as patched:
            model = device_guard(resolution_mode="fail")(lambda: module.load())()
            if undone:
                patched.undo()
            with pytest.raises(EnvironmentConfigurationError, match="opened after the load"):
                quietly(model.open)

    def test_a_cpu_models_session_asked_for_the_gpu_later_is_reported(
        self, package: types.ModuleType, caught: list[warnings.WarningMessage]
    ) -> None:
        """A model with no device, whose session asked for the CPU, is followed all the same.

        Before: it was left unfollowed, so `set_providers(CUDA)` that onnxruntime dropped was
        silent, in "fail" mode too (a watch alone reported it).
        """
        with patch(f"{package.__name__}:OnCPU", resolution_mode="fail"):
            model = package.OnCPU(example_model())
            with pytest.raises(
                EnvironmentConfigurationError, match="dropped CUDAExecutionProvider"
            ):
                quietly(model._onnx_session.set_providers, CUDA)
        with patch(f"{package.__name__}:OnCPU"):
            model = package.OnCPU(example_model())
            quietly(model._onnx_session.set_providers, CUDA)
        assert len(fallbacks(caught)) == 1

    def test_a_loader_patched_in_main_warns_at_the_programs_line(self, tmp_path: Path) -> None:
        """A loader in the program itself (`__main__`): the report for a session opened later
        is filed at the program's line. Before: every frame was the package's, so it was
        filed inside the library."""
        script = textwrap.dedent(
            """
            import warnings, onnxruntime
            from onnx_device_guard import example_model, patch
            class Lazy:
                def __init__(self):
                    self.device, self.session = "cuda", None
                def open(self):
                    asked = ["CUDAExecutionProvider", "CPUExecutionProvider"]
                    self.session = onnxruntime.InferenceSession(example_model(), providers=asked)
            def load():
                return Lazy()
            patch("__main__:load")
            model = load()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model.open()
            print([(w.filename, w.lineno) for w in caught if "Fallback" in w.category.__name__])
            """
        )
        (program := tmp_path / "app.py").write_text(script)
        done = subprocess.run(
            [sys.executable, str(program)], capture_output=True, text=True, check=False
        )
        assert done.stdout.strip() == str([(str(program), 9)]), done.stderr

    def test_a_patched_loader_called_by_its_own_package_warns_at_that_call(
        self, package: types.ModuleType, caught: list[warnings.WarningMessage]
    ) -> None:
        """With no load around it, the caller is the package's line that called the loader
        (a package of your own, say), not a frame past the package."""
        with patch(f"{package.__name__}:load"):
            quietly(package.main, example_model())
        ours = [w for w in caught if issubclass(w.category, DeviceFallbackWarning)]
        assert [w.filename for w in ours] == [package.__file__]

    def test_a_patched_class_the_package_builds_warns_at_the_callers_line(
        self, package: types.ModuleType, caught: list[warnings.WarningMessage]
    ) -> None:
        """The inner load's report skips the package's frames. Before: it pointed at the
        package's own line that built the Detector."""
        with patch(f"{package.__name__}:Pipeline"), patch(f"{package.__name__}:Detector"):
            quietly(package.Pipeline, example_model())
        ours = [w for w in caught if issubclass(w.category, DeviceFallbackWarning)]
        assert ours
        assert {w.filename for w in ours} == {__file__}

    def test_providers_asked_for_are_the_device_asked_for(
        self, package: types.ModuleType, caught: list[warnings.WarningMessage]
    ) -> None:
        """patch(target) with no option: a session in a namespace, 70th dict entry, is found."""
        with patch(f"{package.__name__}:load"):
            model = quietly(package.load, example_model())
        assert model.device == "cpu"
        (text,) = fallbacks(caught)
        assert "tiny.onnx" in text
        assert "Detector" in text

    def test_fail_mode_raises_out_of_the_loader(self, package: types.ModuleType) -> None:
        """In "fail" mode the package's loader raises."""
        with (
            patch(f"{package.__name__}:load", resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError),
        ):
            quietly(package.load, example_model())

    def test_a_package_word_for_the_gpu_does_not_break_the_load(
        self, package: types.ModuleType, caught: list[warnings.WarningMessage]
    ) -> None:
        """device="gpu", which torch cannot parse, is left to the package: the sessions tell."""
        with (
            patch(f"{package.__name__}:load", resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError),
        ):
            quietly(package.load, example_model(), "gpu")
        with patch(f"{package.__name__}:load", device="cpu"):
            model = quietly(package.load, example_model(), "cpu")
        assert model.device == "cpu"
        assert fallbacks(caught) == []

    def test_an_int_device_is_read_as_torch_reads_it(self, package: types.ModuleType) -> None:
        """device=0 is cuda:0, so "fail" mode does not return the model silently."""
        with (
            patch(f"{package.__name__}:load", resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="cuda:0"),
        ):
            quietly(package.load, example_model(), 0)

    def test_a_session_opened_later_is_checked_in_the_call_that_opens_it(
        self, package: types.ModuleType, caught: list[warnings.WarningMessage]
    ) -> None:
        """No require_session=False needed: the first embed() reports once."""
        with patch(f"{package.__name__}:load_lazy"):
            model = package.load_lazy(example_model())
            assert fallbacks(caught) == []
            quietly(model.embed)
            quietly(model.embed)
        assert len(fallbacks(caught)) == 1
        assert caught[-1].filename == __file__  # not the package's line

    def test_a_session_opened_later_raises_from_that_call_in_fail_mode(
        self, package: types.ModuleType
    ) -> None:
        """The error comes out of the call that opened the session."""
        with patch(f"{package.__name__}:load_lazy", resolution_mode="fail"):
            model = package.load_lazy(example_model())
            with pytest.raises(EnvironmentConfigurationError, match="opened after the load"):
                quietly(model.embed)

    def test_after_undo_a_model_left_waiting_is_the_watchs(
        self, package: types.ModuleType, caught: list[warnings.WarningMessage]
    ) -> None:
        """undo() ends the patch's wait: the session opened later is the watch's to report."""
        with watch_sessions():
            with patch(f"{package.__name__}:load_lazy"):
                model = package.load_lazy(example_model())
            quietly(model.embed)
        (text,) = fallbacks(caught)
        assert text.startswith("onnxruntime dropped CUDAExecutionProvider")

    def test_undo_leaves_no_class_changed(self, package: types.ModuleType) -> None:
        """Sessions opened later need no method rewriting: the class is untouched."""
        before = dict(vars(package.Lazy))
        with patch(f"{package.__name__}:load_lazy"):
            package.load_lazy(example_model())
        assert dict(vars(package.Lazy)) == before

    def test_a_deliberate_cpu_session_beside_a_gpu_one_is_no_fallback(
        self, package: types.ModuleType, caught: list[warnings.WarningMessage]
    ) -> None:
        """Each born session is checked against what it asked for."""
        with patch(f"{package.__name__}:load_mixed"):
            quietly(package.load_mixed, example_model())
        (text,) = fallbacks(caught)  # the GPU one dropped; the CPU one is not blamed
        assert "Mixed" in text

    def test_the_model_is_not_kept_alive(self, package: types.ModuleType) -> None:
        """Nothing the library keeps holds a model, pending or aligned."""
        with patch(f"{package.__name__}:load_lazy"):
            model = package.load_lazy(example_model())
        reference = weakref.ref(model)
        del model
        gc.collect()
        assert reference() is None


class TestOneReportPerLoad:
    @pytest.mark.parametrize("warn", [True, False])
    def test_set_providers_during_a_load_is_its_to_report(
        self, caught: list[warnings.WarningMessage], warn: bool
    ) -> None:
        """A session a load moves to a GPU provider that is dropped is reported by the load,
        with its settings. Before: the watch's report came first, with the defaults, so a
        quiet load warned."""
        made = session(CPU)

        @device_guard(warn=warn)
        def load() -> Any:
            made.set_providers(CUDA)
            return types.SimpleNamespace(session=made, device="cuda")

        assert quietly(load).device == "cpu"
        said = fallbacks(caught)
        assert len(said) == warn
        assert all(text.startswith("The model asks for device 'cuda:0'") for text in said)

    def test_a_watch_and_a_guard_report_once(
        self, package: types.ModuleType, caught: list[warnings.WarningMessage]
    ) -> None:
        """A session born in a guarded load is the load's to report, watch or not."""
        with watch_sessions(), patch(f"{package.__name__}:load"):
            quietly(package.load, example_model())
        assert len(fallbacks(caught)) == 1

    def test_nested_guards_report_once(self, caught: list[warnings.WarningMessage]) -> None:
        """A guarded loader that builds a guarded class reports the load once."""

        @device_guard
        class Inner:
            def __init__(self) -> None:
                self.device = torch.device("cuda")
                self.session = session()

        @device_guard
        def load() -> Any:
            return types.SimpleNamespace(inner=Inner(), device="cuda")

        model = load()
        assert model.device == "cpu"
        assert model.inner.device == torch.device("cpu")
        assert len(fallbacks(caught)) == 1

    def test_nested_guards_with_a_session_asked_for_the_cpu_report_once(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A patched loader building a patched class: the class's report is the load's."""
        module: Any = types.ModuleType("nested_cpu_pkg")

        class Model:  # asks onnxruntime for the CPU, keeps the device it was given
            def __init__(self, device: str) -> None:
                self.session, self.device = session(CPU), device

        module.Model, module.load = Model, lambda device="cuda": module.Model(device)
        sys.modules[module.__name__] = module
        try:
            with patch("nested_cpu_pkg:Model"), patch("nested_cpu_pkg:load"):
                assert module.load().device == "cpu"
        finally:
            del sys.modules[module.__name__]
        assert len(fallbacks(caught)) == 1

    def test_an_enclosing_load_names_the_session_not_reported_yet(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """The inner load reported its session; the outer one names the other, which dropped too."""

        @device_guard(session_attr="a")
        def load_inner() -> Any:
            model = types.SimpleNamespace(a=session(), device="cuda")
            model.b = session()
            return model

        @device_guard
        def load_outer() -> Any:
            return load_inner()

        load_outer()
        inner, outer = fallbacks(caught)
        assert "session runs only" in inner
        assert "sessions 'b', 'a' run only" in outer  # the one not reported yet first

    def test_a_lazy_model_opening_two_sessions_in_one_call_reports_once(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A model that fell back at its first session says nothing more for the next ones."""

        @device_guard
        class LazyOCR:
            def __init__(self) -> None:
                self.device, self.det, self.rec = "cuda", None, None

            def __call__(self) -> None:
                self.det, self.rec = session(), session()

            def classify(self) -> None:
                self.cls = session()

        model = LazyOCR()
        model()
        model.classify()
        assert model.device == "cpu"
        assert len(fallbacks(caught)) == 1

    def test_a_report_quiets_only_the_loads_around_it(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A second load on a cached session, and a realign, report again: they are not nested."""
        with watch_sessions():  # observed at birth: it asked for the CPU alone
            cached = session(CPU)
        assert birth_of(cached) is not None

        @device_guard
        def load(device: str = "cuda") -> Any:
            return types.SimpleNamespace(session=cached, device=device)

        first, second = load(), load()
        first.device = "cuda"
        realign(first)
        assert (first.device, second.device) == ("cpu", "cpu")
        assert len(fallbacks(caught)) == 3

    def test_a_cached_dropped_session_is_reported_by_each_load(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """Reported once at its birth's load does not quiet a later, separate load."""
        cache: list[Any] = []

        @device_guard
        def load(device: str = "cuda") -> Any:
            cache[:] = cache or [session()]
            return types.SimpleNamespace(session=cache[0], device=device)

        load()
        load()
        assert len(fallbacks(caught)) == 2

    def test_a_load_refused_by_the_guard_leaves_its_sessions_to_the_watch(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A factory that made a session and returned None: the watch reports the session."""
        kept = []

        @device_guard
        def load() -> None:
            kept.append(session())

        with watch_sessions(), pytest.raises(DeviceGuardError, match="NoneType"):
            load()
        assert len(fallbacks(caught)) == 1

    def test_an_inner_load_failing_in_fail_mode_is_not_reported_again_by_the_watch(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """The inner load's error is the report: the watch adds no warning to it."""

        @device_guard(resolution_mode="fail")
        def inner(device: str = "cuda") -> Any:
            return types.SimpleNamespace(session=session(), device=device)

        @device_guard
        def outer() -> Any:
            return inner()

        with watch_sessions(), pytest.raises(EnvironmentConfigurationError, match="'cuda'"):
            outer()
        assert fallbacks(caught) == []

    def test_a_lazy_models_drop_after_another_warning_is_reported(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A CPU-alone session warned first; a session that then loses CUDA warns too."""

        class Lazy:
            def __init__(self) -> None:
                self.device, self.first, self.second = "cuda", None, None

            def open(self) -> None:
                self.first = session(CPU)

            def open_gpu(self) -> None:
                self.second = session()

        model = device_guard(Lazy)()
        model.open()
        model.open_gpu()
        cpu_alone, dropped = fallbacks(caught)
        assert "device 'cuda'" in cpu_alone
        assert "device 'cuda:0'" in dropped  # what the second session asked for

    def test_a_lazy_model_already_on_the_cpu_reports_its_first_drop(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """Its attribute says 'cpu', its session asked for CUDA and lost it: one warning."""

        class Lazy:
            def __init__(self) -> None:
                self.session, self.device = None, "cpu"

            def open(self) -> None:
                self.session = session()

        model = device_guard(Lazy)()
        model.open()
        assert len(fallbacks(caught)) == 1

    def test_sessions_built_in_worker_threads_are_the_loads(
        self, package: types.ModuleType, caught: list[warnings.WarningMessage]
    ) -> None:
        """A thread pool's sessions reach the load through the model, and are reported once."""
        with watch_sessions(), patch(f"{package.__name__}:load_in_threads"):
            model = quietly(package.load_in_threads, example_model())
        assert birth_of(model.session) is not None
        assert len(fallbacks(caught)) == 1

    def test_a_worker_threads_session_beside_one_born_in_the_load_is_found(self) -> None:
        """A session born in the load does not end the search for one a worker thread made."""

        class Stage:
            def __init__(self, session: object) -> None:
                self.session = session

        class Pipeline:
            def __init__(self) -> None:
                self.detector = session(CPU)  # born in the load, asked for the CPU
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    self.stages = [Stage(pool.submit(session).result())]  # asked for CUDA
                self.device = "cuda"

        with pytest.raises(EnvironmentConfigurationError, match=r"stages\[0\]\.session"):
            device_guard(resolution_mode="fail")(Pipeline)()

    def test_a_realign_inside_the_load_is_part_of_it(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A worker thread's session the watch reported is not reported again by a realign."""

        class Model:
            def __init__(self, session: object) -> None:
                self.session, self.device = session, "cuda"

        def load() -> Model:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                model = Model(pool.submit(session).result())
            realign(model)
            return model

        with watch_sessions():
            assert device_guard(load)().device == "cpu"
        assert len(fallbacks(caught)) == 1


class TestRefusals:
    def test_what_can_never_hold_a_session_is_refused(self) -> None:
        """None and tuples are refused; a model that may open sessions later is not."""
        with pytest.raises(DeviceGuardError, match="NoneType"):
            device_guard(lambda: None)()
        with pytest.raises(DeviceGuardError):
            device_guard(lambda: (1, 2))()
        assert device_guard(lambda: types.SimpleNamespace(device="cuda"))().device == "cuda"

    @pytest.mark.parametrize("shape", ["tuple", "list", "dict", "none", "generator"])
    def test_a_session_born_in_the_call_does_not_let_a_non_model_through(self, shape: str) -> None:
        """`return model, tokenizer` (or nothing, or a generator) is refused, sessions or not.

        Before: a list or a dict of models went through unchecked: its sessions asked for the
        CPU, and the guard read no device off the list, so models on CUDA passed silently.
        """

        def load(device: str = "cuda") -> Any:
            model = types.SimpleNamespace(session=session(CPU), device=device)
            if shape == "generator":
                return (model for _ in range(1))
            shaped = {"tuple": (model, "tokenizer"), "list": [model], "dict": {"m": model}}
            return shaped.get(shape)

        with pytest.raises(DeviceGuardError, match="is no model object"):
            device_guard(load)()

    def test_a_context_manager_factory_is_refused(self) -> None:
        """A `@contextmanager` factory returns no model (its `with` block gets one): refused.

        Before: the guard looked for a device on the context manager and let it through, so
        the model the block got kept "cuda"."""

        @device_guard
        @contextlib.contextmanager
        def open_model() -> Iterator[Any]:
            yield types.SimpleNamespace(session=session(), device="cuda")

        with pytest.raises(DeviceGuardError, match="is no model object"):
            open_model()

    def test_require_session_true_keeps_the_old_refusal(self) -> None:
        """require_session=True refuses a model without a session."""
        with pytest.raises(DeviceGuardError, match="no object with get_providers"):
            device_guard(require_session=True)(lambda: types.SimpleNamespace(device="cuda"))()

    def test_what_the_search_cannot_reach_is_an_error_in_fail_mode(self) -> None:
        """A model built before the call, with sessions past the search's limits, is said."""
        made = session(CPU)
        deep = types.SimpleNamespace(
            a=types.SimpleNamespace(b=types.SimpleNamespace(c=types.SimpleNamespace(s=made)))
        )
        with pytest.raises(DeviceGuardError, match="stopped short"):
            device_guard(resolution_mode="fail")(
                lambda: types.SimpleNamespace(deep=deep, device="cuda")
            )()


class TestRunSeesOnlyInterpreterOptions:
    @pytest.mark.parametrize(
        ("command", "refused"),
        [
            (["python3", "-I", "app.py"], "-I"),
            (["python", "-W", "error", "-E", "app.py"], "-E"),
            (["python3.11", "app.py", "-E"], None),
            (["python", "-c", "pass", "-S"], None),
            (["python", "-m", "pytest", "-I"], None),
            (["pytest", "-S"], None),
            (["python", "-bW", "error", "-I", "app.py"], "-I"),  # -W inside a cluster
            (["python", "--check-hash-based-pycs", "always", "-I", "app.py"], "-I"),
            (["python", "-WE", "app.py"], None),  # E is the warning filter, not an option
            (["python", "-Xdev", "-bS", "app.py"], "-bS"),
            (["python", "-cI", "app.py"], None),  # the code is "I"
            (["python", "--", "app.py", "-I"], None),
            (["/usr/bin/python3.13t", "-I", "app.py"], "-I"),  # free-threaded
            (["python3.12-dbg", "-E", "app.py"], "-E"),
            (["python3.11d", "-S", "app.py"], "-S"),
            (["pypy3.10", "-I", "app.py"], "-I"),
            (["python.exe", "-I", "app.py"], "-I"),
            (["python-config", "-I"], None),
        ],
    )
    def test_only_options_before_the_program_count(
        self, command: list[str], refused: str | None
    ) -> None:
        """An -E after the script or -m is the program's own argument, not Python's."""
        from onnx_device_guard._cli import _startup_skipping

        assert _startup_skipping(command) == refused


class TestHooksComeOff:
    def test_an_abandoned_async_load_ends(self) -> None:
        """A guarded coroutine closed by the collector, in another context, ends its load.

        Before: resetting the load's context variable raised there, so the load stayed in
        flight for good: the hooks never came off and no later drop no model shows was said."""
        script = textwrap.dedent(
            """
            import asyncio, gc, onnxruntime
            from onnx_device_guard import device_guard
            init = vars(onnxruntime.InferenceSession)["__init__"]

            @device_guard(device="cpu", require_session=False)
            async def slow_load():
                await asyncio.sleep(60)

            loop = asyncio.new_event_loop()
            task = loop.create_task(slow_load())
            loop.run_until_complete(asyncio.sleep(0.01))
            loop.close()
            del task
            gc.collect()
            assert vars(onnxruntime.InferenceSession)["__init__"] is init
            print("unhooked")
            """
        )
        assert_prints(script, "unhooked")

    def test_a_lazy_model_loaded_again_waits_once_with_the_later_check(self) -> None:
        """Returned by a load twice, a lazy model keeps one weak reference, the later load's
        check and birth number; collected, it waits no more."""
        from onnx_device_guard import _births

        class Lazy:
            def __init__(self) -> None:
                self.device, self.session = "cuda", None

        def factory(box: list[Lazy]) -> Lazy:
            return box[0]

        model, load = Lazy(), device_guard(factory)
        load([model])
        reference, [(check, _, number)] = _births._PENDING[key := id(model)]
        load([model])
        again, [(later, _, renumbered)] = _births._PENDING[key]
        assert again is reference
        assert later != check
        assert renumbered > number
        del model, again
        gc.collect()
        assert key not in _births._PENDING

    def test_the_last_waiting_model_collected_unhooks_onnxruntime(self) -> None:
        """A guarded lazy model keeps the hooks while alive; once it is collected they come off."""
        script = textwrap.dedent(
            """
            import gc, onnxruntime
            from onnx_device_guard import device_guard
            class Lazy:
                def __init__(self):
                    self.device, self.session = "cuda", None
            init = vars(onnxruntime.InferenceSession)["__init__"]
            model = device_guard(lambda: Lazy())()
            assert vars(onnxruntime.InferenceSession)["__init__"] is not init
            del model
            gc.collect()
            assert vars(onnxruntime.InferenceSession)["__init__"] is init
            print("unhooked")
            """
        )
        assert_prints(script, "unhooked")

    def test_undo_ends_the_wait_of_the_models_the_patch_guarded(self) -> None:
        """undo() unhooks at once; a model it left waiting is not checked after it."""
        script = textwrap.dedent(
            """
            import sys, types, warnings, onnxruntime
            from onnx_device_guard import DeviceFallbackWarning, example_model, patch
            class Lazy:
                def __init__(self):
                    self.device, self.session = "cuda", None
                def open(self):
                    self.session = onnxruntime.InferenceSession(
                        example_model(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
                    )
            sys.modules["lazy_pkg"] = module = types.ModuleType("lazy_pkg")
            module.Lazy = Lazy
            init = vars(onnxruntime.InferenceSession)["__init__"]
            with patch("lazy_pkg:Lazy"):
                model = module.Lazy()
            assert vars(onnxruntime.InferenceSession)["__init__"] is init
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model.open()
            assert model.device == "cuda", model.device
            assert not [w for w in caught if w.category is DeviceFallbackWarning], caught
            print("unhooked")
            """
        )
        assert_prints(script, "unhooked")

    def test_an_undo_elsewhere_waits_for_the_loads_in_flight(self) -> None:
        """An undo in another task or thread leaves the hooks to the loads in flight."""
        script = textwrap.dedent(
            """
            import asyncio, sys, threading, types, warnings
            import onnxruntime
            from onnx_device_guard import device_guard, example_model, patch, watch_sessions
            warnings.simplefilter("ignore")
            init = vars(onnxruntime.InferenceSession)["__init__"]
            class Model:  # its session where only its birth record finds it
                def __init__(self):
                    made = onnxruntime.InferenceSession(
                        example_model(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
                    )
                    deep = types.SimpleNamespace(c=types.SimpleNamespace(s=made))
                    self.device, self.a = "cuda", types.SimpleNamespace(b=deep)
            @device_guard(follow=False)
            async def load():
                await asyncio.sleep(0.05)
                return Model()
            async def ends_a_watch():
                with watch_sessions(warn=False):
                    await asyncio.sleep(0.01)
            async def main():
                return await asyncio.gather(load(), ends_a_watch())
            model, _ = asyncio.run(main())
            assert model.device == "cpu", model.device
            assert vars(onnxruntime.InferenceSession)["__init__"] is init
            sys.modules["undone_pkg"] = module = types.ModuleType("undone_pkg")
            module.load = lambda: None
            started, go, made = threading.Event(), threading.Event(), []
            @device_guard(follow=False)
            def load_in_a_thread():
                started.set()
                go.wait(10)
                return Model()
            handle = patch("undone_pkg:load")
            thread = threading.Thread(target=lambda: made.append(load_in_a_thread()))
            thread.start()
            started.wait(10)
            handle.undo()
            go.set()
            thread.join(10)
            assert made[0].device == "cpu", made[0].device
            assert vars(onnxruntime.InferenceSession)["__init__"] is init
            @device_guard
            def load_following():
                with watch_sessions(warn=False):
                    return Model()
            following = load_following()  # ended its watch, then follows its session
            assert vars(onnxruntime.InferenceSession)["__init__"] is not init
            print("aligned and unhooked")
            """
        )
        assert_prints(script, "aligned and unhooked")

    def test_a_load_whose_alignment_raises_still_unhooks_after_an_undo(self) -> None:
        """The undo waited for a load that fails in "fail" mode: the hooks go when it raises."""
        script = textwrap.dedent(
            """
            import sys, threading, types
            import onnxruntime
            from onnx_device_guard import EnvironmentConfigurationError, device_guard, example_model
            from onnx_device_guard import patch
            init = vars(onnxruntime.InferenceSession)["__init__"]
            sys.modules["failing_pkg"] = module = types.ModuleType("failing_pkg")
            module.load = lambda: None
            started, go, raised = threading.Event(), threading.Event(), []
            @device_guard(resolution_mode="fail", follow=False)
            def load(device="cuda"):
                started.set()
                go.wait(10)
                return onnxruntime.InferenceSession(
                    example_model(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
                )
            def run():
                try:
                    load()
                except EnvironmentConfigurationError as error:
                    raised.append(error)
            handle = patch("failing_pkg:load")
            thread = threading.Thread(target=run)
            thread.start()
            started.wait(10)
            handle.undo()
            assert vars(onnxruntime.InferenceSession)["__init__"] is not init  # the load's still
            go.set()
            thread.join(10)
            assert raised, "the load did not fail"
            assert vars(onnxruntime.InferenceSession)["__init__"] is init
            print("failed and unhooked")
            """
        )
        assert_prints(script, "failed and unhooked")


class TestWhoOwnsABirth:
    """Each session born reaches the one that must check it: no session is missed."""

    def test_sessions_opened_later_are_checked_together(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """Two sessions opened after the load on different GPUs fall back, as in the load."""

        class OnGPU(onnxruntime.InferenceSession):  # type: ignore[misc]
            """Runs on the GPU `device_id` as far as anything asking it can tell."""

            def __init__(self, device_id: int) -> None:
                self.device_id = device_id
                super().__init__(example_model(), providers=CPU)

            def get_providers(self) -> list[str]:
                return CUDA

            def get_provider_options(self) -> dict[str, dict[str, str]]:
                return {CUDA[0]: {"device_id": str(self.device_id)}}

        @device_guard
        class Lazy:
            def __init__(self) -> None:
                self.device, self.sessions = "cuda:0", list[Any]()

            def open(self, device_id: int) -> None:
                self.sessions.append(OnGPU(device_id))

        model = Lazy()
        model.open(1)
        assert model.device == "cuda:1"  # the one session's GPU
        model.open(0)
        assert model.device == "cpu"  # the two disagree: the fallback device
        assert "different GPUs" in fallbacks(caught)[-1]

    def test_a_session_opened_far_down_a_method_is_the_models(self) -> None:
        """However many plain calls lie between the model's method and the birth."""

        def opened(depth: int) -> Any:
            return session() if depth == 0 else opened(depth - 1)

        @device_guard(resolution_mode="fail")
        class Lazy:
            def __init__(self) -> None:
                self.device, self.session = "cuda", None

            def open(self) -> None:
                self.session = opened(200)

        model = Lazy()
        with pytest.raises(EnvironmentConfigurationError, match="opened after the load"):
            model.open()

    def test_a_lazy_model_opening_in_another_load_is_checked_itself(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """The `self` that opens a session is nearer than the load around it: its own report."""

        @device_guard
        class Encoder:
            def __init__(self) -> None:
                self.device, self.session = "cuda", None

            def encode(self) -> None:
                self.session = session()

        @device_guard
        class Index:
            def __init__(self, encoder: Encoder) -> None:
                encoder.encode()
                self.device, self.session = "cpu", session(CPU)

        encoder = Encoder()
        Index(encoder)
        assert encoder.device == "cpu"
        (text,) = fallbacks(caught)
        assert "model Encoder" in text

    def test_a_load_inside_a_lazy_models_method_keeps_its_sessions(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A guarded load nearer than the waiting `self` owns what it makes."""

        @device_guard
        class Inner:
            def __init__(self) -> None:
                self.device, self.session = "cuda", session()

        @device_guard
        class Pipeline:
            def __init__(self) -> None:
                self.device = "cuda"
                self.inner: Any = None

            def build(self) -> None:
                self.inner = Inner()

        pipeline = Pipeline()
        pipeline.build()
        assert pipeline.inner.device == "cpu"
        (text,) = fallbacks(caught)
        assert "model Inner" in text

    def test_the_watch_checks_sessions_session_attr_leaves_out(self) -> None:
        """A guarded load with session_attr owns the sessions it names; the watch the rest."""

        class Two:
            def __init__(self) -> None:
                self.main, self.aux, self.device = session(CPU), session(), "cpu"

        load = device_guard(session_attr="main")(Two)
        with (
            watch_sessions(resolution_mode="fail"),
            pytest.raises(EnvironmentConfigurationError, match="dropped CUDAExecutionProvider"),
        ):
            load()

    @pytest.mark.parametrize("mode", ["fallback", "fail"])
    def test_without_a_watch_the_load_reports_sessions_session_attr_leaves_out(
        self, mode: Any, caught: list[warnings.WarningMessage]
    ) -> None:
        """Born in the load, asked for CUDA, not named: reported with the load's settings."""
        made = session(CPU)

        class Two:
            def __init__(self) -> None:
                self.main, self.aux, self.device = made, session(), "cpu"

        load = device_guard(session_attr="main", resolution_mode=mode)(Two)
        if mode == "fail":
            with pytest.raises(EnvironmentConfigurationError, match="dropped CUDAExecution"):
                load()
        else:
            assert load().device == "cpu"
            assert len(fallbacks(caught)) == 1

    def test_a_task_the_load_started_reports_to_the_watch_after_the_load(self) -> None:
        """A session a load's task opens once the load has returned is the watch's to check."""

        class Warming:
            def __init__(self) -> None:
                self.device, self.session = "cuda", None
                self.warming: asyncio.Task[Any] | None = None

        async def open_later() -> Any:
            await asyncio.sleep(0)  # the load has returned by now
            return session()

        @device_guard
        async def load() -> Any:
            model = Warming()
            model.warming = asyncio.create_task(open_later())  # copies the load's context
            return model

        async def main() -> None:
            with watch_sessions(resolution_mode="fail"):
                model = await load()
                with pytest.raises(EnvironmentConfigurationError, match="dropped CUDA"):
                    await model.warming

        asyncio.run(main())

    def test_a_session_opened_later_is_checked_with_the_loads_settings(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """The scope the model was loaded in decides, not the one its session is opened in."""

        class Lazy:
            def __init__(self) -> None:
                self.session, self.device = None, "cuda"

            def open(self) -> None:
                self.session = session()

        load = device_guard(Lazy)
        with device_policy(resolution_mode="fail"):
            strict = load()
        with device_policy(warn=False):
            quiet = load()
        with pytest.raises(EnvironmentConfigurationError):
            strict.open()
        with device_policy(resolution_mode="fail"):
            quiet.open()  # the load's "fallback" holds
        assert quiet.device == "cpu"
        assert fallbacks(caught) == []

    def test_a_drop_is_explained_once_without_advice_already_followed(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """The fix is why onnxruntime dropped the provider the session asked for. Before: it
        also said to create the session with the CUDA provider, which it was, and to install
        onnxruntime-gpu twice."""

        class Model:
            def __init__(self) -> None:
                self.session, self.device = session(), "cuda"

        device_guard(Model)()
        [message] = fallbacks(caught)
        assert message.count("install onnxruntime-gpu") == 1
        assert "This onnxruntime build has no CUDAExecutionProvider" in message
        assert "create the session with providers" not in message

    def test_a_session_a_loaded_model_opens_again_is_checked(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A model that had its session at load and opens a new one in `.to()` is checked then.

        Before: only a model without a session at load waited for births; a new session
        replacing the first was never checked, so "fail" mode left the model on CUDA.
        """

        class Model:
            def __init__(self) -> None:
                self.session, self.device = session(CPU), "cpu"

            def to(self, device: str) -> Model:
                self.session, self.device = session(CUDA if device == "cuda" else CPU), device
                return self

        strict = device_guard(resolution_mode="fail")(lambda: Model())()
        with pytest.raises(EnvironmentConfigurationError, match="opened after the load"):
            strict.to("cuda")
        device_guard(lambda: Model())().to("cuda")
        assert len(fallbacks(caught)) == 1
        assert device_guard(follow=False)(lambda: Model())().to("cuda").device == "cuda"
        # follow=False aligns at load only: the new session is no model's, reported on its own.
        assert fallbacks(caught)[1].startswith("onnxruntime dropped CUDAExecutionProvider")

    def test_a_later_session_is_checked_beside_those_of_the_load(self) -> None:
        """A CPU session a method opens beside the load's GPU one runs there on purpose, and the
        load's session, found by the search, is still followed after it."""

        class Model:
            def __init__(self, made: Any) -> None:
                self.inner = types.SimpleNamespace(engine=types.SimpleNamespace(session=made))
                self.device = "cuda"

            def open_tokenizer(self) -> None:
                self.tokenizer = session(CPU)

        made = GPUBuildSession()
        model = device_guard(resolution_mode="fail")(Model)(made)
        model.open_tokenizer()  # before: checked alone against 'cuda', a false error
        with pytest.raises(EnvironmentConfigurationError, match=r"inner\.engine\.session"):
            made.set_providers(CPU)  # before: the search's session was no longer followed

    @pytest.mark.parametrize("held", ["partial", "closure", "class attribute"])
    def test_a_worker_threads_session_the_model_hides_is_reported(
        self, held: str, caught: list[warnings.WarningMessage]
    ) -> None:
        """A session born in a worker thread during the load that no search finds is reported:
        warned, in "fail" mode too, as nothing ties it to the model (another thread's may be).

        Before: the load found no session, the model waited for one, and the dropped GPU
        provider was never said.
        """

        class Model:
            shared: Any = None
            run: Any = None

            def __init__(self) -> None:
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    made = pool.submit(session).result()
                if held == "partial":
                    self.run = functools.partial(made.run, None)
                elif held == "closure":
                    self.run = lambda feeds: made.run(None, feeds)
                else:
                    Model.shared = made
                self.device = "cuda"

        device_guard(resolution_mode="fail")(lambda: Model())()
        device_guard(lambda: Model())()
        assert len(fallbacks(caught)) == 2
        assert all("dropped CUDAExecutionProvider" in text for text in fallbacks(caught))

    def test_a_session_a_method_has_a_thread_pool_open_is_reported(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A session a guarded model's method has a worker thread create is tied to no model,
        yet its dropped GPU provider is warned about, in "fail" mode too (whose it is is unknown).

        Before: without watch_sessions() nothing was said, and the model stayed on CUDA.
        """

        class Model:
            def __init__(self) -> None:
                self.session, self.device = session(CPU), "cpu"

            def to(self, device: str) -> Model:
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    self.session = pool.submit(session).result()
                self.device = device
                return self

        assert device_guard(resolution_mode="fail")(lambda: Model())().to("cuda").device == "cuda"
        (text,) = fallbacks(caught)
        assert text.startswith("onnxruntime dropped CUDAExecutionProvider")
        assert "tiny.onnx" in text

    def test_a_quiet_load_in_flight_does_not_quiet_another_threads_drop(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A session an unrelated thread opens while a `warn=False` load runs, which no model
        shows, is warned about as any such session is.

        Before: the quiet load, alone in flight and its model showing no session, lent it its
        settings, so the drop was said at DEBUG only.
        """
        loading, made = threading.Event(), threading.Event()
        kept: list[object] = []

        def quiet_load() -> Any:
            loading.set()
            made.wait(5)
            return types.SimpleNamespace(device="cpu")

        def unrelated() -> None:
            loading.wait(5)
            kept.append(session())
            made.set()

        other = threading.Thread(target=unrelated)
        other.start()
        device_guard(warn=False, require_session=False)(quiet_load)()
        other.join()
        (text,) = fallbacks(caught)
        assert text.startswith("onnxruntime dropped CUDAExecutionProvider")

    def test_a_quiet_load_ending_first_leaves_another_loads_worker_session_to_it(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """Two loads at once: a session one builds in a worker thread is its own to report,
        even when the other, quiet load ends first.

        Before: the quiet load reported it as no model's (at DEBUG), so the other model moved
        to the CPU in silence.
        """
        started, built, ended = threading.Event(), threading.Event(), threading.Event()

        class Loud:
            def __init__(self) -> None:
                started.wait(5)
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    self.session = pool.submit(session).result()
                self.device = "cuda"
                built.set()
                ended.wait(5)

        def quiet_load() -> Any:
            started.set()
            built.wait(5)
            return types.SimpleNamespace(session=session(CPU), device="cpu")

        def in_a_thread() -> None:
            device_guard(warn=False)(quiet_load)()
            ended.set()

        quiet = threading.Thread(target=in_a_thread)
        quiet.start()
        assert device_guard(lambda: Loud())().device == "cpu"
        quiet.join()
        (text,) = fallbacks(caught)
        assert "model Loud" in text

    def test_a_load_ending_while_another_has_yet_to_claim_its_worker_session_leaves_it(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A load counts as in flight until its model has claimed its sessions: another load
        ending between the first's call and its alignment leaves the first's worker session
        to it, which reports it naming its model.

        Before: the second load reported it as no model's, so the first said nothing more.
        """
        from onnx_device_guard import _model_alignment

        at, go = threading.Event(), threading.Event()

        def pause_before_aligning(frame: Any, event: str, arg: Any) -> None:
            if event == "call" and frame.f_code is _model_alignment.align_model.__code__:
                sys.settrace(None)
                at.set()
                go.wait(10)

        class Worker:
            def __init__(self) -> None:
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    self.session = pool.submit(session).result()
                self.device = "cuda"

        def first() -> None:
            sys.settrace(pause_before_aligning)
            device_guard(lambda: Worker())()

        thread = threading.Thread(target=first)
        thread.start()
        at.wait(10)
        device_guard(lambda: types.SimpleNamespace(session=session(CPU), device="cpu"))()
        go.set()
        thread.join()
        (text,) = fallbacks(caught)
        assert "model Worker" in text

    @pytest.mark.parametrize("outcome", ["raises", "fails"])
    def test_a_drop_another_thread_makes_during_a_failed_load_is_reported(
        self, outcome: str, caught: list[warnings.WarningMessage]
    ) -> None:
        """A load that raises still leaves the sessions born elsewhere meanwhile reported."""
        kept: list[Any] = []

        def load() -> Any:
            thread = threading.Thread(target=lambda: kept.append(session()))
            thread.start()
            thread.join()
            if outcome == "raises":
                raise OSError("no such model")
            return types.SimpleNamespace(session=session(), device="cuda")

        with pytest.raises(OSError if outcome == "raises" else EnvironmentConfigurationError):
            device_guard(resolution_mode="fail")(load)()
        (text,) = fallbacks(caught)
        assert text.startswith("onnxruntime dropped CUDAExecutionProvider")

    def test_every_drop_born_elsewhere_during_a_load_is_reported(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """No count limits what a load's end reports of the sessions born elsewhere meanwhile.

        Before: only the last 64 were kept, and the rest went unsaid.
        """
        kept: list[Any] = []

        def load() -> Any:
            thread = threading.Thread(target=lambda: kept.extend(session() for _ in range(70)))
            thread.start()
            thread.join()
            return types.SimpleNamespace(session=session(CPU), device="cpu")

        device_guard(load)()
        assert len(fallbacks(caught)) == 70

    @pytest.mark.parametrize("follow", [True, False])
    def test_the_hooks_go_with_the_last_guarded_model(self, follow: bool) -> None:
        """Once no guarded model lives and no patch or watch is in place, onnxruntime is its
        own again. Before: a guarded load left its __init__ wrapped for good."""
        script = textwrap.dedent(
            f"""
            import gc, onnxruntime
            from onnx_device_guard import device_guard, example_model
            original = onnxruntime.InferenceSession.__init__
            class Model:
                def __init__(self):
                    self.session = onnxruntime.InferenceSession(
                        example_model(), providers=["CPUExecutionProvider"]
                    )
                    self.device = "cpu"
            model = device_guard(follow={follow})(Model)()
            assert onnxruntime.InferenceSession.__init__ is not original or not {follow}
            del model  # the last guarded model
            gc.collect()
            assert onnxruntime.InferenceSession.__init__ is original
            print("restored")
            """
        )
        assert_prints(script, "restored")

    def test_a_report_that_must_not_raise_leaves_the_loads_own_error(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A load that raises, whose session cannot read the fallback device either, raises
        its own error; the session's report says the fallback is unreadable.

        Before: the report's EnvironmentConfigurationError replaced the load's error.
        """
        kept: list[Any] = []

        def load() -> Any:
            kept.append(session())
            raise OSError("no such model")

        with device_policy(fallback_device="cuda"), pytest.raises(OSError, match="no such model"):
            device_guard(load)()
        (text,) = fallbacks(caught)
        assert "cannot read the fallback device 'cuda' either" in text

    def test_a_model_without_weak_references_is_told_and_its_later_drop_reported(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A model that takes no weak reference cannot wait for its sessions: said at load, and
        refused in "fail" mode; a session it opens later under a watch is reported as no model's.

        Before: "fail" mode let it through with a log record, and its later drop was silent."""

        class Slotted:
            __slots__ = ("device", "session")

            def __init__(self) -> None:
                self.device, self.session = "cuda", None

            def open(self) -> None:
                self.session = session()

        with pytest.raises(DeviceGuardError, match="cannot be let through unchecked"):
            device_guard(resolution_mode="fail")(lambda: Slotted())()
        with recorded_logs() as records:
            model = device_guard(Slotted)()
        (said,) = [r.getMessage() for r in records if r.levelno == logging.WARNING]
        assert "no session it opens later is tied to it" in said
        with watch_sessions():
            model.open()
        (text,) = fallbacks(caught)
        assert text.startswith("onnxruntime dropped CUDAExecutionProvider")
        assert model.device == "cuda"

    def test_a_session_another_thread_opens_meanwhile_does_not_fail_a_load(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A load whose model is sound is not failed by a session an unrelated thread opened;
        that session's drop is warned about once, at the load's end."""
        started, opened = threading.Event(), threading.Event()
        kept: list[Any] = []

        class Model:
            def __init__(self) -> None:
                self.session, self.device = session(CPU), "cpu"
                started.set()
                opened.wait(5)

        def elsewhere() -> None:
            started.wait(5)
            kept.append(session())  # asks for CUDA, dropped: its thread's business alone
            opened.set()

        thread = threading.Thread(target=elsewhere)
        thread.start()
        assert device_guard(resolution_mode="fail")(lambda: Model())().device == "cpu"
        thread.join()
        (text,) = fallbacks(caught)
        assert text.startswith("onnxruntime dropped CUDAExecutionProvider")

    def test_a_session_held_by_a_bound_method_is_found(self) -> None:
        """`self.run = session.run` holds the session: the search goes into bound methods."""

        class Model:
            def __init__(self, made: Any) -> None:
                self.run, self.device = made.run, "cuda"

        made = session(CPU)
        with pytest.raises(EnvironmentConfigurationError, match=r"session 'run\.__self__'"):
            device_guard(resolution_mode="fail")(Model)(made)

    def test_a_helper_handed_the_model_does_not_open_its_sessions(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """Only a method running on the model (its `self`) ties a session to a waiting model."""

        class Lazy:  # weakly referenceable, as a waiting model must be
            def __init__(self) -> None:
                self.session, self.device = None, "cuda"

        @device_guard
        def load() -> Lazy:
            return Lazy()

        def summarise(model: Any, path: str) -> None:  # a plain function, its own session
            onnxruntime.InferenceSession(path, providers=CPU)

        model = load()
        summarise(model, example_model())
        assert model.device == "cuda"
        assert fallbacks(caught) == []

    def test_sessions_held_before_the_call_are_checked_beside_born_ones(self) -> None:
        """A model given a session made earlier, which opens another in the call: both checked."""

        class ReadsCUDA(onnxruntime.InferenceSession):  # type: ignore[misc]
            def get_providers(self) -> list[str]:  # what a working GPU build would say
                return CUDA

        class MadeBefore:  # no birth record: what it was asked for is unknown, so it is checked
            def get_providers(self) -> list[str]:
                return CPU

            def run(self, *args: Any) -> list[Any]:
                return []

        made_before = MadeBefore()

        @device_guard(resolution_mode="fail")
        def from_session(main: Any, device: str = "cuda") -> Any:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Specified provider", UserWarning)
                helper = ReadsCUDA(example_model(), providers=CUDA)
            return types.SimpleNamespace(main=main, helper=helper, device=device)

        with pytest.raises(EnvironmentConfigurationError, match="'main'"):
            from_session(made_before)

    def test_a_failed_loads_sessions_are_the_watchs(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """A load that raises has no model to align: the watch reports the sessions it made."""
        kept = []

        @device_guard
        def load(device: str = "cuda") -> Any:
            kept.append(session())  # a package's cache keeps it
            raise FileNotFoundError("tokenizer.json")

        with watch_sessions(), pytest.raises(FileNotFoundError):
            load()
        assert len(fallbacks(caught)) == 1
        with watch_sessions(resolution_mode="fail"), pytest.raises(FileNotFoundError):
            load()  # the load's own error propagates; the watch warns beside it
        assert len(fallbacks(caught)) == 2

    def test_a_failed_inner_loads_sessions_are_not_the_outer_models(
        self, caught: list[warnings.WarningMessage]
    ) -> None:
        """An outer load that catches an inner one's error and returns a CPU model is not blamed."""

        @device_guard
        def inner() -> Any:
            kept = session()  # asked for CUDA, lost it; then the load fails
            raise RuntimeError(f"no tokenizer beside {kept}")

        @device_guard(resolution_mode="fail")
        def outer() -> Any:
            try:
                return inner()
            except RuntimeError:
                return types.SimpleNamespace(session=session(CPU), device="cpu")

        assert outer().device == "cpu"
        (text,) = fallbacks(caught)  # the session's own report, blaming no model
        assert text.startswith("onnxruntime dropped CUDAExecutionProvider")
        with watch_sessions():
            outer()
        assert len(fallbacks(caught)) == 2

    def test_sessions_born_in_new_are_the_loads(self) -> None:
        """A guarded class whose __new__ returns another type is checked on its sessions."""

        class Model:  # its session where no attribute search finds it
            def __init__(self) -> None:
                hidden = session()
                self.infer, self.device = lambda feeds: hidden.run(None, feeds), "cpu"

        @device_guard(resolution_mode="fail")
        class Loader:
            def __new__(cls) -> Any:
                return Model()

        for _ in range(2):
            with pytest.raises(EnvironmentConfigurationError):
                Loader()
