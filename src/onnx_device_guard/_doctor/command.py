"""The doctor's run, from the options typed to the exit status.

First what can be checked before a model runs, then each model, then the report.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import torch

from .._devices import as_device
from .._errors import EnvironmentConfigurationError, ModelInputError
from .._policy import FALLBACK_DEVICE, RESOLUTION_MODE, read_environment
from .diagnosis import EXIT_BAD_INPUT, exit_code, worst
from .facts import Facts, ModelError, listed
from .files import display_path, expand, is_directory
from .inputs import DEFAULT_MAX_INPUT_MIB, check_overrides, parse_dim_option, parse_input_option
from .machine import loaded_cuda_libraries
from .probe import (
    MIB,
    TINY_MODEL,
    Check,
    InferenceOptions,
    ProviderSpec,
    check_model,
    check_provider_names,
    environment,
    model_inputs,
)
from .render import render_any_json, render_many, render_section
from .terminal import (
    PREFIX,
    OutputError,
    Progress,
    colour_wanted,
    paint,
    printable,
    say_error,
    write_out,
)

V = TypeVar("V")
Target = Path | ModelError | None
"""A model to check: a file, a path already known to be bad, or `None` for the tiny model."""

CPU_ONLY_PROVIDERS = frozenset(
    {"CPUExecutionProvider", "AzureExecutionProvider", "XnnpackExecutionProvider"}
)
"""Providers that run on no device of their own, so a `device_id` option means a mistake."""


@dataclass(frozen=True)
class Plan:
    """Everything settled before the first model is checked."""

    check: Check
    targets: tuple[Target, ...]
    many: bool
    """Whether the report covers several models (several paths, or any folder)."""
    json: bool
    strict_by: str | None
    """What makes a fallback exit 1: `--strict`, the environment, or nothing (`None`)."""
    colour: bool


def run(args: argparse.Namespace) -> int:
    """Run the doctor for the parsed command line `args`; return the exit status."""
    try:
        plan = make_plan(args)
        if args.input or args.dim:
            check_names(plan)
    except ModelInputError as error:
        say_error(PREFIX + error.message)
        return EXIT_BAD_INPUT
    progress = Progress()
    try:
        return _report(plan, progress)
    except OutputError as closed:
        return closed.status
    finally:
        progress.close()


def make_plan(args: argparse.Namespace) -> Plan:
    """Check the options and the environment, probe the machine; raise `ModelInputError`."""
    settings = read_environment()  # every field is filled in: the built-in defaults are beneath
    devices = once("the command line", [("--device", parse_device(d)) for d in args.device or []])
    device = devices.get("--device")
    providers = None if args.providers is None else list(map(parse_provider, args.providers))
    options = InferenceOptions(
        overrides=once("--input", [(o.name, o) for o in map(parse_input_option, args.input)]),
        dims=once("--dim", list(map(parse_dim_option, args.dim))),
        max_bytes=(args.max_input_mib or DEFAULT_MAX_INPUT_MIB) * MIB,
        run=not args.no_inference,
        timeout=args.timeout,
    )
    targets: tuple[Target, ...] = tuple(expand(args.models)) if args.models else (None,)
    env, ort = environment()
    providers = providers or [(name, {}) for name in env.available_providers]
    check_provider_names([name for name, _ in providers], ort.get_all_providers())
    fail = settings.resolution_mode == "fail"
    default = torch.device("cuda" if env.torch_cuda_device_count else "cpu")
    fallback = settings.fallback_device
    return Plan(
        check=Check(ort, env, device or default, providers, fallback, options, device is None),
        targets=targets,
        many=len(args.models) > 1 or any(map(is_directory, args.models)),
        json=args.json,
        strict_by="--strict" if args.strict else f"{RESOLUTION_MODE}=fail" if fail else None,
        colour=not args.json and colour_wanted(os.isatty(1)),
    )


def parse_device(text: str) -> torch.device:
    """Return `--device`'s value as a `device`, refusing what the core's `as_device` refuses."""
    try:
        return as_device(text, "--device")
    except ModelInputError as error:
        if "understands" in error.message:  # torch could not parse it
            raise ModelInputError(
                f"--device {text!r} is not a device torch understands; "
                "use a device such as 'cpu', 'cuda' or 'cuda:1'"
            ) from None
        raise ModelInputError(error.message.rstrip(".")) from None


def parse_provider(text: str) -> ProviderSpec:
    """Return `--providers`' `NAME[:KEY=VALUE,...]` as a name and its options."""
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
    pairs = [pair.partition("=") for pair in filter(None, map(str.strip, rest.split(",")))]
    if any(not equals or not key.strip() for key, equals, _ in pairs):
        raise ModelInputError(
            f"--providers {text!r}: provider options must be KEY=VALUE pairs separated "
            "by commas, as in CUDAExecutionProvider:device_id=1"
        )
    options = once(f"--providers {text!r}", [(k.strip(), v.strip()) for k, _, v in pairs])
    if "device_id" in options and name in CPU_ONLY_PROVIDERS:
        raise ModelInputError(
            f"--providers {text!r}: {name} runs on no device of its own and takes no "
            "device_id; give device_id to a GPU provider, as in CUDAExecutionProvider:device_id=1"
        )
    return name, options


def once(option: str, pairs: list[tuple[str, V]]) -> dict[str, V]:
    """`pairs` by name; raise `ModelInputError` for a name given two different values."""
    found: dict[str, V] = {}
    for name, value in pairs:
        if found.setdefault(name, value) != value:
            raise ModelInputError(f"{option} gives {name!r} two different values; give it once")
    return found


def check_names(plan: Plan) -> None:
    """Raise `ModelInputError` for an `--input` or `--dim` that does not fit the models."""
    inputs: dict[str, None] = {}  # in declaration order, each once
    dims: dict[str, None] = {}
    read_any = False
    for target in plan.targets:
        declared = None if isinstance(target, ModelError) else model_inputs(plan.check.ort, target)
        if declared is None or isinstance(target, ModelError):  # the model's own check says why
            continue
        read_any = True
        label = TINY_MODEL if target is None else display_path(target)
        check_overrides(declared, plan.check.options.overrides, label)
        inputs.update(dict.fromkeys(item.name for item in declared))
        dims.update(dict.fromkeys(d for item in declared for d in item.dims if isinstance(d, str)))
    if not read_any:
        return
    whose = "of the models; they have" if plan.many else "of the model; it has"
    options = plan.check.options
    for given, known, option, what in (
        (options.overrides, inputs, "--input", "input"),
        (options.dims, dims, "--dim", "named dimension"),
    ):
        for name in given:
            if name not in known:
                has = listed(list(known)) if known else f"no {what}"
                raise ModelInputError(f"{option} {name!r} matches no {what} {whose} {has}")


def _report(plan: Plan, progress: Progress) -> int:
    count = len(plan.targets)
    alone = count == 1 and not (plan.json and plan.many)  # JSON on a folder is always a list
    results: list[Facts | ModelError] = []
    for number, target in enumerate(plan.targets, start=1):
        result = _check_one(plan, target, progress, f"[{number}/{count}] " if count > 1 else "")
        progress.clear()
        if isinstance(result, ModelError) and alone:  # a bad model, or a folder without any
            say_error(PREFIX + result.message)  # one line, and its JSON object if asked for
            if not plan.json:
                return EXIT_BAD_INPUT
        results.append(result)
    env = replace(plan.check.env, cuda_libraries_loaded=loaded_cuda_libraries())
    results = [replace(r, environment=env) if isinstance(r, Facts) else r for r in results]
    strict = plan.strict_by is not None
    if plan.json:
        documents = [render_any_json(result, strict=strict) for result in results]
        write_out(json.dumps(documents if plan.many else documents[0], indent=2) + "\n")
    elif plan.many:
        _write(plan, render_many(results, env, strict_by=plan.strict_by))
    else:
        _write(plan, render_section(results[0], strict_by=plan.strict_by))
    return worst(exit_code(result, strict=strict) for result in results)


def _check_one(plan: Plan, target: Target, progress: Progress, prefix: str) -> Facts | ModelError:
    """Check one model, its progress line saying which one and how long its inference runs."""
    if isinstance(target, ModelError):
        return target
    shown = TINY_MODEL if target is None else display_path(target)
    if prefix:
        progress.show(f"{prefix}checking ", shown)

    def waiting(seconds: float) -> None:
        if seconds >= 2:
            progress.show(f"{prefix}test inference, {seconds:.0f} s (Ctrl-C stops)")

    try:
        return check_model(plan.check, target, waiting)
    except ModelInputError as error:
        return ModelError(shown, error.message)
    except EnvironmentConfigurationError as error:  # the session cannot read the fallback either
        return ModelError(shown, f"{FALLBACK_DEVICE}: {error.message} Fix or unset the variable.")


def _write(plan: Plan, text: str) -> None:
    """Write a piece of the text report: control characters escaped, verdicts coloured."""
    text = printable(text)
    write_out((paint(text) if plan.colour else text) + "\n")
