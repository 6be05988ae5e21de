"""Finding the model files the user named, and refusing what is not one, without hanging.

What the file system refuses is a one-line `ModelInputError`, never a
traceback or a read that never returns (a FIFO, a device).
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._errors import ModelInputError
from .facts import ModelError
from .terminal import escaped

MODEL_SUFFIX = ".onnx"
"""What a file in a folder must end with (any case) to be checked as a model."""

PROTOBUF_LIMIT = 2**31 - 1
"""The most bytes a protobuf, and so an ONNX model file, can hold."""

_PATH_SHOWN = 160

# Opening a FIFO does not wait for a writer; opening a terminal does not make it ours.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


def display_path(path: Path | str) -> str:
    """`path` as text that cannot forge a line: undecodable bytes and controls as `\\xNN`, cut.

    Examples:
        >>> from onnx_device_guard._doctor.files import display_path
        >>> display_path(b"caf\\xe9.onnx".decode("utf-8", "surrogateescape"))
        'caf\\\\xe9.onnx'
        >>> display_path("m\\nOK: fine.onnx")
        'm\\\\x0aOK: fine.onnx'
        >>> len(display_path("a" * 1000))
        160
    """
    text = escaped(os.fsencode(path).decode("utf-8", "backslashreplace"))
    if len(text) <= _PATH_SHOWN:
        return text
    keep = (_PATH_SHOWN - 3) // 2
    return f"{text[:keep]}...{text[-(_PATH_SHOWN - 3 - keep) :]}"


# Why a path cannot be used, by the `errno` of the `OSError` that reading it raised.
_PROBLEMS: Mapping[int, str] = {
    errno.ENOENT: "the path '{shown}' does not exist",
    errno.ENOTDIR: "the path '{shown}' does not exist",
    errno.ENAMETOOLONG: "'{shown}' is longer than the file system allows for a path or a file "
    "name ({size} bytes); give a shorter path",
    errno.EACCES: "cannot read '{shown}': permission denied (the file, or a folder on its way, "
    "does not let this user read or search it)",
    errno.ELOOP: "'{shown}' is a loop of symbolic links",
}


def file_problem(path: Path, error: OSError) -> str:
    """Say in one line why `path` cannot be used, from the `OSError` that reading it raised."""
    code = errno.EACCES if error.errno == errno.EPERM else error.errno
    reason = error.strerror or type(error).__name__
    problem = _PROBLEMS.get(code or 0, "cannot read '{shown}': {reason}")
    return problem.format(shown=display_path(path), size=len(os.fsencode(path)), reason=reason)


def _stat(path: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as error:
        raise ModelInputError(file_problem(path, error)) from None
    except ValueError as error:  # an embedded NUL byte
        raise ModelInputError(f"'{display_path(path)}' is not a valid path: {error}") from None


@dataclass(frozen=True)
class ModelBytes:
    """A model file's content, read once, and its external data's folder (`None`: not UTF-8)."""

    content: bytes
    folder: str | None


def read_model_file(path: Path) -> ModelBytes:
    """Read `path` once and return its content; raise `ModelInputError` unless it is a model.

    What was opened, without blocking, is checked with `fstat`, so a FIFO swapped in
    after an earlier look is refused too.
    """
    _stat(path)  # the clearest message for a missing or unreachable path
    shown = display_path(path)
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
        try:
            status = os.fstat(descriptor)
            if stat.S_ISREG(status.st_mode) and status.st_size > PROTOBUF_LIMIT:
                raise ModelInputError(
                    f"'{shown}' is {status.st_size / 2**30:.1f} GiB, over the 2 GiB an ONNX "
                    "model file (a protobuf) can hold; keep the weights as external data"
                )
            if stat.S_ISDIR(status.st_mode):
                raise ModelInputError(f"'{shown}' is a directory, not an ONNX model file")
            if not stat.S_ISREG(status.st_mode):
                raise ModelInputError(
                    f"'{shown}' is not a regular file (a FIFO, socket or device); "
                    "give the path of an ONNX model file"
                )
            content = b"".join(iter(functools.partial(os.read, descriptor, 1 << 24), b""))
        finally:
            os.close(descriptor)
    except OSError as error:
        raise ModelInputError(file_problem(path, error)) from None
    if not content:
        raise ModelInputError(f"model file '{shown}' is empty, not an ONNX model")
    folder = os.path.dirname(os.path.abspath(path))  # undecodable bytes are lone surrogates
    return ModelBytes(content, None if any("\ud800" <= c <= "\udfff" for c in folder) else folder)


def is_directory(path: Path) -> bool:
    """Whether `path` is a directory; `False` for anything `os.stat` cannot read."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def expand(paths: Sequence[Path]) -> list[Path | ModelError]:
    """The model files behind `paths`: files as given, folders searched for `*.onnx`.

    A folder without a model, or that cannot be listed, becomes a `ModelError`.
    """
    found: list[Path | ModelError] = []
    for path in paths:
        if not is_directory(path):
            found.append(path)
            continue
        shown = display_path(path)
        empty = ModelError(shown, f"'{shown}' is a directory with no {MODEL_SUFFIX} file in it")
        found.extend(list(_walk(path)) or [empty])
    return found


def _walk(top: Path) -> Iterator[Path | ModelError]:
    """The model files under `top`, depth first and sorted, from a stack (no recursion limit).

    Symbolic links to folders are not followed (no loops).
    """
    pending: list[Path | os.DirEntry[str]] = [top]
    while pending:
        entry = pending.pop()
        try:
            is_folder = isinstance(entry, Path) or entry.is_dir(follow_symlinks=False)
        except OSError:
            is_folder = False
        if not is_folder:
            if entry.name.lower().endswith(MODEL_SUFFIX):
                yield Path(entry)
            continue
        try:
            with os.scandir(entry) as listing:
                pending.extend(sorted(listing, key=lambda item: item.name, reverse=True))
        except OSError as error:
            yield ModelError(display_path(Path(entry)), file_problem(Path(entry), error))
