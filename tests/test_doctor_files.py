"""The doctor and the file system: paths, folders, FIFOs and external data, never a hang."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from onnx_device_guard import ModelInputError
from onnx_device_guard._cli import main
from onnx_device_guard._doctor import files
from onnx_device_guard._doctor.files import expand, read_model_file

from . import doctor_models

PREFIX = "onnx-device-guard doctor: error: "


def one_line(err: str, fragment: str) -> None:
    assert err.count("\n") == 1, err
    assert err.startswith(PREFIX), err
    assert fragment in err, err


def nest(depth: int) -> None:
    """Make `depth` folders ``d`` one inside the other here, one relative step at a time."""
    here = os.getcwd()
    try:
        for _ in range(depth):
            os.mkdir("d")
            os.chdir("d")
    finally:
        os.chdir(here)


def unnest(depth: int) -> None:
    """Remove what `nest` made here (and files in it), bottom up, one relative step at a time.

    pytest's own clean-up of old temporary folders recurses, and would choke on it.
    """
    here = os.getcwd()
    try:
        for _ in range(depth):
            os.chdir("d")
        for _ in range(depth):
            for name in os.listdir("."):
                if name != "d":
                    os.remove(name)
            os.chdir("..")
            os.rmdir("d")
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory, tiny_model_bytes: bytes) -> Iterator[Path]:
    """A folder holding 1,100 folders ``d`` one inside the other, a model at the bottom."""
    top = tmp_path_factory.mktemp("deep")
    here = os.getcwd()
    os.chdir(top)
    try:
        nest(1100)
        with open(os.path.join(*["d"] * 1100, "deep.onnx"), "wb") as model:
            model.write(tiny_model_bytes)
    finally:
        os.chdir(here)
    yield top
    os.chdir(top)
    try:
        unnest(1100)
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def tiny_model_bytes() -> bytes:
    """The packaged tiny model's content."""
    return (resources.files("onnx_device_guard") / "data" / "tiny.onnx").read_bytes()


class TestFolders:
    def test_a_folder_too_deep_to_recurse_into(
        self, deep: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """1,100 nested folders: the model at the bottom is found, no RecursionError."""
        monkeypatch.chdir(deep)

        found = expand([Path("d")])

        assert [str(path).count("/") for path in found] == [1100]
        assert str(found[0]).endswith("/d/deep.onnx")

    def test_a_deep_folder_on_the_command_line(
        self, deep: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """doctor d with 1,100 levels: the model is checked, no traceback and no exit 1."""
        monkeypatch.chdir(deep)

        code = main(["doctor", "d", "--device", "cpu", "--json"])
        captured = capsys.readouterr()

        assert (code, captured.err) == (0, "")
        assert [entry["verdict"] for entry in json.loads(captured.out)] == ["ok"]

    def test_sorted_depth_first(self, tmp_path: Path) -> None:
        """Files and folders come in name order, each folder's models before the next name."""
        for name in ("b/z.onnx", "a.onnx", "b/a/y.onnx", "c.onnx"):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_bytes(b"x")

        found = [str(path.relative_to(tmp_path)) for path in expand([tmp_path])]  # type: ignore[union-attr]

        assert found == ["a.onnx", "b/a/y.onnx", "b/z.onnx", "c.onnx"]

    def test_a_folder_without_search_permission(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """PermissionError from stat (root ignores chmod, so stat is made to refuse): exit 2."""
        model = tmp_path / "locked" / "model.onnx"
        real_stat = os.stat

        def refuse(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            if str(path).startswith(str(tmp_path / "locked")):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_stat(path, *args, **kwargs)

        monkeypatch.setattr(os, "stat", refuse)

        assert main(["doctor", str(model)]) == 2
        one_line(capsys.readouterr().err, "permission denied")

    def test_a_folder_that_cannot_be_listed(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """PermissionError from listing a folder: one error entry, exit 2."""

        def refuse(path: Any) -> Any:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))

        monkeypatch.setattr(os, "scandir", refuse)

        assert main(["doctor", str(tmp_path)]) == 2
        one_line(capsys.readouterr().err, "permission denied")


class TestNotARegularFile:
    def test_a_fifo_is_refused_at_once(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A FIFO as MODEL: exit 2 'not a regular file' at once, not a hang."""
        os.mkfifo(tmp_path / "pipe.onnx")

        assert main(["doctor", str(tmp_path / "pipe.onnx")]) == 2
        one_line(capsys.readouterr().err, "is not a regular file")

    def test_a_fifo_swapped_in_after_the_look(
        self, tmp_path: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The file becomes a FIFO after it was looked at: what is opened is what is checked."""
        model = tmp_path / "model.onnx"
        shutil.copy(tiny_model_path, model)
        real_stat = files._stat

        def look_then_swap(path: Path) -> os.stat_result:
            looked = real_stat(path)
            assert stat.S_ISREG(looked.st_mode)
            model.unlink()
            os.mkfifo(model)  # no writer: a blocking open or read would never return
            return looked

        monkeypatch.setattr(files, "_stat", look_then_swap)

        with pytest.raises(ModelInputError, match="is not a regular file"):
            read_model_file(model)


class TestFileNames:
    def test_a_name_that_is_not_utf8(
        self, tmp_path: Path, tiny_model_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A valid model named with a Latin-1 byte is checked; its name shows as \\xe9."""
        name = os.fsdecode(b"caf\xe9.onnx")
        shutil.copy(tiny_model_path, tmp_path / name)

        assert main(["doctor", str(tmp_path / name), "--device", "cpu"]) == 0
        out = capsys.readouterr().out
        assert "caf\\xe9.onnx" in out
        assert "OK: the session reads tensors on 'cpu'." in out

    @pytest.mark.parametrize("name", [b"model.onnx", b"caf\xe9.onnx"], ids=["utf8", "latin1"])
    def test_external_data_is_found_beside_the_model(
        self,
        tmp_path: Path,
        name: bytes,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A model with external data, run from another folder: its weights are found."""
        model = doctor_models.with_external_data(tmp_path / os.fsdecode(name))
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)

        code = main(["doctor", str(model), "--device", "cpu", "--json"])
        report = json.loads(capsys.readouterr().out)

        assert (code, report["verdict"]) == (0, "ok"), report
        assert report["inference"]["status"] == "ok"

    def test_external_data_in_a_folder_onnxruntime_cannot_name(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A folder whose name is not UTF-8: the report says the external data is not found."""
        (tmp_path / "plain").mkdir()
        doctor_models.with_external_data(tmp_path / "plain" / "model.onnx")
        folder = tmp_path / os.fsdecode(b"d\xe9p\xf4t")
        (tmp_path / "plain").rename(folder)  # onnx cannot write into such a folder itself
        model = folder / "model.onnx"

        assert main(["doctor", str(model), "--device", "cpu"]) == 2
        one_line(
            capsys.readouterr().err,
            "external data of '" + files.display_path(model) + "' cannot be found",
        )
