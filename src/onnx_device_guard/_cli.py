"""The `onnx-device-guard` command line: `doctor`, and `run`, which runs a program watched.

Bad input is one line on stderr and exit status 2, never a traceback. Nothing heavy
is imported here, so `--help` and `--version` answer at once.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import math
import os
import re
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import NoReturn, TypeVar

from ._doctor.terminal import say_error, tolerate_unencodable_output

PROG = "onnx-device-guard"

_Number = TypeVar("_Number", int, float)

INTERRUPTED = 130
"""The exit status after Ctrl-C (128 + SIGINT, as shells report it)."""

DEFAULT_TIMEOUT = 60
"""The default of `--timeout`, in seconds."""

EXIT_STATUS = """\
environment:
  ONNX_DEVICE_GUARD_RESOLUTION_MODE=fail acts like --strict; a fallback goes to
  ONNX_DEVICE_GUARD_FALLBACK_DEVICE (default cpu). NO_COLOR turns colour off,
  FORCE_COLOR on off a terminal.

exit status:
  (with several models, the first of 3, 1, 2, 4, 0 that any of them gives)
    0  the session reads tensors on the device asked for, or a fallback without --strict
    1  --strict (or ONNX_DEVICE_GUARD_RESOLUTION_MODE=fail) and the device had to change
    2  bad input: a model, option or environment variable the doctor cannot use, no
       usable onnxruntime, or a report that cannot be written (one line on stderr)
    3  the test inference failed on the device (the diagnosis says why)
    4  inconclusive: the test inference could not run with the inputs tried, or did not
       end within --timeout (the report says which option helps)
  130  interrupted (Ctrl-C)
  141  the reader of stdout went away (a broken pipe, as in `doctor | head -0`)
"""

DOCTOR_DESCRIPTION = """\
Check that an onnxruntime session can read tensors on a torch device, and say why
not when it cannot. For each MODEL (files, or folders searched for *.onnx; default: a
tiny model shipped with the package) the doctor creates a session, reads back the
providers it really runs, aligns the device as the library does, runs a test
inference there, and reports the likely causes and fixes.
"""


RUN_DESCRIPTION = """\
Run PROGRAM (python app.py, a console script, ...) unchanged, with every
onnxruntime session it and the Python processes it starts create checked as
it is born: a session that asked for a GPU provider and runs none of them is
reported (a DeviceFallbackWarning and a WARNING record) or, with --strict,
raises EnvironmentConfigurationError. The exit status is the program's.
"""


class _Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose usage errors are one line, as the command promises."""

    def error(self, message: str, prog: str | None = None) -> NoReturn:
        say_error(f"{self.prog}: error: {message} (see '{prog or self.prog} --help')")
        raise SystemExit(2)

    def refuse_unknown(self, unknown: Sequence[str], command: str) -> NoReturn:
        """A usage error for `unknown` arguments, suggesting the closest option of `command`."""
        [commands] = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        parser = commands.choices[command]
        options = [option for action in parser._actions for option in action.option_strings]
        close = difflib.get_close_matches(unknown[0].split("=")[0], options, n=1)
        if unknown[0].startswith("-") and close:  # argparse before 3.14 suggests nothing
            self.error(f"unknown option {unknown[0]!r}; did you mean {close[0]!r}?", parser.prog)
        self.error(f"unrecognized arguments: {' '.join(unknown)}", parser.prog)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default `sys.argv[1:]`); return the exit status."""
    tolerate_unencodable_output()
    try:
        parser = build_parser()
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            parser.refuse_unknown(unknown, args.command)
        status: int = args.handler(args)
    except KeyboardInterrupt:
        say_error(f"{PROG}: interrupted")
        return INTERRUPTED
    return status


def version() -> str:
    """The installed version, read from the package metadata without importing the package."""
    try:
        return metadata.version("onnx-device-guard")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


def build_parser() -> _Parser:
    """Return the parser of `onnx-device-guard` and its `doctor` command."""
    parser = _Parser(
        prog=PROG,
        description="Keep a model's torch device in line with what its onnxruntime session reads.",
        epilog="See 'onnx-device-guard doctor --help' for its checks and exit status.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(title="commands", dest="command", required=True)
    doctor = commands.add_parser(
        "doctor",
        help="check a model's device against its onnxruntime session and explain mismatches",
        description=DOCTOR_DESCRIPTION,
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor.add_argument(
        "models",
        nargs="*",
        type=_path,
        metavar="MODEL",
        help="ONNX model files, or folders searched (recursively) for *.onnx files "
        "(default: a tiny y = x + 1 model shipped with the package)",
    )
    doctor.add_argument(
        "--device",
        action="append",
        metavar="DEVICE",
        help="the torch device to check, such as cpu, cuda or cuda:1 "
        "(default: cuda when torch sees a CUDA device, else cpu)",
    )
    doctor.add_argument(
        "--providers",
        nargs="+",
        metavar="EP",
        help="execution providers to request, in order, optionally with options: "
        "CUDAExecutionProvider:device_id=1 CPUExecutionProvider "
        "(default: onnxruntime.get_available_providers())",
    )
    doctor.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=SHAPE[:VALUE]",
        help="the test input NAME: its shape (1x3x224x224; [] for a scalar; empty for the "
        "model's) and the value it is filled with, as in --input sr=:16000 (repeatable)",
    )
    doctor.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N",
        help="the size of the model's named dynamic dimension NAME, as in --dim height=64 "
        "(repeatable)",
    )
    doctor.add_argument(
        "--no-inference",
        action="store_true",
        help="check the device only, without the test inference",
    )
    doctor.add_argument(
        "--max-input-mib",
        type=_above_zero(int, "a whole number of 1 or more"),
        default=None,
        metavar="MIB",
        help="the most memory one set of test inputs may take (default: 256); larger inputs "
        "make the inference inconclusive instead of being allocated",
    )
    doctor.add_argument(
        "--timeout",
        type=_above_zero(float, "a number of seconds above 0"),
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"the most seconds one model's test inference may take, search included "
        f"(default: {DEFAULT_TIMEOUT}); a run still going then is stopped and the "
        "inference is inconclusive",
    )
    doctor.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead: one object for one model file (an error object when it "
        "cannot be checked), a list for several models or a folder",
    )
    doctor.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when the device had to be changed (as "
        "ONNX_DEVICE_GUARD_RESOLUTION_MODE=fail does)",
    )
    doctor.set_defaults(handler=_doctor)
    run = commands.add_parser(
        "run",
        help="run a Python program with every onnxruntime session it creates watched",
        usage="%(prog)s [-h] [--strict] [--fallback-device DEVICE] [--no-warn]"
        " -- PROGRAM [ARGS ...]",
        description=RUN_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--strict", action="store_true", help="a dropped GPU provider raises")
    run.add_argument("--fallback-device", metavar="DEVICE", help="where tensors go instead")
    run.add_argument("--no-warn", action="store_true", help="log fallbacks at DEBUG only")
    run.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS ...]")
    run.set_defaults(handler=_run)
    return parser


def _path(text: str) -> Path:
    if not text:
        raise argparse.ArgumentTypeError("a model path cannot be empty")
    return Path(text)


def _above_zero(convert: Callable[[str], _Number], what: str) -> Callable[[str], _Number]:
    """An argument type: `convert`'s finite number above 0, or a usage error saying `what`."""

    def parse(text: str) -> _Number:
        try:
            number = convert(text)
        except ValueError:
            number = convert("0")
        if not (number > 0 and math.isfinite(number)):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return number

    return parse


def _run(args: argparse.Namespace) -> int:
    """Replace this process with the program, its sessions watched from its first line."""
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        say_error(
            f"{PROG} run: error: name the program to run, as in '{PROG} run -- python app.py'"
        )
        return 2
    flags = _startup_skipping(program)
    if flags is not None:
        say_error(
            f"{PROG} run: error: {program[0]} {flags} ignores PYTHONPATH or skips site, so "
            "the watch cannot start in it. Drop -I, -E and -S, or call "
            "onnx_device_guard.watch_sessions() in the program itself."
        )
        return 2
    environ = dict(os.environ)
    folder = str(Path(__file__).parent / "_bootstrap")
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, environ.get("PYTHONPATH")]))
    if args.strict:
        environ["ONNX_DEVICE_GUARD_RESOLUTION_MODE"] = "fail"
    if args.no_warn:
        environ["ONNX_DEVICE_GUARD_WARN"] = "0"
    if args.fallback_device is not None:
        environ["ONNX_DEVICE_GUARD_FALLBACK_DEVICE"] = args.fallback_device
    refused = _refused(environ, args.fallback_device)
    if refused is not None:
        say_error(f"{PROG} run: error: {refused}")
        return 2
    try:
        if not program[0]:  # execve refuses it (ValueError); a shell finds no such program
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
        os.execvpe(program[0], program, environ)
    except OSError as error:  # as a shell says it: 127 not found, 126 found but not run
        say_error(f"{PROG} run: error: cannot run {program[0]!r}: {error.strerror}")
        return 127 if isinstance(error, FileNotFoundError) else 126


# The usual values of the library's variables (_policy.read_environment reads them, spaces
# around ignored), matched here: torch, seconds to import, reads any other.
_USUAL = {
    "ONNX_DEVICE_GUARD_RESOLUTION_MODE": r"fallback|fail",
    "ONNX_DEVICE_GUARD_FALLBACK_DEVICE": r"cpu|meta|mps|cuda(:(1[01]\d|12[0-7]|[1-9]?\d))?",
    "ONNX_DEVICE_GUARD_WARN": r"(?ai)1|true|yes|on|0|false|no|off",
}


def _refused(environ: dict[str, str], fallback_device: str | None) -> str | None:
    """The library's one-line refusal of `--fallback-device` or a variable in `environ`, else
    `None`, without importing torch for the usual values."""
    values = {name: environ.get(name, "").strip() for name in _USUAL}
    usual = (not value or re.fullmatch(_USUAL[name], value) for name, value in values.items())
    # An empty variable is unset; an empty --fallback-device is a bad device.
    if (fallback_device is None or fallback_device.strip()) and all(usual):
        return None
    from ._devices import as_device
    from ._errors import ModelInputError
    from ._policy import read_environment

    try:
        if fallback_device is not None:  # named as the option, not as the variable it sets
            as_device(fallback_device.strip(), "--fallback-device")
        read_environment(environ)
    except ModelInputError as error:
        return error.message
    return None


def _startup_skipping(program: list[str]) -> str | None:
    """The interpreter option that would keep the watch out of a `python ...` command line,
    or of a script whose `#!` line runs Python.

    Read as Python reads its options: clustered (`-bI`), `-W` and `-X` taking the rest of
    their cluster or the next argument as their value, and `-c`, `-m` or the script
    ending them.
    """
    if not _python(program[0]):
        words = _interpreter_line(program[0])
        flags = _startup_skipping(words + program[:1]) if words and _python(words[0]) else None
        return flags and f"{flags} in its #! line"
    arguments = iter(program[1:])
    for argument in arguments:
        if not argument.startswith("-") or argument in ("-", "--"):
            return None  # the program starts here: the rest are its own arguments
        kind = "takes" if argument == "--check-hash-based-pycs" else _cluster(argument)
        if kind == "takes":
            next(arguments, None)
        elif kind:
            return argument if kind == "skips" else None
    return None


def _python(program: str) -> bool:
    # python3.13t (free-threaded), python3.12-dbg, pypy3 and python.exe are Pythons too.
    interpreter = r"(?:python|pypy)[0-9.]*[a-z]?(?:-dbg)?(?:\.exe)?"
    return re.fullmatch(interpreter, os.path.basename(program), re.IGNORECASE) is not None


def _interpreter_line(program: str) -> list[str]:
    """The interpreter and its options that a script's `#!` line names (`env` and its
    options left out), or `[]` for a program that is not such a script."""
    import shutil

    try:
        with open(shutil.which(program) or program, "rb") as script:
            line = script.readline(512).decode(errors="replace")
    except (OSError, ValueError):
        return []
    words = line[2:].split() if line.startswith("#!") else []
    if words and os.path.basename(words[0]) == "env":
        words = words[1:]
        while words and (words[0][:1] == "-" or "=" in words[0]):  # its options and variables
            del words[: 2 if words[0] in ("-u", "--unset", "-C", "--chdir") else 1]
    return words


def _cluster(argument: str) -> str:
    """What an option cluster does: "skips" (-I, -E, -S), "ends" (-c, -m), "takes" (its last
    option's value is the next argument), or "" (none of these; long options take none)."""
    for place, letter in enumerate(argument[1:] if argument[1] != "-" else "", start=2):
        if letter in "IES":
            return "skips"
        if letter in "cm":
            return "ends"
        if letter in "WX":  # its value: the rest of the cluster, or the next argument
            return "takes" if place == len(argument) else ""
    return ""


def _doctor(args: argparse.Namespace) -> int:
    from ._doctor.command import run

    return run(args)
