"""The handler faults again, for tasks enqueued through ``django.tasks`` (ArcatureBackend).

The backend runs the task inside the same worker thread and under the same
watchdog, so a BaseException is this attempt's ``panic`` (the TaskResult is
FAILED with that exception's class) and a task that hangs or blocks its event
loop is timed out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from django_arcature.models import Job, JobStatus
from django_arcature.tasks.compat import TaskResultStatus
from tests.faults.handler_support import outcome, run_worker
from tests.testapp import handler_fault_jobs, handler_fault_tasks
from tests.testapp.handler_fault_jobs import BASE_EXCEPTION_KINDS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.heavy]

EXPECTED_TYPE = {
    "KeyboardInterrupt": "builtins.KeyboardInterrupt",
    "SystemExit": "builtins.SystemExit",
    "GeneratorExit": "builtins.GeneratorExit",
    "custom": "tests.testapp.handler_fault_jobs.HandlerBaseException",
}


@pytest.fixture(autouse=True)
def release_blocked_handlers() -> Iterator[None]:
    handler_fault_jobs.RELEASE.clear()
    yield
    handler_fault_jobs.RELEASE.set()


def test_a_base_exception_in_a_task_fails_that_task_and_nothing_else() -> None:
    results = [
        (kind, task.enqueue(kind))
        for task in (handler_fault_tasks.raise_base, handler_fault_tasks.araise_base)
        for kind in BASE_EXCEPTION_KINDS
    ]
    after = Job.objects.enqueue("tests.add", args=[20, 1]).pk
    worker, status = run_worker(concurrency=1)
    assert status == 0
    for kind, result in results:
        row = Job.objects.get(pk=uuid.UUID(result.id))
        assert outcome(row) == (JobStatus.DEAD, "panic", 1), kind
        fetched = result.task.get_result(result.id)
        assert fetched.status == TaskResultStatus.FAILED
        assert [error.exception_class_path for error in fetched.errors] == [EXPECTED_TYPE[kind]]
    assert Job.objects.get(pk=after).result == 21
    assert (worker.stats.dead, worker.stats.succeeded) == (len(results), 1)


@pytest.mark.parametrize("name", ["block_loop", "hang"])
def test_a_task_that_blocks_is_timed_out_and_the_next_job_runs(name: str) -> None:
    blocked = getattr(handler_fault_tasks, name).enqueue(60)
    after = Job.objects.enqueue("tests.add", args=[1, 1]).pk
    _, status = run_worker(concurrency=1)
    assert status == 0
    row = Job.objects.get(pk=uuid.UUID(blocked.id))
    assert outcome(row) == (JobStatus.DEAD, "timeout", 1)
    fetched = blocked.task.get_result(blocked.id)
    assert fetched.status == TaskResultStatus.FAILED
    assert [error.exception_class_path for error in fetched.errors] == ["builtins.TimeoutError"]
    assert Job.objects.get(pk=after).result == 2
