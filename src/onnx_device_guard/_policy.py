"""The settings in force: `device_policy` scopes, over defaults from the `VARIABLES` (read at
first use, not import, so a bad value cannot stop `import onnx_device_guard`)."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import ContextDecorator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import torch

from ._devices import DeviceLike, as_device
from ._errors import DeviceGuardError, ModelInputError, in_context
from ._messages import short_repr, typed_repr
from ._options import DeviceMismatchResolutionMode, Resolved, Settings, check_mode, settings

F = TypeVar("F", bound=Callable[..., Any])

_CURRENT: ContextVar[_Scope | None] = ContextVar("onnx_device_guard_scope", default=None)


@dataclass(eq=False)
class _Scope:
    """One entered `device_policy`: the settings in force inside it, and the scope it is in."""

    settings: Resolved
    owner: device_policy
    outer: _Scope | None
    task: object = None
    """The asyncio task it was entered in, if any: a task it starts sees it, but cannot leave it."""
    ended: bool = False
    """Set when it is left out of order: it is never in force again."""


def _innermost() -> _Scope | None:
    """The innermost scope in force, skipping those that ended."""
    scope = _CURRENT.get()
    while scope is not None and scope.ended:
        scope = scope.outer
    return scope


def _current_task() -> object:
    """The asyncio task running in this thread, if any (asyncio is never imported for it)."""
    asyncio = sys.modules.get("asyncio")
    try:
        return None if asyncio is None else asyncio.current_task()
    except RuntimeError:  # no event loop runs in this thread
        return None


def _forked() -> None:
    """A forked child looks in a fresh variable: no context of it sees its parent's scopes."""
    global _CURRENT
    _CURRENT = ContextVar("onnx_device_guard_scope", default=None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


VARIABLES = RESOLUTION_MODE, FALLBACK_DEVICE, WARN = (
    "ONNX_DEVICE_GUARD_RESOLUTION_MODE",
    "ONNX_DEVICE_GUARD_FALLBACK_DEVICE",
    "ONNX_DEVICE_GUARD_WARN",
)
"""Every variable this module reads, in the order it reads them."""

BUILT_IN = Resolved(resolution_mode="fallback", fallback_device=torch.device("cpu"), warn=True)
"""The defaults when no variable is set."""


def read_environment(environ: Mapping[str, str] = os.environ) -> Resolved:
    """The defaults the variables in `environ` set; empty or blank ones leave the built-in.

    Raises `ModelInputError` naming a variable that holds a value it cannot take.
    """
    mode, device, warn = (environ.get(name, "").strip() for name in VARIABLES)
    try:
        resolution_mode = check_mode(mode, RESOLUTION_MODE) if mode else None
        fallback = as_device(device, FALLBACK_DEVICE) if device else None
        switch = parse_switch(WARN, warn)
    except ModelInputError as error:
        raise in_context(error, "The environment variable ", " Fix or unset it.") from None
    return Settings(resolution_mode, fallback, switch).over(BUILT_IN)


SWITCH_WORDS = {"1": True, "true": True, "yes": True, "on": True}
SWITCH_WORDS |= {"0": False, "false": False, "no": False, "off": False}
"""The spellings a yes/no variable takes, in any case, with spaces around."""


def parse_switch(name: str, text: str) -> bool | None:
    """Read the yes/no variable `name` holding `text` (`None` when empty), or raise
    `ModelInputError` naming the `SWITCH_WORDS`."""
    word = text.strip().lower()
    if word and word not in SWITCH_WORDS:
        raise ModelInputError(
            f"{name}={short_repr(text.strip())} must be a yes/no switch: 1, true, yes or on for "
            "yes; 0, false, no or off for no (any case), or unset."
        )
    return SWITCH_WORDS.get(word)


# The defaults outside every scope, read once (errors are not cached: a bad value raises each time).
_defaults = functools.cache(read_environment)


def current_policy() -> Resolved:
    """The innermost scope's settings, else the defaults (environment, then built in)."""
    scope = _innermost()
    return _defaults() if scope is None else scope.settings


class device_policy(ContextDecorator):  # noqa: N801 - a context manager, named like contextlib's
    """Set the alignment settings for a block of code, or for every call of a function.

    Inside it,
    [`align_device_with_onnx_session`][onnx_device_guard.align_device_with_onnx_session],
    [`aligned_device`][onnx_device_guard.aligned_device] and guarded
    factories use these values for every option they are not given; an
    option left at `None` keeps the enclosing scope's value. Outside every
    scope the `ONNX_DEVICE_GUARD_*` variables set the defaults, else
    `"fallback"`, `cpu` and `warn=True`. Scopes nest, are left in the reverse
    order of entry, and hold per thread and asyncio task; a process pool's
    workers start from the defaults.

    Args:
        resolution_mode: `"fail"` or `"fallback"` (see
            [`DeviceMismatchResolutionMode`][onnx_device_guard.DeviceMismatchResolutionMode]).
        fallback_device: Where to go when a session runs no GPU-capable provider.
        warn: `False` silences fallbacks (no warning, a DEBUG record).

    Raises:
        ModelInputError: An option has a value it cannot take; or, on entry,
            an `ONNX_DEVICE_GUARD_*` environment variable has one.
        DeviceGuardError: On exit, the scope is not the innermost one in
            this thread or task (left out of order, or elsewhere).

    Examples:
        >>> import torch
        >>> from onnx_device_guard import align_device_with_onnx_session, device_policy
        >>> class CPUSession:
        ...     def get_providers(self):
        ...         return ["CPUExecutionProvider"]
        >>> with device_policy(fallback_device="meta", warn=False):
        ...     align_device_with_onnx_session(CPUSession(), "cuda")
        device(type='meta')
    """

    def __init__(
        self,
        *,
        resolution_mode: DeviceMismatchResolutionMode | None = None,
        fallback_device: DeviceLike | None = None,
        warn: bool | None = None,
    ) -> None:
        self._settings = settings(resolution_mode, fallback_device, warn)

    def __repr__(self) -> str:
        given = ", ".join(f"{name}={value!r}" for name, value in vars(self._settings).items())
        return f"device_policy({given})"

    def __enter__(self) -> None:
        # The scope, not this instance, holds the state, so one instance can be
        # entered recursively, from several threads and tasks at once.
        settings = self._settings.over(current_policy())
        _CURRENT.set(_Scope(settings, self, _innermost(), _current_task()))

    def __exit__(self, *exc_info: object) -> None:
        innermost = own = _innermost()
        while own is not None and own.owner is not self:
            own = own.outer
        if own is None or own.task is not _current_task():
            raise DeviceGuardError(
                f"Leaving {self!r}, which was not entered in this thread or task; the scopes "
                "in force are left as they are. Enter and leave a device_policy in the same "
                "thread or task, with a `with` block."
            )
        if own is innermost:
            _CURRENT.set(own.outer)
            return
        own.ended = True
        raise DeviceGuardError(
            f"Leaving {self!r} out of order: a scope entered after it (by a generator's "
            "consumer, say) is still in force. This one has ended; the later one keeps what it "
            "inherited until it ends. Enter each device_policy with a `with` block, around the "
            "loop that consumes a generator."
        )

    def __call__(self, function: F) -> F:
        """Run every call of `function` inside this scope.

        Args:
            function: A plain or `async def` function, also under
                `@classmethod` or `@staticmethod`.

        Returns:
            A wrapper of `function` with the same name, signature and types.

        Raises:
            ModelInputError: `function` is not callable, or is a generator
                function (or an object whose `__call__` is one).

        Examples:
            >>> from onnx_device_guard import device_policy
            >>> @device_policy(warn=False)
            ... def quiet():
            ...     return "ran inside the scope"
            >>> quiet()
            'ran inside the scope'
        """
        candidate: object = function  # typed as callable, but users pass anything
        if isinstance(candidate, classmethod | staticmethod):
            return cast(F, type(candidate)(self(candidate.__func__)))
        if not callable(candidate):
            raise ModelInputError(
                f"device_policy decorates a function or method; got {typed_repr(function)}."
            )
        call = type(candidate).__call__  # an object's own: `async def`, or a generator's
        # Not what a `functools.wraps` wrapper wraps: one may run its generator to the end.
        if any(
            inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f)
            for f in (function, call)
        ):
            name = short_repr(getattr(function, "__qualname__", function))
            raise ModelInputError(
                f"device_policy cannot decorate the generator function {name}: the scope would "
                "end before the generator runs. Enter `with device_policy(...):` around each use "
                "of the generator instead, or pass the options explicitly to the calls inside it."
            )
        if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call):

            @functools.wraps(function)
            async def scoped_async(*args: Any, **kwargs: Any) -> Any:
                with self:
                    return await function(*args, **kwargs)

            return cast(F, scoped_async)

        return super().__call__(function)  # ContextDecorator's: each call inside `with self:`
