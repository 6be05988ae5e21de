"""The `onnx-device-guard` command line; `doctor` is its one command.

`main` parses the arguments, lets `_probe` gather the
facts and `_doctor` explain them, prints the report on
stdout and returns the exit status. Bad input is one line on stderr and exit
status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from . import __version__
from ._devices import as_device
from ._errors import ModelInputError

PROG = "onnx-device-guard"

EXIT_STATUS = """\
exit status:
  0  the session reads tensors on the requested device, or the device had to
     be changed and --strict was not given
  1  --strict was given and the device had to be changed
  2  bad input: a missing or unreadable model file, a file that is not an ONNX
     model, a device torch cannot parse, an unknown execution provider, or no
     onnxruntime installed (one line on stderr)
  3  the test inference did not complete (the diagnosis says why)
"""

DOCTOR_DESCRIPTION = """\
Check that an onnxruntime session can read tensors on a torch device, and
explain why not when it cannot. The doctor creates a session for MODEL (or a
tiny model shipped with the package) with the requested execution providers,
reads back the providers it really runs, aligns the device with
align_device_with_onnx_session, runs one inference on zeros created on the
aligned device, and reports what it found with the likely causes and fixes.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default `sys.argv[1:]`); return the exit status."""
    args = build_parser().parse_args(argv)
    status: int = args.handler(args)
    return status


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of `onnx-device-guard` and its `doctor` command."""
    parser = argparse.ArgumentParser(
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
        "model",
        nargs="?",
        type=Path,
        metavar="MODEL.onnx",
        help="the ONNX model to check (default: a tiny y = x + 1 model shipped with the package)",
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
        "--json", action="store_true", help="print the report as one JSON object instead"
    )
    doctor.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when the device had to be changed",
    )
    doctor.set_defaults(handler=_doctor)
    return parser


def parse_device(text: str) -> torch.device:
    """Return `--device`'s value as a `device`, or raise `ModelInputError`.

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
    except ModelInputError:
        raise ModelInputError(
            f"--device {text!r} is not a device torch understands; "
            "use a device such as 'cpu', 'cuda' or 'cuda:1'"
        ) from None


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
    if name.lower().endswith((".onnx", ".ort")) or "/" in name or "\\" in name:
        raise ModelInputError(
            f"{text!r} was read as an execution provider; put MODEL.onnx before --providers"
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
    from ._doctor import diagnose, exit_code, render_json, render_text
    from ._probe import gather

    try:
        device = None if args.device is None else parse_device(args.device)
        providers = None if args.providers is None else [parse_provider(p) for p in args.providers]
        facts = gather(args.model, device, providers)
    except ModelInputError as error:
        print(f"{PROG} doctor: error: {error.message}", file=sys.stderr)
        return 2
    findings = diagnose(facts)
    if args.json:
        print(json.dumps(render_json(facts, findings, strict=args.strict), indent=2))
    else:
        print(render_text(facts, findings, strict=args.strict))
    return exit_code(facts, strict=args.strict)
