"""wrapt wrappers that pickle by reference, as the functions they wrap do.

A wrapt proxy refuses to pickle ("object proxy must define __reduce__()"),
which would keep decorated factories out of process pools. These wrappers
pickle as a name to look up again on the other side, as wrapt's docs
("Serialising a Decorator") recommend.
"""

from __future__ import annotations

import importlib
import pickle
from typing import TYPE_CHECKING, Any

import wrapt

if TYPE_CHECKING:
    _FunctionWrapper = wrapt.FunctionWrapper[..., Any]
    _BoundFunctionWrapper = wrapt.BoundFunctionWrapper[..., Any]
else:  # wrapt's classes are generic in its stubs only
    _FunctionWrapper = wrapt.FunctionWrapper
    _BoundFunctionWrapper = wrapt.BoundFunctionWrapper


def _resolve_qualname(module: str, qualname: str) -> object:
    target: object = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


class BoundWrapperByReference(_BoundFunctionWrapper):
    """A wrapper bound to a class or an instance; pickles as an attribute lookup on it."""

    def __reduce_ex__(self, protocol: object) -> tuple[Any, ...]:
        owner = self._self_instance if self._self_instance is not None else self._self_owner
        return (getattr, (owner, self.__name__))

    def __copy__(self) -> BoundWrapperByReference:
        return self

    def __deepcopy__(self, memo: object) -> BoundWrapperByReference:
        return self


class WrapperByReference(_FunctionWrapper):
    """A function wrapper that pickles as its module and qualified name."""

    __bound_function_wrapper__ = BoundWrapperByReference

    pickled_as = "function"
    """What the wrapper is called in the error raised when it cannot be pickled."""

    def __reduce_ex__(self, protocol: object) -> tuple[Any, ...]:
        qualname = self.__qualname__
        if "<locals>" in qualname:
            raise pickle.PicklingError(
                f"Cannot pickle the {self.pickled_as} {qualname}: it is defined inside a "
                "function. Define it at module level to send it to another process."
            )
        return (_resolve_qualname, (self.__module__, qualname))

    # Functions are immutable as far as copy is concerned; so are wrapped ones.
    def __copy__(self) -> WrapperByReference:
        return self

    def __deepcopy__(self, memo: object) -> WrapperByReference:
        return self
