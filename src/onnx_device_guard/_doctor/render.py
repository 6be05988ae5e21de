"""The doctor's reports: the text a person reads and the JSON a script reads."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import textwrap
from collections.abc import Mapping, Sequence

from .diagnosis import Finding, diagnose, exit_code, headline, verdict
from .facts import NO_SESSION, Environment, Facts, ModelError, one_line

SCHEMA_VERSION = 1
"""The version of the JSON report's keys; it grows when a key changes or goes."""

ROW_LIMIT = 2000
"""The most characters a fact's row shows; the rest is counted, not printed."""

_LABEL_WIDTH = len("CUDA libraries loaded") + 2


def render_text(
    facts: Facts,
    findings: tuple[Finding, ...],
    *,
    strict_by: str | None,
    machine: bool = True,
) -> str:
    """Return the report a person reads: aligned facts, the verdict, numbered fixes.

    `strict_by` names what made the run strict (`None`: it is not); `machine=False` leaves
    out the machine's facts, said once above.
    """
    lines = _rows(
        [
            ("model", facts.model),
            *(_machine_rows(facts.environment) if machine else []),
            *_provider_rows(facts),
            ("requested device", str(facts.requested_device)),
            ("aligned device", str(facts.aligned_device)),
            ("inference", f"{facts.inference.status}: {facts.inference.detail}"),
            ("seconds", f"{facts.seconds:.2f}"),
        ]
    )
    messages = [*facts.onnxruntime_messages, *facts.environment.torch_messages]
    if messages:  # a section with nothing to say is left out
        lines += ["", "What onnxruntime and torch said:"]
        lines += [_wrap(one_line(message), indent=4, first="  - ") for message in messages]
    if messages and facts.omitted_messages:
        lines.append(
            f"  (and {facts.omitted_messages} more not about providers, devices or a failure)"
        )
    lines += ["", _wrap(headline(facts))]
    if strict_by and facts.fell_back and verdict(facts) != "failed":
        lines.append(f"{strict_by}: the device had to be changed, so the exit status is 1.")
    if facts.inference.suggestion:
        again = f"run again with `{' '.join(facts.inference.suggestion)}`"
        lines.append(
            _wrap(f"To get a conclusive answer, {again} or with inputs that fit (see below).")
        )
    heading = "Notes (the device needs no change):" if verdict(facts) == "ok" else "Diagnosis:"
    return "\n".join(lines + _diagnosis_lines(findings, heading))


def render_many(
    results: Sequence[Facts | ModelError], env: Environment, *, strict_by: str | None
) -> str:
    """Return the report on several models: the machine and what holds for all of them once,
    then a section per model with what differs, then the summary table."""
    checked = [diagnose(result) for result in results if isinstance(result, Facts)]
    shared = [f for f in checked[0] if all(f in other for other in checked[1:])] if checked else []
    shared = shared if len(checked) > 1 else []
    parts = ["\n".join(_rows(_machine_rows(env)))]
    if shared:
        heading = "What holds for every model checked:"
        parts.append("\n".join(_diagnosis_lines(shared, heading)))
    parts += [render_section(result, strict_by=strict_by, skip=shared) for result in results]
    parts.append(f"\nSummary:\n{render_summary(results, strict=strict_by is not None)}")
    return "\n".join(parts)


def render_section(
    result: Facts | ModelError, *, strict_by: str | None, skip: Sequence[Finding] | None = None
) -> str:
    """Return one model's text report, or its ERROR line; among several (`skip` given: the
    findings said once above), under its name."""
    if isinstance(result, ModelError):
        lines = _rows([("model", result.model), ("seconds", f"{result.seconds:.2f}")])
        section = "\n".join([*lines, "", _wrap(f"ERROR: {result.message}")])
    else:
        findings = tuple(finding for finding in diagnose(result) if finding not in (skip or ()))
        section = render_text(result, findings, strict_by=strict_by, machine=skip is None)
    return section if skip is None else f"\n=== {result.model} ===\n{section}"


def render_summary(results: Sequence[Facts | ModelError], *, strict: bool) -> str:
    """Return the table that ends a report on several models: one row per model."""
    table = [("model", "verdict", "device", "inference", "exit", "seconds")]
    folder = _common_folder([result.model for result in results])
    for result in results:
        row = ("error", "-", "-")
        if not isinstance(result, ModelError):
            moved = f" -> {result.aligned_device}" if result.fell_back else ""
            row = (verdict(result), f"{result.requested_device}{moved}", result.inference.status)
        status = str(exit_code(result, strict=strict))
        table.append((result.model[len(folder) :], *row, status, f"{result.seconds:.2f}"))
    widths = [max(map(len, column)) for column in zip(*table, strict=True)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in table
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    if folder:
        lines.insert(0, f"(models under {folder})")
    return "\n".join(line.rstrip() for line in lines)


def render_json(facts: Facts, findings: tuple[Finding, ...], *, strict: bool) -> dict[str, object]:
    """Return the report as one JSON-ready object with the same facts as the text."""
    machine = json.loads(json.dumps(dataclasses.asdict(facts.environment)))  # lists, not tuples
    del machine["import_messages"]
    torch_messages = machine.pop("torch_messages")
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": verdict(facts),
        "summary": headline(facts),
        "exit_code": exit_code(facts, strict=strict),
        "seconds": round(facts.seconds, 3),
        "model": facts.model,
        **machine,
        "requested_providers": list(facts.requested_providers),
        "requested_provider_options": _plain(facts.requested_provider_options),
        "session_providers": list(facts.session_providers),
        "session_provider_options": _plain(facts.session_provider_options),
        "requested_device": str(facts.requested_device),
        "aligned_device": str(facts.aligned_device),
        "fell_back": facts.fell_back,
        "inference_ok": facts.inference.status == "ok",
        "inference": {
            "status": facts.inference.status,
            "detail": facts.inference.detail,
            "inputs": list(facts.inference.culprits),
            "attempts": facts.inference.attempts,
        },
        "suggested_options": list(facts.inference.suggestion),
        "diagnosis": [str(finding) for finding in findings],
        "findings": [dataclasses.asdict(finding) for finding in findings],
        "onnxruntime_messages": list(facts.onnxruntime_messages),
        "onnxruntime_messages_omitted": facts.omitted_messages,
        "session_retry": facts.session_retry,
        "torch_messages": torch_messages,
    }


def render_any_json(result: Facts | ModelError, *, strict: bool) -> dict[str, object]:
    """`render_json` for a checked model; one the doctor could not check has verdict `error`."""
    if isinstance(result, Facts):
        return render_json(result, diagnose(result), strict=strict)
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": "error",
        "summary": f"ERROR: {result.message}",
        "exit_code": 2,
        "seconds": round(result.seconds, 3),
        "model": result.model,
        "error": result.message,
    }


def _machine_rows(env: Environment) -> list[tuple[str, str]]:
    built = f"({env.torch_gpu_build})" if env.torch_gpu_build else "(CPU-only build)"
    if env.torch_cudnn:
        built = f"{built[:-1]}, cuDNN {env.torch_cudnn})"
    ort_built = f" (built with {env.onnxruntime_build})" if env.onnxruntime_build else ""
    installed = ", ".join(
        str(dist) if dist.provides_module else f"{dist} (add-on)"
        for dist in env.installed_distributions
    )
    if len(env.module_owners) > 1:
        installed += "  <- more than one onnxruntime"
    visible = "(not set)" if env.cuda_visible_devices is None else repr(env.cuda_visible_devices)
    built += f", CUDA devices visible: {env.torch_cuda_device_count}"
    return [
        ("onnx-device-guard", f"{env.onnx_device_guard_version}, Python {env.python}"),
        ("torch", f"{env.torch_version} {built}"),
        ("onnxruntime", env.onnxruntime_version + ort_built),
        ("installed", installed or "(pip lists no onnxruntime distribution)"),
        ("available providers", ", ".join(env.available_providers)),
        ("GPUs", ", ".join(env.gpus) or "none (nvidia-smi lists none, or is not installed)"),
        ("CUDA_VISIBLE_DEVICES", visible),
        *[("CUDA libraries loaded", ", ".join(env.cuda_libraries_loaded))]
        * bool(env.cuda_libraries_loaded),
    ]


def _provider_rows(facts: Facts) -> list[tuple[str, str]]:
    """The requested providers with their options, [dropped] if lost; the session's device_id."""
    requested: list[str] = []
    running: list[str] = []
    for name in facts.requested_providers:
        options = facts.requested_provider_options.get(name, {})
        shown = ",".join(f"{key}={value}" for key, value in options.items())
        shown = f" ({shown})" if shown else ""
        dropped = "" if name in facts.session_providers else " [dropped]"
        requested.append(f"{name}{shown}{dropped}")
    for name in facts.session_providers:
        device_id = facts.session_provider_options.get(name, {}).get("device_id")
        running.append(name if device_id is None else f"{name} (device_id {device_id})")
    if facts.inference.detail.startswith(NO_SESSION):
        running = [f"none: creating the session with {', '.join(running)} failed"]
    return [
        ("requested providers", ", ".join(requested)),
        ("session providers", ", ".join(running)),
    ]


def _diagnosis_lines(findings: Sequence[Finding], heading: str) -> list[str]:
    """The numbered findings, each with its fix and link, under `heading`."""
    if not findings:
        return []
    lines = ["", heading]
    for number, finding in enumerate(findings, start=1):
        lines.append(_wrap(finding.problem, indent=5, first=f"  {number}. "))
        lines.append(_wrap(f"Fix: {finding.fix}", indent=5, first="     "))
        if finding.help_url:
            lines.append(f"     See: {finding.help_url}")
    return lines


def _common_folder(models: Sequence[str]) -> str:
    """The folder all `models` lie in, with its trailing separator; '' if none or just '/'."""
    if len(models) < 2 or not all(model.startswith(os.sep) for model in models):
        return ""
    folder = os.path.commonpath(models)
    if folder in models:  # one model's own path: keep its name
        folder = os.path.dirname(folder)
    return "" if folder in ("", os.sep) else folder + os.sep


def _rows(rows: Sequence[tuple[str, str]]) -> list[str]:
    """Each fact on its own row (a newline in it escaped), cut to `ROW_LIMIT`, values aligned."""
    lines = []
    for label, value in rows:
        value = value.replace("\n", "\\x0a")
        if len(value) > ROW_LIMIT:
            value = f"{value[:ROW_LIMIT]}... ({len(value) - ROW_LIMIT:,} more characters)"
        lines.append(_wrap(value, indent=2 + _LABEL_WIDTH, first=f"  {label:<{_LABEL_WIDTH}}"))
    return lines


def _plain(options: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    return {name: dict(values) for name, values in options.items()}


def _wrap(text: str, *, indent: int = 0, first: str = "") -> str:
    """Fill `text`, never breaking a `command` in backticks (textwrap keeps U+00A0)."""
    if not text.strip():
        return first.rstrip()
    text = re.sub(r"`[^`]+`", lambda span: span.group().replace(" ", "\u00a0"), text)
    columns = shutil.get_terminal_size((88, 24)).columns  # 88 off a terminal
    filled = textwrap.fill(
        text,
        width=max(columns, indent + 20),
        initial_indent=first,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return filled.replace("\u00a0", " ")
