"""The doctor's diagnosis, report and probes, on fake environments and the real CPU build."""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from onnx_device_guard import ModelInputError
from onnx_device_guard._doctor.capture import Captured, captured_output, clean_messages
from onnx_device_guard._doctor.diagnosis import (
    CUDA_REQUIREMENTS_URL,
    EXIT_PRECEDENCE,
    Finding,
    diagnose,
    exit_code,
    headline,
    verdict,
    worst,
)
from onnx_device_guard._doctor.facts import (
    NO_SESSION,
    Environment,
    Facts,
    InferenceCheck,
    InstalledDistribution,
    ModelError,
)
from onnx_device_guard._doctor.files import ModelBytes, read_model_file
from onnx_device_guard._doctor.probe import (
    TINY_MODEL,
    InferenceOptions,
    Unmade,
    align,
    check_provider_names,
    create_session,
    import_onnxruntime,
    onnxruntime_distributions,
    run_inference,
    run_with_deadline,
    suggest_provider,
)
from onnx_device_guard._doctor.render import render_any_json, render_json, render_text
from onnx_device_guard._providers import GPU_CAPABLE_EXECUTION_PROVIDERS

from .sessions import FakeSession, cpu_session, cuda_session

ROOT = Path(__file__).resolve().parents[1]
CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TRT = "TensorrtExecutionProvider"
GPU_WHEEL = InstalledDistribution("onnxruntime-gpu", "1.20.0")
CPU_WHEEL = InstalledDistribution("onnxruntime", "1.20.0")
OK = InferenceCheck("ok", "InferenceSession.run on cpu with x float32[1,4]")

CUDA_LOAD_FAILURE = (
    "[E:onnxruntime:Default, provider_bridge_ort.cc:1862 TryGetProviderInfo_CUDA] "
    "Failed to load library libonnxruntime_providers_cuda.so with error: "
    "libcudnn.so.9: cannot open shared object file: No such file or directory"
)

needs_cpu_only_onnxruntime = pytest.mark.skipif(
    CUDA in onnxruntime.get_available_providers(),
    reason="needs an onnxruntime build without the CUDA provider",
)
needs_cpu_only_torch = pytest.mark.skipif(
    torch.cuda.is_available(), reason="needs torch that sees no CUDA device"
)


def fake_facts(
    session: FakeSession,
    *,
    device: str = "cuda",
    available: Sequence[str] = (CUDA, CPU),
    requested: Sequence[str] | None = None,
    distributions: Sequence[InstalledDistribution] = (GPU_WHEEL,),
    torch_gpu_build: str | None = "CUDA 12.4",
    cuda_devices: int = 1,
    inference: InferenceCheck = OK,
    messages: Sequence[str] = (),
    retry: str | None = None,
    torch_messages: Sequence[str] = (),
) -> Facts:
    """The facts of a made-up machine, the device aligned with ``session`` by the real core."""
    requested_device = torch.device(device)
    aligned, mismatch = align(session, requested_device)
    machine = Environment(
        onnx_device_guard_version="0.1.0",
        python="3.11.7 on Linux x86_64",
        torch_version="2.4.0+cu124" if torch_gpu_build else "2.4.0+cpu",
        torch_gpu_build=torch_gpu_build,
        torch_cuda_device_count=cuda_devices,
        onnxruntime_version="1.20.0",
        installed_distributions=tuple(distributions),
        available_providers=tuple(available),
        torch_messages=tuple(torch_messages),
    )
    return Facts(
        model="model.onnx",
        environment=machine,
        requested_providers=tuple(available if requested is None else requested),
        session_providers=tuple(session.get_providers()),
        session_provider_options={
            name: {key: str(value) for key, value in options.items()}
            for name, options in session.get_provider_options().items()
        },
        requested_device=requested_device,
        aligned_device=aligned,
        mismatch=mismatch,
        inference=inference,
        onnxruntime_messages=tuple(messages),
        session_retry=retry,
    )


def kinds(facts: Facts) -> list[str]:
    return [finding.kind for finding in diagnose(facts)]


def only(facts: Facts, kind: str) -> Finding:
    matching = [finding for finding in diagnose(facts) if finding.kind == kind]
    assert len(matching) == 1, diagnose(facts)
    return matching[0]


class TestHealthyEnvironments:
    def test_cuda_session_on_the_requested_gpu_needs_nothing(self) -> None:
        """A CUDA session on device_id 0 and device cuda:0: OK, no diagnosis, exit 0."""
        facts = fake_facts(cuda_session(0), device="cuda:0")

        assert diagnose(facts) == ()
        assert verdict(facts) == "ok"
        assert exit_code(facts, strict=True) == 0
        assert headline(facts) == f"OK: the session runs {CUDA} and reads tensors on 'cuda:0'."

    def test_cpu_device_on_a_cpu_build_needs_nothing(self) -> None:
        """Device cpu on a CPU wheel: OK, and no GPU advice at all."""
        facts = fake_facts(
            cpu_session(), device="cpu", available=(CPU,), distributions=(CPU_WHEEL,)
        )

        assert diagnose(facts) == ()
        assert headline(facts) == "OK: the session reads tensors on 'cpu'."


class TestSeveralDistributions:
    def test_two_onnxruntime_distributions_are_flagged(self) -> None:
        """onnxruntime beside onnxruntime-gpu is a known breakage, flagged with an uninstall."""
        facts = fake_facts(cpu_session(), distributions=(CPU_WHEEL, GPU_WHEEL))

        finding = only(facts, "several-distributions")

        assert "onnxruntime 1.20.0, onnxruntime-gpu 1.20.0" in finding.problem
        assert "pip uninstall -y onnxruntime onnxruntime-gpu" in finding.fix
        assert kinds(facts)[0] == "several-distributions"

    def test_flagged_even_when_the_device_is_fine(self) -> None:
        """Several distributions are reported even while the session reads the device."""
        facts = fake_facts(cuda_session(0), distributions=(GPU_WHEEL, CPU_WHEEL))

        assert kinds(facts) == ["several-distributions"]
        assert verdict(facts) == "ok"

    def test_add_ons_do_not_count(self) -> None:
        """onnxruntime-extensions does not install the onnxruntime module: not flagged."""
        add_on = InstalledDistribution("onnxruntime-extensions", "0.12.0", provides_module=False)
        facts = fake_facts(cuda_session(0), distributions=(GPU_WHEEL, add_on))

        assert diagnose(facts) == ()


class TestProviderNotInBuild:
    def test_cuda_on_a_cpu_wheel_means_install_onnxruntime_gpu(self) -> None:
        """CUDA asked of the CPU wheel: swap the wheel for onnxruntime-gpu."""
        facts = fake_facts(
            cpu_session(), available=(CPU,), requested=(CUDA, CPU), distributions=(CPU_WHEEL,)
        )

        finding = only(facts, "provider-not-in-build")

        assert finding.problem.startswith(f"{CUDA} is not part of this onnxruntime build")
        assert "pip uninstall -y onnxruntime && pip install onnxruntime-gpu" in finding.fix
        assert kinds(facts) == ["provider-not-in-build"]
        assert facts.aligned_device == torch.device("cpu")

    def test_other_providers_name_their_distribution(self) -> None:
        """OpenVINO missing from the build points to onnxruntime-openvino."""
        facts = fake_facts(
            cpu_session(),
            device="cpu",
            available=(CPU,),
            requested=("OpenVINOExecutionProvider", CPU),
            distributions=(CPU_WHEEL,),
        )

        finding = only(facts, "provider-not-in-build")

        assert "pip install onnxruntime-openvino" in finding.fix

    def test_plugin_providers_need_registering(self) -> None:
        """NvTensorRTRTX is a plugin: the fix says to install and register it."""
        facts = fake_facts(
            cpu_session(), available=(CPU,), requested=("NvTensorRTRTXExecutionProvider", CPU)
        )

        finding = only(facts, "provider-not-in-build")

        assert "register_execution_provider_library" in finding.fix

    def test_a_retried_session_says_what_failed(self) -> None:
        """When onnxruntime retried the session, its error is part of the explanation."""
        error = "Unknown Provider Type: ROCMExecutionProvider when using [...]"
        facts = fake_facts(
            cpu_session(),
            available=(CPU,),
            requested=("ROCMExecutionProvider", CPU),
            retry=error,
        )

        finding = only(facts, "provider-not-in-build")

        assert error in finding.problem
        assert "pip install onnxruntime-rocm" in finding.fix

    def test_no_gpu_provider_in_the_build_at_all(self) -> None:
        """Default providers of a CPU wheel and device cuda: install onnxruntime-gpu."""
        facts = fake_facts(cpu_session(), available=(CPU,), distributions=(CPU_WHEEL,))

        finding = only(facts, "no-gpu-provider-in-build")

        assert "has no GPU-capable execution provider" in finding.problem
        assert "pip uninstall -y onnxruntime && pip install onnxruntime-gpu" in finding.fix
        assert verdict(facts) == "fallback"


class TestProviderDropped:
    def test_cuda_dropped_at_creation_points_to_its_libraries(self) -> None:
        """CUDA in the build but not in the session: CUDA/cuDNN libraries, preload_dlls()."""
        facts = fake_facts(cpu_session())

        finding = only(facts, "provider-dropped")

        assert finding.problem.startswith(f"{CUDA} is in this onnxruntime build, but")
        assert "onnxruntime.preload_dlls()" in finding.fix
        assert "cuDNN" in finding.fix
        assert finding.help_url == CUDA_REQUIREMENTS_URL
        assert kinds(facts) == ["provider-dropped"]

    def test_onnxruntime_log_line_is_quoted(self) -> None:
        """The native log line that names the missing library is quoted in the problem."""
        facts = fake_facts(cpu_session(), messages=["unrelated", CUDA_LOAD_FAILURE])

        finding = only(facts, "provider-dropped")

        assert "libcudnn.so.9: cannot open shared object file" in finding.problem

    def test_dropped_tensorrt_beside_a_working_cuda_is_a_note(self) -> None:
        """TensorRT dropped while CUDA runs: reported, yet the verdict stays OK."""
        facts = fake_facts(cuda_session(0), available=(TRT, CUDA, CPU))

        finding = only(facts, "provider-dropped")

        assert finding.problem.startswith(TRT)
        assert "CUDAExecutionProvider alone" in finding.fix
        assert verdict(facts) == "ok"
        assert exit_code(facts, strict=True) == 0

    def test_a_retry_is_named_as_the_reason(self) -> None:
        """A provider lost to onnxruntime's retry is attributed to the retry's error."""
        facts = fake_facts(cpu_session(), retry="CUDA failure 100: no CUDA-capable device")

        finding = only(facts, "provider-dropped")

        assert "CUDA failure 100" in finding.problem
        assert "retried" in finding.problem


class TestGpuNotRequested:
    def test_cpu_only_providers_for_a_cuda_device(self) -> None:
        """A GPU build asked for CPU only while the device is cuda: put CUDA first."""
        facts = fake_facts(cpu_session(), requested=(CPU,))

        finding = only(facts, "no-gpu-provider-requested")

        assert f"--providers {CUDA} CPUExecutionProvider" in finding.fix
        assert kinds(facts) == ["no-gpu-provider-requested"]


class TestDeviceIdMismatch:
    def test_index_differs_from_the_providers_device_id(self) -> None:
        """cuda:1 against device_id 0: the core moves to cuda:0 and its explanation is used."""
        facts = fake_facts(cuda_session(0), device="cuda:1", cuda_devices=2)

        finding = only(facts, "device-id-mismatch")

        assert facts.aligned_device == torch.device("cuda:0")
        assert facts.mismatch is not None
        assert finding.problem == facts.mismatch.problem
        assert "{'device_id': 1}" in finding.fix
        assert verdict(facts) == "fallback"
        assert exit_code(facts, strict=True) == 1

    def test_device_id_is_shown_in_the_report(self) -> None:
        """The session's device_id appears next to its provider."""
        facts = fake_facts(cuda_session(1), device="cuda:1", cuda_devices=2)

        assert f"{CUDA} (device_id 1)" in render_text(facts, (), strict_by=None)


class TestTorchSide:
    def test_cpu_only_torch_cannot_use_cuda(self) -> None:
        """A CPU-only torch asked for cuda is a cause of its own."""
        facts = fake_facts(cuda_session(0), torch_gpu_build=None, cuda_devices=0)

        finding = only(facts, "torch-sees-no-cuda")

        assert "CPU-only build" in finding.problem
        assert "CUDA build of torch" in finding.fix

    def test_cuda_torch_without_a_gpu_quotes_torch(self) -> None:
        """A CUDA build of torch that sees no GPU repeats torch's own warning."""
        facts = fake_facts(
            cuda_session(0), cuda_devices=0, torch_messages=["Found no NVIDIA driver"]
        )

        finding = only(facts, "torch-sees-no-cuda")

        assert "Found no NVIDIA driver" in finding.problem
        assert "CUDA_VISIBLE_DEVICES" in finding.fix

    def test_index_beyond_the_visible_devices(self) -> None:
        """cuda:3 with two visible GPUs does not exist."""
        facts = fake_facts(cuda_session(None), device="cuda:3", cuda_devices=2)

        finding = only(facts, "torch-device-index")

        assert "cuda:0 to cuda:1" in finding.problem

    def test_cpu_device_needs_no_cuda(self) -> None:
        """Device cpu on a machine without CUDA raises no torch finding."""
        facts = fake_facts(
            cpu_session(), device="cpu", available=(CPU,), torch_gpu_build=None, cuda_devices=0
        )

        assert diagnose(facts) == ()

    def test_other_device_types_are_noted_as_unchecked(self) -> None:
        """The core checks only CUDA; an mps device gets a note saying so."""
        facts = fake_facts(cuda_session(0), device="mps")

        assert kinds(facts) == ["device-not-checked"]


class TestInferenceOutcome:
    def test_failed_inference_is_exit_3_whatever_else(self) -> None:
        """A failed test inference wins over --strict's exit status 1."""
        failed = InferenceCheck("failed", "run raised RuntimeError: no data transfer registered")
        facts = fake_facts(cpu_session(), inference=failed)

        assert verdict(facts) == "failed"
        assert exit_code(facts, strict=True) == 3
        assert exit_code(facts, strict=False) == 3
        assert "no data transfer registered" in only(facts, "inference-failed").problem
        assert headline(facts).startswith("FAILED: the test inference on 'cpu'")

    def test_skipped_inference_is_a_note(self) -> None:
        """An input the doctor cannot build skips the inference without failing the check."""
        skipped = InferenceCheck("skipped", "input 'text' has type tensor(string)")
        facts = fake_facts(cuda_session(0), inference=skipped)

        assert kinds(facts) == ["inference-skipped"]
        assert verdict(facts) == "ok"
        assert exit_code(facts, strict=True) == 0


class TestExitStatus:
    def test_fallback_is_0_without_strict_and_1_with_it(self) -> None:
        """A device that had to change: 0 normally, 1 under --strict."""
        facts = fake_facts(cpu_session())

        assert facts.fell_back
        assert (exit_code(facts, strict=False), exit_code(facts, strict=True)) == (0, 1)
        assert headline(facts).startswith("FALLBACK: 'cuda' -> 'cpu'. The model asks for")

    def test_inconclusive_is_4_and_never_hides_strict(self) -> None:
        """Inputs that do not fit: 4; with a fallback under --strict, 1 wins."""
        unsure = InferenceCheck("inconclusive", "Pad refused x", culprits=("x",))
        kept = fake_facts(cuda_session(0), inference=unsure)
        moved = fake_facts(cpu_session(), inference=unsure)

        assert (verdict(kept), exit_code(kept, strict=True)) == ("inconclusive", 4)
        assert (verdict(moved), exit_code(moved, strict=False)) == ("inconclusive", 4)
        assert exit_code(moved, strict=True) == 1
        assert render_json(moved, diagnose(moved), strict=True)["fell_back"] is True

    def test_inconclusive_headline_gives_the_device_answer_too(self) -> None:
        """The verdict line says where the tensors go and which input did not fit."""
        unsure = InferenceCheck("inconclusive", "Pad refused x", culprits=("x",))
        facts = fake_facts(cpu_session(), inference=unsure)

        assert headline(facts).startswith("INCONCLUSIVE: 'cuda' -> 'cpu'. The model asks for")
        assert headline(facts).endswith("with the inputs the doctor tried (input 'x').")
        assert "--strict: the device had to be changed" in render_text(
            facts, diagnose(facts), strict_by="--strict"
        )

    def test_a_failure_on_the_device_wins_over_everything(self) -> None:
        """3 beats 1, 2 and 4 when several models are checked."""
        assert worst([0, 4, 2, 1, 3]) == 3
        assert worst([0, 4, 2, 1]) == 1
        assert worst([0, 4, 2]) == 2
        assert worst([0, 4]) == 4
        assert EXIT_PRECEDENCE == (3, 1, 2, 4, 0)


class TestAdvice:
    def test_no_circular_advice_on_the_cpu(self) -> None:
        """A failure on device cpu does not advise asking for device 'cpu'."""
        failed = InferenceCheck("failed", "run raised Fail: unsupported op")
        facts = fake_facts(
            cpu_session(), device="cpu", available=(CPU,), torch_gpu_build=None, inference=failed
        )

        text = render_text(facts, diagnose(facts), strict_by=None)

        assert "ask for device 'cpu'" not in text
        assert "fix the causes above" not in text

    def test_torch_failing_to_make_the_inputs_is_not_blamed_on_onnxruntime(self) -> None:
        """A torch build without 'mps' fails before any session runs: torch is named."""
        failed = InferenceCheck(
            "failed",
            "InferenceSession.run on mps with x float32[1,4]: creating the inputs on mps raised "
            "RuntimeError: PyTorch is not linked with support for mps devices",
        )
        facts = fake_facts(
            cpu_session(), device="mps", available=(CPU,), torch_gpu_build=None, inference=failed
        )
        fix = only(facts, "inference-failed").fix
        assert fix == "This torch build cannot put tensors on 'mps': ask for device 'cpu'."

    def test_inconclusive_advice_names_the_input_and_the_options(self) -> None:
        """The fix names the input and shows --input, --dim and --no-inference."""
        unsure = InferenceCheck(
            "inconclusive", "refused", culprits=("sr",), suggestion=("--no-inference",)
        )
        finding = only(fake_facts(cuda_session(0), inference=unsure), "inference-inconclusive")

        assert "Give 'sr' a shape and value" in finding.fix
        assert "`--input sr=:16000`" in finding.fix
        assert "`--no-inference`" in finding.fix
        assert "says nothing against the device" in finding.problem

    def test_no_inference_is_not_a_finding(self) -> None:
        """--no-inference was asked for: no note about a skipped inference."""
        skipped = InferenceCheck("skipped", "not run (--no-inference)")

        assert kinds(fake_facts(cuda_session(0), inference=skipped)) == []


class TestMessages:
    def test_each_message_once_and_unrelated_ones_counted(self) -> None:
        """Repeats (also with another log prefix) and the run's own error are dropped."""
        error = "Non-zero status code returned while running Pad node"
        kept, omitted = clean_messages(
            [
                CUDA_LOAD_FAILURE,
                CUDA_LOAD_FAILURE,
                "[W:onnxruntime:, graph.cc:1 Clean] Removing initializer 'w'. It is not used.",
                "[W:onnxruntime:, graph.cc:2 Clean] Removing initializer 'v'. It is not used.",
                f"[E:onnxruntime:, sequential_executor.cc:9 Execute] {error}",
            ],
            known=[f"run raised Fail: {error}"],
        )

        assert kept == [CUDA_LOAD_FAILURE]
        assert omitted == 2

    def test_the_report_counts_what_it_left_out(self) -> None:
        """The text says how many messages were not about providers or devices."""
        facts = replace(fake_facts(cpu_session(), messages=[CUDA_LOAD_FAILURE]), omitted_messages=3)

        assert "  (and 3 more not about providers, devices or a failure)" in render_text(
            facts, (), strict_by=None
        )
        assert render_json(facts, (), strict=False)["onnxruntime_messages_omitted"] == 3


class TestTextReport:
    def test_fact_columns_line_up(self) -> None:
        """Every fact's value starts in the same column."""
        facts = fake_facts(cpu_session(), requested=(CUDA, TRT, "OpenVINOExecutionProvider", CPU))
        rows = render_text(facts, (), strict_by=None).split("\n\n")[0].splitlines()
        columns = set()
        for row in rows:
            labelled = re.match(r"  \S+(?: \S+)*\s{2,}(\S)", row)
            columns.add(labelled.start(1) if labelled else len(row) - len(row.lstrip()))

        assert len(rows) > 11  # a long line was wrapped
        assert len(columns) == 1

    def test_dropped_providers_are_marked(self) -> None:
        """A requested provider the session lost is marked [dropped]."""
        text = render_text(fake_facts(cpu_session()), (), strict_by=None)

        assert f"{CUDA} [dropped], {CPU}" in text

    def test_diagnosis_is_numbered_with_fixes(self) -> None:
        """Each finding gets a number, a Fix line and its link."""
        facts = fake_facts(cpu_session(), torch_gpu_build=None, cuda_devices=0)
        text = render_text(facts, diagnose(facts), strict_by="--strict")

        assert "\nDiagnosis:\n  1. " in text
        assert "\n  2. torch 2.4.0+cpu is a CPU-only build" in text
        assert "     Fix: The CUDA or cuDNN libraries" in text
        assert f"     See: {CUDA_REQUIREMENTS_URL}" in text
        assert "--strict: the device had to be changed, so the exit status is 1." in text

    def test_commands_are_never_broken_across_lines(self) -> None:
        """A `command` in a fix stays on one line, ready to copy."""
        facts = fake_facts(
            cpu_session(),
            available=(CPU,),
            requested=(CUDA, CPU),
            distributions=(CPU_WHEEL, InstalledDistribution("onnxruntime-directml", "1.20.0")),
        )
        text = render_text(facts, diagnose(facts), strict_by=None)

        assert (
            "`pip uninstall -y onnxruntime onnxruntime-directml && pip install onnxruntime-gpu`"
            in (text)
        )

    def test_onnxruntime_messages_are_listed(self) -> None:
        """What onnxruntime said while creating the session is shown."""
        facts = fake_facts(cpu_session(), messages=[CUDA_LOAD_FAILURE])

        assert "libcudnn.so.9" in render_text(facts, (), strict_by=None)


class TestJsonReport:
    def test_has_the_documented_keys(self) -> None:
        """The keys the issue names are there, with their types, and it serialises."""
        facts = fake_facts(cpu_session(), distributions=(CPU_WHEEL, GPU_WHEEL))
        report = render_json(facts, diagnose(facts), strict=False)

        assert json.loads(json.dumps(report)) == report
        assert report["requested_device"] == "cuda"
        assert report["aligned_device"] == "cpu"
        assert report["fell_back"] is True
        assert report["session_providers"] == [CPU]
        assert report["available_providers"] == [CUDA, CPU]
        assert report["installed_distributions"] == [
            {"name": "onnxruntime", "version": "1.20.0", "provides_module": True},
            {"name": "onnxruntime-gpu", "version": "1.20.0", "provides_module": True},
        ]
        assert report["inference_ok"] is True
        assert report["diagnosis"] == [str(finding) for finding in diagnose(facts)]
        assert report["verdict"] == "fallback"
        assert report["exit_code"] == 0

    def test_keys_are_unchanged_by_the_facts_record(self) -> None:
        """The machine's facts stay top-level keys, in the order scripts have seen."""
        facts = fake_facts(cpu_session())

        assert list(render_json(facts, diagnose(facts), strict=False)) == [
            "schema_version",
            "verdict",
            "summary",
            "exit_code",
            "seconds",
            "model",
            "onnx_device_guard_version",
            "python",
            "torch_version",
            "torch_gpu_build",
            "torch_cuda_device_count",
            "onnxruntime_version",
            "installed_distributions",
            "available_providers",
            "gpus",
            "cuda_visible_devices",
            "torch_cudnn",
            "onnxruntime_build",
            "cuda_libraries_loaded",
            "requested_providers",
            "requested_provider_options",
            "session_providers",
            "session_provider_options",
            "requested_device",
            "aligned_device",
            "fell_back",
            "inference_ok",
            "inference",
            "suggested_options",
            "diagnosis",
            "findings",
            "onnxruntime_messages",
            "onnxruntime_messages_omitted",
            "session_retry",
            "torch_messages",
        ]

    def test_every_key_is_documented(self) -> None:
        """docs/doctor.md's JSON table lists every key of both kinds of object."""
        facts = fake_facts(cpu_session())
        keys = set(render_json(facts, diagnose(facts), strict=False))
        keys |= set(render_any_json(ModelError("m.onnx", "why"), strict=False))
        page = (ROOT / "docs" / "doctor.md").read_text()
        json_section = page[page.index("## JSON output") : page.index("## Exit codes")]

        documented = set(re.findall(r"^\| `(\w+)` \|", json_section, re.MULTILINE))
        documented |= set(re.findall(r"`(\w+)`", json_section.split("verdict `error` has")[-1]))
        assert keys <= documented, keys - documented

    def test_the_verdict_error_is_listed_in_the_docs_and_the_readme(self) -> None:
        """Both name the verdict `error` beside the four others."""
        readme = (ROOT / "README.md").read_text()
        doctor_section = readme[readme.index("## The doctor") :]
        doctor_section = doctor_section[: doctor_section.index("\n## ", 1)]

        assert "`error`" in doctor_section
        assert "| `error` |" in (ROOT / "docs" / "doctor.md").read_text()


class TestProviderNames:
    KNOWN = sorted(set(onnxruntime.get_all_providers()) | GPU_CAPABLE_EXECUTION_PROVIDERS)

    @pytest.mark.parametrize(
        ("typed", "meant"),
        [
            ("CUDAExecutonProvider", CUDA),
            ("cudaexecutionprovider", CUDA),
            ("cuda", CUDA),
            ("TensorRTExecutionProvider", TRT),
            ("CPUExecutionProvder", CPU),
            ("ROCmExecutionProvider", "ROCMExecutionProvider"),
        ],
    )
    def test_suggests_the_closest_real_name(self, typed: str, meant: str) -> None:
        """Typos, case and missing suffixes find the real provider."""
        assert suggest_provider(typed, self.KNOWN) == meant

    def test_nothing_close_suggests_nothing(self) -> None:
        """A name like no provider gets no suggestion."""
        assert suggest_provider("banana", self.KNOWN) is None

    def test_unknown_name_is_bad_input_with_the_suggestion(self) -> None:
        """An unknown name raises ModelInputError carrying the suggestion."""
        with pytest.raises(ModelInputError, match="did you mean 'CUDAExecutionProvider'"):
            check_provider_names([CPU, "CUDAExecutonProvider"], onnxruntime.get_all_providers())

    def test_gpu_providers_missing_from_the_build_list_are_known(self) -> None:
        """GPU providers count as known even where get_all_providers() omits them."""
        check_provider_names(sorted(GPU_CAPABLE_EXECUTION_PROVIDERS), [CPU])


class FakeDistribution(metadata.Distribution):
    """An installed distribution made of in-memory metadata files."""

    def __init__(self, name: str, version: str, record: Sequence[str] | None) -> None:
        self._files = {"METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"}
        if record is not None:
            self._files["RECORD"] = "".join(f"{path},,\n" for path in record)

    def read_text(self, filename: str) -> str | None:
        return self._files.get(filename)

    def locate_file(self, path: str | os.PathLike[str]) -> Path:
        return Path("/nowhere") / path


class TestInstalledDistributions:
    def test_finds_onnxruntime_distributions_and_who_owns_the_module(self) -> None:
        """Names are normalised; RECORD says which install the onnxruntime module."""
        found = onnxruntime_distributions(
            [
                FakeDistribution("onnxruntime_gpu", "1.20.0", ["onnxruntime/__init__.py"]),
                FakeDistribution("onnxruntime", "1.19.0", ["onnxruntime/__init__.py"]),
                FakeDistribution("onnxruntime-extensions", "0.12.0", ["onnxruntime_extensions/x"]),
                FakeDistribution("ort-nightly-gpu", "1.21.0.dev1", ["onnxruntime/__init__.py"]),
                FakeDistribution("torch", "2.4.0", ["torch/__init__.py"]),
                FakeDistribution("onnxruntime-gpu", "1.18.0", ["onnxruntime/__init__.py"]),
            ]
        )

        assert found == (
            InstalledDistribution("onnxruntime", "1.19.0"),
            InstalledDistribution("onnxruntime-extensions", "0.12.0", provides_module=False),
            InstalledDistribution("onnxruntime-gpu", "1.20.0"),
            InstalledDistribution("ort-nightly-gpu", "1.21.0.dev1"),
        )

    def test_without_a_record_the_name_decides(self) -> None:
        """Without RECORD or top_level.txt, known add-on prefixes are not module owners."""
        found = onnxruntime_distributions(
            [
                FakeDistribution("onnxruntime-directml", "1.20.0", None),
                FakeDistribution("onnxruntime-genai", "0.5.0", None),
            ]
        )

        assert [dist.provides_module for dist in found] == [True, False]

    def test_this_environment_lists_its_onnxruntime(self) -> None:
        """The real environment's onnxruntime is found, owning the module."""
        owners = [dist for dist in onnxruntime_distributions() if dist.provides_module]

        assert [dist.version for dist in owners] == [onnxruntime.__version__]


class TestImportOnnxruntime:
    def test_missing_onnxruntime_says_how_to_install_it(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """No module and no distribution: install exactly one onnxruntime package."""
        monkeypatch.setitem(sys.modules, "onnxruntime", None)
        monkeypatch.setattr(metadata, "distributions", lambda **_: iter(()))

        with pytest.raises(ModelInputError, match=r"^onnxruntime is not installed; install"):
            import_onnxruntime()

    def test_listed_but_unimportable_says_reinstall(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A distribution whose module is gone (a half-uninstall) is to be reinstalled."""
        monkeypatch.setitem(sys.modules, "onnxruntime", None)

        with pytest.raises(ModelInputError, match="pip install --force-reinstall onnxruntime"):
            import_onnxruntime()

    def test_an_import_that_raises_something_else(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A broken onnxruntime raising RuntimeError on import: ModelInputError, so exit 2."""
        package = tmp_path / "onnxruntime"
        package.mkdir()
        (package / "__init__.py").write_text("raise RuntimeError('DLL initialisation failed')\n")
        for name in [name for name in sys.modules if name.split(".")[0] == "onnxruntime"]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.syspath_prepend(str(tmp_path))

        with pytest.raises(ModelInputError, match="importing it raised RuntimeError: DLL"):
            import_onnxruntime()


class TestModelFile:
    def test_missing(self, tmp_path: Path) -> None:
        """A path that does not exist is named as such."""
        with pytest.raises(ModelInputError, match="does not exist"):
            read_model_file(tmp_path / "missing.onnx")

    def test_directory(self, tmp_path: Path) -> None:
        """A directory is not a model file."""
        with pytest.raises(ModelInputError, match="is a directory"):
            read_model_file(tmp_path)

    def test_empty(self, tmp_path: Path) -> None:
        """An empty file is not a model."""
        (tmp_path / "empty.onnx").touch()

        with pytest.raises(ModelInputError, match="is empty"):
            read_model_file(tmp_path / "empty.onnx")

    def test_unreadable(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A file that cannot be opened says why (as root, chmod cannot make one)."""
        model = tmp_path / "locked.onnx"
        model.write_bytes(b"x")

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(os, "open", refuse)

        with pytest.raises(
            ModelInputError, match=r"cannot read '.*locked\.onnx': permission denied"
        ):
            read_model_file(model)


class TestCapturedOutput:
    def test_messages_drop_banners_colours_and_timestamps(self) -> None:
        """Messages are one clean line each; the retry's error is picked out."""
        captured = Captured(
            stdout=(
                "*************** EP Error ***************\n"
                "EP Error Unknown Provider Type: X when using ['X']\n"
                "Falling back to ['CPUExecutionProvider'] and retrying.\n"
                "****************************************\n"
            ),
            stderr=f"\x1b[0;93m2026-01-02 03:04:05.678 {CUDA_LOAD_FAILURE}\x1b[m\n\n",
            warnings=["Specified provider 'X' is not in available provider names."],
        )

        assert captured.messages() == (
            "Specified provider 'X' is not in available provider names.",
            "EP Error Unknown Provider Type: X when using ['X']",
            "Falling back to ['CPUExecutionProvider'] and retrying.",
            CUDA_LOAD_FAILURE,
        )
        assert captured.retry() == "Unknown Provider Type: X when using ['X']"

    def test_captures_warnings_prints_and_native_stderr(
        self, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """Warnings, print() and writes to file descriptor 2 are kept, not shown."""
        with captured_output() as captured:
            warnings.warn("provider unavailable", UserWarning, stacklevel=1)
            print("EP Error banner")
            os.write(2, b"[E:onnxruntime] failed to load\n")

        assert captured.warnings == ["provider unavailable"]
        assert captured.stdout == "EP Error banner\n"
        assert captured.stderr == "[E:onnxruntime] failed to load\n"
        assert capfd.readouterr() == ("", "")

    def test_restores_stderr(self, capfd: pytest.CaptureFixture[str]) -> None:
        """After the block, native writes to file descriptor 2 reach stderr again."""
        with captured_output():
            pass
        os.write(2, b"after\n")

        assert capfd.readouterr().err == "after\n"


class TestCreateSession:
    @needs_cpu_only_onnxruntime
    def test_unavailable_provider_is_dropped_and_the_warning_kept(
        self, tiny_model_path: Path
    ) -> None:
        """CUDA requested of the CPU build: the session runs CPU, onnxruntime's warning is kept."""
        session, said = create_session(
            onnxruntime, read_model_file(tiny_model_path), "tiny.onnx", [(CUDA, {}), (CPU, {})]
        )

        assert session.get_providers() == [CPU]
        assert any(f"Specified provider '{CUDA}'" in message for message in said.messages())
        assert said.retry() is None

    @pytest.mark.skipif(
        "ROCMExecutionProvider" in onnxruntime.get_all_providers(),
        reason="needs a build that does not know ROCm",
    )
    def test_retry_is_recorded(self, tiny_model_path: Path) -> None:
        """A provider this build cannot create makes onnxruntime retry; the error is kept."""
        session, said = create_session(
            onnxruntime,
            read_model_file(tiny_model_path),
            "tiny.onnx",
            [("ROCMExecutionProvider", {}), (CPU, {})],
        )
        retry = said.retry()

        assert session.get_providers() == [CPU]
        assert retry is not None
        assert retry.startswith("Unknown Provider Type: ROCMExecutionProvider")
        assert not any("****" in message for message in said.messages())

    def test_a_gpu_provider_dropped_for_an_operator_only_it_has_is_blamed(self) -> None:
        """A GPU build whose CUDA library did not load, and a model whose operator only CUDA
        implements: the session is Unmade, tried with the CPU, and the finding is the drop.
        Before: a ModelInputError blaming the model. With CUDA loaded, the model's error."""
        no_kernel = "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation"

        class GpuBuild:
            SessionOptions = onnxruntime.SessionOptions

            @staticmethod
            def get_available_providers() -> list[str]:
                return [CUDA, CPU]

            @staticmethod
            def InferenceSession(*args: Any, **kwargs: Any) -> Any:
                if loud:
                    warnings.warn(CUDA_LOAD_FAILURE, stacklevel=1)
                raise RuntimeError(f"{no_kernel} for GroupNorm(1) node with name ''")

        loud, model = True, ModelBytes(b"model", None)
        session, said = create_session(GpuBuild, model, "m.onnx", [(CUDA, {}), (CPU, {})])

        assert isinstance(session, Unmade)
        assert session.get_providers() == [CPU]
        facts = replace(
            fake_facts(FakeSession(session.get_providers()), messages=said.messages()),
            inference=InferenceCheck("failed", f"{NO_SESSION} ({session.error})"),
        )
        finding = only(facts, "provider-dropped")
        assert "libcudnn.so.9" in finding.problem
        assert "no session can be created without it" in finding.problem
        assert "preload_dlls" in finding.fix
        loud = False
        with pytest.raises(ModelInputError, match="Could not find an implementation"):
            create_session(GpuBuild, model, "m.onnx", [(CUDA, {}), (CPU, {})])

    def test_not_an_onnx_model_is_bad_input(self, tmp_path: Path) -> None:
        """A text file named .onnx is reported as not an ONNX model."""
        model = tmp_path / "notes.onnx"
        model.write_text("these are not weights\n")

        with pytest.raises(ModelInputError, match="is not an ONNX model"):
            create_session(onnxruntime, read_model_file(model), str(model), [(CPU, {})])


class InputArg:
    """What ``session.get_inputs()`` and ``get_outputs()`` return: a name, a shape, a type."""

    def __init__(self, name: str, shape: list[int | str | None], type: str) -> None:
        self.name, self.shape, self.type = name, shape, type


class FakeBinding:
    """Records the calls made on an IO binding."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def bind_input(self, **kwargs: Any) -> None:
        self.calls.append(("bind_input", kwargs))

    def bind_output(self, name: str, **kwargs: Any) -> None:
        self.calls.append(("bind_output", {"name": name, **kwargs}))

    def copy_outputs_to_cpu(self) -> list[Any]:
        self.calls.append(("copy_outputs_to_cpu", {}))
        return []


class FakeGPUSession(FakeSession):
    """A CUDA session that records its IO binding, and can fail like a CPU-only one."""

    def __init__(self, error: Exception | None = None, host_error: Exception | None = None) -> None:
        super().__init__([CUDA, CPU], {CUDA: {"device_id": "0"}})
        self.binding = FakeBinding()
        self.error = error
        self.host_error = host_error
        self.host_runs = 0
        self.run_options: list[Any] = []

    def run(self, outputs: object, feeds: dict[str, Any], run_options: Any = None) -> list[Any]:
        """``InferenceSession.run`` from host (NumPy) arrays."""
        self.host_runs += 1
        self.run_options.append(run_options)
        if self.host_error is not None:
            raise self.host_error
        return []

    def get_inputs(self) -> list[InputArg]:
        return [InputArg("x", ["batch", 4], "tensor(float)"), InputArg("n", [], "tensor(int64)")]

    def get_outputs(self) -> list[InputArg]:
        return [InputArg("y", ["batch", 4], "tensor(float)")]

    def io_binding(self) -> FakeBinding:
        return self.binding

    def run_with_iobinding(self, binding: FakeBinding, run_options: Any = None) -> None:
        binding.calls.append(("run_with_iobinding", {}))
        self.run_options.append(run_options)
        if self.error is not None:
            raise self.error


class RealErrorsOnGPU(FakeGPUSession):
    """A CUDA session whose runs, bound or from host arrays, are a real CPU session's."""

    def __init__(self, real: Any, made: list[torch.Tensor]) -> None:
        super().__init__()
        self.real, self.made, self.errors = real, made, list[Exception]()

    def run(self, outputs: object, feeds: dict[str, Any], run_options: Any = None) -> list[Any]:
        self.host_runs += 1
        return list(self.real.run(None, feeds))

    def get_inputs(self) -> list[Any]:
        return list(self.real.get_inputs())

    def get_outputs(self) -> list[Any]:
        return list(self.real.get_outputs())

    def run_with_iobinding(self, binding: FakeBinding, run_options: Any = None) -> None:
        names = [argument.name for argument in self.real.get_inputs()]
        try:
            self.real.run(None, {n: t.numpy() for n, t in zip(names, self.made, strict=True)})
        except Exception as error:
            self.errors.append(error)
            raise


def one_node(node: str, constant: np.ndarray[Any, Any]) -> Any:
    """A real CPU session running `node` on x float[length] and `constant`."""
    graph = helper.make_graph(
        [helper.make_node(node, ["x", "c"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["length"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(constant, "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=[CPU])


def real_error(node: str) -> str:
    """What onnxruntime raises for a Reshape of two values to seven, or an Add of 2 and 3."""
    constant = np.array([7]) if node == "Reshape" else np.zeros(3, np.float32)
    with pytest.raises(Exception, match="providers/cpu") as raised:
        one_node(node, constant).run(None, {"x": np.zeros(2, np.float32)})
    return str(raised.value)


@pytest.fixture
def inputs_on_cpu(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """Make the doctor's CUDA inputs on CPU, so the IO-binding path runs without a GPU."""
    made: list[torch.Tensor] = []

    def make_tensors(specs: Any, device: torch.device) -> list[torch.Tensor]:
        made[:] = [torch.full(spec.shape, spec.value, dtype=spec.dtype) for spec in specs]
        return list(made)

    monkeypatch.setattr("onnx_device_guard._doctor.probe.make_tensors", make_tensors)
    return made


class TestInference:
    def test_real_cpu_session_runs(self, real_cpu_session: Any) -> None:
        """The tiny model runs on CPU through session.run, dynamic batch set to 1."""
        check = run_inference(real_cpu_session, torch.device("cpu"))

        assert check == InferenceCheck(
            "ok", "InferenceSession.run on cpu with x float32[1,4]", attempts=1
        )

    def test_cuda_goes_through_io_binding(self, inputs_on_cpu: list[torch.Tensor]) -> None:
        """A CUDA device binds the tensors in place, outputs on the same GPU, then runs."""
        session = FakeGPUSession()

        check = run_inference(session, torch.device("cuda:0"))

        x, n = inputs_on_cpu
        assert check.status == "ok"
        assert check.detail == "run_with_iobinding on cuda:0 with x float32[1,4], n int64[]=1"
        assert session.binding.calls == [
            (
                "bind_input",
                {
                    "name": "x",
                    "device_type": "cuda",
                    "device_id": 0,
                    "element_type": np.float32,
                    "shape": (1, 4),
                    "buffer_ptr": x.data_ptr(),
                },
            ),
            (
                "bind_input",
                {
                    "name": "n",
                    "device_type": "cuda",
                    "device_id": 0,
                    "element_type": np.int64,
                    "shape": (),
                    "buffer_ptr": n.data_ptr(),
                },
            ),
            ("bind_output", {"name": "y", "device_type": "cuda", "device_id": 0}),
            ("run_with_iobinding", {}),
            ("copy_outputs_to_cpu", {}),
        ]

    def test_a_bounded_run_can_be_stopped_on_the_gpu_too(
        self, inputs_on_cpu: list[torch.Tensor]
    ) -> None:
        """run_with_deadline hands RunOptions to run_with_iobinding and to the host check."""
        session = FakeGPUSession(RuntimeError("Reshape: bad shape"), RuntimeError("same"))

        run_with_deadline(session, torch.device("cuda:0"), InferenceOptions(timeout=30))

        assert session.run_options
        assert all(isinstance(o, onnxruntime.RunOptions) for o in session.run_options)

    def test_a_failing_run_is_reported_not_raised(self, inputs_on_cpu: list[torch.Tensor]) -> None:
        """The IO-binding error becomes a failed check with its message."""
        session = FakeGPUSession(RuntimeError("no data transfer registered from CUDA to CPU"))

        check = run_inference(session, torch.device("cuda:0"))

        assert check.status == "failed"
        assert "raised RuntimeError: no data transfer registered from CUDA to CPU;" in check.detail
        assert session.host_runs == 1

    def test_operator_errors_on_the_gpu_are_inconclusive(
        self, inputs_on_cpu: list[torch.Tensor]
    ) -> None:
        """Refused by the model both from CUDA tensors and from host arrays: the inputs."""
        refused = RuntimeError("Non-zero status code returned while running Pad node")
        session = FakeGPUSession(refused, host_error=refused)

        check = run_inference(session, torch.device("cuda:0"))

        assert check.status == "inconclusive"
        assert session.host_runs == check.attempts >= 1

    def test_a_run_that_works_from_host_arrays_is_a_device_failure(
        self, inputs_on_cpu: list[torch.Tensor]
    ) -> None:
        """Bound CUDA tensors fail where host arrays run: the device is at fault, exit 3."""
        session = FakeGPUSession(RuntimeError("Non-zero status code returned by node Gemm"))

        check = run_inference(session, torch.device("cuda:0"))

        assert check.status == "failed"
        assert "through InferenceSession.run completed" in check.detail
        assert session.host_runs == 1

    def test_the_models_own_errors_on_the_gpu_are_never_the_devices(
        self, inputs_on_cpu: list[torch.Tensor]
    ) -> None:
        """onnxruntime's own Reshape error names .../core/providers/cpu/...: not the device's.

        The model reshapes x to rows of 16; the bound run and the host run both refuse one
        value, and the doctor goes on to 32, which runs (it was FAILED, exit 3, on "provider").
        """
        session = RealErrorsOnGPU(one_node("Reshape", np.array([-1, 16])), inputs_on_cpu)

        check = run_inference(session, torch.device("cuda:0"))

        assert "providers/cpu" in str(session.errors[0])
        assert (check.status, check.attempts, session.host_runs) == ("ok", 2, 1)

    @pytest.mark.parametrize("node", ["Reshape", "Add", "Relu"])
    def test_an_input_error_naming_a_provider_or_a_node_is_the_inputs(
        self, node: str, inputs_on_cpu: list[torch.Tensor]
    ) -> None:
        """onnxruntime's real Reshape and broadcast texts, and a node named '/relationship/..',
        refused from CUDA tensors and from host arrays: inconclusive after every size, exit 4.
        """
        refused = RuntimeError(
            real_error(node)
            if node != "Relu"
            else "Non-zero status code returned while "
            "running Relu node. Name:'/relationship/Relu' Status Message: invalid dims"
        )
        session = FakeGPUSession(refused, host_error=refused)

        check = run_inference(session, torch.device("cuda:0"))

        assert check.status == "inconclusive"
        assert session.host_runs == check.attempts

    def test_a_cuda_failure_from_host_arrays_too_is_the_devices(
        self, inputs_on_cpu: list[torch.Tensor]
    ) -> None:
        """Both runs fail with CUDA's own words (outside paths and names): the device, exit 3."""
        session = FakeGPUSession(
            RuntimeError("CUDA failure 700: an illegal memory access was encountered"),
            RuntimeError("Name:'/a/Relu' Status Message: CUDA failure 700: illegal access"),
        )

        check = run_inference(session, torch.device("cuda:0"))

        assert (check.status, check.attempts) == ("failed", 1)
        assert "from host memory it raised RuntimeError:" in check.detail

    @pytest.mark.parametrize("device", ["cuda:0", "cpu"])
    def test_running_out_of_memory_is_the_devices_not_the_inputs(
        self, device: str, inputs_on_cpu: list[torch.Tensor]
    ) -> None:
        """onnxruntime's arena cannot allocate, no device word outside its C++ names: failed
        at once, the device ran out of memory (exit 3), on the GPU before any host run (which
        may fit). Before: the inputs' fault, inconclusive after every size (exit 4)."""
        oom = RuntimeError(
            "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while "
            "running Conv node. Name:'/conv/Conv' Status Message: /onnxruntime_src/onnxruntime/"
            "core/framework/bfc_arena.cc:376 void* onnxruntime::BFCArena::AllocateRawInternal("
            "size_t, bool, onnxruntime::Stream*, bool, onnxruntime::WaitNotificationFn) Failed "
            "to allocate memory for requested buffer of size 4294967296"
        )
        session = FakeGPUSession(oom, host_error=oom)

        check = run_inference(session, torch.device(device))

        assert (check.status, check.attempts) == ("failed", 1)
        assert "Failed to allocate memory for requested buffer" in check.detail
        assert check.detail.endswith(f"; {device} ran out of memory")
        assert session.host_runs == (1 if device == "cpu" else 0)
        assert check.culprits == ()

    @needs_cpu_only_torch
    def test_cuda_tensors_without_cuda_fail_cleanly(self, real_cpu_session: Any) -> None:
        """On this machine, zeros on cuda:0 cannot be made: a failed check, not a crash."""
        check = run_inference(real_cpu_session, torch.device("cuda:0"))

        assert check.status == "failed"
        assert "run_with_iobinding on cuda:0" in check.detail

    def test_unbuildable_inputs_skip_the_run(self) -> None:
        """A string input cannot come from torch: the inference is skipped."""

        class TextSession(FakeGPUSession):
            def get_inputs(self) -> list[InputArg]:
                return [InputArg("text", [1], "tensor(string)")]

        check = run_inference(TextSession(), torch.device("cpu"))

        assert check.status == "skipped"
        assert "tensor(string)" in check.detail


class TestPackagedModel:
    def test_report_names_it(self) -> None:
        """The default model is described, not given a temporary path."""
        assert "tiny" in TINY_MODEL
