"""Scopes under threads and asyncio tasks: every call sees its own scope and no other.

Each worker (thread or task) enters its own ``device_policy`` with a mode and
a fallback device no other worker uses, waits until all the others have
entered theirs, and then calls the core and guarded factories many times,
checking every single result against its own scope. Rendezvous points along
the way keep the scopes overlapping in time.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import pytest
import torch

from onnx_device_guard import (
    EnvironmentConfigurationError,
    align_device_with_onnx_session,
    aligned_device,
    device_guard,
    device_policy,
)
from onnx_device_guard._policy import current_policy

from .helpers import no_scope_left
from .logs import recorded_logs
from .sessions import CPU as CPU_NAME
from .sessions import CUDA as CUDA_NAME
from .sessions import GPUSession, cpu_session, cuda_session

THREADS = 8
ROUNDS_PER_THREAD = 300
RENDEZVOUS_EVERY = 25
TASKS = 200
ROUNDS_PER_TASK = 10

Mode = Literal["fail", "fallback"]

CPU_SESSION = cpu_session()
SESSION_ON_GPU_3 = cuda_session(3)
SESSION_ON_GPU_0 = cuda_session(0)


@dataclass
class Model:
    """What the factories return."""

    session: Any
    device: Any


@device_guard
def load(session: Any, device: str) -> Model:
    """A guarded factory that uses the policy in force when it is called."""
    return Model(session, device)


@device_guard(resolution_mode="fallback")
def load_lenient(session: Any, device: str) -> Model:
    """A guarded factory whose own option overrides the scope's mode, not its fallback device."""
    return Model(session, device)


@device_guard
async def load_async(session: Any, device: str) -> Model:
    """An async guarded factory that lets other tasks run before it returns."""
    await asyncio.sleep(0)
    return Model(session, device)


strict = device_policy(resolution_mode="fail")
"""One instance, shared by every worker as a decorator at once."""


@strict
def align_strictly(session: Any, device: str) -> torch.device:
    return align_device_with_onnx_session(session, device)


@strict
async def align_strictly_async(session: Any, device: str) -> torch.device:
    await asyncio.sleep(0)
    return align_device_with_onnx_session(session, device)


@dataclass(frozen=True)
class Scope:
    """One worker's policy: a mode and a fallback device that no other worker uses."""

    resolution_mode: Mode
    fallback_device: torch.device
    warn: bool

    @classmethod
    def for_worker(cls, number: int) -> Scope:
        # Distinct fallbacks per worker; not CUDA ones, which a CPU session cannot read either.
        device_type = ("mps", "xpu", "meta", "hpu")[number % 4]
        return cls(
            resolution_mode="fail" if number % 3 == 0 else "fallback",
            fallback_device=torch.device(device_type, number // 4),
            warn=number % 5 == 0,
        )

    def enter(self) -> device_policy:
        return device_policy(
            resolution_mode=self.resolution_mode,
            fallback_device=self.fallback_device,
            warn=self.warn,
        )

    def check_in_force(self) -> None:
        policy = current_policy()
        assert (policy.resolution_mode, policy.fallback_device, policy.warn) == (
            self.resolution_mode,
            self.fallback_device,
            self.warn,
        )

    def check_model(self, make: Callable[[], Model], aligned: str | None = None) -> None:
        """The factory's model falls back as this scope says, or the call fails.

        ``aligned`` is the device a fallback moves to; by default this scope's
        fallback device, as for a CPU-only session.
        """
        if self.resolution_mode == "fail":
            with pytest.raises(EnvironmentConfigurationError):
                make()
            return
        assert make().device == (str(self.fallback_device) if aligned is None else aligned)

    async def check_model_async(
        self, make: Callable[[], Awaitable[Model]], aligned: str | None = None
    ) -> None:
        """As :meth:`check_model`, for an async factory."""
        if self.resolution_mode == "fail":
            with pytest.raises(EnvironmentConfigurationError):
                await make()
            return
        model = await make()
        assert model.device == (str(self.fallback_device) if aligned is None else aligned)

    def check_core(self) -> None:
        """The core sees this scope's mode and fallback device, and explicit options win."""
        if self.resolution_mode == "fail":
            with pytest.raises(EnvironmentConfigurationError):
                align_device_with_onnx_session(CPU_SESSION, "cuda:0")
            with pytest.raises(EnvironmentConfigurationError):
                align_device_with_onnx_session(SESSION_ON_GPU_3, "cuda:0")
        else:
            assert align_device_with_onnx_session(CPU_SESSION, "cuda:0") == self.fallback_device
            assert align_device_with_onnx_session(SESSION_ON_GPU_3, "cuda:0") == torch.device(
                "cuda", 3
            )
        assert (
            align_device_with_onnx_session(CPU_SESSION, "cuda:0", "fallback")
            == self.fallback_device
        )
        assert align_device_with_onnx_session(CPU_SESSION, "cuda:0", "fallback", "cpu") == (
            torch.device("cpu")
        )
        assert align_device_with_onnx_session(SESSION_ON_GPU_0, "cuda:0") == torch.device("cuda", 0)


def default_policy_fields() -> tuple[object, ...]:
    policy = current_policy()
    return (policy.resolution_mode, policy.fallback_device, policy.warn, no_scope_left())


DEFAULTS = ("fallback", torch.device("cpu"), True, True)


def fallback_records(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    """The fallback records among `records`, leaving out one-off notes (such as a
    session that cannot be followed), which go to whichever thread meets them first."""
    return [record for record in records if getattr(record, "odg_event", None) == "fallback"]


@pytest.fixture
def log_records() -> Iterator[list[logging.LogRecord]]:
    """The library's log records at every level, kept out of pytest's log capture."""
    with recorded_logs() as records:
        yield records


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Make the interpreter switch threads every 10 us instead of every 5 ms.

    The threads then interleave inside single calls, not only at the barriers.
    """
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


class TestThreads:
    """Scopes in threads: no thread inherits or sees another's scope."""

    @pytest.mark.usefixtures("frequent_thread_switches")
    def test_every_call_sees_its_own_scope(self, log_records: list[logging.LogRecord]) -> None:
        """8 threads, each in its own overlapping scope, check thousands of calls each."""
        rendezvous = threading.Barrier(THREADS, timeout=60)
        scopes = [Scope.for_worker(number) for number in range(THREADS)]
        scope_of_thread: dict[int, Scope] = {}

        def work(scope: Scope) -> None:
            try:
                assert default_policy_fields() == DEFAULTS, "a new thread starts with the defaults"
                scope_of_thread[threading.get_ident()] = scope
                with scope.enter():
                    rendezvous.wait()  # every thread is inside its scope from here on
                    for round_number in range(ROUNDS_PER_THREAD):
                        scope.check_in_force()
                        scope.check_core()
                        scope.check_model(lambda: load(CPU_SESSION, "cuda:0"))
                        lenient = load_lenient(CPU_SESSION, "cuda:0")
                        assert lenient.device == str(scope.fallback_device)
                        with pytest.raises(EnvironmentConfigurationError):
                            align_strictly(CPU_SESSION, "cuda:0")
                        assert align_strictly(SESSION_ON_GPU_0, "cuda") == torch.device("cuda")
                        with aligned_device(
                            CPU_SESSION,
                            "cuda:1",
                            resolution_mode="fallback",
                            fallback_device="meta",
                        ) as device:
                            assert device == torch.device("meta")
                            assert current_policy().fallback_device == torch.device("meta")
                        scope.check_in_force()
                        if round_number % RENDEZVOUS_EVERY == 0:
                            rendezvous.wait()
                    rendezvous.wait()  # no thread leaves its scope before all have finished
                assert default_policy_fields() == DEFAULTS
            except BaseException:
                rendezvous.abort()  # the others stop waiting; this thread's error is reported
                raise

        with (
            device_policy(resolution_mode="fail", fallback_device="meta", warn=False),
            ThreadPoolExecutor(THREADS) as pool,
        ):
            futures = [pool.submit(work, scope) for scope in scopes]
            errors = [error for future in futures if (error := future.exception()) is not None]
            # Report the failure itself, not the broken barrier it left the others with.
            errors.sort(key=lambda error: isinstance(error, threading.BrokenBarrierError))
            if errors:
                raise errors[0]
            assert current_policy().resolution_mode == "fail", "the threads left ours alone"
        assert default_policy_fields() == DEFAULTS

        # Each round falls back 7 times in "fallback" mode and 4 in "fail" mode (explicit
        # options), and every fallback logs once, at the level of its own thread's scope.
        assert len(scope_of_thread) == THREADS
        logged: dict[int, Counter[int]] = {ident: Counter() for ident in scope_of_thread}
        for record in fallback_records(log_records):
            logged[record.thread or 0][record.levelno] += 1
        for ident, scope in scope_of_thread.items():
            level = logging.WARNING if scope.warn else logging.DEBUG
            per_round = 7 if scope.resolution_mode == "fallback" else 4
            assert logged[ident] == {level: ROUNDS_PER_THREAD * per_round}

    def test_a_thread_started_inside_a_scope_gets_the_defaults(self) -> None:
        """threading.Thread does not copy the context: the new thread runs with the defaults."""
        seen: list[tuple[object, ...]] = []
        with device_policy(resolution_mode="fail", fallback_device="meta", warn=False):
            thread = threading.Thread(target=lambda: seen.append(default_policy_fields()))
            thread.start()
            thread.join()
        assert seen == [DEFAULTS]

    def test_a_context_copied_into_a_thread_carries_the_scope(self) -> None:
        """contextvars.copy_context().run() is how a thread opts in to the caller's scope."""
        seen: list[tuple[object, ...]] = []
        with device_policy(resolution_mode="fail", fallback_device="meta", warn=False):
            context = contextvars.copy_context()
        thread = threading.Thread(
            target=context.run, args=(lambda: seen.append(default_policy_fields()[:3]),)
        )
        thread.start()
        thread.join()
        assert seen == [("fail", torch.device("meta"), False)]
        assert default_policy_fields() == DEFAULTS


class Rendezvous:
    """A one-shot barrier for asyncio tasks (asyncio.Barrier is Python 3.11+)."""

    def __init__(self, parties: int) -> None:
        self._waiting = parties
        self._everyone_here = asyncio.Event()

    async def wait(self) -> None:
        self._waiting -= 1
        if self._waiting == 0:
            self._everyone_here.set()
        await asyncio.wait_for(self._everyone_here.wait(), timeout=60)


class TestAsyncioTasks:
    """Scopes in asyncio tasks: a task copies the scope it was created in, and keeps its own."""

    def test_every_call_sees_its_own_scope(self, log_records: list[logging.LogRecord]) -> None:
        """200 tasks, each in its own overlapping scope, interleave at every await."""
        scopes = [Scope.for_worker(number) for number in range(TASKS)]
        assert len({scope.fallback_device for scope in scopes}) == TASKS

        async def work(scope: Scope, entered: Rendezvous, finished: Rendezvous) -> int:
            assert default_policy_fields() == DEFAULTS
            rounds = 0
            with scope.enter():
                await entered.wait()  # every task is inside its scope from here on
                for _ in range(ROUNDS_PER_TASK):
                    scope.check_in_force()
                    scope.check_core()
                    scope.check_model(lambda: load(CPU_SESSION, "cuda:0"))
                    await scope.check_model_async(lambda: load_async(CPU_SESSION, "cuda:0"))
                    scope.check_in_force()
                    await scope.check_model_async(
                        lambda: load_async(SESSION_ON_GPU_3, "cuda:0"), aligned="cuda:3"
                    )
                    with pytest.raises(EnvironmentConfigurationError):
                        await align_strictly_async(CPU_SESSION, "cuda:0")
                    scope.check_in_force()
                    assert await align_strictly_async(SESSION_ON_GPU_0, "cuda:0") == (
                        torch.device("cuda", 0)
                    )
                    scope.check_in_force()
                    await asyncio.sleep(0)
                    rounds += 1
                await finished.wait()  # no task leaves its scope before all have finished
                scope.check_in_force()
            assert default_policy_fields() == DEFAULTS
            return rounds

        async def main() -> list[int]:
            entered, finished = Rendezvous(TASKS), Rendezvous(TASKS)
            tasks = [asyncio.create_task(work(scope, entered, finished)) for scope in scopes]
            return await asyncio.gather(*tasks)

        assert asyncio.run(main()) == [ROUNDS_PER_TASK] * TASKS
        assert default_policy_fields() == DEFAULTS

        # Each round falls back 7 times in "fallback" mode and 2 in "fail" mode (explicit
        # options), and every fallback logs at the level of its own task's scope.
        expected: Counter[int] = Counter()
        for scope in scopes:
            level = logging.WARNING if scope.warn else logging.DEBUG
            expected[level] += ROUNDS_PER_TASK * (7 if scope.resolution_mode == "fallback" else 2)
        assert Counter(record.levelno for record in fallback_records(log_records)) == expected

    def test_a_task_keeps_the_scope_it_was_created_in(self) -> None:
        """create_task copies the scope; leaving it in the creator does not end it in the task."""

        async def child(release: asyncio.Event) -> tuple[object, ...]:
            await release.wait()  # the creator has left its scope by now
            seen = default_policy_fields()[:3]
            with device_policy(fallback_device="cuda:5"):
                assert current_policy().fallback_device == torch.device("cuda", 5)
            return seen

        async def main() -> None:
            release = asyncio.Event()
            with device_policy(resolution_mode="fail", fallback_device="meta", warn=False):
                inside = asyncio.create_task(child(release))
            outside = asyncio.create_task(child(release))
            assert default_policy_fields() == DEFAULTS
            release.set()
            assert await inside == ("fail", torch.device("meta"), False)
            assert await outside == DEFAULTS[:3]
            assert default_policy_fields() == DEFAULTS, "the tasks' scopes stayed in the tasks"

        asyncio.run(main())

    def test_to_thread_carries_the_scope_and_run_in_executor_does_not(self) -> None:
        """asyncio.to_thread copies the task's context; a bare executor thread does not."""

        async def main() -> None:
            loop = asyncio.get_running_loop()
            with device_policy(resolution_mode="fail", fallback_device="meta", warn=False):
                copied = await asyncio.to_thread(default_policy_fields)
                bare = await loop.run_in_executor(None, default_policy_fields)
                model = await asyncio.to_thread(load_lenient, CPU_SESSION, "cuda:0")
            assert copied[:3] == ("fail", torch.device("meta"), False)
            assert bare == DEFAULTS
            assert model.device == "meta"

        asyncio.run(main())


class TestReentrancy:
    """One device_policy instance entered recursively: each level unwinds to its own."""

    def test_recursive_decorated_function(self) -> None:
        """A recursive function under one policy instance sees it at every depth."""
        shared = device_policy(fallback_device="meta")
        depths: list[tuple[int, str, str]] = []

        @shared
        def descend(depth: int) -> None:
            policy = current_policy()
            depths.append((depth, str(policy.resolution_mode), str(policy.fallback_device)))
            if depth < 5:
                with device_policy(resolution_mode="fail" if depth % 2 else "fallback"):
                    descend(depth + 1)
            assert current_policy() is policy, "each level is restored on the way back"

        with device_policy(resolution_mode="fail"):
            descend(0)
            assert current_policy().fallback_device == torch.device("cpu")
        assert depths == [
            (0, "fail", "meta"),
            (1, "fallback", "meta"),
            (2, "fail", "meta"),
            (3, "fallback", "meta"),
            (4, "fail", "meta"),
            (5, "fallback", "meta"),
        ]
        assert default_policy_fields() == DEFAULTS


class TestProviderChangesInAnotherThread:
    """A session another thread is changing is read once it is rebuilt, and its change wins."""

    def test_a_session_being_rebuilt_is_read_once_rebuilt(self) -> None:
        """onnxruntime's `set_providers` reads `None` providers meanwhile: the load waits.

        Before: the load raised ModelInputError ("must return a list ... got NoneType None").
        """
        rebuilding, resume = threading.Event(), threading.Event()

        class SlowReset(GPUSession):
            def _create_inference_session(self, *args: Any, **kwargs: Any) -> None:
                if rebuilding.is_set():  # the set_providers below: held half-way
                    resume.wait(5)
                super()._create_inference_session(*args, **kwargs)

        session = SlowReset(device_id=1)

        @device_guard(warn=False)
        def load() -> Model:
            return Model(session, "cuda:1")

        kept = load()  # the hooks are in place before the change starts (it follows its session)
        rebuilding.set()
        changer = threading.Thread(target=session.set_providers, args=([CPU_NAME],))
        changer.start()
        while session.get_providers() is not None:  # until it is half-way
            threading.Event().wait(0.001)
        threading.Timer(0.2, resume.set).start()
        assert load().device == "cpu"  # read once rebuilt: the CPU only
        changer.join()
        assert kept.device == "cpu"

    def test_a_change_during_the_loads_write_is_not_undone_by_it(self) -> None:
        """A change whose own alignment ran before the load wrote its stale device: the load
        looks again. Before: the model kept the load's 'cuda:0' with its session on GPU 1."""
        session = GPUSession(device_id=0)

        class Slow:
            def __init__(self) -> None:
                self.session, self._where = session, torch.device("cuda:1")

            @property
            def device(self) -> torch.device:
                return self._where

            @device.setter
            def device(self, value: torch.device) -> None:
                if value == torch.device("cuda:0"):  # the load's write: another thread changes
                    mover = threading.Thread(
                        target=session.set_providers,
                        args=([CUDA_NAME, CPU_NAME], [{"device_id": 1}, {}]),
                    )
                    mover.start()
                    mover.join()
                self._where = value

        model = device_guard(warn=False)(Slow)()
        assert model.device == torch.device("cuda:1")
