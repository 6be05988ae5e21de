"""The doctor's run, from the options typed to the exit status.

First everything that can be checked before a model runs: the options,
the library's environment variables, onnxruntime and the providers, and,
when `--input` or `--dim` name inputs, those names against the models'
real inputs. Then each model in turn: checked, diagnosed and written out
(text, or JSON at the end), with progress on a terminal's stderr. An option
the doctor refuses is one line on stderr and exit status 2 with nothing on
stdout; with `--json`, a model that cannot be checked is still a JSON object.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .core import RESOLUTION_MODE, ModelInputError, read_environment
from .diagnosis import EXIT_BAD_INPUT, diagnose, status_of, worst
from .facts import Facts, ModelError, listed
from .files import display_path, expand, is_directory
from .inputs import check_overrides
from .options import Request, inference_options, parse_device, parse_providers
from .probe import (
    TINY_MODEL,
    Check,
    Machine,
    check_model,
    check_provider_names,
    default_device,
    environment,
    model_inputs,
)
from .render import (
    render_any_json,
    render_error_section,
    render_machine,
    render_summary,
    render_text,
)
from .streams import PREFIX, Output, say_error
from .terminal import Progress, colour_wanted, paint, printable

Target = Path | ModelError | None
"""A model to check: a file, a path already known to be bad, or `None` for the tiny model."""


@dataclass(frozen=True)
class Plan:
    """Everything settled before the first model is checked."""

    machine: Machine
    check: Check
    targets: tuple[Target, ...]
    many: bool
    """Whether the report covers several models (several paths, or any folder)."""
    json: bool
    strict_by: str | None
    """What makes a fallback exit 1: `--strict`, the environment, or nothing (`None`)."""
    colour: bool


def run(request: Request) -> int:
    """Run the doctor for `request`; return the exit status."""
    try:
        plan = make_plan(request)
        if request.inputs or request.dims:
            check_names(plan)
    except ModelInputError as error:
        say_error(PREFIX + error.message)
        return EXIT_BAD_INPUT
    progress = Progress()
    try:
        return _report(plan, Output(), progress)
    finally:
        progress.close()


def make_plan(request: Request) -> Plan:
    """Check the options and the environment, probe the machine; raise `ModelInputError`."""
    mode, fallback = read_environment()
    device = None if request.device is None else parse_device(request.device)
    providers = None if request.providers is None else parse_providers(request.providers)
    options = inference_options(request)
    targets: tuple[Target, ...] = tuple(expand(request.models)) if request.models else (None,)
    env, ort = environment()
    providers = providers or [(name, {}) for name in env.available_providers]
    check_provider_names([name for name, _ in providers], ort.get_all_providers())
    strict_by = "--strict" if request.strict else None
    if strict_by is None and mode == "fail":
        strict_by = f"{RESOLUTION_MODE}=fail"
    return Plan(
        machine=Machine(ort, env),
        check=Check(
            device=default_device(env) if device is None else device,
            providers=providers,
            fallback=fallback,
            options=options,
        ),
        targets=targets,
        many=len(request.models) > 1 or any(map(is_directory, request.models)),
        json=request.json,
        strict_by=strict_by,
        colour=not request.json and colour_wanted(_is_terminal(sys.stdout)),
    )


def check_names(plan: Plan) -> None:
    """Raise `ModelInputError` for an `--input` or `--dim` that does not fit the models.

    The models' declared inputs are read before anything runs; a model that
    cannot be read is left to its own check, which says why.
    """
    inputs: dict[str, None] = {}  # in declaration order, each once
    dims: dict[str, None] = {}
    read_any = False
    for target in plan.targets:
        if isinstance(target, ModelError):
            continue
        try:
            declared = model_inputs(plan.machine, target)
        except ModelInputError:
            continue
        if declared is None:  # names onnxruntime cannot decode: the check says so
            continue
        read_any = True
        label = TINY_MODEL if target is None else display_path(target)
        check_overrides(declared, plan.check.options.overrides, label)
        inputs.update(dict.fromkeys(model_input.name for model_input in declared))
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


def _report(plan: Plan, out: Output, progress: Progress) -> int:
    first = plan.targets[0]
    if len(plan.targets) == 1 and isinstance(first, ModelError):  # a folder without models
        return _single_error(plan, out, first)
    if plan.many and not plan.json and not _write(plan, out, render_machine(plan.machine.env)):
        return out.status
    results: list[Facts | ModelError] = []
    for number, target in enumerate(plan.targets, start=1):
        result = _check_one(plan, target, _Step(progress, number, len(plan.targets)))
        progress.clear()
        results.append(result)
        if isinstance(result, ModelError) and len(plan.targets) == 1:
            return _single_error(plan, out, result)
        if not plan.json and not _write(plan, out, _section(plan, result)):
            return out.status
    return _finish(plan, out, results)


class _Step:
    """The progress line for one model: which one, and how long its inference has run."""

    def __init__(self, progress: Progress, number: int, count: int) -> None:
        self.progress = progress
        self.prefix = f"[{number}/{count}] " if count > 1 else ""

    def start(self, name: str) -> None:
        if self.prefix:
            self.progress.show(f"{self.prefix}checking {name}")

    def waiting(self, seconds: float) -> None:
        if seconds >= 2:
            self.progress.show(f"{self.prefix}test inference, {seconds:.0f} s (Ctrl-C stops)")


def _check_one(plan: Plan, target: Target, step: _Step) -> Facts | ModelError:
    if isinstance(target, ModelError):
        return target
    shown = TINY_MODEL if target is None else display_path(target)
    step.start(shown)
    try:
        return check_model(plan.machine, plan.check, target, step.waiting)
    except ModelInputError as error:
        return ModelError(shown, error.message)


def _single_error(plan: Plan, out: Output, error: ModelError) -> int:
    """One model that cannot be checked: one line on stderr, and JSON if asked for."""
    say_error(PREFIX + error.message)
    document = json.dumps(render_any_json(error, strict=False), indent=2)
    if plan.json and not out.write(document + "\n"):
        return out.status
    return EXIT_BAD_INPUT


def _section(plan: Plan, result: Facts | ModelError) -> str:
    if isinstance(result, ModelError):
        section = render_error_section(result)
    else:
        section = render_text(
            result,
            diagnose(result),
            strict=plan.strict_by is not None,
            machine=not plan.many,
            strict_by=plan.strict_by or "--strict",
        )
    return f"\n=== {result.model} ===\n{section}" if plan.many else section


def _finish(plan: Plan, out: Output, results: list[Facts | ModelError]) -> int:
    strict = plan.strict_by is not None
    statuses = [status_of(result, strict=strict) for result in results]
    if plan.json:
        documents = [render_any_json(result, strict=strict) for result in results]
        if not out.write(json.dumps(documents if plan.many else documents[0], indent=2) + "\n"):
            return out.status
    elif plan.many:
        summary = render_summary(results, strict=strict)
        if not _write(plan, out, f"\nSummary:\n{summary}"):
            return out.status
    return worst(statuses)


def _write(plan: Plan, out: Output, text: str) -> bool:
    """Write a piece of the text report: control characters escaped, verdicts coloured."""
    text = printable(text)
    return out.write((paint(text) if plan.colour else text) + "\n")


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
