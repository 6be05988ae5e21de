"""What onnxruntime says while the doctor works (warnings, printed lines, its C++ log on
file descriptor 2): kept off the terminal, cleaned, each relevant message given once."""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .facts import one_line, tidy_error

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?\s+")
_RELEVANT = re.compile(
    r"(?i)provider|\bEP\b|cuda|cudnn|cublas|tensorrt|rocm|migraphx|directml|\bdml\b|gpu|"
    r"device|driver|failed|failure|error|cannot|could not|unable|fall(?:ing)? ?back|"
    r"shared object|\.so\b|\.dll\b|library"
)
# onnxruntime's log prefixes a source location ("[W:onnxruntime:, graph.cc:42 Fn]") that
# differs between otherwise equal messages; duplicates are found without it.
_LOG_PREFIX = re.compile(r"^\[[EWIV]:onnxruntime:[^\]]*\]\s*")


@dataclass
class Captured:
    """What was said while `captured_output` was in force."""

    stdout: str = ""
    stderr: str = ""
    warnings: list[str] = field(default_factory=list)

    def messages(self) -> tuple[str, ...]:
        """Return the warnings, printed lines and native log lines, one line each."""
        messages = [one_line(text, 500) for text in self.warnings]
        for line in self.stdout.splitlines():
            if line.strip("* \t") not in ("", "EP Error"):  # not the banner of a retry
                messages.append(line.strip())
        for line in self.stderr.splitlines():
            # onnxruntime's native log colours its lines and stamps them with the time.
            line = _TIMESTAMP.sub("", _ANSI.sub("", line)).strip()
            if line:
                messages.append(line)
        return tuple(messages)

    def retry(self) -> str | None:
        """Return the error onnxruntime printed when it retried with its fallback providers."""
        for line in self.stdout.splitlines():
            if line.startswith("EP Error"):
                return line.removeprefix("EP Error").lstrip(": ").strip()
        return None


def clean_messages(messages: Iterable[str], *, known: Iterable[str] = ()) -> tuple[list[str], int]:
    """Keep each message about providers, devices or a failure once; count the others.

    Those said elsewhere in the report (`known`, such as the inference's own error)
    are dropped and not counted.
    """
    known_keys = [_key(text) for text in known]
    said = set(known_keys)
    kept: list[str] = []
    unrelated = 0
    for message in messages:
        key = _key(message)
        if not key or key in said or any(key[:80] in other for other in known_keys):
            continue
        said.add(key)
        if _RELEVANT.search(key):
            kept.append(message)
        else:
            unrelated += 1
    return kept, unrelated


def _key(message: str) -> str:
    """The message without its log prefix, C++ locations and numbers (which vary by attempt)."""
    text = tidy_error(_LOG_PREFIX.sub("", message))
    return re.sub(r"\d+", "#", " ".join(text.split()))


def own_messages(name: str, messages: Iterable[str]) -> list[str]:
    """The messages about provider `name`: naming it or its library, before a library's.

    Examples:
        >>> from onnx_device_guard._doctor.capture import own_messages
        >>> own_messages("CUDAExecutionProvider", [
        ...     "Failed to load library libonnxruntime_providers_tensorrt.so: libnvinfer.so.10",
        ...     "Failed to load library libonnxruntime_providers_cuda.so: libcudnn.so.9",
        ... ])
        ['Failed to load library libonnxruntime_providers_cuda.so: libcudnn.so.9']
    """
    library = f"providers_{name.removesuffix('ExecutionProvider').lower()}"
    own = [text for text in messages if name in text or library in text.lower()]
    loads = [text for text in messages if "Failed to load library" in text]
    return own or [text for text in loads if "providers_" not in text]


@contextlib.contextmanager
def captured_output() -> Iterator[Captured]:
    """Capture warnings, `print` output and native writes to file descriptor 2.

    Not thread-safe (`warnings.catch_warnings`): for the command line, which has one thread.
    """
    captured = Captured()
    printed = io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with contextlib.redirect_stdout(printed), _native_stderr(captured):
                yield captured
        finally:
            captured.stdout = printed.getvalue()
            captured.warnings = [one_line(warning.message, 2000) for warning in caught]


@contextlib.contextmanager
def _native_stderr(captured: Captured) -> Iterator[None]:
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable fd 2: capture nothing
        yield
        return
    with tempfile.TemporaryFile() as temporary:
        os.dup2(temporary.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                if sys.stderr is not None:
                    sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            temporary.seek(0)
            captured.stderr = temporary.read().decode(errors="replace")
