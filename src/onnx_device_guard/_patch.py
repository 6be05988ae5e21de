"""`patch`: guard a third-party factory where it is defined, also in a module imported later or
reloaded (`_ImportFinder`: wrapt's post-import hooks fire once)."""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib.abc
import importlib.util
import inspect
import pathlib
import pkgutil
import re
import sys
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec, PathFinder
from typing import Any

import wrapt

from ._births import release, stop_waiting, use
from ._devices import DeviceLike
from ._errors import ModelInputError
from ._follow import Origin, stop_following
from ._guard import class_guard, guard_class, read_signature, unguard_class
from ._messages import logger, short_repr
from ._model_alignment import Load, call_and_align, call_and_align_async
from ._options import (
    DeviceMismatchResolutionMode,
    DeviceSource,
    GuardOptions,
    SessionAttr,
    guard_options,
)

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_TARGET = re.compile(rf"(?P<module>{_DOTTED}):(?P<path>{_DOTTED})")
_lock = threading.RLock()
_installed: dict[str, _Installation] = {}
"""The patches in place (or waiting for their module), by target."""


def patch(  # noqa: PLR0913 - one keyword per documented option
    target: str,
    /,
    *,
    resolution_mode: DeviceMismatchResolutionMode | None = None,
    fallback_device: DeviceLike | None = None,
    warn: bool | None = None,
    session_attr: SessionAttr | None = None,
    device_attr: str | None = None,
    device: DeviceSource | None = None,
    require_session: bool | None = None,
    follow: bool = True,
) -> Patch:
    """Guard a third-party model loader where it is defined, without editing its package.

    A function is replaced in its module and in every loaded module that
    holds it; a class is guarded in place, as `device_guard(Class)` does; a
    method is replaced on its class. A module not imported yet is patched as
    it is imported. The docs' "Guarding third-party loaders" has the rules:
    reloads, patching twice, pickling.

    Args:
        target: `"module:attribute"`, where the attribute is a function, a
            class, or `Class.method`.
        resolution_mode: As for [`device_guard`][onnx_device_guard.device_guard].
        fallback_device: As for `device_guard`.
        warn: As for `device_guard`.
        session_attr: As for `device_guard`.
        device_attr: As for `device_guard`.
        device: As for `device_guard`.
        require_session: As for `device_guard`.
        follow: As for `device_guard`; `undo()` stops the following of the
            models the patch guarded.

    Returns:
        A [`Patch`][onnx_device_guard.Patch] handle, to `undo()` or to use in `with`.

    Raises:
        ModelInputError: The target is malformed, not installed, missing from
            its module (when that is imported, for a module imported later) or
            written in C; an option is unusable; or the target is already
            patched with other options.

    Examples:
        A module whose loader's session onnxruntime left on CPU:

        >>> import sys, types
        >>> from onnx_device_guard import patch
        >>> class CPUSession:
        ...     def get_providers(self):
        ...         return ["CPUExecutionProvider"]
        >>> class Model:
        ...     def __init__(self, device):
        ...         self.session, self.device = CPUSession(), device
        >>> sys.modules["loaders"] = loaders = types.ModuleType("loaders")
        >>> loaders.load = load = lambda device="cuda": Model(device)
        >>> with patch("loaders:load", warn=False):
        ...     loaders.load().device
        'cpu'
        >>> loaders.load is load
        True
        >>> del sys.modules["loaders"]
    """
    if not any(isinstance(finder, _ImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ImportFinder())  # to patch a module as it is imported
    match = _TARGET.fullmatch(target) if isinstance(target, str) else None
    if match is None:
        raise ModelInputError(
            f"patch() takes a target such as 'package.module:function', "
            f"'package.module:Class' or 'package.module:Class.method'; got {short_repr(target)}."
        )
    options = guard_options(locals())  # its parameters, by name
    _check_installed(target, match["module"])
    with _lock:
        installation = _installed.get(target)
        if installation is None:
            new = _Installation(target, match["module"], match["path"], options)
            module = sys.modules.get(new.module_name)
            # Else _ImportFinder applies it as the module is imported.
            installation = new if module is None else new.apply(module)
            if installation is new:
                _installed[target] = new
                use()  # sessions are observed at birth while the patch is in place
        elif installation.options != options:
            raise ModelInputError(
                f"{target!r} is already patched with other options ({installation.options}); "
                f"undo that patch before patching it with {options}."
            )
        installation.handles += 1
        return Patch(installation, target)


def _check_installed(target: str, module: str) -> None:
    """Refuse a target whose module cannot be found, importing nothing: it would wait forever."""
    parts = module.split(".")
    depth = next((d for d in range(len(parts), 0, -1) if ".".join(parts[:d]) in sys.modules), 0)
    path = getattr(sys.modules.get(".".join(parts[:depth])), "__path__", None) if depth else None
    for number in range(depth, len(parts)):  # the first with every finder, then by path
        name, spec = ".".join(parts[: number + 1]), None
        with contextlib.suppress(ImportError, ValueError):
            spec = (
                importlib.util.find_spec(name)
                if number == depth
                else PathFinder.find_spec(name, path or [])
            )
        if spec is None:
            known = [info.name for info in pkgutil.iter_modules(path)]
            close = difflib.get_close_matches(parts[number], known, 1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            unseen = "" if number == depth else " (or import its package first, if it makes it)"
            raise ModelInputError(
                f"patch({target!r}): no module named {name!r} is installed, so the patch would "
                f"wait for an import that never comes.{hint} Check the spelling{unseen}, or "
                "install the package."
            )
        path = spec.submodule_search_locations
        with contextlib.suppress(OSError, ValueError):  # an `__init__` that extends its path
            if "__path__" in pathlib.Path(spec.origin or "").read_text("utf-8", "replace"):
                return  # (pkgutil's extend_path): only its import tells what it holds


def _missing(module: types.ModuleType, path: str) -> str:
    """Say which part of `path` the module lacks, with the closest name it has."""
    owner: object = module
    for number, part in enumerate(path.split(".")):
        try:
            owner = inspect.getattr_static(owner, part)
        except AttributeError:
            where = module.__name__ if number == 0 else ".".join(path.split(".")[:number])
            names = [name for name in dir(owner) if not name.startswith("__")]
            close = difflib.get_close_matches(part, names, 1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return f"{where} has no attribute {part!r}{hint}"
    return f"{path} cannot be read"


def _patch_of(value: object) -> _Installation | None:
    """The patch in place that put `value` there (a wrapper or a guarded class), if one did."""
    if isinstance(value, PatchedFunction):
        origin = value._self_origin
    else:
        guard = class_guard(value) if isinstance(value, type) else None
        origin = None if guard is None else guard.origin
    return origin if isinstance(origin, _Installation) and not origin.cancelled else None


class Patch(contextlib.AbstractContextManager["Patch"]):
    """A handle on one [`patch`][onnx_device_guard.patch]: `undo()` it, or use it in `with`.

    Args:
        installation: The patch this handle holds (made by `patch`).
        target: The target string given to `patch`.

    Raises:
        ModelInputError: Never here: `patch` checks everything first.

    Examples:
        >>> import sys, types
        >>> from onnx_device_guard import patch
        >>> sys.modules["plain"] = module = types.ModuleType("plain")
        >>> module.load = load = lambda: None
        >>> with patch("plain:load") as handle:
        ...     handle.active, module.load is load
        (True, False)
        >>> handle.active, module.load is load
        (False, True)
        >>> del sys.modules["plain"]
    """

    def __init__(self, installation: _Installation, target: str) -> None:
        self._installation, self._target, self._undone = installation, target, False

    @property
    def target(self) -> str:
        """The target string given to `patch`."""
        return self._target

    @property
    def active(self) -> bool:
        """Whether this handle is not undone and its module still holds the target."""
        return not self._undone and not self._held().lost

    def undo(self) -> None:
        """Give up this handle; the last one on a patch puts back what it replaced.

        Returns:
            None.

        Raises:
            ModelInputError: Never: a name rebound since the patch is left as it is.

        Examples:
            >>> import sys, types
            >>> from onnx_device_guard import patch
            >>> sys.modules["undone"] = module = types.ModuleType("undone")
            >>> module.load = load = lambda: None
            >>> handle = patch("undone:load")
            >>> handle.undo()
            >>> handle.undo()  # a second time does nothing
            >>> module.load is load
            True
            >>> del sys.modules["undone"]
        """
        with _lock:
            if self._undone:
                return
            self._undone = True
            held = self._held()
            held.handles -= 1
            if held.handles == 0:
                held.stop()

    def __exit__(self, *exc_info: object) -> None:
        self.undo()

    def _held(self) -> _Installation:
        """The patch this handle is on: another name's, when its own turned out to be on the
        object that name patched first (both waited for their modules)."""
        installation = self._installation
        while installation.merged_into is not None:
            installation = installation.merged_into
        return installation

    def __repr__(self) -> str:
        state = "undone" if self._undone else "lost" if self._held().lost else "active"
        return f"<onnx_device_guard patch {self.target!r} ({state})>"


@dataclass(eq=False)
class _Installation:
    """One target's patch; `cancelled` by the last `undo()`, `lost` if its module lacks it."""

    target: str
    module_name: str
    path: str
    options: GuardOptions
    handles: int = 0
    cancelled: bool = False
    lost: bool = False
    merged_into: _Installation | None = None
    undo_steps: list[Callable[[], None]] = field(default_factory=list)

    def stop(self) -> None:
        """Put back what the patch replaced; the models it guarded stop following and waiting."""
        self.cancelled = True
        for step in reversed(self.undo_steps):
            step()
        self.undo_steps.clear()
        stop_following(self)
        self.forget()
        stop_waiting(self)  # after forget's release: the last of them may unhook

    def forget(self) -> None:
        """Take the patch out of `_installed`, so no import applies it, and release the hooks."""
        if _installed.get(self.target) is self:  # else forgotten when an import lost it
            del _installed[self.target]
            release()

    def apply(self, module: types.ModuleType) -> _Installation:
        """Patch `module`; the patch that holds the target: this one, or one of another name."""
        try:
            owner, name, original = wrapt.resolve_path(module, self.path)
        except wrapt.PathResolutionError:
            raise ModelInputError(
                f"patch({self.target!r}): {_missing(module, self.path)}. Check the target's "
                "spelling and the version of the package that defines it."
            ) from None
        other = _patch_of(original)
        if other is not None:  # this patch's (a reload re-imported it) or another name's
            if other.options != self.options:
                raise ModelInputError(
                    f"patch({self.target!r}): it is already patched as {other.target!r} with "
                    f"other options ({other.options}); patch it with those, or undo that patch."
                )
        elif not isinstance(original, type) and (why := _not_patchable(original)):
            raise ModelInputError(
                f"patch({self.target!r}): it is {why}. Guard a Python function of yours "
                "that calls it with device_guard instead."
            )
        elif isinstance(original, type):  # held by a module or by a class
            guard_class(original, self.options, origin=self)  # which refuses other options
            # unguard_class leaves a class guarded in source (by device_guard: origin None).
            self.undo_steps.append(functools.partial(unguard_class, original, self))
        else:
            self._wrap(owner, name, original)
        return other or self

    def _wrap(self, owner: object, name: str, original: object) -> None:
        """Wrap a method on its class, or a function in its module and every copy of it."""
        wrapper = wrapt.wrap_object(owner, name, PatchedFunction, (self.target, self.options, self))
        copies = not isinstance(owner, type)
        for namespace, key in _references(original) if copies else []:
            namespace[key] = wrapper

        def restore() -> None:
            # Wrapped since by a plain function: theirs stays, and ours still guards under it.
            with contextlib.suppress(wrapt.WrapperNotOutermostError):
                wrapt.unwrap_object(owner, name, wrapper, missing_ok=True)
            # Every other module that holds the wrapper got it from this patch: the
            # copies replaced above and modules imported while it was in place.
            for namespace, key in _references(wrapper) if copies else []:
                namespace[key] = original

        self.undo_steps.append(restore)


def _not_patchable(value: object) -> str | None:
    """Why `value` (not a class) cannot be patched: it is not Python code; `None` if it can."""
    function = value.__func__ if isinstance(value, classmethod | staticmethod) else value
    if isinstance(function, functools.partial):
        return _not_patchable(function.func)
    if hasattr(function, "__code__"):
        return None
    wrapped = getattr(function, "__wrapped__", None)
    if wrapped is not None and wrapped is not function:
        return _not_patchable(wrapped)
    if not callable(function):
        return f"a {type(function).__name__}, not a function, class or method"
    if isinstance(inspect.getattr_static(type(function), "__call__", None), types.FunctionType):
        return None
    return f"{short_repr(function)}, written in C and shared by every module that imports it"


class _ImportFinder(importlib.abc.MetaPathFinder):
    """Answers only for a module with a patch on it: its spec, with a `_PatchingLoader`."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if not any(i.module_name == fullname for i in list(_installed.values())):
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(fullname, path, target)
            if spec is None:
                continue
            if hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchingLoader(spec.loader)  # type: ignore[assignment]
            else:  # a loader from before Python 3.4: nothing of ours runs after it
                logger.warning(
                    "patch() cannot patch %s as it is imported: its loader %s has no "
                    "exec_module(). Import %s before calling patch().",
                    fullname,
                    short_repr(spec.loader),
                    fullname,
                )
            return spec
        return None


class _PatchingLoader(wrapt.ObjectProxy[Any]):
    """A module's own loader; after `exec_module` it applies the module's patches (again)."""

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__  # the spec's, set by the import system (the code may change it)
        # The import system set the module's loader to this proxy: give it its own back.
        for holder, attribute in ((module, "__loader__"), (module.__spec__, "loader")):
            if getattr(holder, attribute, None) is self:
                setattr(holder, attribute, self.__wrapped__)
        self.__wrapped__.exec_module(module)
        # A lazy package (Hugging Face's _LazyModule) puts another object in its place.
        module = sys.modules.get(name, module)
        with _lock:
            failure: ModelInputError | None = None
            for installation in [i for i in _installed.values() if i.module_name == name]:
                try:  # what an earlier run of the module replaced stays replaced until undo()
                    held = installation.apply(module)
                except ModelInputError as error:
                    installation.lost = True  # its handles are no longer active
                    installation.forget()  # a new patch() may take its place
                    failure = failure or error
                else:
                    if held is not installation:  # the object another name patched first:
                        held.handles += installation.handles  # its handles go on that patch
                        installation.handles, installation.merged_into = 0, held
                        installation.forget()
            if failure is not None:
                raise failure


def _class_seen_by_caller(proxy: wrapt.ObjectProxy[Any]) -> type:
    """A patched callable's `__class__`: its original's, so that it passes for a function, but
    its own for a pickler's `reducer_override` (cloudpickle's, as Ray, Dask and joblib use),
    which would copy a function by value, unguarded, instead of calling `__reduce_ex__`."""
    caller = sys._getframe().f_back  # None for a lookup from outside any Python code
    if caller is not None and caller.f_code.co_name == "reducer_override":
        return type(proxy)
    return proxy.__wrapped__.__class__  # type: ignore[no-any-return]


class PatchedFunction(wrapt.FunctionWrapper[..., Any]):
    """A patched function or method: guards each call, pickles as its target and options."""

    def __init__(
        self, wrapped: Any, target: str, options: GuardOptions, origin: Origin | None = None
    ) -> None:
        function = wrapped.__func__ if isinstance(wrapped, classmethod | staticmethod) else wrapped
        align = call_and_align_async if inspect.iscoroutinefunction(function) else call_and_align
        signature = read_signature(function)  # once here, not at every call
        bound = signature and signature.replace(parameters=list(signature.parameters.values())[1:])

        def guard(wrapped: Any, instance: object, args: Any, kwargs: Any) -> Any:
            # wrapt has bound `wrapped` to the instance (or class), which is never passed
            # on: the call's arguments then start at the second parameter.
            called = signature if instance is None else bound
            return align(Load(options, wrapped, args, kwargs, called, origin))

        # A copy taken while the patch was in place passes calls through once it is undone.
        super().__init__(wrapped, guard, None if origin is None else lambda: not origin.cancelled)
        self._self_target, self._self_options, self._self_origin = target, options, origin
        self._self_of_class = function is not wrapped  # a static or class method
        self._self_carried: _ByValueOnly | None = None

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        """Bind as wrapt does, but a static or class method binds no instance: it pickles
        without it."""
        if self._self_of_class and owner is not None:
            instance = None
        return super().__get__(instance, owner)

    def __reduce_ex__(self, protocol: object) -> tuple[Any, ...]:
        original = None
        if self._self_target.startswith("__main__:"):  # no worker can look it up: it travels,
            wrapped: Any = self.__wrapped__  # one proxy each time (its function may call it)
            kind = type(wrapped) if self._self_of_class else None
            function = wrapped.__func__ if kind else wrapped
            if inspect.isfunction(function):
                self._self_carried = function = self._self_carried or _ByValueOnly(function)
            original = (kind, function)
        return (_guarded_elsewhere, (self._self_target, self._self_options, original))

    def __deepcopy__(self, memo: object = None) -> Any:
        return self

    __copy__ = __deepcopy__

    __class__ = property(_class_seen_by_caller)


class _BoundPatchedFunction(wrapt.BoundFunctionWrapper[..., Any]):
    """A patched method bound to its class or instance; pickles as that binding, guarded."""

    def __reduce_ex__(self, protocol: object) -> tuple[Any, ...]:
        unpickle, arguments = self._self_parent.__reduce_ex__(protocol)
        return (unpickle, (*arguments, self._self_instance, self._self_owner))

    __copy__ = __deepcopy__ = PatchedFunction.__deepcopy__
    __class__ = property(_class_seen_by_caller)


PatchedFunction.__bound_function_wrapper__ = _BoundPatchedFunction  # type: ignore[misc]


class _ByValueOnly(wrapt.ObjectProxy[Any]):
    """A `__main__` target's function, which no other process can look up: cloudpickle copies
    it by value (it passes for the function); pickle, which takes functions by name, leaves it
    out, and the target is looked up where it is unpickled (a process pool's `__main__`)."""

    def __reduce_ex__(self, protocol: object) -> tuple[Any, ...]:
        return (type(None), ())


def _guarded_elsewhere(target: str, options: GuardOptions, original: Any, *binding: Any) -> Any:
    """Unpickle a patched function or bound method: the target as this process has it (or as
    it was carried, from a `__main__` no other process has), guarded."""
    kind, function = original or (None, None)
    if function is not None:
        patched = function if kind is None else kind(function)
    else:
        try:
            patched = wrapt.resolve_path(*target.split(":"))[2]
        except (wrapt.TargetModuleNotFoundError, wrapt.PathResolutionError) as error:
            raise ModelInputError(
                f"Cannot unpickle the loader patched as {target!r}: this process has no "
                f"such target ({error}). Unpickle it where its package is installed, or "
                "send one defined in a script (__main__) with cloudpickle."
            ) from None
    if not isinstance(patched, PatchedFunction):  # else patched here too
        patched = PatchedFunction(patched, target, options)
    return patched.__get__(*binding) if binding else patched


def _references(value: object) -> Iterator[tuple[dict[str, Any], str]]:
    """Every `(module namespace, name)` that holds `value` itself, read without `__getattr__`."""
    for module in list(sys.modules.values()):
        if not isinstance(module, types.ModuleType):
            # Some packages put other objects in sys.modules; typeshed says they cannot.
            continue  # type: ignore[unreachable]
        try:
            namespace = object.__getattribute__(module, "__dict__")
            items = list(namespace.items())
        except Exception:  # a module that refuses to be read holds nothing of ours
            continue
        yield from ((namespace, name) for name, held in items if held is value)
