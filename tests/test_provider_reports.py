"""What a session reports about its providers: any iterable of names, and unreadable indices.

A session that can read the device must never be turned into an error by a
report about which GPU it runs on: unreadable or malformed provider options,
or a ``device_id`` that is not a GPU index torch addresses, mean "index not
checked", with one WARNING naming the value, and alignment goes by provider
type alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import NoReturn

import pytest
import torch

from onnx_device_guard import EnvironmentConfigurationError, align_device_with_onnx_session

from .logs import recorded_logs
from .sessions import FakeSession
from .sessions import RaisingOptionsSession as OptionsRaise
from .sessions import ReturningSession as Reports

CUDA0 = torch.device("cuda", 0)
GPU = "CUDAExecutionProvider"


class OptionsLookupRaises:
    """A CUDA session whose ``get_provider_options`` lookup raises."""

    def get_providers(self) -> list[str]:
        return [GPU]

    def __getattr__(self, name: str) -> NoReturn:
        raise RuntimeError(f"{name} is not loaded")


class GetRaises(Mapping[str, object]):
    """A mapping whose ``get`` and item lookup raise."""

    def __getitem__(self, key: str) -> NoReturn:
        raise TypeError("unhashable today")

    def get(self, key: str, default: object = None) -> NoReturn:
        raise TypeError("unhashable today")

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def with_device_id(device_id: object) -> FakeSession:
    return FakeSession([GPU, "CPUExecutionProvider"], {GPU: {"device_id": device_id}})


UNCHECKED: list[tuple[str, object, str]] = [
    # (id, session, a fragment the warning must hold)
    ("get_provider_options raises", OptionsRaise(), "KeyError"),
    ("get_provider_options lookup raises", OptionsLookupRaises(), "RuntimeError"),
    ("options are a list", Reports([GPU], ["device_id=1"]), "list ['device_id=1']"),
    (
        "provider options are a str",
        Reports([GPU], {GPU: "device_id=1"}),
        "str 'device_id=1'",
    ),
    ("options mapping whose get raises", Reports([GPU], GetRaises()), "TypeError"),
    ("provider options whose get raises", Reports([GPU], {GPU: GetRaises()}), "TypeError"),
    ("device_id whose repr raises", with_device_id(ReprRaises()), "<ReprRaises object>"),
    ("huge device_id", with_device_id("9" * 10_000_000), "999..."),
    *(
        (f"device_id {raw!r}", with_device_id(raw), name)
        for raw, name in [
            ("abc", "device_id='abc'"),
            ("zero", "device_id='zero'"),
            ("-1", "device_id='-1'"),
            (-1, "device_id=-1"),
            ("", "device_id=''"),
            ("1.0", "device_id='1.0'"),
            (1.0, "device_id=1.0"),
            ("0x1", "device_id='0x1'"),
            (True, "device_id=True"),
            ("\u0663", "device_id='\u0663'"),
            ([0], "device_id=[0]"),
            ({"id": 0}, "device_id={'id': 0}"),
            ("128", "device_id='128'"),
            (128, "device_id=128"),
            ("255", "device_id='255'"),
            (256, "device_id=256"),
            (2**31, f"device_id={2**31}"),
            (2**70, f"device_id={2**70}"),
        ]
    ),
]


class TestIndexNotChecked:
    """An unreadable GPU index never turns a session that reads the device into an error."""

    @pytest.mark.parametrize(
        ("session", "named"),
        [(session, named) for _, session, named in UNCHECKED],
        ids=[case_id for case_id, _, _ in UNCHECKED],
    )
    @pytest.mark.parametrize("mode", ["fallback", "fail"])
    def test_aligns_by_provider_type_with_one_warning(
        self, session: object, named: str, mode: str
    ) -> None:
        """The device is kept, in either mode, and one WARNING names the bad value."""
        with recorded_logs() as records:
            aligned = align_device_with_onnx_session(session, "cuda:3", mode)  # type: ignore[arg-type]
        assert aligned == torch.device("cuda", 3)
        warnings = [r for r in records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        message = warnings[0].getMessage()
        assert named in message
        assert "not checked" in message
        assert len(message) < 1000

    def test_no_gpu_provider_still_fails(self) -> None:
        """Without a GPU-capable provider the options are never read: fail mode raises."""
        with pytest.raises(EnvironmentConfigurationError):
            align_device_with_onnx_session(Reports(["CPUExecutionProvider"], 5), CUDA0, "fail")

    @pytest.mark.parametrize(("raw", "index"), [(" 1", 1), ("2 ", 2), ("\t3\n", 3), (4, 4)])
    def test_whitespace_around_digits_is_read(self, raw: object, index: int) -> None:
        """Whitespace around the digits is ignored, as onnxruntime's own parser ignores it."""
        assert align_device_with_onnx_session(with_device_id(raw), CUDA0) == torch.device(
            "cuda", index
        )

    def test_largest_addressable_index_still_aligns(self) -> None:
        """device_id 127 is the last index torch addresses: it is checked as usual."""
        with recorded_logs() as records:
            assert align_device_with_onnx_session(with_device_id("127"), CUDA0) == torch.device(
                "cuda", 127
            )
        assert "device_id 127" in records[0].getMessage()
        with pytest.raises(EnvironmentConfigurationError, match="device_id 127"):
            align_device_with_onnx_session(with_device_id(127), CUDA0, "fail")


def names() -> Iterator[str]:
    yield GPU
    yield "CPUExecutionProvider"


class TestAnyIterableOfProviderNames:
    """get_providers() may return any iterable of names, as onnxruntime's set() checks allow."""

    @pytest.mark.parametrize(
        "providers",
        [
            [GPU],
            (GPU, "CPUExecutionProvider"),
            {GPU, "CPUExecutionProvider"},
            frozenset({GPU}),
            {GPU: {}},
            names(),
        ],
        ids=["list", "tuple", "set", "frozenset", "dict", "generator"],
    )
    def test_gpu_session_keeps_the_device(self, providers: object) -> None:
        """A GPU-capable provider among them keeps the device."""
        assert align_device_with_onnx_session(Reports(providers), "cuda:1") == torch.device(
            "cuda", 1
        )

    @pytest.mark.parametrize(
        "providers",
        [{"CPUExecutionProvider"}, ("CPUExecutionProvider",), iter(["CPUExecutionProvider"])],
        ids=["set", "tuple", "iterator"],
    )
    def test_cpu_session_falls_back(self, providers: object) -> None:
        """No GPU-capable provider among them: the fallback, or the error in fail mode."""
        with recorded_logs():
            assert align_device_with_onnx_session(Reports(providers), CUDA0) == torch.device("cpu")
        with pytest.raises(EnvironmentConfigurationError, match="CPUExecutionProvider"):
            align_device_with_onnx_session(Reports({"CPUExecutionProvider"}), CUDA0, "fail")


def session_on(device_id: object) -> FakeSession:
    return FakeSession(
        ["CUDAExecutionProvider", "CPUExecutionProvider"],
        {"CUDAExecutionProvider": {"device_id": device_id}},
    )


class TestDeviceIdBeyondTorchsRange:
    """A device_id torch cannot address was turned into a wrong device, then into an error."""

    @pytest.mark.parametrize("device_id", ["128", 128, "255", 256, 2**31, 2**70, "9" * 20])
    @pytest.mark.parametrize("mode", ["fallback", "fail"])
    def test_index_is_not_checked(self, device_id: object, mode: str) -> None:
        """First cuda:-128 came back for 128; then a GPU session that reads cuda:0 raised.

        Now the index is not checked (one WARNING names it) and the CUDA
        provider alone decides: the device is kept.
        """
        with recorded_logs() as records:
            aligned = align_device_with_onnx_session(
                session_on(device_id),
                "cuda:0",
                mode,  # type: ignore[arg-type]
            )
        assert aligned == torch.device("cuda", 0)
        assert [r.levelno for r in records] == [logging.WARNING]
        assert f"device_id={device_id!r}" in records[0].getMessage()

    def test_largest_addressable_index_still_aligns(self) -> None:
        """cuda:127 is the last index torch keeps as it is; it still aligns normally."""
        assert align_device_with_onnx_session(session_on("127"), "cuda:0") == torch.device(
            "cuda", 127
        )
        with pytest.raises(EnvironmentConfigurationError, match="device_id 127"):
            align_device_with_onnx_session(session_on(127), "cuda:0", "fail")
