"""Finding the model files the user named, and refusing what is not one, without hanging.

Every question to the file system goes through `os.stat` first, so a path
that is too long, a folder without search permission, a FIFO or a device
gives a one-line `ModelInputError` instead of a traceback or a read that
never returns.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from .._errors import ModelInputError
from .facts import ModelError

MODEL_SUFFIX = ".onnx"
"""What a file in a folder must end with (any case) to be checked as a model."""

_PATH_SHOWN = 160


def display_path(path: Path | str) -> str:
    """`path` as text that any terminal can print: undecodable bytes as `\\xNN`, cut if long.

    Examples:
        >>> from onnx_device_guard._doctor.files import display_path
        >>> display_path(b"caf\\xe9.onnx".decode("utf-8", "surrogateescape"))
        'caf\\\\xe9.onnx'
        >>> len(display_path("a" * 1000))
        160
    """
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    if len(text) <= _PATH_SHOWN:
        return text
    keep = (_PATH_SHOWN - 3) // 2
    return f"{text[:keep]}...{text[-(_PATH_SHOWN - 3 - keep) :]}"


def file_problem(path: Path, error: OSError) -> str:
    """Say in one line why `path` cannot be used, from the `OSError` that reading it raised."""
    shown = display_path(path)
    code = error.errno
    if code in (errno.ENOENT, errno.ENOTDIR):
        return f"model file '{shown}' does not exist"
    if code == errno.ENAMETOOLONG:
        return (
            f"'{shown}' is longer than the file system allows for a path or a file name "
            f"({len(os.fsencode(path))} bytes); give a shorter path"
        )
    if code in (errno.EACCES, errno.EPERM):
        return (
            f"cannot read '{shown}': permission denied (the file, or a folder on its way, "
            "does not let this user read or search it)"
        )
    if code == errno.ELOOP:
        return f"'{shown}' is a loop of symbolic links"
    reason = error.strerror or type(error).__name__
    return f"cannot read '{shown}': {reason}"


def _stat(path: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as error:
        raise ModelInputError(file_problem(path, error)) from None
    except ValueError as error:  # an embedded NUL byte
        raise ModelInputError(f"'{display_path(path)}' is not a valid path: {error}") from None


def check_model_file(path: Path) -> None:
    """Raise `ModelInputError` unless `path` is a readable, non-empty regular file.

    A FIFO, a socket or a device is refused without being opened, since
    opening one can block forever.
    """
    mode = _stat(path)
    shown = display_path(path)
    if stat.S_ISDIR(mode.st_mode):
        raise ModelInputError(f"'{shown}' is a directory, not an ONNX model file")
    if not stat.S_ISREG(mode.st_mode):
        raise ModelInputError(
            f"'{shown}' is not a regular file (a FIFO, socket or device); "
            "give the path of an ONNX model file"
        )
    if mode.st_size == 0:
        raise ModelInputError(f"model file '{shown}' is empty, not an ONNX model")
    try:
        with path.open("rb") as stream:
            stream.read(1)
    except OSError as error:
        raise ModelInputError(file_problem(path, error)) from None


def model_source(path: Path) -> str | bytes:
    """What to hand `onnxruntime.InferenceSession`: the path, or the file's bytes.

    onnxruntime takes a path only as UTF-8 text; a file whose name is not
    valid UTF-8 is read here and passed by content.
    """
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return path.read_bytes()
        except OSError as error:
            raise ModelInputError(file_problem(path, error)) from None
    return text


def is_directory(path: Path) -> bool:
    """Whether `path` is a directory; `False` for anything `os.stat` cannot read."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def expand(paths: Sequence[Path]) -> list[Path | ModelError]:
    """The model files behind `paths`: files as given, folders searched for `*.onnx`.

    A folder is searched recursively and its files are sorted; a folder that
    holds no model, or that cannot be listed, becomes a `ModelError`, as
    does a path that cannot be read at all. Files are checked later, one by
    one, so one broken model does not stop the others.
    """
    found: list[Path | ModelError] = []
    for path in paths:
        if not is_directory(path):
            found.append(path)
            continue
        models: list[Path | ModelError] = list(_walk(path))
        if not models:
            found.append(
                ModelError(
                    display_path(path),
                    f"'{display_path(path)}' is a directory with no {MODEL_SUFFIX} file in it",
                )
            )
        found.extend(models)
    return found


def _walk(folder: Path) -> Iterator[Path | ModelError]:
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError as error:
        yield ModelError(display_path(folder), file_problem(folder, error))
        return
    for entry in entries:
        path = Path(entry.path)
        try:
            directory = entry.is_dir(follow_symlinks=False)  # no symlink loops
        except OSError:
            directory = False
        if directory:
            yield from _walk(path)
        elif entry.name.lower().endswith(MODEL_SUFFIX):
            yield path
