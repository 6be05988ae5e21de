"""Run the doctor in a child process whose stdout and stderr are a real pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SOURCES = str(Path(__file__).resolve().parents[1] / "src")


@dataclass(frozen=True)
class Session:
    """What the terminal showed, as raw text, and the exit status."""

    screen: str
    status: int


def run_on_terminal(
    argv: Sequence[str], *, columns: int, interrupt_after: str | None = None, timeout: float = 120
) -> Session:
    """Run `onnx-device-guard` with `argv` on a terminal `columns` wide.

    With `interrupt_after`, SIGINT is sent once that text has appeared.
    """
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    environ = {**os.environ, "PYTHONPATH": SOURCES, "NO_COLOR": "1"}
    environ.pop("COLUMNS", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "onnx_device_guard", *argv],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=environ,
        start_new_session=True,
    )
    os.close(follower)
    screen = b""
    deadline = time.monotonic() + timeout
    sent = interrupt_after is None
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                screen += chunk
            if not sent and interrupt_after is not None and interrupt_after.encode() in screen:
                child.send_signal(signal.SIGINT)
                sent = True
        status = child.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(leader)
        if child.poll() is None:
            child.kill()
    return Session(screen.decode("utf-8", "replace").replace("\r\n", "\n"), status)
