"""silero-vad: a patched loader's model follows its real session after load.

`patch("silero_vad.model:load_silero_vad", ...)` guards silero's own loader;
with `onnx=True` it returns an `OnnxWrapper` whose `session` is a real
onnxruntime session and which has no device attribute, so the guard checks
the device given with `device=`. The tests change that session's providers
the two ways a service meets (the user's `set_providers`, and onnxruntime's
own fallback inside `run()` after a GPU provider raises `EPFail`) and check
that the model is checked again and that silero's own inference still gives
the unguarded answer.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.helpers import is_followed
from tests.logs import recorded_logs, warning_records

from onnx_device_guard import patch

from .test_silero_vad import TARGET, probabilities

silero_vad = pytest.importorskip("silero_vad")

CPU = "CPUExecutionProvider"
AZURE = "AzureExecutionProvider"
CHANGED = "The session 'session' of a OnnxWrapper changed its providers from "
CUDA = "CUDAExecutionProvider"


def gpu_session_failing_once(session: Any) -> None:
    """Make a real CPU session say it runs CUDA, and fail its next run with a real EPFail.

    What follows is onnxruntime's own code: `run()` catches the EPFail, prints
    a notice, calls `set_providers` with its fallback providers (which builds
    the session again on the CPU) and runs once more.
    """
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    class FailsOnce:
        def __init__(self, real: Any) -> None:
            self.real, self.failed = real, False

        def run(self, *args: Any) -> Any:
            if not self.failed:
                self.failed = True
                raise state.EPFail("CUDA failure 700: an illegal memory access was encountered")
            return self.real.run(*args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

    session._sess = FailsOnce(session._sess)
    session._providers = [CUDA, CPU]
    session._provider_options = {CUDA: {"device_id": "0"}, CPU: {}}


def load_onnx() -> Any:
    return silero_vad.load_silero_vad(onnx=True)


@pytest.fixture(scope="module")
def unguarded() -> list[float]:
    """silero's speech probabilities from an unguarded ONNX model."""
    return probabilities(load_onnx())


class TestSileroFollows:
    """A model from patched silero-vad follows its session's provider changes."""

    def test_set_providers_is_followed_and_answers_the_same(self, unguarded: list[float]) -> None:
        """A real provider change is followed quietly (cpu reads it); answers are unchanged."""
        with patch(TARGET, device="cpu"):
            model = load_onnx()
            assert is_followed(model.session)
            with recorded_logs() as records:
                model.session.set_providers([AZURE, CPU])
            assert model.session.get_providers() == [AZURE, CPU]
            assert warning_records(records) == []
            assert any(
                record.getMessage()
                == CHANGED + f"['{CPU}'] to ['{AZURE}', '{CPU}']. Aligning the model again."
                for record in records
            )
            assert probabilities(model) == unguarded

    def test_a_cuda_request_is_checked_again_on_a_change(self) -> None:
        """Asked for cuda, the CPU session warns at load and again on a change, naming both."""
        with patch(TARGET, device="cuda"), recorded_logs() as records:
            model = load_onnx()
            assert len(warning_records(records)) == 1
            model.session.set_providers([AZURE, CPU])
        load_warning, change_warning = warning_records(records)
        assert "odg_changed_session" not in vars(load_warning)
        assert change_warning.getMessage().startswith(
            CHANGED + f"['{CPU}'] to ['{AZURE}', '{CPU}']. The model asks for device 'cuda'"
        )
        fields = vars(change_warning)
        assert fields["odg_changed_session"] == "session"
        assert fields["odg_old_providers"] == [CPU]
        assert fields["odg_new_providers"] == [AZURE, CPU]
        assert fields["odg_applied"] is False

    def test_onnxruntimes_fallback_in_silero_inference(
        self, unguarded: list[float], capsys: Any
    ) -> None:
        """onnxruntime's real EPFail fallback during silero's own call goes through the hook."""
        with patch(TARGET, device="cpu"):
            model = load_onnx()
            gpu_session_failing_once(model.session)
            with recorded_logs() as records:
                answer = probabilities(model)
        assert answer == unguarded
        assert model.session.get_providers() == [CPU]
        assert warning_records(records) == []
        assert any(
            record.getMessage().startswith(
                CHANGED + "['CUDAExecutionProvider', 'CPUExecutionProvider'] to ['CPU"
            )
            for record in records
        )
        assert "Falling back to ['CPUExecutionProvider'] and retrying." in capsys.readouterr().out

    def test_undo_gives_the_session_its_set_providers_back(self) -> None:
        """After undo() silero's session has no hook, and a change reaches no model."""
        with patch(TARGET, device="cuda"), recorded_logs():
            model = load_onnx()
            assert is_followed(model.session)
        assert not is_followed(model.session)
        assert "set_providers" not in vars(model.session)
        with recorded_logs() as records:
            model.session.set_providers([AZURE, CPU])
        assert records == []
