"""dispatch.run_handler / process: every way a handler can end, without a database."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_arcature import Permanent, RetryPolicy, job, registry
from django_arcature.context import JobContext, current_job
from django_arcature.core.decide import (
    HandlerError,
    Malformed,
    Panic,
    Succeeded,
    Timeout,
    Unknown,
)
from django_arcature.db import ClaimedJob
from django_arcature.worker.dispatch import WorkerShutdown, process, run_handler

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NO_JITTER = RetryPolicy(base_seconds=10, factor=2, jitter=0)


@pytest.fixture
def register() -> Iterator[Callable[..., str]]:
    names: list[str] = []

    def add(func: Callable[..., Any], **options: Any) -> str:
        name = f"unit.dispatch.{func.__name__}.{uuid.uuid4().hex[:8]}"
        job(name=name, **options)(func)  # the public way to register a handler
        names.append(name)
        return name

    yield add
    for name in names:
        registry.unregister(name)


def claimed(
    name: str, *args: Any, attempts: int = 1, max_attempts: int = 3, **kw: Any
) -> ClaimedJob:
    return ClaimedJob(
        id=uuid.uuid4(),
        task_name=name,
        queue="default",
        priority=0,
        payload={"args": list(args), "kwargs": kw},
        attempts=attempts,
        max_attempts=max_attempts,
        claim_token=uuid.uuid4(),
        lease_seconds=30,
    )


def test_sync_handler_result_is_returned(register: Callable[..., str]) -> None:
    def add(a: int, b: int) -> int:
        return a + b

    assert run_handler(claimed(register(add), 2, 3), timeout=None) == Succeeded(5)


def test_unknown_task() -> None:
    outcome = run_handler(claimed("no.such.task"), timeout=None)
    assert isinstance(outcome, Unknown)
    assert outcome.task_name == "no.such.task"
    # The registry's explanation travels with it, to become the dead job's message.
    assert outcome.detail.startswith("No job handler is registered under 'no.such.task'.")


def test_payload_that_does_not_bind_is_malformed(register: Callable[..., str]) -> None:
    def add(a: int, b: int) -> int:
        return a + b

    outcome = run_handler(claimed(register(add), "x", 3), timeout=None)
    assert isinstance(outcome, Malformed)
    assert "'a'" in outcome.reason


def test_payload_of_wrong_shape_is_malformed(register: Callable[..., str]) -> None:
    def noop() -> None:
        return None

    job = claimed(register(noop))
    bad = ClaimedJob(**{**job.__dict__, "payload": ["not", "an", "object"]})
    assert isinstance(run_handler(bad, timeout=None), Malformed)


def test_exception_is_a_handler_error_with_traceback(register: Callable[..., str]) -> None:
    def boom() -> None:
        raise ValueError("bad input")

    outcome = run_handler(claimed(register(boom)), timeout=None)
    assert isinstance(outcome, HandlerError)
    assert outcome.message == "ValueError: bad input"
    assert not outcome.permanent
    assert "raise ValueError" in outcome.traceback
    assert outcome.exception_type == "builtins.ValueError"


def test_permanent_is_flagged(register: Callable[..., str]) -> None:
    def give_up() -> None:
        raise Permanent("user deleted")

    outcome = run_handler(claimed(register(give_up)), timeout=None)
    assert isinstance(outcome, HandlerError)
    assert outcome.permanent


def test_base_exception_is_a_panic(register: Callable[..., str]) -> None:
    def leave() -> None:
        raise SystemExit(3)

    outcome = run_handler(claimed(register(leave)), timeout=None)
    assert isinstance(outcome, Panic)
    assert outcome.exception_type == "builtins.SystemExit"


@pytest.mark.parametrize("exc", [KeyboardInterrupt, WorkerShutdown, GeneratorExit])
def test_a_base_exception_from_the_handler_is_its_panic(
    register: Callable[..., str], exc: type[BaseException]
) -> None:
    """Handler code raising these ends its attempt; only a signal to the process stops a worker."""

    def stop() -> None:
        raise exc()

    outcome = run_handler(claimed(register(stop)), timeout=None)
    assert isinstance(outcome, Panic)
    assert outcome.exception_type.endswith(exc.__name__)


def test_non_json_return_is_a_permanent_error_saying_what_to_return(
    register: Callable[..., str],
) -> None:
    def returns_set() -> set[int]:
        return {1, 2}

    outcome = run_handler(claimed(register(returns_set)), timeout=None)
    assert isinstance(outcome, HandlerError)
    assert outcome.permanent
    assert "cannot be stored" in outcome.message
    assert "return None, str, int" in outcome.message


def test_async_handler_runs(register: Callable[..., str]) -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return x * 2

    assert run_handler(claimed(register(double), 21), timeout=None) == Succeeded(42)


def test_async_handler_on_a_loop_in_another_thread(register: Callable[..., str]) -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:

        async def where() -> bool:
            return asyncio.get_running_loop() is loop

        assert run_handler(claimed(register(where)), timeout=None, loop=loop) == Succeeded(True)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def test_async_timeout_cancels_the_coroutine(register: Callable[..., str]) -> None:
    seen: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    outcome = run_handler(claimed(register(slow)), timeout=0.05)
    assert outcome == Timeout(0.05)
    assert seen == ["cancelled"]


def test_async_handlers_own_timeout_error_is_a_handler_error(
    register: Callable[..., str],
) -> None:
    async def raises_timeout() -> None:
        raise TimeoutError("upstream timed out")

    outcome = run_handler(claimed(register(raises_timeout)), timeout=5)
    assert isinstance(outcome, HandlerError)
    assert "upstream timed out" in outcome.message


def test_sync_timeout_returns_and_tells_the_handler(register: Callable[..., str]) -> None:
    stopped = threading.Event()

    def slow() -> None:
        job = current_job()
        assert job is not None
        job.wait(10)  # wakes as soon as the worker gives up on the attempt
        stopped.set()

    started = time.monotonic()
    outcome = run_handler(claimed(register(slow)), timeout=0.1)
    assert outcome == Timeout(0.1)
    assert time.monotonic() - started < 5
    assert stopped.wait(5)


def test_current_job_describes_the_running_job(register: Callable[..., str]) -> None:
    seen: dict[str, Any] = {}

    def look() -> None:
        job = current_job()
        assert job is not None
        seen.update(id=job.job_id, attempt=job.attempt, cancelled=job.cancelled)

    job = claimed(register(look), attempts=2)
    assert run_handler(job, timeout=None) == Succeeded(None)
    assert seen == {"id": job.id, "attempt": 2, "cancelled": False}
    assert current_job() is None


def test_cancel_flag_reaches_the_handler(register: Callable[..., str]) -> None:
    release = threading.Event()
    seen: list[bool] = []

    def watch() -> None:
        release.wait(5)
        job = current_job()
        assert job is not None
        seen.append(job.cancelled)

    job = claimed(register(watch))
    context = JobContext(job.id, job.task_name, job.queue, 1, 3)
    result: list[Any] = []
    thread = threading.Thread(
        target=lambda: result.append(run_handler(job, timeout=None, context=context))
    )
    thread.start()
    context.cancel("lost")
    release.set()
    thread.join(5)
    assert seen == [True]
    assert context.cancel_reason == "lost"


# --- process ------------------------------------------------------------------------


def test_process_success_appends_to_the_attempt_log(register: Callable[..., str]) -> None:
    def noop() -> str:
        return "done"

    job = claimed(register(noop))
    completion = process(job, worker_id="w1", now=NOW)
    assert completion.kind == "succeeded"
    assert completion.result == "done"
    assert completion.job_id == job.id
    assert completion.claim_token == job.claim_token
    assert completion.attempt_log == [{"worker": "w1", "error": None}]


def test_process_retry_uses_the_policy(register: Callable[..., str]) -> None:
    def boom() -> None:
        raise RuntimeError("flaky")

    job = claimed(register(boom), attempts=2, max_attempts=3)
    completion = process(job, worker_id="w1", now=NOW, policy=NO_JITTER)
    assert completion.kind == "retry"
    assert completion.available_at == NOW + timedelta(seconds=20)
    assert completion.message == "RuntimeError: flaky"
    assert completion.attempt_log is not None
    error = completion.attempt_log[-1]["error"]
    assert error["exception_class_path"] == "builtins.RuntimeError"
    assert "flaky" in error["traceback"]


def test_process_uses_the_jobs_own_retry_policy(register: Callable[..., str]) -> None:
    def boom() -> None:
        raise RuntimeError("flaky")

    name = register(boom, retry=RetryPolicy(base_seconds=1, jitter=0))
    completion = process(claimed(name), worker_id="w", now=NOW)
    assert completion.available_at == NOW + timedelta(seconds=1)


def test_process_exhausted_is_dead(register: Callable[..., str]) -> None:
    def boom() -> None:
        raise RuntimeError("still broken")

    completion = process(claimed(register(boom), attempts=3, max_attempts=3), worker_id="w")
    assert (completion.kind, completion.error_kind) == ("dead", "exhausted")


def test_process_unknown_and_malformed_are_dead() -> None:
    unknown = process(claimed("nowhere.task"), worker_id="w")
    assert (unknown.kind, unknown.error_kind) == ("dead", "unknown")
    assert unknown.attempt_log is not None
    assert unknown.attempt_log[-1]["error"]["exception_class_path"].endswith("UnknownTask")


def test_process_timeout_from_the_jobs_declaration(register: Callable[..., str]) -> None:
    def slow() -> None:
        job = current_job()
        assert job is not None
        job.wait(5)

    name = register(slow, timeout=0.05)
    completion = process(claimed(name, attempts=1, max_attempts=1), worker_id="w")
    assert (completion.kind, completion.error_kind) == ("dead", "timeout")


def test_process_keeps_earlier_attempts(register: Callable[..., str]) -> None:
    def noop() -> None:
        return None

    job = claimed(register(noop), attempts=2)
    earlier = [{"worker": "w0", "error": {"exception_class_path": "x.Y", "traceback": "t"}}]
    job = ClaimedJob(**{**job.__dict__, "attempt_log": earlier})
    completion = process(job, worker_id="w1")
    assert completion.attempt_log == [*earlier, {"worker": "w1", "error": None}]
