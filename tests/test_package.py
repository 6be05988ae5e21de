"""The package's public surface: names, version, typing marker, imports."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from importlib.resources import files

import pytest

import onnx_device_guard

PUBLIC_API = {
    "align_device_with_onnx_session",
    "DeviceMismatchResolutionMode",
    "GPU_CAPABLE_EXECUTION_PROVIDERS",
    "device_guard",
    "aligned_device",
    "device_policy",
    "realign",
    "watch_sessions",
    "SessionWatch",
    "patch",
    "Patch",
    "example_model",
    "DeviceGuardError",
    "DeviceFallbackWarning",
    "ModelInputError",
    "EnvironmentConfigurationError",
    "__version__",
}


class TestPublicAPI:
    """What `import onnx_device_guard` offers."""

    def test_all_lists_exactly_the_public_api(self) -> None:
        """__all__ is the documented API, and every name in it exists."""
        assert set(onnx_device_guard.__all__) == PUBLIC_API
        for name in onnx_device_guard.__all__:
            assert hasattr(onnx_device_guard, name)

    def test_version_comes_from_the_distribution(self) -> None:
        """__version__ is the installed distribution's version."""
        assert onnx_device_guard.__version__ == version("onnx-device-guard")

    def test_error_hierarchy(self) -> None:
        """Both specific errors derive from DeviceGuardError and a builtin."""
        assert issubclass(onnx_device_guard.ModelInputError, onnx_device_guard.DeviceGuardError)
        assert issubclass(onnx_device_guard.ModelInputError, ValueError)
        assert issubclass(
            onnx_device_guard.EnvironmentConfigurationError, onnx_device_guard.DeviceGuardError
        )
        assert issubclass(onnx_device_guard.EnvironmentConfigurationError, RuntimeError)

    def test_errors_show_under_their_public_name(self) -> None:
        """Tracebacks print onnx_device_guard.ModelInputError, the name users import."""
        assert onnx_device_guard.ModelInputError.__module__ == "onnx_device_guard"

    def test_ships_a_typing_marker(self) -> None:
        """py.typed is installed with the package."""
        assert (files("onnx_device_guard") / "py.typed").is_file()

    def test_ships_the_tiny_model(self) -> None:
        """The doctor's default model is package data."""
        assert (files("onnx_device_guard") / "data" / "tiny.onnx").is_file()


class TestImport:
    """Importing the package stays cheap and leaves onnxruntime alone."""

    def test_does_not_import_onnxruntime(self) -> None:
        """Sessions are duck-typed: onnxruntime is the user's to import."""
        code = "import sys, onnx_device_guard; print('onnxruntime' in sys.modules)"
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert result.stdout.strip() == "False"

    def test_does_not_import_torch_until_a_name_is_used(self) -> None:
        """The names load on first use: the command line's --help needs no torch."""
        code = (
            "import sys, onnx_device_guard; before = 'torch' in sys.modules; "
            "onnx_device_guard.device_guard; print(before, 'torch' in sys.modules)"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert result.stdout.split() == ["False", "True"]

    def test_every_name_is_in_dir_and_unknown_names_raise(self) -> None:
        """dir() lists the lazy names; a missing one is an AttributeError, as usual."""
        assert set(onnx_device_guard.__all__) <= set(dir(onnx_device_guard))
        with pytest.raises(AttributeError, match="no_such_name"):
            onnx_device_guard.no_such_name  # noqa: B018


class TestErrorObjects:
    """Errors carry a message and a help URL, also across pickling."""

    def test_message_and_help_url(self) -> None:
        """str() holds the message and the link."""
        error = onnx_device_guard.EnvironmentConfigurationError("No GPU provider.")
        assert error.message == "No GPU provider."
        assert error.help_url.startswith("https://")
        assert str(error) == f"No GPU provider. (see {error.help_url})"

    def test_custom_help_url(self) -> None:
        """A specific help_url overrides the class default."""
        error = onnx_device_guard.ModelInputError("x", help_url="https://example.org/#x")
        assert error.help_url == "https://example.org/#x"

    def test_pickle_round_trip_keeps_everything(self) -> None:
        """Errors raised in a process pool reach the parent intact."""
        import pickle

        error = onnx_device_guard.ModelInputError("bad", help_url="https://example.org/#bad")
        restored = pickle.loads(pickle.dumps(error))
        assert type(restored) is onnx_device_guard.ModelInputError
        assert (restored.message, restored.help_url) == (error.message, error.help_url)
