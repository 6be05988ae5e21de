"""The `onnx-device-guard` command line; `doctor` is its one command.

`main` parses the arguments, lets the doctor's `probe` gather the facts
for each model and its `diagnosis` and `render` explain them, prints the
report on stdout and returns the exit status. Bad input is one line on
stderr and exit status 2, never a traceback; a closed output pipe ends the
command quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch

from . import __version__
from ._devices import as_device
from ._errors import ModelInputError

PROG = "onnx-device-guard"

PIPE_CLOSED = 141
"""The exit status when the reader of stdout went away (128 + SIGPIPE, as other tools give)."""

EXIT_STATUS = """\
exit status:
  (with several models, the first of 3, 1, 2, 4, 0 that any of them gives)
  0  the session reads tensors on the requested device, or the device had to
     be changed and --strict was not given
  1  --strict was given and the device had to be changed
  2  bad input: a missing, unreadable or non-regular model file, a file that is
     not an ONNX model, a device torch cannot parse, an unknown execution
     provider or option, no usable onnxruntime, or a report that cannot be
     written (one line on stderr)
  3  the test inference failed on the device (the diagnosis says why)
  4  inconclusive: the test inference could not run with the inputs tried (the
     report names the input and the option that fixes it); the device answer
     stands
141 stdout was closed before the report was written (as in `doctor | head -0`)
"""

DOCTOR_DESCRIPTION = """\
Check that an onnxruntime session can read tensors on a torch device, and
explain why not when it cannot. For each MODEL (files, or folders searched for
*.onnx; default: a tiny model shipped with the package) the doctor creates a
session with the requested execution providers, reads back the providers it
really runs, aligns the device with align_device_with_onnx_session, runs a test
inference on the aligned device (trying larger sizes for dynamic dimensions when
the smallest do not fit), and reports what it found with the likely causes and
fixes.
"""


class _Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose usage errors are one line, as the command promises."""

    def error(self, message: str) -> NoReturn:
        _say_error(f"{self.prog}: error: {message} (see '{self.prog} --help')")
        raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default `sys.argv[1:]`); return the exit status."""
    _occupy_closed_standard_streams()
    _tolerate_unencodable_output()
    args = build_parser().parse_args(argv)
    status: int = args.handler(args)
    return status


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of `onnx-device-guard` and its `doctor` command."""
    parser = _Parser(
        prog=PROG,
        description="Keep a model's torch device in line with what its onnxruntime session reads.",
        epilog="See 'onnx-device-guard doctor --help' for its checks and exit status.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
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
        type=_positive_int,
        default=None,
        metavar="MIB",
        help="the most memory one set of test inputs may take (default: 256); larger inputs "
        "make the inference inconclusive instead of being allocated",
    )
    doctor.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead: one object for one model file, a list for several "
        "models or a folder",
    )
    doctor.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when the device had to be changed",
    )
    doctor.set_defaults(handler=_doctor)
    return parser


def _path(text: str) -> Path:
    if not text:
        raise argparse.ArgumentTypeError("a model path cannot be empty")
    return Path(text)


def _positive_int(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return number


def parse_device(text: str) -> torch.device:
    """Return `--device`'s value as a `device`, or raise `ModelInputError`.

    The value goes through the library's `as_device`, so the doctor refuses
    exactly what the core refuses.

    Examples:
        >>> from onnx_device_guard._cli import parse_device
        >>> parse_device("cuda:1")
        device(type='cuda', index=1)
        >>> parse_device("gpu")
        Traceback (most recent call last):
        onnx_device_guard.ModelInputError: --device 'gpu' is not a device torch understands; ...
    """
    try:
        return as_device(text, "device")
    except ModelInputError as error:
        if "understands" in error.message:  # torch could not parse it
            raise ModelInputError(
                f"--device {text!r} is not a device torch understands; "
                "use a device such as 'cpu', 'cuda' or 'cuda:1'"
            ) from None
        raise ModelInputError(f"--device {text!r}: {error.message}") from None


def parse_provider(text: str) -> tuple[str, dict[str, str]]:
    """Return `--providers`' `NAME[:KEY=VALUE,...]` as a name and its options.

    Examples:
        >>> from onnx_device_guard._cli import parse_provider
        >>> parse_provider("CUDAExecutionProvider:device_id=1")
        ('CUDAExecutionProvider', {'device_id': '1'})
        >>> parse_provider("CPUExecutionProvider")
        ('CPUExecutionProvider', {})
    """
    name, _, rest = text.partition(":")
    name = name.strip()
    if not text.strip():
        raise ModelInputError(
            "--providers got an empty name; give execution provider names such as "
            "CUDAExecutionProvider CPUExecutionProvider, or leave --providers out for all "
            "that onnxruntime offers"
        )
    if name.lower().endswith((".onnx", ".ort")) or "/" in name or "\\" in name:
        raise ModelInputError(
            f"{text!r} was read as an execution provider; put the models before --providers"
        )
    if not name:
        raise ModelInputError(f"--providers {text!r} has no provider name before ':'")
    options: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in rest.split(","))):
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise ModelInputError(
                f"--providers {text!r}: provider options must be KEY=VALUE pairs separated "
                "by commas, as in CUDAExecutionProvider:device_id=1"
            )
        options[key.strip()] = value.strip()
    return name, options


def _doctor(args: argparse.Namespace) -> int:
    from ._doctor.diagnosis import EXIT_BAD_INPUT, diagnose, status_of, worst
    from ._doctor.facts import Facts, ModelError
    from ._doctor.files import display_path, expand, is_directory
    from ._doctor.inputs import DEFAULT_MAX_INPUT_MIB, parse_dim_option, parse_input_option
    from ._doctor.probe import (
        MIB,
        TINY_MODEL,
        InferenceOptions,
        check_model,
        check_provider_names,
        default_device,
        environment,
    )
    from ._doctor.render import (
        render_any_json,
        render_error_section,
        render_machine,
        render_summary,
        render_text,
    )

    try:
        device = None if args.device is None else parse_device(args.device)
        providers = None if args.providers is None else [parse_provider(p) for p in args.providers]
        overrides = {}
        for text in args.input:
            override = parse_input_option(text)
            overrides[override.name] = override
        dims = dict(parse_dim_option(text) for text in args.dim)
        options = InferenceOptions(
            overrides=overrides,
            dims=dims,
            max_bytes=(args.max_input_mib or DEFAULT_MAX_INPUT_MIB) * MIB,
            run=not args.no_inference,
        )
        targets: list[Path | ModelError | None] = (
            list(expand(args.models)) if args.models else [None]
        )
        many = len(args.models) > 1 or any(is_directory(path) for path in args.models)
        if len(targets) == 1 and isinstance(targets[0], ModelError):
            raise ModelInputError(targets[0].message)
        env, ort = environment()
        if device is None:
            device = default_device(env)
        if providers is None:
            providers = [(name, {}) for name in env.available_providers]
        check_provider_names([name for name, _ in providers], ort.get_all_providers())
    except ModelInputError as error:
        _say_error(f"{PROG} doctor: error: {error.message}")
        return EXIT_BAD_INPUT

    out = _Output()
    results: list[Facts | ModelError] = []
    input_names: set[str] = set()
    dim_names: set[str] = set()
    if many and not args.json and not out.write(render_machine(env) + "\n"):
        return out.status
    for target in targets:
        if isinstance(target, ModelError):
            result: Facts | ModelError = target
        else:
            try:
                result, inputs = check_model(ort, env, target, device, providers, options)
            except ModelInputError as error:
                shown = TINY_MODEL if target is None else display_path(target)
                result = ModelError(shown, error.message)
                if not many:
                    _say_error(f"{PROG} doctor: error: {error.message}")
                    return EXIT_BAD_INPUT
            else:
                input_names.update(model_input.name for model_input in inputs)
                dim_names.update(
                    dim
                    for model_input in inputs
                    for dim in model_input.dims
                    if isinstance(dim, str)
                )
        results.append(result)
        if not args.json:
            section = (
                render_error_section(result)
                if isinstance(result, ModelError)
                else render_text(result, diagnose(result), strict=args.strict, machine=not many)
            )
            if many:
                section = f"\n=== {result.model} ===\n{section}"
            if not out.write(section + "\n"):
                return out.status
    statuses = [status_of(result, strict=args.strict) for result in results]
    if args.json:
        documents = [render_any_json(result, strict=args.strict) for result in results]
        if not out.write(json.dumps(documents if many else documents[0], indent=2) + "\n"):
            return out.status
    elif many and not out.write(
        "\nSummary:\n" + render_summary(results, strict=args.strict) + "\n"
    ):
        return out.status
    for problem in _unused(overrides, input_names, "--input", "input") + _unused(
        dims, dim_names, "--dim", "named dimension"
    ):
        _say_error(f"{PROG} doctor: error: {problem}")
        statuses.append(EXIT_BAD_INPUT)
    return worst(statuses)


def _unused(given: dict[str, Any], known: set[str], option: str, what: str) -> list[str]:
    return [
        f"{option} {name!r} matches no {what} of the models checked"
        + (f" (they have {', '.join(sorted(known))})" if known else "")
        for name in given
        if name not in known
    ]


class _Output:
    """Writes the report to stdout, turning a closed pipe or a full disk into an exit status."""

    def __init__(self) -> None:
        self.status = 0

    def write(self, text: str) -> bool:
        """Write `text`; return False (with `status` set) when stdout cannot take it."""
        stream = sys.stdout
        if stream is None:
            _say_error(f"{PROG} doctor: error: cannot write the report: stdout is closed")
            self.status = 2
            return False
        try:
            stream.write(text)
            stream.flush()
        except BrokenPipeError:
            _silence_stdout()
            self.status = PIPE_CLOSED
            return False
        except OSError as error:
            _silence_stdout()
            reason = error.strerror or type(error).__name__
            _say_error(f"{PROG} doctor: error: cannot write the report to stdout: {reason}")
            self.status = 2
            return False
        return True


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's own flush at exit has nothing to complain of.

    What was buffered is dropped: nobody can read it any more.
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _say_error(line: str) -> None:
    """Write one line to stderr; when stderr is closed, say nothing (never on stdout)."""
    stream = sys.stderr
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError):
        stream.write(line + "\n")
        stream.flush()


def _occupy_closed_standard_streams() -> None:
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


def _tolerate_unencodable_output() -> None:
    """Let stdout and stderr print any path: what their encoding lacks becomes `\\xNN`."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")
