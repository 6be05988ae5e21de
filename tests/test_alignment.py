"""The alignment core: align_device_with_onnx_session."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

from onnx_device_guard import (
    GPU_CAPABLE_EXECUTION_PROVIDERS,
    EnvironmentConfigurationError,
    ModelInputError,
    align_device_with_onnx_session,
)

from .logs import recorded_logs
from .sessions import FakeSession, ProvidersOnlySession, cpu_session, cuda_session

CUDA_0 = torch.device("cuda", 0)
CPU = torch.device("cpu")


class TestSeedContract:
    """The behaviour documented for the function, on real and fake sessions."""

    def test_real_cpu_session_falls_back_to_cpu(self, real_cpu_session: Any) -> None:
        """A CPU-only real session turns cuda:0 into cpu by default."""
        assert align_device_with_onnx_session(real_cpu_session, CUDA_0) == CPU

    def test_real_cpu_session_fails_in_fail_mode(self, real_cpu_session: Any) -> None:
        """resolution_mode='fail' raises EnvironmentConfigurationError instead."""
        with pytest.raises(EnvironmentConfigurationError):
            align_device_with_onnx_session(real_cpu_session, CUDA_0, resolution_mode="fail")

    def test_silently_dropped_cuda_provider_is_detected(
        self, real_dropped_cuda_session: Any
    ) -> None:
        """A session that asked for CUDA but got CPU is judged by its effective providers."""
        assert real_dropped_cuda_session.get_providers() == ["CPUExecutionProvider"]
        assert align_device_with_onnx_session(real_dropped_cuda_session, "cuda") == CPU

    def test_keyword_arguments_have_the_seed_names(self, real_cpu_session: Any) -> None:
        """session, device, resolution_mode and fallback_device are the parameter names."""
        device = align_device_with_onnx_session(
            session=real_cpu_session,
            device=CUDA_0,
            resolution_mode="fallback",
            fallback_device=torch.device("meta"),
        )
        assert device == torch.device("meta")

    @pytest.mark.parametrize("device", ["cpu", "mps", "meta", "xpu:1", torch.device("cpu")])
    def test_non_cuda_device_is_returned_unchanged(self, device: Any) -> None:
        """Non-CUDA devices are not validated against the providers."""
        assert align_device_with_onnx_session(cpu_session(), device) == torch.device(device)

    def test_non_cuda_device_does_not_call_get_providers(self) -> None:
        """A session that would raise is never asked when the device is not CUDA."""

        class Exploding:
            def get_providers(self) -> list[str]:
                raise AssertionError("must not be called")

        assert align_device_with_onnx_session(Exploding(), "cpu", "fail") == CPU

    @pytest.mark.parametrize("provider", sorted(GPU_CAPABLE_EXECUTION_PROVIDERS))
    def test_every_gpu_capable_provider_keeps_cuda(self, provider: str) -> None:
        """CUDA, TensorRT, NvTensorRTRTX, ROCm and MIGraphX all read CUDA tensors."""
        session = ProvidersOnlySession([provider, "CPUExecutionProvider"])
        assert align_device_with_onnx_session(session, "cuda:0", "fail") == CUDA_0

    @pytest.mark.parametrize(
        "provider",
        [
            "DmlExecutionProvider",
            "CoreMLExecutionProvider",
            "OpenVINOExecutionProvider",
            "AzureExecutionProvider",
            "WebGpuExecutionProvider",
        ],
    )
    def test_other_accelerators_do_not_count(self, provider: str) -> None:
        """DirectML, CoreML, OpenVINO and the rest cannot read torch's CUDA memory."""
        session = ProvidersOnlySession([provider, "CPUExecutionProvider"])
        with pytest.raises(EnvironmentConfigurationError):
            align_device_with_onnx_session(session, "cuda:0", "fail")

    def test_gpu_provider_after_cpu_still_counts(self) -> None:
        """The order of providers does not matter for GPU capability."""
        session = ProvidersOnlySession(["CPUExecutionProvider", "CUDAExecutionProvider"])
        assert align_device_with_onnx_session(session, "cuda", "fail") == torch.device("cuda")

    def test_compatible_device_is_returned_as_given(self) -> None:
        """A compatible torch.device comes back equal, index and all."""
        assert align_device_with_onnx_session(cuda_session(0), CUDA_0) == CUDA_0

    def test_fallback_device_replaces_cpu(self) -> None:
        """fallback_device is what the fallback mode returns."""
        result = align_device_with_onnx_session(cpu_session(), "cuda", fallback_device="meta")
        assert result == torch.device("meta")

    def test_a_fallback_device_it_cannot_read_is_an_error_naming_the_device_asked_for(
        self,
    ) -> None:
        """The message says the model asked for cuda:1, not the fallback cuda:0."""
        with pytest.raises(EnvironmentConfigurationError) as caught:
            align_device_with_onnx_session(cpu_session(), "cuda:1", fallback_device="cuda:0")
        message = caught.value.message
        assert message.startswith("The session cannot read the fallback device 'cuda:0' either:")
        assert "The model asks for device 'cuda:1'" in message
        assert "asks for device 'cuda:0'" not in message

    def test_gpu_capable_set_is_frozen(self) -> None:
        """The provider set is a frozenset of names, so nobody can change it by accident."""
        assert isinstance(GPU_CAPABLE_EXECUTION_PROVIDERS, frozenset)
        assert "CUDAExecutionProvider" in GPU_CAPABLE_EXECUTION_PROVIDERS


class TestStringDevices:
    """Devices given as strings are parsed; the result is always a torch.device."""

    @pytest.mark.parametrize(
        ("given", "expected"),
        [("cpu", CPU), ("cuda:0", CUDA_0), ("meta", torch.device("meta"))],
    )
    def test_result_is_a_torch_device(self, given: str, expected: torch.device) -> None:
        """A compatible string device comes back as the equivalent torch.device."""
        result = align_device_with_onnx_session(cuda_session(0), given)
        assert isinstance(result, torch.device)
        assert result == expected

    def test_fallback_device_string(self) -> None:
        """A string fallback_device is parsed too."""
        result = align_device_with_onnx_session(cpu_session(), "cuda", fallback_device="meta")
        assert result == torch.device("meta")


class TestResolutionMode:
    """The mode is validated before anything else."""

    @pytest.mark.parametrize("mode", ["raise", "FAIL", "", 1, ["fail"], object()])
    def test_unknown_mode_is_rejected(self, mode: Any) -> None:
        """Anything but 'fail' and 'fallback' is a ModelInputError naming the value."""
        with pytest.raises(ModelInputError, match="resolution_mode must be one of") as info:
            align_device_with_onnx_session(cuda_session(0), "cuda:0", mode)
        assert repr(mode) in info.value.message

    def test_mode_is_checked_first_whatever_the_device(self) -> None:
        """A bad mode fails even for a CPU device and a bad session."""
        with pytest.raises(ModelInputError, match="resolution_mode"):
            align_device_with_onnx_session(object(), "cpu", "retry")  # type: ignore[arg-type]

    def test_mode_is_checked_before_the_device(self) -> None:
        """A bad mode wins over an unparsable device."""
        with pytest.raises(ModelInputError, match="resolution_mode"):
            align_device_with_onnx_session(cpu_session(), "gpu!", "retry")  # type: ignore[arg-type]


class TestBadInput:
    """Bad inputs raise ModelInputError with a message that names them."""

    @pytest.mark.parametrize("device", ["gpu", "cuda:x", "cuda:-1", "", " cuda"])
    def test_unparsable_device_string(self, device: str) -> None:
        """A string torch cannot parse is named in the message."""
        with pytest.raises(ModelInputError, match="is not a device torch understands") as info:
            align_device_with_onnx_session(cpu_session(), device)
        assert repr(device) in info.value.message

    @pytest.mark.parametrize("device", [True, 1.5, None, b"cuda", ["cuda"]])
    def test_device_of_the_wrong_type(self, device: Any) -> None:
        """Only torch.device, str and a CUDA index are devices; the message names the type."""
        with pytest.raises(ModelInputError, match=r"device must be a torch\.device") as info:
            align_device_with_onnx_session(cpu_session(), device)
        assert type(device).__name__ in info.value.message

    def test_an_int_is_a_cuda_index_as_torch_reads_it(self) -> None:
        """0 is cuda:0; an index torch cannot address is refused."""
        assert align_device_with_onnx_session(cuda_session(1), 1) == torch.device("cuda", 1)
        with pytest.raises(ModelInputError, match="cannot address"):
            align_device_with_onnx_session(cuda_session(0), 128)

    def test_bad_fallback_device_is_rejected_even_when_unused(self) -> None:
        """fallback_device is validated up front, not when a mismatch happens."""
        with pytest.raises(ModelInputError, match="fallback_device='gpu'"):
            align_device_with_onnx_session(cuda_session(0), "cuda:0", fallback_device="gpu")

    @pytest.mark.parametrize("session", [None, "model.onnx", object(), 42])
    def test_session_without_get_providers(self, session: Any) -> None:
        """A session needs get_providers(); the message says what was passed."""
        with pytest.raises(ModelInputError, match="get_providers") as info:
            align_device_with_onnx_session(session, "cuda:0")
        assert type(session).__name__ in info.value.message

    def test_session_whose_get_providers_raises(self) -> None:
        """An exception inside get_providers() becomes a ModelInputError, chained."""

        class Broken:
            def get_providers(self) -> list[str]:
                raise RuntimeError("session was released")

        with pytest.raises(ModelInputError, match="session was released") as info:
            align_device_with_onnx_session(Broken(), "cuda")
        assert isinstance(info.value.__cause__, RuntimeError)

    @pytest.mark.parametrize("providers", ["CPUExecutionProvider", None, [1, 2], {1: "a"}])
    def test_get_providers_returning_garbage(self, providers: Any) -> None:
        """get_providers() must return a list of strings."""

        class Odd:
            def get_providers(self) -> Any:
                return providers

        with pytest.raises(ModelInputError, match=r"must return .*provider names"):
            align_device_with_onnx_session(Odd(), "cuda")

    @pytest.mark.parametrize("device_id", ["abc", "-1", "1.0", "", "٣", [0], True, -3])
    def test_garbage_device_id(self, device_id: object) -> None:
        """A device_id that is not a GPU index means "index not checked", with one WARNING.

        The session runs a CUDA provider, so it reads the device: aligning by
        provider type alone keeps it (see tests/test_provider_reports.py).
        """
        session = FakeSession(
            ["CUDAExecutionProvider"], {"CUDAExecutionProvider": {"device_id": device_id}}
        )
        with recorded_logs() as records:
            assert align_device_with_onnx_session(session, "cuda:0") == torch.device("cuda", 0)
        assert [record.levelno for record in records] == [logging.WARNING]
        assert repr(device_id) in records[0].getMessage()

    def test_provider_options_that_are_not_a_mapping(self) -> None:
        """get_provider_options() that is not a mapping: the index is not checked either."""

        class Odd(FakeSession):
            def get_provider_options(self) -> Any:
                return ["device_id", "0"]

        with recorded_logs() as records:
            aligned = align_device_with_onnx_session(Odd(["CUDAExecutionProvider"]), "cuda:1")
        assert aligned == torch.device("cuda", 1)
        assert "get_provider_options" in records[0].getMessage()


class TestDeviceIndex:
    """cuda:N is checked against the device_id of the session's first GPU provider."""

    def test_matching_index_is_kept(self) -> None:
        """cuda:1 on a session with device_id 1 is compatible."""
        assert align_device_with_onnx_session(cuda_session(1), "cuda:1", "fail") == torch.device(
            "cuda", 1
        )

    def test_fallback_moves_to_the_sessions_gpu(self) -> None:
        """cuda:1 on device_id 0 falls back to cuda:0, not to the fallback device."""
        result = align_device_with_onnx_session(cuda_session(0), "cuda:1", fallback_device="meta")
        assert result == CUDA_0

    def test_fail_names_both_indices(self) -> None:
        """The error names the requested device and the session's device_id."""
        with pytest.raises(EnvironmentConfigurationError) as info:
            align_device_with_onnx_session(cuda_session(0), "cuda:1", "fail")
        assert "'cuda:1'" in info.value.message
        assert "device_id 0" in info.value.message
        assert info.value.help_url.endswith("#device-id-mismatch")

    def test_bare_cuda_means_device_zero_before_cuda_is_initialised(self) -> None:
        """Without an index, 'cuda' is torch's current device: 0 here."""
        assert not torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        assert align_device_with_onnx_session(cuda_session(0), "cuda", "fail") == torch.device(
            "cuda"
        )
        assert align_device_with_onnx_session(cuda_session(2), "cuda") == torch.device("cuda", 2)

    def test_bare_cuda_follows_the_current_device_once_initialised(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """After torch.cuda.set_device(1), bare 'cuda' means cuda:1."""
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
        assert align_device_with_onnx_session(cuda_session(1), "cuda", "fail") == torch.device(
            "cuda"
        )
        with pytest.raises(EnvironmentConfigurationError, match=r"'cuda' \(now cuda:1\)"):
            align_device_with_onnx_session(cuda_session(0), "cuda", "fail")

    def test_no_device_id_means_no_index_check(self) -> None:
        """Without a device_id in the options, any index is accepted."""
        assert align_device_with_onnx_session(cuda_session(None), "cuda:3", "fail") == (
            torch.device("cuda", 3)
        )

    def test_session_without_provider_options_is_not_index_checked(self) -> None:
        """get_provider_options() is optional on duck-typed sessions."""
        session = ProvidersOnlySession(["CUDAExecutionProvider"])
        assert align_device_with_onnx_session(session, "cuda:5", "fail") == torch.device("cuda", 5)

    def test_only_the_first_gpu_provider_is_consulted(self) -> None:
        """With TensorRT before CUDA, TensorRT's device_id is the one that counts."""
        session = FakeSession(
            ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
            {
                "TensorrtExecutionProvider": {"device_id": "1"},
                "CUDAExecutionProvider": {"device_id": "0"},
            },
        )
        assert align_device_with_onnx_session(session, "cuda:1", "fail") == torch.device("cuda", 1)
        with pytest.raises(EnvironmentConfigurationError, match="TensorrtExecutionProvider"):
            align_device_with_onnx_session(session, "cuda:0", "fail")

    def test_integer_device_id_is_accepted(self) -> None:
        """Some wrappers report device_id as an int; it is read the same way."""
        session = FakeSession(
            ["CUDAExecutionProvider"], {"CUDAExecutionProvider": {"device_id": 2}}
        )
        assert align_device_with_onnx_session(session, "cuda") == torch.device("cuda", 2)


class TestMessagesAndLogging:
    """Mismatches are reported in words a person can act on."""

    def test_fail_message_names_device_providers_and_fixes(self) -> None:
        """The error names the device, the effective providers and what to do."""
        session = FakeSession(["AzureExecutionProvider", "CPUExecutionProvider"])
        with pytest.raises(EnvironmentConfigurationError) as info:
            align_device_with_onnx_session(session, "cuda:0", "fail")
        message = info.value.message
        assert "'cuda:0'" in message
        assert "['AzureExecutionProvider', 'CPUExecutionProvider']" in message
        assert "onnxruntime-gpu" in message
        assert "CUDAExecutionProvider" in message
        assert "'cpu'" in message
        assert info.value.help_url.endswith("#no-data-transfer-registered")
        assert info.value.help_url in str(info.value)

    def test_fallback_logs_a_warning(self, caplog: pytest.LogCaptureFixture) -> None:
        """A fallback is logged at WARNING on the 'onnx_device_guard' logger."""
        with caplog.at_level(logging.DEBUG, logger="onnx_device_guard"):
            align_device_with_onnx_session(cpu_session(), "cuda:0")
        [record] = caplog.records
        assert record.name == "onnx_device_guard"
        assert record.levelno == logging.WARNING
        assert "'cuda:0'" in record.getMessage()
        assert "Using 'cpu' instead" in record.getMessage()

    def test_compatible_device_logs_nothing(self, caplog: pytest.LogCaptureFixture) -> None:
        """Nothing is logged when the device is kept."""
        with caplog.at_level(logging.DEBUG, logger="onnx_device_guard"):
            align_device_with_onnx_session(cuda_session(0), "cuda:0")
        assert caplog.records == []

    def test_library_logger_has_a_null_handler(self) -> None:
        """Applications decide where the library's log records go."""
        handlers = logging.getLogger("onnx_device_guard").handlers
        assert any(isinstance(handler, logging.NullHandler) for handler in handlers)


@pytest.mark.cuda
class TestOnRealCUDA:
    """On a machine with CUDA and onnxruntime-gpu: a real CUDA session keeps cuda."""

    def test_real_cuda_session_keeps_cuda(self, tiny_model_path: Any) -> None:
        """A session whose CUDA provider loaded keeps cuda:0."""
        import onnxruntime

        session = onnxruntime.InferenceSession(
            str(tiny_model_path), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
        )
        assert align_device_with_onnx_session(session, "cuda:0", "fail") == CUDA_0
