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
from ._environment import read as read_environment
from ._errors import DeviceGuardError, ModelInputError
from ._messages import short_repr
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
    raise ModelInputError(f"resolution_mode must be one of {choices}; got {short_repr(value)}.")


def check_warn(value: object) -> bool:
    """Return `value` as a bool if it is one, else raise `ModelInputError`.

    numpy's boolean scalars (`numpy.True_`, what `array.any()` returns) count
    as bools: they hold nothing but True or False. Anything else, `1` and
    `"yes"` included, is refused rather than guessed at.
    """
    if isinstance(value, bool):
        return value
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"):
        return bool(value)
    raise ModelInputError(
        f"warn must be True or False; got {_type_label(value)} {short_repr(value)}."
    )


def _type_label(value: object) -> str:
    kind = type(value)
    module = getattr(kind, "__module__", "builtins")
    name = getattr(kind, "__qualname__", kind.__name__)
    return name if module == "builtins" else f"{module}.{name}"


@dataclass(frozen=True)
class Policy:
    """The alignment defaults in force: one entered scope in a chain of nested scopes.

    `resolution_mode`, `fallback_device` and `warn` are the values in force
    inside this scope: its own options where it set them, else those of the
    scope outside it, down to the environment's defaults. `own` keeps the
    options it set itself, so the chain can be rebuilt when a scope outside
    this one leaves first.
    """

    resolution_mode: DeviceMismatchResolutionMode
    fallback_device: torch.device
    warn: bool
    outer: Policy | None = None
    own: tuple[DeviceMismatchResolutionMode | None, torch.device | None, bool | None] = (
        None,
        None,
        None,
    )
    owner: object = None

    def inside(self, own: _Options, owner: object) -> Policy:
        """Return the scope that `own` options, entered by `owner`, make inside this one."""
        mode, device, warn = own
        return Policy(
            resolution_mode=self.resolution_mode if mode is None else mode,
            fallback_device=self.fallback_device if device is None else device,
            warn=self.warn if warn is None else warn,
            outer=self,
            own=own,
            owner=owner,
        )


_Options = tuple[DeviceMismatchResolutionMode | None, torch.device | None, bool | None]

_CURRENT: ContextVar[Policy | None] = ContextVar("onnx_device_guard_policy", default=None)
_base: Policy | None = None


def base_policy() -> Policy:
    """Return the policy outside every scope: the environment's defaults, else the built-in ones.

    The `ONNX_DEVICE_GUARD_*` variables are read at the first call and kept;
    a bad value is not kept, so every call raises until it is fixed.

    Raises:
        ModelInputError: An `ONNX_DEVICE_GUARD_*` variable holds a bad value.
    """
    global _base
    base = _base
    if base is None:
        defaults = read_environment()
        base = _base = Policy(
            resolution_mode=defaults.resolution_mode,
            fallback_device=defaults.fallback_device,
            warn=defaults.warn,
            own=(defaults.resolution_mode, defaults.fallback_device, defaults.warn),
        )
    return base


def reread_environment() -> Policy:
    """Forget the defaults read from the environment, and read them again.

    Raises:
        ModelInputError: An `ONNX_DEVICE_GUARD_*` variable holds a bad value.
    """
    global _base
    _base = None
    return base_policy()


def current_policy() -> Policy:
    """Return the innermost `device_policy` in force in this thread or task.

    Outside every scope, the defaults that the environment variables set
    (read at the first use), else the built-in ones.

    Raises:
        ModelInputError: An `ONNX_DEVICE_GUARD_*` variable holds a bad value.
    """
    policy = _CURRENT.get()
    if policy is not None:
        return policy
    base = _base
    return base_policy() if base is None else base


def _enter(own: _Options, owner: object) -> None:
    _CURRENT.set(current_policy().inside(own, owner))


def _exit(owner: object) -> None:
    """Remove the innermost scope that `owner` entered, and only that one.

    Scopes entered after it (a generator's consumer can enter one while the
    generator's is still open) stay, with their own options; the values they
    had inherited from the removed scope are taken again from what is now
    outside them. Neither "remove the innermost scope" nor
    `ContextVar.reset(token)` would do that: the first removes someone
    else's scope when exits come out of order, the second also drops every
    scope entered after the token was taken.
    """
    current = _CURRENT.get()
    if current is not None and current.owner is owner:  # exits in order: the common case
        outer = current.outer
        _CURRENT.set(None if outer is None or outer.outer is None else outer)
        return
    later: list[Policy] = []
    node = current
    while node is not None and node.owner is not owner:
        later.append(node)
        node = node.outer
    if node is None or node.outer is None:
        raise DeviceGuardError(
            f"Leaving {owner!r}, which was not entered in this thread or task; the scopes "
            "in force are left as they are. Enter and leave a device_policy in the same "
            "thread or task, with a `with` block."
        )
    rebuilt = node.outer
    for scope in reversed(later):
        rebuilt = rebuilt.inside(scope.own, scope.owner)
    _CURRENT.set(None if rebuilt.outer is None else rebuilt)


class device_policy:  # noqa: N801 - a context manager, named like contextlib's
    """Set alignment defaults for a block of code, or for every call of a function.

    Inside the block,
    [`align_device_with_onnx_session`][onnx_device_guard.align_device_with_onnx_session],
    [`aligned_device`][onnx_device_guard.aligned_device] and guarded
    factories use these values for every option they are not given
    explicitly. An option left at `None` keeps the value of the enclosing
    scope. Outside any scope the defaults are those the environment variables
    `ONNX_DEVICE_GUARD_RESOLUTION_MODE`, `ONNX_DEVICE_GUARD_FALLBACK_DEVICE`
    and `ONNX_DEVICE_GUARD_WARN` set (read at the first use), else
    `resolution_mode="fallback"`, `fallback_device=cpu` and `warn=True`.

    Scopes nest, and leaving one (also by an exception) removes that scope
    and only that one, even out of order: a scope entered later keeps the
    options it set. They live in a `contextvars.ContextVar`: a new thread
    starts with the defaults, an asyncio task starts with the scope in force
    where it was created, and neither ever sees another's changes. One
    instance may be entered any number of times, also concurrently, and works
    as a decorator of plain and `async def` functions. A scope entered inside
    a generator is also in force for its consumer between items; enter the
    scope around the loop instead.

    Args:
        resolution_mode: `"fail"` or `"fallback"` (see
            [`DeviceMismatchResolutionMode`][onnx_device_guard.DeviceMismatchResolutionMode]).
        fallback_device: The device a `"fallback"` resolution returns when the
            session runs no GPU-capable provider.
        warn: `False` reports fallbacks at DEBUG level instead of WARNING, for
            scripts on machines known to have no GPU.

    Raises:
        ModelInputError: An option has a value it cannot take; or, on entry,
            an `ONNX_DEVICE_GUARD_*` environment variable has one.
        DeviceGuardError: On exit, the scope was not entered in this thread
            or task.

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

    __slots__ = ("_own",)

    def __init__(
        self,
        resolution_mode: DeviceMismatchResolutionMode | None = None,
        fallback_device: DeviceLike | None = None,
        warn: bool | None = None,
    ) -> None:
        self._own: _Options = (
            None if resolution_mode is None else check_mode(resolution_mode),
            None if fallback_device is None else as_device(fallback_device, "fallback_device"),
            None if warn is None else check_warn(warn),
        )

    def __repr__(self) -> str:
        mode, device, warn = self._own
        return f"device_policy(resolution_mode={mode!r}, fallback_device={device!r}, warn={warn!r})"

    def __getstate__(self) -> _Options:
        return self._own

    def __setstate__(self, state: _Options) -> None:
        self._own = state

    def __enter__(self) -> None:
        _enter(self._own, self)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Each entered scope records which instance entered it, rather than
        # this instance recording its scopes, so the same instance can be
        # entered recursively or from several threads at once; the exit
        # removes the innermost scope this instance entered in this context.
        _exit(self)

    def __call__(self, function: F) -> F:
        """Run every call of `function` inside this scope.

        Args:
            function: A plain or `async def` function; an `async def` one
                runs its whole body, awaits included, inside the scope.

        Returns:
            A wrapper of `function` with the same name, signature and types.

        Raises:
            ModelInputError: `function` is not callable, or is a generator
                function, whose body would run after the scope had ended.

        Examples:
            >>> from onnx_device_guard import device_policy
            >>> @device_policy(warn=False)
            ... def quiet():
            ...     return "ran inside the scope"
            >>> quiet()
            'ran inside the scope'
        """
        candidate: object = function  # typed as callable, but users pass anything
        if not (callable(candidate) or isinstance(candidate, classmethod | staticmethod)):
            raise ModelInputError(
                "device_policy decorates a function or method; "
                f"got {type(function).__name__} {short_repr(function)}."
            )
        # Stacked over @classmethod or @staticmethod, look at the function inside.
        inner = function.__func__ if isinstance(function, classmethod | staticmethod) else function
        if inspect.isgeneratorfunction(inner) or inspect.isasyncgenfunction(inner):
            name = short_repr(getattr(function, "__qualname__", function))
            raise ModelInputError(
                f"device_policy cannot decorate the generator function {name}: the scope "
                "would end before the generator runs, and a scope entered inside a generator "
                "is also seen by its consumer between iterations. Enter "
                "`with device_policy(...):` around each use of the generator instead (around "
                "the loop that consumes it), or pass the options explicitly to the calls "
                "inside it."
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
