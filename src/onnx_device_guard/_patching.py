"""`patch`: guard a third-party factory where it is defined, without editing its package.

A target names a module and an attribute path in it: a function, a class, or
a method of a class. A function is replaced by its guarded wrapper in its
module and in every loaded module that holds the same function object under
any name (the copies `from x import f` makes); a class is guarded in place
(see `_classes`); a method is replaced on its class, so subclasses and aliases
of the class see it. A target whose module is not imported yet is patched by a
post-import hook when it is.

Patching one target again while it is patched wraps nothing twice: it returns
another handle on the same patch (a count of handles keeps it in place until
the last one is undone), and raises when the options differ.
"""

from __future__ import annotations

import inspect
import re
import sys
import threading
import types
from typing import Any

import wrapt

from ._classes import (
    describe_options,
    guard_class,
    guarded_options,
    is_guarded,
    unguard_class,
)
from ._decorator import _GuardOptions, device_guard
from ._errors import ModelInputError

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_TARGET = re.compile(rf"(?P<module>{_DOTTED}):(?P<path>{_DOTTED})")
_MISSING: Any = object()
_lock = threading.RLock()
_installed: dict[str, _Installation] = {}
"""The patches in place (or waiting for their module), by target."""
_owners: dict[int, _Installation] = {}
"""The patches in place, by the id of what they put there (a wrapper or a guarded class)."""


def patch(target: str, /, **options: Any) -> Patch:
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
    raised out of the `import` statement that loaded the module.

    Patching a target that is already patched with the same options wraps
    nothing twice: it returns a new handle on the same patch, which stays in
    place until every handle is undone.

    Args:
        target: `"module:attribute"`, where the attribute is a function, a
            class, or `Class.method`.
        options: The options of
            [`device_guard`][onnx_device_guard.device_guard], passed on as
            they are (`resolution_mode`, `fallback_device`, `session_attr`,
            `device_attr`, ...).

    Returns:
        A handle: its `undo()` method, or the end of a `with` block over it,
        puts back every reference the patch replaced, except those that were
        rebound to something else since.

    Raises:
        ModelInputError: The target string is malformed; the target does not
            exist in its loaded module (or, for a module imported later, when
            it is imported); an option is unknown or unusable; or the target
            is already patched with other options.

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
        >>> with patch("loaders:load", fallback_device="cpu"):
        ...     loaders.load().device
        device(type='cpu')
        >>> loaders.load is load
        True
        >>> del sys.modules["loaders"]
    """
    match = _TARGET.fullmatch(target) if isinstance(target, str) else None
    if match is None:
        raise ModelInputError(
            f"patch() takes a target such as 'package.module:function', "
            f"'package.module:Class' or 'package.module:Class.method'; got {target!r}."
        )
    guard = _guard_options(options)
    with _lock:
        installation = _installed.get(target) or _patched_under_another_name(match)
        if installation is not None:
            if installation.options != guard:
                raise ModelInputError(
                    f"{target!r} is already patched with other options "
                    f"({describe_options(installation.options)}); undo that patch before "
                    f"patching it with {describe_options(guard)}."
                )
        else:
            installation = _Installation(target, match["module"], match["path"], guard)
            installation.start()
            _installed[target] = installation
        installation.handles += 1
        return Patch(installation, target)


def _patched_under_another_name(match: re.Match[str]) -> _Installation | None:
    """The patch that already replaced the target, when it is loaded and was patched."""
    owner: object = sys.modules.get(match["module"], _MISSING)
    *path, name = match["path"].split(".")
    try:
        for part in path:
            owner = getattr(owner, part, _MISSING)
        if owner is _MISSING:
            return None
        if isinstance(owner, type) and path:
            value = owner.__dict__.get(name, _MISSING)
        else:
            value = getattr(owner, name, _MISSING)
    except Exception:  # a lazy attribute that fails to load: apply() reports it
        return None
    return _owners.get(id(value))


def _guard_options(options: dict[str, Any]) -> _GuardOptions:
    """Validate `options` as `device_guard` does and return them, built."""
    accepted = [
        name
        for name, parameter in inspect.signature(device_guard).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ModelInputError(
            f"patch() got the option(s) {unknown}, which device_guard does not take; "
            f"its options are {accepted}."
        )
    decorator = device_guard(**options)
    built = getattr(decorator, "__self__", None)
    assert isinstance(built, _GuardOptions)
    return built


class Patch:
    """A handle on one `patch(...)`: `undo()` it, or use it as a context manager.

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
        """Whether this handle has not been undone yet."""
        return not self._undone

    def undo(self) -> None:
        """Give up this handle; the last handle on a patch restores what it replaced.

        Undoing a handle twice does nothing the second time.
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
        state = "active" if self.active else "undone"
        return f"<onnx_device_guard patch {self.target!r} ({state})>"


class _Installation:
    """One target's patch: what it replaced, where, and how to put it back."""

    def __init__(self, target: str, module: str, path: str, options: _GuardOptions) -> None:
        self.target = target
        self.module_name = module
        self.path = path.split(".")
        self.options = options
        self.handles = 0
        self.applied = False
        self.cancelled = False
        self.undo_steps: list[Any] = []

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
        self.cancelled = True
        for step in reversed(self.undo_steps):
            step()
        self.undo_steps.clear()
        self.options.follower.close()  # the sessions of models it built stop being followed
        for key in [key for key, owner in _owners.items() if owner is self]:
            del _owners[key]

    def apply(self, module: types.ModuleType) -> None:
        owner: object = module
        for name in self.path[:-1]:
            owner = self._lookup(owner, name)
        name = self.path[-1]
        if isinstance(owner, type) and len(self.path) > 1:
            if not self._patched_already(owner.__dict__.get(name)):
                self._patch_method(owner, name)
        else:
            value = self._lookup(owner, name)
            if self._patched_already(value):
                pass
            elif isinstance(value, type):
                self._patch_class(value)
            elif callable(value):
                self._patch_function(value)
            else:
                raise ModelInputError(
                    f"patch({self.target!r}): {self.target} is a "
                    f"{type(value).__name__}, not a function, class or method."
                )
        self.applied = True

    def _patched_already(self, value: object) -> bool:
        """Whether another patch (of this object under another name) put `value` there.

        `patch()` finds such a patch itself when the module is loaded; this
        covers targets patched under two names before their module was imported.
        """
        other = _owners.get(id(value))
        if other is None or other is self:
            return False
        if other.options != self.options:
            raise ModelInputError(
                f"patch({self.target!r}): it is already patched as {other.target!r} with "
                f"other options ({describe_options(other.options)}); patch it with those, "
                "or undo that patch."
            )
        return True

    def _lookup(self, owner: object, name: str) -> Any:
        try:
            return getattr(owner, name)
        except AttributeError:
            pass
        raise ModelInputError(
            f"patch({self.target!r}): {owner!r} has no attribute {name!r}. Check the "
            "target's spelling and the version of the package that defines it."
        )

    def _patch_class(self, cls: type) -> None:
        existing = guarded_options(cls)
        if is_guarded(cls) and existing is not None:  # by device_guard in its source: it stays
            if existing != self.options:
                raise ModelInputError(
                    f"patch({self.target!r}): the class is already guarded with other "
                    f"options ({describe_options(existing)}); patch it with those, or not at all."
                )
            return
        guard_class(cls, self.options)
        _owners[id(cls)] = self
        self.undo_steps.append(lambda: unguard_class(cls))

    def _patch_method(self, owner: type, name: str) -> None:
        own = owner.__dict__.get(name, _MISSING)
        raw = own if own is not _MISSING else _static_lookup(owner, name)
        if raw is _MISSING:
            self._lookup(owner, name)  # raises, naming the attribute
        wrapper = self.options.decorate(raw)
        type.__setattr__(owner, name, wrapper)
        _owners[id(wrapper)] = self

        def restore() -> None:
            if owner.__dict__.get(name, _MISSING) is wrapper:
                if own is _MISSING:
                    type.__delattr__(owner, name)
                else:
                    type.__setattr__(owner, name, own)

        self.undo_steps.append(restore)

    def _patch_function(self, function: Any) -> None:
        wrapper = self.options.decorate(function)
        for namespace, name in _references(function):
            namespace[name] = wrapper
        _owners[id(wrapper)] = self

        def restore() -> None:
            # Every module that holds the wrapper got it from this patch: the
            # aliases replaced above and modules imported while it was in place.
            for namespace, name in _references(wrapper):
                namespace[name] = function

        self.undo_steps.append(restore)


def _static_lookup(owner: type, name: str) -> Any:
    for klass in owner.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _MISSING


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
