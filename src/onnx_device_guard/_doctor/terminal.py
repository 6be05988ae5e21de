"""What the command writes: the report on stdout, one-line errors on stderr, progress.

Text the doctor did not write (paths, input names, onnxruntime's messages) is
escaped, so it cannot drive the terminal or forge a line.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Mapping

_COLOURS: Mapping[str, str] = {
    "OK": "32",  # green
    "FALLBACK": "33",  # yellow
    "INCONCLUSIVE": "33",
    "FAILED": "31",  # red
    "ERROR": "31",
}
_VERDICT = re.compile(rf"^({'|'.join(_COLOURS)}):", re.MULTILINE)

PREFIX = "onnx-device-guard doctor: error: "
"""How the doctor's error lines start."""

PIPE_CLOSED = 141
"""The exit status when the reader of stdout went away (128 + SIGPIPE, as other tools give)."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def escaped(text: str) -> str:
    """`text` with every control character, the newline too, written as `\\xNN` (one line)."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def printable(text: str) -> str:
    """`text` with every control character but the newline escaped, as `\\x1b`."""
    return "\n".join(map(escaped, text.split("\n")))


def colour_wanted(is_terminal: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Whether to colour a report: `NO_COLOR` wins, then `FORCE_COLOR`, then the terminal."""
    environ = os.environ if environ is None else environ
    return not environ.get("NO_COLOR") and (bool(environ.get("FORCE_COLOR")) or is_terminal)


def paint(report: str) -> str:
    """Colour the verdict word that starts a line (`OK:`, `FAILED:`...) of `report`."""
    return _VERDICT.sub(lambda match: f"\x1b[{_COLOURS[match[1]]}m{match[1]}\x1b[0m:", report)


class Progress:
    """One line of progress on the terminal's stderr, rewritten in place and cleared at the end.

    Off a terminal it does nothing; it writes to its own copy of descriptor 2, which the
    capture of onnxruntime's log takes over.
    """

    def __init__(self, descriptor: int | None = None) -> None:
        self._shown = False
        if descriptor is None:
            with contextlib.suppress(OSError):
                descriptor = os.dup(2) if os.isatty(2) else None
        self._descriptor = descriptor

    def show(self, text: str, tail: str = "") -> None:
        """Replace the progress line with `text` then `tail`, cut from the left to fit."""
        try:
            width = os.get_terminal_size(self._descriptor or 0).columns - 1
        except OSError:
            width = 79
        text, tail = printable(text), printable(tail)
        if len(text) + len(tail) > width:
            room = max(width - len(text) - 3, 0)
            tail = "..." + tail[len(tail) - room :] if room else ""
        self._shown = True  # first: Ctrl-C during the write must still clear it
        self._write(f"\r\x1b[2K{(text + tail)[:width]}")

    def clear(self) -> None:
        """Remove the progress line, so the next output starts on a clean line."""
        if self._shown:
            self._write("\r\x1b[2K")
            self._shown = False

    def close(self) -> None:
        """Clear the line and let go of the descriptor."""
        self.clear()
        if self._descriptor is not None:
            with contextlib.suppress(OSError):
                os.close(self._descriptor)
            self._descriptor = None

    def _write(self, text: str) -> None:
        if self._descriptor is None:
            return
        try:
            os.write(self._descriptor, text.encode("utf-8", "backslashreplace"))
        except OSError:
            self._descriptor = None


class OutputError(Exception):
    """stdout cannot take the report; `status` is the exit status to give (2 or 141)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def write_out(text: str) -> None:
    """Write `text` to stdout and flush; raise `OutputError` when stdout cannot take it.

    Its binary layer gets the bytes until it took all (unbuffered, the text layer drops what
    a write leaves). Then stdout points at /dev/null, so Python's flush at exit says nothing.
    """
    if sys.stdout is None:
        say_error(f"{PREFIX}cannot write the report: stdout is closed")
        raise OutputError(2)
    try:
        if (binary := getattr(sys.stdout, "buffer", None)) is None:
            sys.stdout.write(text)  # an in-memory stream takes text whole
        else:
            left = memoryview(text.encode(sys.stdout.encoding, sys.stdout.errors or "strict"))
            while left:  # after a short write, the next says why (a broken pipe)
                left = left[binary.write(left) or 0 :]
        sys.stdout.flush()
    except OSError as error:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        if isinstance(error, BrokenPipeError):
            raise OutputError(PIPE_CLOSED) from None
        reason = error.strerror or type(error).__name__
        say_error(f"{PREFIX}cannot write the report to stdout: {reason}")
        raise OutputError(2) from None


def say_error(line: str) -> None:
    """Write one line to stderr, control characters (newlines too) escaped; if closed, nothing."""
    if sys.stderr is None:
        return
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(escaped(line) + "\n")
        sys.stderr.flush()


def tolerate_unencodable_output() -> None:
    """Let stdout and stderr print any path: what their encoding lacks becomes `\\xNN`."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")
