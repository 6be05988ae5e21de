"""Which execution providers read GPU memory, and reading them off a session (no torch here)."""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ._errors import ModelInputError
from ._messages import ObjectTable, error_text, logger, short_repr, typed_repr

MAX_DEVICE_INDEX = 127
"""The largest device index torch keeps as it is: it stores one in a signed byte."""

GPU_CAPABLE_EXECUTION_PROVIDERS: frozenset[str] = frozenset(
    {
        "CUDAExecutionProvider",
        "TensorrtExecutionProvider",
        "NvTensorRTRTXExecutionProvider",
        "ROCMExecutionProvider",
        "MIGraphXExecutionProvider",
    }
)
"""Names of the onnxruntime execution providers that read torch's `cuda` tensors.

ROCm and MIGraphX builds of torch call their devices `cuda` too.

Examples:
    >>> from onnx_device_guard import GPU_CAPABLE_EXECUTION_PROVIDERS
    >>> "CUDAExecutionProvider" in GPU_CAPABLE_EXECUTION_PROVIDERS
    True
    >>> "DmlExecutionProvider" in GPU_CAPABLE_EXECUTION_PROVIDERS
    False
"""


RESETTING: ObjectTable[threading.RLock] = ObjectTable()
"""Each session's lock, held by `set_providers` while it rebuilds the session (whose providers
read `None` meanwhile), and by a reader that found them `None`."""


def require_session(session: object) -> Callable[[], object]:
    """Return `session.get_providers`, or raise `ModelInputError` if it has none."""
    try:
        get_providers = getattr(session, "get_providers", None)
    except Exception as error:  # a lookup that raises: a broken proxy, say
        raise _broken("Looking up session.get_providers", error) from error
    if not callable(get_providers):
        raise ModelInputError(
            "session must be an onnxruntime.InferenceSession, or any object with a "
            f"get_providers() method; got {typed_repr(session)}."
        )
    return get_providers  # type: ignore[no-any-return]


def effective_providers(session: object) -> tuple[str, ...]:
    """`session.get_providers()` (any iterable of names but a bare string) as a tuple."""
    get_providers = require_session(session)
    try:
        providers: Any = get_providers()
        if providers is None and (lock := RESETTING.get(session)) is not None:
            with lock:  # another thread's set_providers is rebuilding it: read it once built
                providers = get_providers()
    except Exception as error:
        raise _broken("session.get_providers()", error) from error
    if type(providers) is not list:  # a list is onnxruntime's own answer
        try:
            iterable = callable(getattr(type(providers), "__iter__", None))
        except Exception:  # a metaclass whose lookup raises
            iterable = False
        if isinstance(providers, str | bytes) or not iterable:
            raise ModelInputError(
                "session.get_providers() must return a list (or another iterable) of provider "
                f"names; got {typed_repr(providers)}."
            )
    try:
        names = tuple(providers)
    except Exception as error:
        what = f"Iterating over what session.get_providers() returned ({typed_repr(providers)})"
        raise _broken(what, error) from error
    for name in names:
        if type(name) is not str and not isinstance(name, str):
            raise ModelInputError(
                "session.get_providers() must return provider names (strings); got "
                f"{typed_repr(name)} in {short_repr(providers)}."
            )
    return names


def _broken(what: str, error: Exception) -> ModelInputError:
    """The error for a session whose `what` raised `error`."""
    return ModelInputError(
        f"{what} raised {error_text(error)}. Pass a fully initialised onnxruntime.InferenceSession."
    )


def first_gpu_provider(providers: tuple[str, ...]) -> str | None:
    """Return the first GPU-capable provider in `providers`, in the session's order."""
    for name in providers:
        if name in GPU_CAPABLE_EXECUTION_PROVIDERS:
            return name
    return None


def provider_device_id(session: object, provider: str) -> int | None:
    """The GPU index `provider` runs on in `session`; `None` (logged if odd), never raising."""
    try:
        get_options = getattr(session, "get_provider_options", None)
        if not callable(get_options):
            return None
        all_options = get_options()
        if type(all_options) is not dict and not isinstance(all_options, Mapping):
            what = f"session.get_provider_options() returned {typed_repr(all_options)}"
            _unchecked(provider, f"{what}, not a mapping")
            return None
        options = all_options.get(provider)
        if options is None:
            return None
        if type(options) is not dict and not isinstance(options, Mapping):
            _unchecked(provider, f"its options are {typed_repr(options)}, not a mapping")
            return None
        raw = options.get("device_id")
    except Exception as error:
        _unchecked(provider, f"reading session.get_provider_options() raised {error_text(error)}")
        return None
    index = parse_device_id(raw)
    if index is None and raw is not None:
        _unchecked(
            provider,
            f"it reports device_id={short_repr(raw)}, which is not a GPU index torch "
            f"addresses (0 to {MAX_DEVICE_INDEX})",
        )
    return index


def parse_device_id(raw: object) -> int | None:
    """`raw` (an int, or digits with whitespace around, as onnxruntime reads) as a GPU index."""
    if isinstance(raw, str):  # looked up, never int(): it takes '٣', '+1' and a megabyte of digits
        text = raw.strip()
        return INDICES.get(text.lstrip("0") or "0") if text else None
    if isinstance(raw, bool):
        return None
    try:
        index = operator.index(raw)  # type: ignore[arg-type]
    except Exception:
        return None
    return index if 0 <= index <= MAX_DEVICE_INDEX else None


INDICES = {str(index): index for index in range(MAX_DEVICE_INDEX + 1)}
"""Every GPU index torch addresses, by the digits that spell it without leading zeros."""


def _unchecked(provider: str, why: str) -> None:
    logger.warning(
        "Cannot tell which GPU %s runs on: %s. The device index is not checked; the "
        "device is aligned by provider type alone.",
        provider,
        why,
    )


def why_dropped(provider: str) -> str:
    """Why onnxruntime may have dropped `provider`, as far as this process can tell."""
    try:
        import onnxruntime

        available = list(onnxruntime.get_available_providers())
    except Exception:
        available = None
    if available is not None and provider not in available:
        return (
            f"This onnxruntime build has no {provider} (it offers {short_repr(available, 200)}): "
            "install onnxruntime-gpu, and no other onnxruntime package beside it."
        )
    return (
        f"onnxruntime has {provider} but could not start it; its own log, above, says why "
        "(often a CUDA or cuDNN library it cannot load)."
    )
