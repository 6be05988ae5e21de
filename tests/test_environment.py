"""Environment variables set the defaults beneath every scope.

Precedence: explicit argument > innermost device_policy > environment >
built-in. The variables are read at the first use, not at import; a bad value
raises ModelInputError naming the variable, at every use until it is fixed.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

from onnx_device_guard import (
    EnvironmentConfigurationError,
    ModelInputError,
    align_device_with_onnx_session,
    device_guard,
    device_policy,
)
from onnx_device_guard._policy import (
    FALLBACK_DEVICE,
    RESOLUTION_MODE,
    VARIABLES,
    WARN,
    _defaults,
    current_policy,
)

from .logs import recorded_logs
from .sessions import cpu_session

META = torch.device("meta")
CPU = torch.device("cpu")


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """A clean set of the library's variables; the defaults are read again after each test."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    reread()
    yield monkeypatch
    monkeypatch.undo()
    reread()


def set_and_reread(environ: pytest.MonkeyPatch, **values: str) -> None:
    for name, value in values.items():
        environ.setenv(name, value)
    reread()


def reread() -> None:
    """Forget the defaults read from the environment, and read them again."""
    _defaults.cache_clear()
    current_policy()


class Model:
    def __init__(self) -> None:
        self.session = cpu_session()
        self.device = "cuda:0"


@device_guard
def load() -> Model:
    return Model()


class TestEachVariable:
    """Each variable sets its default."""

    def test_resolution_mode_fail(self, environ: pytest.MonkeyPatch) -> None:
        """RESOLUTION_MODE=fail turns every silent fallback into an error."""
        set_and_reread(environ, ONNX_DEVICE_GUARD_RESOLUTION_MODE="fail")
        with pytest.raises(EnvironmentConfigurationError):
            align_device_with_onnx_session(cpu_session(), "cuda:0")
        with pytest.raises(EnvironmentConfigurationError):
            load()

    def test_fallback_device(self, environ: pytest.MonkeyPatch) -> None:
        """FALLBACK_DEVICE=meta is where a fallback goes."""
        set_and_reread(
            environ, ONNX_DEVICE_GUARD_FALLBACK_DEVICE="meta", ONNX_DEVICE_GUARD_WARN="0"
        )
        assert align_device_with_onnx_session(cpu_session(), "cuda:0") == META
        assert load().device == "meta"

    @pytest.mark.parametrize(("value", "level"), [("0", logging.DEBUG), ("1", logging.WARNING)])
    def test_warn(self, environ: pytest.MonkeyPatch, value: str, level: int) -> None:
        """WARN=0 logs fallbacks at DEBUG, WARN=1 at WARNING."""
        set_and_reread(environ, ONNX_DEVICE_GUARD_WARN=value)
        with recorded_logs() as records:
            align_device_with_onnx_session(cpu_session(), "cuda:0")
        assert [record.levelno for record in records] == [level]

    @pytest.mark.parametrize("value", ["", " fail ", "\tfail\n", "   ", "\t\n"])
    def test_empty_means_unset_and_whitespace_is_ignored(
        self, environ: pytest.MonkeyPatch, value: str
    ) -> None:
        """Empty or only whitespace is unset; whitespace around a value is dropped.

        Before: an empty value meant unset, but one of only whitespace was refused.
        """
        set_and_reread(environ, ONNX_DEVICE_GUARD_RESOLUTION_MODE=value)
        assert current_policy().resolution_mode == ("fail" if value.strip() else "fallback")
        for name in ("ONNX_DEVICE_GUARD_FALLBACK_DEVICE", "ONNX_DEVICE_GUARD_WARN"):
            set_and_reread(environ, **{name: "  "})
            assert (current_policy().fallback_device, current_policy().warn) == (CPU, True)

    def test_unset_gives_the_built_in_defaults(self, environ: pytest.MonkeyPatch) -> None:
        """With none set, the built-in defaults hold."""
        policy = current_policy()
        assert (policy.resolution_mode, policy.fallback_device, policy.warn) == (
            "fallback",
            CPU,
            True,
        )


class TestPrecedence:
    """explicit argument > innermost device_policy > environment > built-in."""

    def test_scope_beats_environment(self, environ: pytest.MonkeyPatch) -> None:
        """A scope's own options win; what it leaves unset comes from the environment."""
        set_and_reread(
            environ,
            ONNX_DEVICE_GUARD_RESOLUTION_MODE="fail",
            ONNX_DEVICE_GUARD_FALLBACK_DEVICE="meta",
        )
        with device_policy(resolution_mode="fallback", warn=False):
            policy = current_policy()
            assert (policy.resolution_mode, policy.fallback_device) == ("fallback", META)
            with device_policy(fallback_device="cpu"):
                assert current_policy().fallback_device == CPU
            assert align_device_with_onnx_session(cpu_session(), "cuda:0") == META
        assert current_policy().resolution_mode == "fail"

    def test_explicit_argument_beats_everything(self, environ: pytest.MonkeyPatch) -> None:
        """Arguments win over a scope and the environment."""
        set_and_reread(environ, ONNX_DEVICE_GUARD_RESOLUTION_MODE="fail")
        with device_policy(resolution_mode="fail", warn=False):
            assert align_device_with_onnx_session(cpu_session(), "cuda:0", "fallback") == CPU
            strict_free = device_guard(resolution_mode="fallback")(Model)
            assert strict_free().device == "cpu"

    def test_environment_beats_built_in(self, environ: pytest.MonkeyPatch) -> None:
        """Outside any scope, the environment's value, not the built-in one."""
        set_and_reread(environ, ONNX_DEVICE_GUARD_WARN="0")
        assert current_policy().warn is False


BAD_VALUES = [
    (RESOLUTION_MODE, "FAIL"),
    (RESOLUTION_MODE, "strict"),
    (RESOLUTION_MODE, "1"),
    (FALLBACK_DEVICE, "gpu"),
    (FALLBACK_DEVICE, "cuda:256"),
    (FALLBACK_DEVICE, "x" * 100_000),
    (WARN, "2"),
    (WARN, "maybe"),
]


class TestBadValues:
    """A bad value is never silently ignored: ModelInputError naming the variable."""

    @pytest.mark.parametrize(
        ("name", "value"), BAD_VALUES, ids=[f"{n}={v[:8]}" for n, v in BAD_VALUES]
    )
    def test_raised_at_every_use(self, environ: pytest.MonkeyPatch, name: str, value: str) -> None:
        """The core, the guard and a scope all raise it, naming the variable."""
        environ.setenv(name, value)
        _defaults.cache_clear()
        with pytest.raises(ModelInputError, match=name) as info:
            current_policy()
        assert len(info.value.message) < 1000
        for use in (
            lambda: align_device_with_onnx_session(cpu_session(), "cuda:0"),
            load,
            lambda: device_policy(warn=False).__enter__(),
        ):
            with pytest.raises(ModelInputError, match=name):
                use()

    def test_fixing_the_value_clears_the_error(self, environ: pytest.MonkeyPatch) -> None:
        """A bad value is not kept: once fixed, the next use reads the good one."""
        environ.setenv(WARN, "maybe")
        with pytest.raises(ModelInputError):
            reread()
        environ.setenv(WARN, "0")
        assert current_policy().warn is False


def run_python(code: str, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in VARIABLES}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


class TestInAFreshProcess:
    """How an operator uses them: set before the process starts."""

    def test_import_does_not_fail_first_use_does(self) -> None:
        """A bad value lets the import through; the first alignment raises, naming it."""
        result = run_python(
            "import onnx_device_guard as g\n"
            "print('imported')\n"
            "class S:\n"
            "    def get_providers(self): return ['CPUExecutionProvider']\n"
            "try:\n"
            "    g.align_device_with_onnx_session(S(), 'cuda')\n"
            "except g.ModelInputError as error:\n"
            "    print(error.message)\n",
            ONNX_DEVICE_GUARD_RESOLUTION_MODE="strict",
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[0] == "imported"
        assert "ONNX_DEVICE_GUARD_RESOLUTION_MODE must be one of" in lines[1]
        assert "got 'strict'" in lines[1]

    def test_fail_mode_for_a_whole_process(self) -> None:
        """ONNX_DEVICE_GUARD_RESOLUTION_MODE=fail makes a silent fallback raise."""
        result = run_python(
            "import onnx_device_guard as g\n"
            "class S:\n"
            "    def get_providers(self): return ['CPUExecutionProvider']\n"
            "g.align_device_with_onnx_session(S(), 'cuda')\n",
            ONNX_DEVICE_GUARD_RESOLUTION_MODE="fail",
        )
        assert result.returncode == 1
        assert "EnvironmentConfigurationError" in result.stderr
