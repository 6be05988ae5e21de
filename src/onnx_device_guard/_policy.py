"""Scoped defaults for alignment: resolution mode, fallback device, warnings."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, TypeVar, cast, get_args

import torch

from ._devices import DeviceLike, as_device
from ._errors import ModelInputError
from ._pickling import WrapperByReference

DeviceMismatchResolutionMode = Literal["fail", "fallback"]
"""How a device the session cannot read is resolved.

* `"fallback"`: log the mismatch and return a device the session can read
  (the fallback device, CPU unless configured otherwise).
* `"fail"`: raise
  [`EnvironmentConfigurationError`][onnx_device_guard.EnvironmentConfigurationError].

Examples:
    >>> import typing
    >>> from onnx_device_guard import DeviceMismatchResolutionMode
    >>> typing.get_args(DeviceMismatchResolutionMode)
    ('fail', 'fallback')
"""

_MODES: tuple[str, ...] = get_args(DeviceMismatchResolutionMode)

F = TypeVar("F", bound=Callable[..., Any])


def check_mode(value: object) -> DeviceMismatchResolutionMode:
    """Return `value` if it is a resolution mode, else raise `ModelInputError`."""
    if isinstance(value, str):
        if value == "fail":
            return "fail"
        if value == "fallback":
            return "fallback"
    choices = ", ".join(repr(mode) for mode in _MODES)
    raise ModelInputError(f"resolution_mode must be one of {choices}; got {value!r}.")


def check_warn(value: object) -> bool:
    """Return `value` if it is a bool, else raise `ModelInputError`."""
    if isinstance(value, bool):
        return value
    raise ModelInputError(f"warn must be True or False; got {type(value).__name__} {value!r}.")


@dataclass(frozen=True)
class Policy:
    """The alignment defaults in force: one node of a chain of nested scopes."""

    resolution_mode: DeviceMismatchResolutionMode
    fallback_device: torch.device
    warn: bool
    outer: Policy | None = None


_DEFAULT_POLICY = Policy(resolution_mode="fallback", fallback_device=torch.device("cpu"), warn=True)
_CURRENT: ContextVar[Policy] = ContextVar("onnx_device_guard_policy", default=_DEFAULT_POLICY)


def current_policy() -> Policy:
    """Return the innermost `device_policy` in force in this thread or task."""
    return _CURRENT.get()


class device_policy:  # noqa: N801 - a context manager, named like contextlib's
    """Set alignment defaults for a block of code, or for every call of a function.

    Inside the block,
    [`align_device_with_onnx_session`][onnx_device_guard.align_device_with_onnx_session],
    [`aligned_device`][onnx_device_guard.aligned_device] and guarded
    factories use these values for every option they are not given
    explicitly. An option left at `None` keeps the value of the enclosing
    scope. Outside any scope the defaults are `resolution_mode="fallback"`,
    `fallback_device=cpu` and `warn=True`.

    Scopes nest, and leaving one (also by an exception) restores the one
    outside it. They live in a `contextvars.ContextVar`: a new thread
    starts with the defaults, an asyncio task starts with the scope in force
    where it was created, and neither ever sees another's changes. One
    instance may be entered any number of times, also concurrently, and works
    as a decorator of plain and `async def` functions.

    Args:
        resolution_mode: `"fail"` or `"fallback"` (see
            [`DeviceMismatchResolutionMode`][onnx_device_guard.DeviceMismatchResolutionMode]).
        fallback_device: The device a `"fallback"` resolution returns when the
            session runs no GPU-capable provider.
        warn: `False` reports fallbacks at DEBUG level instead of WARNING, for
            scripts on machines known to have no GPU.

    Raises:
        ModelInputError: An option has a value it cannot take.

    Examples:
        >>> import torch
        >>> from onnx_device_guard import align_device_with_onnx_session, device_policy
        >>> class CPUSession:
        ...     def get_providers(self):
        ...         return ["CPUExecutionProvider"]
        >>> with device_policy(fallback_device="meta", warn=False):
        ...     align_device_with_onnx_session(CPUSession(), "cuda")
        device(type='meta')
        >>> align_device_with_onnx_session(CPUSession(), "cuda")
        device(type='cpu')

        As a decorator, the scope holds for every call:

        >>> @device_policy(resolution_mode="fail")
        ... def load(session):
        ...     return align_device_with_onnx_session(session, "cuda")
        >>> load(CPUSession())
        Traceback (most recent call last):
        onnx_device_guard.EnvironmentConfigurationError: ...
    """

    __slots__ = ("_fallback_device", "_resolution_mode", "_warn")

    def __init__(
        self,
        resolution_mode: DeviceMismatchResolutionMode | None = None,
        fallback_device: DeviceLike | None = None,
        warn: bool | None = None,
    ) -> None:
        self._resolution_mode = None if resolution_mode is None else check_mode(resolution_mode)
        self._fallback_device = (
            None if fallback_device is None else as_device(fallback_device, "fallback_device")
        )
        self._warn = None if warn is None else check_warn(warn)

    def __repr__(self) -> str:
        return (
            f"device_policy(resolution_mode={self._resolution_mode!r}, "
            f"fallback_device={self._fallback_device!r}, warn={self._warn!r})"
        )

    def __enter__(self) -> None:
        outer = _CURRENT.get()
        policy = Policy(
            resolution_mode=(
                outer.resolution_mode if self._resolution_mode is None else self._resolution_mode
            ),
            fallback_device=(
                outer.fallback_device if self._fallback_device is None else self._fallback_device
            ),
            warn=outer.warn if self._warn is None else self._warn,
            outer=outer,
        )
        _CURRENT.set(policy)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # The scope to restore is stored in the scope itself rather than on
        # this instance, so the same instance can be entered recursively or
        # from several threads at once.
        outer = _CURRENT.get().outer
        _CURRENT.set(_DEFAULT_POLICY if outer is None else outer)

    def __call__(self, function: F) -> F:
        """Run every call of `function` inside this scope.

        Args:
            function: A plain or `async def` function; an `async def` one
                runs its whole body, awaits included, inside the scope.

        Returns:
            A wrapper of `function` with the same name, signature and types.

        Raises:
            ModelInputError: `function` is a generator function, whose body
                would run after the scope had ended.

        Examples:
            >>> from onnx_device_guard import device_policy
            >>> @device_policy(warn=False)
            ... def quiet():
            ...     return "ran inside the scope"
            >>> quiet()
            'ran inside the scope'
        """
        # Stacked over @classmethod or @staticmethod, look at the function inside.
        inner = function.__func__ if isinstance(function, classmethod | staticmethod) else function
        if inspect.isgeneratorfunction(inner) or inspect.isasyncgenfunction(inner):
            raise ModelInputError(
                f"device_policy cannot decorate the generator function "
                f"{getattr(function, '__qualname__', function)!r}: the scope would end before "
                "the generator runs. Use `with device_policy(...):` inside it instead."
            )
        if inspect.iscoroutinefunction(inner):

            async def run_async(
                wrapped: Callable[..., Any], instance: object, args: Any, kwargs: Any
            ) -> Any:
                with self:
                    return await wrapped(*args, **kwargs)

            return cast(F, WrapperByReference(function, run_async))

        def run(wrapped: Callable[..., Any], instance: object, args: Any, kwargs: Any) -> Any:
            with self:
                return wrapped(*args, **kwargs)

        return cast(F, WrapperByReference(function, run))
