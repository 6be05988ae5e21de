"""``watch_sessions`` in every Ray and Dask worker, turned on with one line (issue 23).

The one-liners of docs/distributed.md, in real worker processes:

* Ray: ``ray.init(runtime_env={"worker_process_setup_hook":
  "onnx_device_guard.watch_sessions"})``, which each worker process of the
  job (tasks, actors, workers started for a task's own ``runtime_env``) runs
  before its first task;
* Dask: ``client.register_worker_callbacks(onnx_device_guard.watch_sessions)``,
  which runs it on every worker, present and future (Dask calls it with no
  argument, as it takes no ``dask_worker``); or Dask's preload setting, for
  workers started elsewhere;
* both: ``onnx-device-guard run -- python driver.py``, whose ``PYTHONPATH``
  the workers inherit.

Each worker here opens a real session of the tiny model, asked for CUDA
first: the CPU build of onnxruntime runs it on CPU only, so the watch
reports a fallback, or raises in ``"fail"`` mode. The clusters start once
for this module, with two workers at most, and are shut down at its end.
Collected only when named (see ``conftest.py``); skipped where ray or
distributed is not installed.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import onnx_device_guard
from onnx_device_guard import DeviceFallbackWarning, EnvironmentConfigurationError

from . import watch_tasks as wt
from .test_distributed import local_ray, wait_for

# As in test_distributed.py: without it, Ray holds back a line that another
# worker printed in the last 5 s. Ray reads it when it is imported.
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
ray = pytest.importorskip("ray", reason="the distributed nox session installs ray")
distributed = pytest.importorskip("distributed", reason="the distributed nox session installs it")
dask = pytest.importorskip("dask", reason="the distributed nox session installs it")

ROOT = Path(__file__).resolve().parents[2]
HOOK = "onnx_device_guard.watch_sessions"
"""The import path Ray's ``worker_process_setup_hook`` takes (the documented one-liner)."""
PRELOAD = "import onnx_device_guard; onnx_device_guard.watch_sessions()"
"""Dask's preload also takes the text of a script (it holds a space)."""
STRICT = {"ONNX_DEVICE_GUARD_RESOLUTION_MODE": "fail"}
FALLBACK = f"{DeviceFallbackWarning.__name__}: onnxruntime dropped {wt.CUDA}"
"""How the watch's warning starts, as Python writes it to a worker's stderr."""


def _python_path() -> str:
    return os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)


def unwrap(error: BaseException) -> BaseException:
    """Ray raises ``RayTaskError(Original)``, a subclass of both; the original is its cause."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


def assert_dropped(error: BaseException) -> None:
    """``error`` is the watch's own, as the worker raised it."""
    assert type(error) is EnvironmentConfigurationError
    assert isinstance(error, EnvironmentConfigurationError)
    assert f"onnxruntime dropped {wt.CUDA}" in error.message
    assert error.help_url.endswith("#no-data-transfer-registered")


def assert_fell_back(result: tuple[list[str], list[tuple[str, str]], int]) -> None:
    """What ``session_in_worker`` returns from a watched worker: one fallback, at its line."""
    providers, raised, pid = result
    assert providers == [wt.CPU]
    assert raised.count((DeviceFallbackWarning.__name__, "watch_tasks.py")) == 1
    assert pid != os.getpid()


# ---------------------------------------------------------------- clusters


@pytest.fixture(scope="module")
def ray_watched() -> Iterator[Any]:
    """One local Ray cluster (2 CPUs) whose every worker process runs the one-liner's hook."""
    with local_ray(HOOK) as started:
        yield started


@pytest.fixture(scope="module")
def dask_watched() -> Iterator[tuple[Any, Any]]:
    """A LocalCluster of one worker process, and a client that registered the one-liner."""
    cluster = distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        env={"PYTHONPATH": _python_path()},
    )
    client = distributed.Client(cluster)
    client.register_worker_callbacks(onnx_device_guard.watch_sessions)
    try:
        yield cluster, client
    finally:
        client.close()
        cluster.close()


# ---------------------------------------------------------------- Ray


class TestRayWorkers:
    """``worker_process_setup_hook`` turns the watch on in every worker process of the job."""

    def test_task_worker_reports_a_dropped_provider(self, ray_watched: Any) -> None:
        """A task's session that asked for CUDA and runs on CPU: one fallback warning, there."""
        task = ray_watched.remote(wt.session_in_worker)
        assert_fell_back(ray_watched.get(task.remote(), timeout=120))

    def test_cpu_session_is_no_fallback(self, ray_watched: Any) -> None:
        """A session that asked for the CPU only is left alone."""
        task = ray_watched.remote(wt.session_in_worker)
        providers, raised, _ = ray_watched.get(task.remote((wt.CPU,)), timeout=120)
        assert (providers, raised) == ([wt.CPU], [])

    def test_actor_worker_reports_a_dropped_provider(self, ray_watched: Any) -> None:
        """An actor's process runs the hook too, before its ``__init__``."""
        actor = ray_watched.remote(wt.SessionActor).remote()
        try:
            assert_fell_back(ray_watched.get(actor.session_in_worker.remote(), timeout=120))
        finally:
            ray_watched.kill(actor)

    def test_fail_mode_from_env_var_in_a_task(self, ray_watched: Any) -> None:
        """Fail mode set in a task's own ``runtime_env``: the worker raises, the driver gets it.

        The task's ``env_vars`` join the job's, which hold the hook, so the
        new worker started for them watches as well.
        """
        strict = ray_watched.remote(wt.session_in_worker).options(runtime_env={"env_vars": STRICT})
        with pytest.raises(EnvironmentConfigurationError) as info:
            ray_watched.get(strict.remote(), timeout=120)
        assert_dropped(unwrap(info.value))

    def test_fail_mode_from_env_var_in_an_actor(self, ray_watched: Any) -> None:
        """The same for an actor started with the variable: its method's error reaches us."""
        options = {"runtime_env": {"env_vars": STRICT}}
        actor = ray_watched.remote(wt.SessionActor).options(**options).remote()
        try:
            with pytest.raises(EnvironmentConfigurationError) as info:
                ray_watched.get(actor.session_in_worker.remote(), timeout=120)
        finally:
            ray_watched.kill(actor)
        assert_dropped(unwrap(info.value))


class TestRayFallbacksReachTheDriver:
    """Ray forwards each worker's stderr: the warning shows in the driver's output."""

    def test_task_warning_in_driver_output(
        self, ray_watched: Any, capfd: pytest.CaptureFixture[str]
    ) -> None:
        pid = ray_watched.get(ray_watched.remote(wt.fall_back_in_task).remote(), timeout=120)
        seen = wait_for(capfd, FALLBACK)
        lines = [line for line in seen.splitlines() if FALLBACK in line]
        assert any(f"pid={pid})" in line and "'cuda:0'" in line for line in lines), seen[-3000:]

    def test_actor_warning_in_driver_output(
        self, ray_watched: Any, capfd: pytest.CaptureFixture[str]
    ) -> None:
        actor = ray_watched.remote(wt.SessionActor).remote()
        try:
            pid = ray_watched.get(actor.fall_back.remote(), timeout=120)
        finally:
            ray_watched.kill(actor)
        seen = wait_for(capfd, FALLBACK)
        lines = [line for line in seen.splitlines() if FALLBACK in line]
        assert any(f"(SessionActor pid={pid})" in line for line in lines), seen[-3000:]


# ---------------------------------------------------------------- Dask


class TestDaskWorkers:
    """``register_worker_callbacks(watch_sessions)`` turns the watch on in every worker."""

    def test_worker_reports_a_dropped_provider(self, dask_watched: tuple[Any, Any]) -> None:
        _, client = dask_watched
        assert_fell_back(client.submit(wt.session_in_worker, pure=False).result(timeout=120))

    def test_cpu_session_is_no_fallback(self, dask_watched: tuple[Any, Any]) -> None:
        _, client = dask_watched
        result = client.submit(wt.session_in_worker, (wt.CPU,), pure=False).result(timeout=120)
        assert result[:2] == ([wt.CPU], [])

    def test_future_workers_watch_too(self, dask_watched: tuple[Any, Any]) -> None:
        """A worker that joins after the call runs the callback when it joins."""
        cluster, client = dask_watched
        cluster.scale(2)
        try:
            client.wait_for_workers(2, timeout=120)
            results = client.run(wt.session_in_worker)
            assert len(results) == 2
            for result in results.values():
                assert_fell_back(result)
            assert len({pid for *_, pid in results.values()}) == 2
        finally:
            cluster.scale(1)

    def test_fail_mode_from_env_var(self) -> None:
        """Fail mode in ``LocalCluster(env=...)``: the driver gets the worker's error as itself."""
        with (
            distributed.LocalCluster(
                n_workers=1,
                threads_per_worker=1,
                dashboard_address=":0",
                env={**STRICT, "PYTHONPATH": _python_path()},
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            client.register_worker_callbacks(onnx_device_guard.watch_sessions)
            with pytest.raises(EnvironmentConfigurationError) as info:
                client.submit(wt.session_in_worker, pure=False).result(timeout=120)
        assert_dropped(info.value)

    def test_preload_setting(self) -> None:
        """``distributed.worker.preload`` (``dask worker --preload``) turns it on at start."""
        with (
            dask.config.set({"distributed.worker.preload": [PRELOAD]}),
            distributed.LocalCluster(
                n_workers=1,
                threads_per_worker=1,
                dashboard_address=":0",
                env={"PYTHONPATH": _python_path()},
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            assert_fell_back(client.submit(wt.session_in_worker, pure=False).result(timeout=120))


def ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records of the library's logger (the scheduler logs its plugins beside them)."""
    return [record for record in caplog.records if record.name == "onnx_device_guard"]


class TestDaskFallbacksReachTheDriver:
    def test_forward_logging_brings_the_record(
        self, dask_watched: tuple[Any, Any], caplog: pytest.LogCaptureFixture
    ) -> None:
        """``client.forward_logging("onnx_device_guard")``: the worker's record, fields and all."""
        _, client = dask_watched
        client.forward_logging("onnx_device_guard", level=logging.WARNING)
        try:
            with caplog.at_level(logging.WARNING, logger="onnx_device_guard"):
                future = client.submit(wt.fall_back_in_dask, pure=False)
                assert future.result(timeout=120) == [wt.CPU]
                deadline = time.monotonic() + 15
                while not ours(caplog) and time.monotonic() < deadline:
                    time.sleep(0.1)
        finally:
            client.unforward_logging("onnx_device_guard")
        assert len(ours(caplog)) == 1
        record = ours(caplog)[0]
        fields = vars(record)
        assert record.levelno == logging.WARNING
        assert (fields["odg_event"], fields["odg_reason"]) == ("fallback", "provider_dropped")
        assert Path(fields["odg_model_file"]).name == "tiny.onnx"
        assert list(fields["odg_asked_providers"]) == [wt.CUDA]  # a tuple, once forwarded
        assert fields["worker"] in client.scheduler_info()["workers"]  # Dask adds the worker


# ---------------------------------------------------------------- onnx-device-guard run

DRIVERS = {
    "ray": """
import time

import onnxruntime
import ray

from onnx_device_guard import EnvironmentConfigurationError, example_model


@ray.remote
def open_session():
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    session = onnxruntime.InferenceSession(str(example_model()), providers=providers)
    return session.get_providers()


if __name__ == "__main__":
    ray.init(num_cpus=1, include_dashboard=False)
    try:
        print(ray.get(open_session.remote()))
    except EnvironmentConfigurationError as error:
        print(type(error.cause).__name__, "from the worker")
    time.sleep(2)  # Ray forwards the worker's stderr within about a second
    ray.shutdown()
""",
    "dask": """
import onnxruntime
from distributed import Client, LocalCluster

from onnx_device_guard import EnvironmentConfigurationError, example_model


def open_session():
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    session = onnxruntime.InferenceSession(str(example_model()), providers=providers)
    return session.get_providers()


if __name__ == "__main__":
    with LocalCluster(n_workers=1, dashboard_address=":0") as cluster, Client(cluster) as client:
        try:
            print(client.submit(open_session, pure=False).result())
        except EnvironmentConfigurationError as error:
            print(type(error).__name__, "from the worker")
""",
}
"""Drivers that never call the library: the workers open the sessions, `run` watches them."""


def run_watched(folder: Path, engine: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``onnx-device-guard run [options] -- python driver.py``, as a user would type it."""
    script = folder / f"{engine}_driver.py"
    script.write_text(DRIVERS[engine])
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONNX_DEVICE_GUARD_")}
    env["RAY_ADDRESS"] = "local"  # a cluster of its own, never this process's
    command = [sys.executable, "-m", "onnx_device_guard", "run", *options, "--"]
    return subprocess.run(
        [*command, sys.executable, str(script)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


class TestRunCommand:
    """``onnx-device-guard run -- python driver.py``: workers inherit the watch with PYTHONPATH."""

    @pytest.mark.parametrize("engine", ["ray", "dask"])
    def test_worker_fallback_shows_in_driver_stderr(self, tmp_path: Path, engine: str) -> None:
        """Ray forwards the worker's stderr; a LocalCluster's workers write to the driver's."""
        result = run_watched(tmp_path, engine)
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.strip() == "['CPUExecutionProvider']", result.stderr[-3000:]
        assert FALLBACK in result.stderr, result.stderr[-3000:]

    @pytest.mark.parametrize("engine", ["ray", "dask"])
    def test_strict_raises_in_the_worker(self, tmp_path: Path, engine: str) -> None:
        """``--strict`` sets fail mode for the workers too: the error reaches the driver."""
        result = run_watched(tmp_path, engine, "--strict")
        assert result.returncode == 0, result.stderr[-3000:]
        expected = "EnvironmentConfigurationError from the worker"
        assert result.stdout.strip() == expected, result.stderr[-3000:]
