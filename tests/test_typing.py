"""Static types of the public API, checked by mypy --strict (and run as plain tests)."""

from __future__ import annotations

import asyncio
from typing import Any

import torch
from typing_extensions import assert_type

from onnx_device_guard import aligned_device, device_guard, patch

from .guarded_classes import GuardedModel
from .guarded_models import Model, load_model
from .sessions import cpu_session


class TestGuardedFactoryTypes:
    """device_guard keeps parameter and return types (ParamSpec)."""

    def test_function_keeps_its_types(self) -> None:
        """A guarded function returns what the factory returns."""
        assert_type(load_model(device="cuda:0"), Model)

    def test_classmethods_keep_their_types(self) -> None:
        """Both stacking orders keep the classmethod's return type."""
        assert_type(Model.from_pretrained("cuda:0"), Model)
        assert_type(Model.from_config("cuda:0"), Model)

    def test_configured_decorator_keeps_types(self) -> None:
        """The configured form keeps types too, async included."""

        @device_guard(resolution_mode="fallback")
        def load(path: str, *, device: str = "cuda") -> Model:
            return Model(cpu_session(), device)

        @device_guard
        async def load_async(device: str) -> Model:
            return Model(cpu_session(), device)

        assert_type(load("model.onnx"), Model)
        assert_type(asyncio.run(load_async("cuda")), Model)

    def test_aligned_device_yields_a_torch_device(self) -> None:
        """aligned_device's target is typed torch.device."""
        session: Any = cpu_session()
        with aligned_device(session, "cuda") as device:
            assert_type(device, torch.device)


class TestGuardedClassTypes:
    """device_guard on a class returns the class itself, with its type."""

    def test_bare_and_configured_forms_keep_the_class(self) -> None:
        """Both forms return type[C]; instances keep their attributes' types."""
        assert_type(GuardedModel, type[GuardedModel])
        assert_type(GuardedModel().device, torch.device | str)

        class Bare:
            def __init__(self) -> None:
                self.session, self.device = cpu_session(), "cuda"

        class Configured(Bare):
            pass

        assert_type(device_guard(Bare), type[Bare])
        assert_type(device_guard(fallback_device="cpu")(Configured), type[Configured])


class TestPatchTypes:
    """patch returns a handle usable as a context manager."""

    def test_handle_types(self) -> None:
        """patch() is typed as returning its handle, and `with` binds the handle."""
        handle = patch("tests.guarded_models:load_model")
        with handle as entered:
            assert_type(entered.active, bool)
        assert_type(handle.target, str)
