"""The command's standard streams: the report on stdout, one-line errors on stderr.

A closed stdout pipe or a full disk becomes an exit status, never a
traceback or Python's "Exception ignored" at exit; a closed stderr swallows
errors rather than moving them to stdout; a closed descriptor 0, 1 or 2 is
filled with /dev/null before a model file can take its number.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import Any

from .terminal import printable

PREFIX = "onnx-device-guard doctor: error: "
"""How the doctor's error lines start."""

PIPE_CLOSED = 141
"""The exit status when the reader of stdout went away (128 + SIGPIPE, as other tools give)."""


class Output:
    """Writes the report to stdout, turning a closed pipe or a full disk into an exit status."""

    def __init__(self) -> None:
        self.status = 0

    def write(self, text: str) -> bool:
        """Write `text`; return False (with `status` set) when stdout cannot take it."""
        stream = sys.stdout
        if stream is None:
            say_error(f"{PREFIX} cannot write the report: stdout is closed")
            self.status = 2
            return False
        try:
            stream.write(text)
            stream.flush()
        except BrokenPipeError:
            silence_stdout()
            self.status = PIPE_CLOSED
            return False
        except OSError as error:
            silence_stdout()
            reason = error.strerror or type(error).__name__
            say_error(f"{PREFIX} cannot write the report to stdout: {reason}")
            self.status = 2
            return False
        return True


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's own flush at exit has nothing to complain of.

    What was buffered is dropped: nobody can read it any more.
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def say_error(line: str) -> None:
    """Write one line to stderr, control characters (newlines too) escaped; if closed, nothing.

    Nothing goes to stdout instead.
    """
    stream = sys.stderr
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError):
        stream.write(printable(line).replace("\n", "\\x0a") + "\n")
        stream.flush()


def occupy_closed_standard_streams() -> None:
    """Open /dev/null on a closed file descriptor 0, 1 or 2.

    Otherwise the next file opened (a model, onnxruntime's log) would get
    that number, and native writes to "stderr" would land in it.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                opened = os.open(os.devnull, os.O_RDWR)
                if opened != fd:
                    os.dup2(opened, fd)
                    os.close(opened)


def tolerate_unencodable_output() -> None:
    """Let stdout and stderr print any path: what their encoding lacks becomes `\\xNN`."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")


def is_terminal(stream: Any) -> bool:
    """Whether `stream` is a terminal; `False` for a closed or odd one."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
