"""Which execution providers read GPU memory, and reading them off a session."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._errors import ModelInputError

GPU_CAPABLE_EXECUTION_PROVIDERS: frozenset[str] = frozenset(
    {
        "CUDAExecutionProvider",
        "TensorrtExecutionProvider",
        "NvTensorRTRTXExecutionProvider",
        "ROCMExecutionProvider",
        "MIGraphXExecutionProvider",
    }
)
"""Names of the onnxruntime execution providers that read tensors in CUDA memory.

A session whose effective providers include one of these can consume
`cuda` torch tensors (ROCm and MIGraphX builds of torch also call their
devices `cuda`). DirectML, CoreML, OpenVINO and the other providers do not
count: they cannot read torch's CUDA memory.

Examples:
    >>> from onnx_device_guard import GPU_CAPABLE_EXECUTION_PROVIDERS
    >>> "CUDAExecutionProvider" in GPU_CAPABLE_EXECUTION_PROVIDERS
    True
    >>> "DmlExecutionProvider" in GPU_CAPABLE_EXECUTION_PROVIDERS
    False
"""


_DEVICE_IDS = {str(index): index for index in range(64)}
"""`device_id` values as onnxruntime reports them (`"0"`), and the index each names."""


def require_session(session: object) -> Callable[[], object]:
    """Return `session.get_providers`, or raise `ModelInputError` if it has none."""
    try:
        get_providers = getattr(session, "get_providers", None)
    except Exception as error:  # a lookup that raises: a broken proxy, say
        raise _lookup_error("get_providers", error) from error
    if not callable(get_providers):
        raise ModelInputError(
            "session must be an onnxruntime.InferenceSession, or any object with a "
            f"get_providers() method; got {type(session).__name__} {_short_repr(session)}."
        )
    return get_providers  # type: ignore[no-any-return]


def effective_providers(session: object) -> tuple[str, ...]:
    """Return `session.get_providers()` as a tuple, or raise `ModelInputError`."""
    providers = _ask(require_session(session), "get_providers")
    if not isinstance(providers, (list, tuple)):
        raise ModelInputError(
            "session.get_providers() must return a list of provider names; "
            f"got {type(providers).__name__} {_short_repr(providers)}."
        )
    for name in providers:
        if not isinstance(name, str):
            raise ModelInputError(
                "session.get_providers() must return a list of provider names (strings); "
                f"got {_short_repr(providers)}."
            )
    return tuple(providers)


def first_gpu_provider(providers: tuple[str, ...]) -> str | None:
    """Return the first GPU-capable provider in `providers`, in the session's order."""
    for name in providers:
        if name in GPU_CAPABLE_EXECUTION_PROVIDERS:
            return name
    return None


def provider_device_id(session: object, provider: str) -> int | None:
    """Return the `device_id` that `provider` runs on in `session`, if it says.

    `None` when the session has no `get_provider_options()` or the provider's
    options hold no `device_id`. Malformed options raise `ModelInputError`.
    """
    try:
        get_options = getattr(session, "get_provider_options", None)
    except Exception as error:
        raise _lookup_error("get_provider_options", error) from error
    if not callable(get_options):
        return None
    all_options = _ask(get_options, "get_provider_options")
    if type(all_options) is not dict and not isinstance(all_options, Mapping):
        raise ModelInputError(
            "session.get_provider_options() must return a mapping of provider name to "
            f"options; got {type(all_options).__name__} {_short_repr(all_options)}."
        )
    options = all_options.get(provider)
    if options is None:
        return None
    if type(options) is not dict and not isinstance(options, Mapping):
        raise ModelInputError(
            f"session.get_provider_options()[{provider!r}] must be a mapping of option "
            f"names to values; got {type(options).__name__} {_short_repr(options)}."
        )
    raw = options.get("device_id")
    known = _DEVICE_IDS.get(raw) if type(raw) is str else None
    if known is not None:
        return known  # the common case, first
    if raw is None:
        return None
    return _parse_device_id(raw, provider)


def _ask(method: Callable[[], object], name: str) -> Any:
    """Call the session's `method`, turning whatever it raises into `ModelInputError`."""
    try:
        return method()
    except Exception as error:
        raise ModelInputError(
            f"session.{name}() raised {type(error).__name__}: {error}. "
            "Pass a fully initialised onnxruntime.InferenceSession."
        ) from error


def _lookup_error(name: str, error: Exception) -> ModelInputError:
    return ModelInputError(
        f"Looking up session.{name} raised {type(error).__name__}: {error}. "
        "Pass a fully initialised onnxruntime.InferenceSession."
    )


def _parse_device_id(raw: object, provider: str) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit():
        return int(raw)
    raise ModelInputError(
        f"{provider} reports device_id={raw!r}, which is not a GPU index; "
        "expected a non-negative integer such as '0'."
    )


def _short_repr(value: object, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
