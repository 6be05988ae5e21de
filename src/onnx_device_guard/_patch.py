"""`patch`: guard a third-party factory where it is defined, without editing its package.

A target names a module and an attribute path in it: a function, a class, or
a method of a class. A function is replaced by a guarded wrapt wrapper in its
module (`wrapt.wrap_object`) and in every loaded module that holds the same
function object under any name (the copies `from x import f` makes, which
wrapt does not look for); a method is wrapped on its class, so subclasses and
aliases of the class see it; a class is guarded in place (see `_classes`). A
target whose module is not imported yet is patched by a wrapt post-import
hook when it is. `undo()` puts everything back with `wrapt.unwrap_object`.

Builtins and other functions written in C are refused: they have no module
of their own (`math.sqrt` is the same object in every module that imported
it), so replacing "every reference" would change code far from the loader.

A module executed again while patches are in place (`importlib.reload`, or
an import after its entry was deleted from `sys.modules`) gets its patches
applied again. `_ReloadFinder`, first on `sys.meta_path` from the first
patch on, does it: for a module with a patch in place, and only for one, it
wraps the loader that the other finders return, and after that loader's
`exec_module` applies the module's patches to what the module now holds.
Everything else it leaves to the next finder. A reload runs the new code in
the module's old namespace, so a target the new code no longer defines is
still there, guarded. A patch that can no longer be applied (a module
imported anew without the target) raises `ModelInputError` out of that
import, and its handles report `active` as false.

Patching one target again while it is patched wraps nothing twice: it returns
another handle on the same patch (a count of handles keeps it in place until
the last one is undone), and raises when the options differ.

A patched function or method pickles as its target and options: another
process that unpickles it gets the target guarded with the same options
(its own module is not changed), so a patched loader sent to a process pool,
a Ray task or a Dask task never arrives unguarded. A patched class pickles by
reference like any class, and arrives as the other process's own, unpatched
class: patch there too (see the docs page on Ray, Dask and process pools).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import re
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import wrapt

from ._call_device import Call
from ._classes import guard_class, guarded_options, is_guarded, unguard_class
from ._devices import DeviceLike
from ._errors import ModelInputError
from ._messages import MISSING, short_repr
from ._model_alignment import align_model
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
_owners: dict[int, _Installation] = {}
"""The patches in place, by the id of what they put there (a wrapper or a guarded class)."""


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
    require_session: bool = True,
    follow: bool = True,
) -> Patch:
    """Guard a third-party model loader where it is defined, without editing its package.

    The loader is named by a string, `"package.module:function"`,
    `"package.module:Class"` or `"package.module:Class.method"` (a plain,
    class or static method). A function is replaced by its guarded form in its
    module and in every loaded module that holds it under any name, such as
    the copies made by `from package.module import function`. A class is
    guarded in place, as `device_guard(Class)` does: each instance is aligned
    once its outermost `__init__` returns. A method is replaced on its class,
    so subclasses and every name of the class see it.

    When the module is not imported yet, the patch is made as soon as it is
    imported, so one `patch(...)` line can sit at the top of an entry point.
    If the target then turns out not to exist, the `ModelInputError` is
    raised out of the `import` statement that loaded the module. A package
    that is not installed at all is refused at once.

    Patching a target that is already patched with the same options wraps
    nothing twice: it returns a new handle on the same patch, which stays in
    place until every handle is undone.

    A patched function or method sent to another process (pickle, a process
    pool, Ray, Dask) arrives guarded with the same options. A patched class
    arrives as that process's own class, unpatched: patch in each worker.

    A module reloaded (`importlib.reload`) or imported again while it is
    patched gets the patch again. Builtins and other functions written in C
    are refused: they are shared by every module that imports them.

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
        A [`Patch`][onnx_device_guard.Patch] handle: its `undo()` method, or
        the end of a `with` block over it, puts back every reference the
        patch replaced, except those that were rebound to something else since.

    Raises:
        ModelInputError: The target string is malformed; its package is not
            installed; the target does not exist in its loaded module (or,
            for a module imported later, when it is imported); it is a
            builtin or another callable written in C; an option is unusable;
            or the target is already patched with other options.

    Examples:
        A module that loads a model whose session onnxruntime left on CPU:

        >>> import sys, types
        >>> import torch
        >>> loaders = types.ModuleType("loaders")
        >>> class CPUSession:
        ...     def get_providers(self):
        ...         return ["CPUExecutionProvider"]
        >>> class Model:
        ...     def __init__(self, device):
        ...         self.session, self.device = CPUSession(), torch.device(device)
        >>> def load(device="cuda"):
        ...     return Model(device)
        >>> loaders.load, loaders.Model = load, Model
        >>> sys.modules["loaders"] = loaders
        >>> from onnx_device_guard import patch
        >>> with patch("loaders:load", fallback_device="cpu", warn=False):
        ...     loaders.load().device
        device(type='cpu')
        >>> loaders.load is load
        True
        >>> del sys.modules["loaders"]
    """
    _ReloadFinder.install()
    match = _TARGET.fullmatch(target) if isinstance(target, str) else None
    if match is None:
        raise ModelInputError(
            f"patch() takes a target such as 'package.module:function', "
            f"'package.module:Class' or 'package.module:Class.method'; got {short_repr(target)}."
        )
    options = guard_options(
        resolution_mode=resolution_mode,
        fallback_device=fallback_device,
        warn=warn,
        session_attr=session_attr,
        device_attr=device_attr,
        device=device,
        require_session=require_session,
        follow=follow,
    )
    _check_installed(target, match["module"])
    with _lock:
        installation = _installed.get(target) or _patched_under_another_name(match)
        if installation is not None:
            if installation.options != options:
                raise ModelInputError(
                    f"{target!r} is already patched with other options "
                    f"({installation.options}); undo that patch before "
                    f"patching it with {options}."
                )
        else:
            installation = _Installation(target, match["module"], match["path"], options)
            installation.start()
            _installed[target] = installation
        installation.handles += 1
        return Patch(installation, target)


def _check_installed(target: str, module: str) -> None:
    """Refuse a target whose top-level package cannot be found at all (it would wait forever)."""
    top = module.partition(".")[0]
    if module in sys.modules or top in sys.modules:
        return
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise ModelInputError(
            f"patch({target!r}): no module named {top!r} is installed, so the patch would "
            "wait for an import that never comes. Check the spelling, or install the package."
        )


def _patched_under_another_name(match: re.Match[str]) -> _Installation | None:
    """The patch that already replaced the target, when it is loaded and was patched."""
    module = sys.modules.get(match["module"])
    if module is None:
        return None
    try:
        value = wrapt.resolve_path(module, match["path"])[2]
    except Exception:  # missing, or a lazy attribute that fails to load: apply() reports it
        return None
    return _owners.get(id(value))


class Patch:
    """A handle on one [`patch`][onnx_device_guard.patch]: `undo()` it, or use it in `with`.

    `patch` makes the handles; one target patched twice gives two handles on
    one patch, which stays in place until both are undone.

    Args:
        installation: The patch this handle holds (made by `patch`).
        target: The target string given to `patch`.

    Raises:
        ModelInputError: Never here: `patch` checks everything first.

    Examples:
        >>> import sys, types
        >>> from onnx_device_guard import patch
        >>> module = types.ModuleType("plain")
        >>> def load():
        ...     return None
        >>> module.load = load
        >>> sys.modules["plain"] = module
        >>> handle = patch("plain:load")
        >>> handle.active, module.load is load
        (True, False)
        >>> handle.undo()
        >>> handle.active, module.load is load
        (False, True)
        >>> del sys.modules["plain"]
    """

    def __init__(self, installation: _Installation, target: str) -> None:
        self._installation = installation
        self._target = target
        self._undone = False

    @property
    def target(self) -> str:
        """The target string given to `patch`."""
        return self._target

    @property
    def active(self) -> bool:
        """Whether this handle has not been undone, and its patch is in place.

        A module reloaded or imported again gets its patches again. A patch
        is lost, and this false, when the module, executed again, no longer
        holds the target: the import or reload raised `ModelInputError` then.
        """
        return not self._undone and not self._installation.lost

    def undo(self) -> None:
        """Give up this handle; the last handle on a patch restores what it replaced.

        Undoing a handle twice does nothing the second time.

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
            >>> handle.undo(); handle.undo()
            >>> module.load is load
            True
            >>> del sys.modules["undone"]
        """
        with _lock:
            if self._undone:
                return
            self._undone = True
            installation = self._installation
            installation.handles -= 1
            if installation.handles == 0:
                installation.stop()
                if _installed.get(installation.target) is installation:
                    del _installed[installation.target]

    def __enter__(self) -> Patch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.undo()

    def __repr__(self) -> str:
        state = "undone" if self._undone else "lost" if self._installation.lost else "active"
        return f"<onnx_device_guard patch {self.target!r} ({state})>"


class _Installation:
    """One target's patch: what it replaced, where, and how to put it back."""

    def __init__(self, target: str, module: str, path: str, options: GuardOptions) -> None:
        self.target = target
        self.module_name = module
        self.path = path
        self.options = options
        self.handles = 0
        self.applied = False
        self.cancelled = False
        """Set by the last `undo()`; models watched for this patch stop following."""
        self.lost = False
        """Set when its module was executed again without the target (see `reapply`)."""
        self.undo_steps: list[Callable[[], None]] = []

    def start(self) -> None:
        module = sys.modules.get(self.module_name)
        if module is not None:
            self.apply(module)
            return
        wrapt.register_post_import_hook(self._on_import, self.module_name)

    def _on_import(self, module: types.ModuleType) -> None:
        with _lock:
            if self.cancelled or self.applied:
                return
            try:
                self.apply(module)
            except ModelInputError:
                # The patch never took: forget it, so a corrected patch() can follow.
                if _installed.get(self.target) is self:
                    del _installed[self.target]
                raise

    def stop(self) -> None:
        from ._follow import stop_following

        self.cancelled = True
        for step in reversed(self.undo_steps):
            step()
        self.undo_steps.clear()
        stop_following(self)  # the sessions of models it guarded stop being followed
        for key in [key for key, owner in _owners.items() if owner is self]:
            del _owners[key]

    def reapply(self, module: types.ModuleType) -> None:
        """Apply the patch to `module` executed again (a reload) while it is in place.

        What the earlier application replaced stays replaced (other modules
        may still hold it), and `undo()` restores both.
        """
        if self.cancelled or not self.applied or self.lost:
            return
        try:
            self.apply(module)
        except ModelInputError:
            self.lost = True
            raise

    def apply(self, module: types.ModuleType) -> None:
        try:
            owner, name, original = wrapt.resolve_path(module, self.path)
        except wrapt.PathResolutionError as error:
            raise ModelInputError(
                f"patch({self.target!r}): {error.__cause__ or error}. Check the target's "
                "spelling and the version of the package that defines it."
            ) from None
        if _owners.get(id(original)) is self or self._patched_already(original):
            pass  # put there by this patch (a reloaded module that re-imports it) or another
        elif not isinstance(original, type) and (why := _not_patchable(original)):
            raise ModelInputError(
                f"patch({self.target!r}): {self.target} is {why}. patch() guards Python "
                "functions, classes and methods; guard a Python function of yours that "
                "calls it with device_guard instead."
            )
        elif isinstance(owner, type) and "." in self.path:
            self._patch_method(owner, name)
        elif isinstance(original, type):
            self._patch_class(original)
        else:
            self._patch_function(module, original)
        self.applied = True

    def _patched_already(self, value: object) -> bool:
        """Whether another patch (of this object under another name) put `value` there."""
        other = _owners.get(id(value))
        if other is None or other is self:
            return False
        if other.options != self.options:
            raise ModelInputError(
                f"patch({self.target!r}): it is already patched as {other.target!r} with "
                f"other options ({other.options}); patch it with those, or undo that patch."
            )
        return True

    def _patch_class(self, cls: type) -> None:
        existing = guarded_options(cls)
        if is_guarded(cls) and existing is not None:  # by device_guard in its source: it stays
            if existing != self.options:
                raise ModelInputError(
                    f"patch({self.target!r}): the class is already guarded with other "
                    f"options ({existing}); patch it with those, or not at all."
                )
            return
        guard_class(cls, self.options, origin=self)
        _owners[id(cls)] = self
        self.undo_steps.append(lambda: unguard_class(cls))

    def _patch_method(self, owner: type, name: str) -> None:
        wrapper = wrapt.wrap_object(owner, name, PatchedFunction, (self.target, self.options, self))
        _owners[id(wrapper)] = self
        self.undo_steps.append(lambda: _unwrap(owner, name, wrapper))

    def _patch_function(self, module: types.ModuleType, function: Any) -> None:
        wrapper = wrapt.wrap_object(
            module, self.path, PatchedFunction, (self.target, self.options, self)
        )
        for namespace, name in _references(function):
            namespace[name] = wrapper
        _owners[id(wrapper)] = self

        def restore() -> None:
            _unwrap(module, self.path, wrapper)
            # Every other module that holds the wrapper got it from this patch: the
            # copies replaced above and modules imported while it was in place.
            for namespace, name in _references(wrapper):
                namespace[name] = function

        self.undo_steps.append(restore)


def _not_patchable(value: object) -> str | None:
    """Why `value` cannot be patched, or `None` when it can (a class is checked elsewhere).

    A Python function (or a wrapt wrapper around one, which has its
    `__code__`), a class or static method of one, an instance of a Python
    class that defines `__call__`, or a `functools.partial` of any of these,
    or a C wrapper that names one as its `__wrapped__` (`functools.lru_cache`)
    can be. A builtin, a method descriptor or any other callable written in C
    cannot: such objects are shared by every module that imports them.
    """
    function = value.__func__ if isinstance(value, classmethod | staticmethod) else value
    if isinstance(function, functools.partial):
        return _not_patchable(function.func)
    if hasattr(function, "__code__"):
        return None
    wrapped = getattr(function, "__wrapped__", None)
    if wrapped is not None and wrapped is not function:
        return _not_patchable(wrapped)
    native = (
        types.BuiltinFunctionType,
        types.MethodDescriptorType,
        types.WrapperDescriptorType,
        types.MethodWrapperType,
        types.ClassMethodDescriptorType,
    )
    if isinstance(function, native):
        return (
            f"{short_repr(function)}, a {type(function).__name__} written in C: such an "
            "object is shared by every module that imports it"
        )
    if not callable(function):
        return f"a {type(function).__name__}, not a function, class or method"
    call = inspect.getattr_static(type(function), "__call__", None)
    if isinstance(call, types.FunctionType):
        return None
    return f"a {type(function).__name__}, a callable written in C, not Python code"


class _ReloadFinder(importlib.abc.MetaPathFinder):
    """Applies a module's patches again when the module is executed again (a reload).

    It sits first on `sys.meta_path` and answers only for a module that has
    a patch in place: it asks the finders after it for the spec, and wraps
    the spec's loader in a `_ReapplyingLoader`. For every other module it
    returns `None` at once, and the import goes on as if it were not there.
    """

    @classmethod
    def install(cls) -> None:
        if not any(isinstance(finder, cls) for finder in sys.meta_path):
            sys.meta_path.insert(0, cls())

    def find_spec(
        self,
        fullname: str,
        path: Any = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if not any(
            installation.module_name == fullname and installation.applied
            for installation in list(_installed.values())
        ):
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = _ReapplyingLoader(spec.loader, fullname)  # type: ignore[assignment]
                return spec
        return None


class _ReapplyingLoader(wrapt.ObjectProxy[Any]):
    """A module's own loader; after `exec_module` it applies the module's patches again."""

    def __init__(self, loader: Any, name: str) -> None:
        super().__init__(loader)
        self._self_name = name

    def exec_module(self, module: types.ModuleType) -> None:
        # The import system set the module's loader to this proxy: give it its own back.
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.__wrapped__
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.__wrapped__
        self.__wrapped__.exec_module(module)
        with _lock:
            installations = [i for i in _installed.values() if i.module_name == self._self_name]
            failure: ModelInputError | None = None
            for installation in installations:
                try:
                    installation.reapply(module)
                except ModelInputError as error:
                    failure = failure or error
            if failure is not None:
                raise failure


def _unwrap(owner: object, name: str, wrapper: object) -> None:
    """Put back what `wrapper` replaced, unless it was rebound or wrapped again since."""
    # Wrapped since by a plain function: theirs stays, and ours still guards under it.
    with contextlib.suppress(wrapt.WrapperNotOutermostError):
        wrapt.unwrap_object(owner, name, wrapper, missing_ok=True)


class PatchedFunction(wrapt.FunctionWrapper[..., Any]):
    """A patched function or method: guards each call, pickles as its target and options."""

    def __init__(
        self, wrapped: Any, target: str, options: GuardOptions, origin: object = None
    ) -> None:
        function = wrapped.__func__ if isinstance(wrapped, classmethod | staticmethod) else wrapped
        if inspect.iscoroutinefunction(function):

            async def guard(
                wrapped: Callable[..., Any], instance: object, args: Any, kwargs: Any
            ) -> Any:
                model = await wrapped(*args, **kwargs)
                align_model(model, options, Call(wrapped, args, kwargs), origin)  # type: ignore[arg-type]
                return model

        else:

            def guard(  # type: ignore[misc]
                wrapped: Callable[..., Any], instance: object, args: Any, kwargs: Any
            ) -> Any:
                model = wrapped(*args, **kwargs)
                align_model(model, options, Call(wrapped, args, kwargs), origin)  # type: ignore[arg-type]
                return model

        # The instance is never passed on: wrapt has already bound `wrapped`.
        super().__init__(wrapped, guard)
        self._self_target = target
        self._self_options = options

    def __reduce_ex__(self, protocol: object) -> tuple[Any, ...]:
        return (_guarded_elsewhere, (self._self_target, self._self_options))

    def __copy__(self) -> PatchedFunction:
        return self

    def __deepcopy__(self, memo: object) -> PatchedFunction:
        return self


class _BoundPatchedFunction(wrapt.BoundFunctionWrapper[..., Any]):
    """A patched method bound to its class or instance; pickles as that lookup, guarded."""

    def __reduce_ex__(self, protocol: object) -> tuple[Any, ...]:
        parent = self._self_parent
        owner = self._self_instance if self._self_instance is not None else self._self_owner
        name = parent._self_target.rpartition(".")[2]
        return (_bound_elsewhere, (parent._self_target, parent._self_options, owner, name))


PatchedFunction.__bound_function_wrapper__ = _BoundPatchedFunction  # type: ignore[misc]


def _guarded_elsewhere(target: str, options: GuardOptions) -> Any:
    """Unpickle a patched function: the target, as this process has it, guarded."""
    module, _, path = target.partition(":")
    original = wrapt.resolve_path(importlib.import_module(module), path)[2]
    if isinstance(original, PatchedFunction):  # patched here too
        return original
    return PatchedFunction(original, target, options)


def _bound_elsewhere(target: str, options: GuardOptions, owner: object, name: str) -> Any:
    """Unpickle a patched method bound to `owner` (a class or an instance)."""
    cls = owner if isinstance(owner, type) else type(owner)
    current = inspect.getattr_static(cls, name, MISSING)
    if isinstance(current, PatchedFunction):  # the class is patched here too
        return getattr(owner, name)
    wrapper = _guarded_elsewhere(target, options)
    instance = None if isinstance(owner, type) else owner
    return wrapper.__get__(instance, cls)


def _references(value: object) -> list[tuple[dict[str, Any], str]]:
    """Every `(module namespace, name)` in the loaded modules that holds `value` itself.

    Reads each module's `__dict__` directly, so a lazy module's `__getattr__`
    never runs; a module whose namespace cannot be read is skipped.
    """
    found: list[tuple[dict[str, Any], str]] = []
    for module in list(sys.modules.values()):
        if not isinstance(module, types.ModuleType):
            # Some packages put other objects in sys.modules; typeshed says they cannot.
            continue  # type: ignore[unreachable]
        try:
            namespace = object.__getattribute__(module, "__dict__")
            items = list(namespace.items())
        except Exception:  # a module that refuses to be read holds nothing of ours
            continue
        found.extend((namespace, name) for name, held in items if held is value)
    return found
