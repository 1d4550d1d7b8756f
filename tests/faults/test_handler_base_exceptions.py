"""Handler code that raises a BaseException ends its own attempt as ``dead`` ``panic``.

``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit`` or a BaseException of the
handler's own must never kill the thread that ran it (the job would stay
``running``, heartbeated forever) nor stop the worker: only a signal sent to the
worker process does that. Each case is run through ``run_handler`` (no database),
an in-process ``Worker`` and a real ``arcature_worker`` process, sync and async,
with and without a timeout being watched.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

from django_arcature.core.decide import Panic
from django_arcature.db import ClaimedJob
from django_arcature.models import Job, JobStatus
from django_arcature.worker.dispatch import run_handler
from tests.concurrency import conftest as process_fixtures
from tests.concurrency.conftest import WorkerProcess
from tests.faults.handler_support import outcome, rows, run_worker
from tests.testapp.handler_fault_jobs import BASE_EXCEPTION_KINDS

# The worker-process fixtures of tests/concurrency, used here too.
events = process_fixtures.events
start_worker = process_fixtures.start_worker

HANDLERS = (
    "tests.faults.raise_base",
    "tests.faults.araise_base",
    "tests.faults.raise_base_timed",
    "tests.faults.araise_base_timed",
)

EXPECTED_TYPE = {
    "KeyboardInterrupt": "builtins.KeyboardInterrupt",
    "SystemExit": "builtins.SystemExit",
    "GeneratorExit": "builtins.GeneratorExit",
    "custom": "tests.testapp.handler_fault_jobs.HandlerBaseException",
}


def claimed(task_name: str, *args: object) -> ClaimedJob:
    return ClaimedJob(
        id=uuid.uuid4(),
        task_name=task_name,
        queue="default",
        priority=0,
        payload={"args": list(args), "kwargs": {}},
        attempts=1,
        max_attempts=3,
        claim_token=uuid.uuid4(),
        lease_seconds=30,
    )


@pytest.mark.parametrize("kind", BASE_EXCEPTION_KINDS)
@pytest.mark.parametrize("task_name", HANDLERS)
@pytest.mark.parametrize("timeout", [None, 10.0])
def test_run_handler_turns_every_base_exception_into_a_panic(
    task_name: str, kind: str, timeout: float | None
) -> None:
    outcome = run_handler(claimed(task_name, kind), timeout=timeout)
    assert isinstance(outcome, Panic), outcome
    assert outcome.exception_type == EXPECTED_TYPE[kind]


@pytest.mark.parametrize("kind", BASE_EXCEPTION_KINDS)
def test_run_handler_inside_a_running_loop_is_a_panic_too(kind: str) -> None:
    """An async test calling the dispatcher: the attempt runs on a loop of its own."""

    async def call() -> object:
        return run_handler(claimed("tests.faults.araise_base", kind), timeout=None)

    outcome = asyncio.run(call())
    assert isinstance(outcome, Panic), outcome


def _enqueue_every_case() -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """Every (handler, kind) first, by priority, then ordinary jobs after them."""
    bad = [
        Job.objects.enqueue(name, args=[kind], priority=10).pk
        for name in HANDLERS
        for kind in BASE_EXCEPTION_KINDS
    ]
    good = [Job.objects.enqueue("tests.add", args=[i, 1]).pk for i in range(8)]
    good += [Job.objects.enqueue("tests.faults.async_value", args=[i]).pk for i in range(4)]
    return bad, good


def _assert_every_case_panicked(bad: list[uuid.UUID], good: list[uuid.UUID]) -> None:
    found = rows(bad + good)
    for job_id in bad:
        row = found[job_id]
        assert outcome(row) == (JobStatus.DEAD, "panic", 1), (row.task_name, row.payload)
        kind = row.payload["args"][0]
        assert row.claim_token is None
        assert row.attempt_log[-1]["error"]["exception_class_path"] == EXPECTED_TYPE[kind]
    assert [outcome(found[job_id]) for job_id in good] == [(JobStatus.SUCCEEDED, "", 1)] * len(good)
    assert [found[job_id].result for job_id in good] == [*range(1, 9), *range(4)]


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("concurrency", [1, 3])
def test_in_process_worker_survives_every_base_exception(concurrency: int) -> None:
    """With one handler thread, the ordinary jobs run only if that thread survived."""
    bad, good = _enqueue_every_case()
    worker, status = run_worker(concurrency=concurrency, batch=5, timeout=60)
    assert status == 0
    _assert_every_case_panicked(bad, good)
    assert worker.stats.dead == len(bad)
    assert worker.stats.succeeded == len(good)
    assert worker.stats.lost == 0


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_worker_process_survives_every_base_exception(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    bad, good = _enqueue_every_case()
    worker = start_worker("--burst", "--concurrency", "1", "--batch", "5")
    assert worker.wait(90) == 0, worker.log
    _assert_every_case_panicked(bad, good)
    total = len(bad) + len(good)
    assert f"{total} processed: {len(good)} succeeded, 0 to retry, {len(bad)} dead" in worker.log
