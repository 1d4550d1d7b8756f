"""django.tasks on real ``manage.py arcature_worker`` processes, including SIGKILL mid-task.

A worker killed while a task runs leaves the row ``running`` with a lease
nobody renews; another worker's sweep takes it back once the lease has
expired on the database's clock, runs it again, and the result says so:
two attempts, the first one lost. (django-tasks-db leaves such a task RUNNING
forever.)
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from django_arcature.models import Job
from django_arcature.tasks.compat import TaskResultStatus, task_backends
from django_arcature.tasks.results import LOST_WORKER_ID
from tests.concurrency.conftest import WorkerProcess, wait_until
from tests.integration import backend_tasks as tasks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

StartWorker = Callable[..., WorkerProcess]


def status_of(result_id: str) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=uuid.UUID(result_id))


def test_burst_worker_runs_django_tasks_to_their_results(start_worker: StartWorker) -> None:
    added = tasks.add.enqueue(2, 3)
    awaited = tasks.async_add.enqueue(40, 2)
    emailed = tasks.send_email.enqueue("ada@example.com")
    refused = tasks.refuses.enqueue("closed account")
    context = tasks.attempt_number.enqueue(1)
    vanished = Job.objects.enqueue(
        "tests.testapp.tasks.removed_in_last_deploy.cleanup", backend="default"
    )

    worker = start_worker("--burst", "--worker-id", "burst-1")
    assert worker.wait(60) == 0, worker.log

    sum_result = tasks.add.get_result(added.id)
    assert (sum_result.status, sum_result.return_value) == (TaskResultStatus.SUCCESSFUL, 5)
    assert sum_result.worker_ids == ["burst-1"]
    async_result = tasks.async_add.get_result(awaited.id)
    assert async_result.status == TaskResultStatus.SUCCESSFUL
    assert async_result.return_value == 42  # type: ignore[comparison-overlap]
    assert tasks.send_email.get_result(emailed.id).return_value == "sent to ada@example.com"
    seen = tasks.attempt_number.get_result(context.id).return_value
    assert (seen["attempt"], seen["worker_ids"]) == (1, ["burst-1"])

    refused_result = tasks.refuses.get_result(refused.id)
    assert refused_result.status == TaskResultStatus.FAILED
    assert "closed account" in refused_result.errors[0].traceback

    # The worker survived a row whose module is gone, and says why it failed.
    vanished_result = task_backends["default"].get_result(str(vanished.id))
    assert vanished_result.status == TaskResultStatus.FAILED
    assert "cannot import module" in Job.objects.get(pk=vanished.pk).last_error
    [error] = vanished_result.errors
    assert error.exception_class_path == "django_arcature.exceptions.UnknownTask"


def test_sigkill_mid_task_then_recovery_by_lease(start_worker: StartWorker, tmp_path: Path) -> None:
    marker = str(tmp_path / "started.txt")
    enqueued = tasks.sleeps_then_returns.enqueue(2.0, marker)

    doomed = start_worker("--lease", "2", "--worker-id", "doomed")
    wait_until(lambda: tasks.started_count(marker) == 1, what="the first attempt to start")
    assert status_of(enqueued.id) == "running"
    doomed.signal(signal.SIGKILL)
    assert doomed.wait(10) == -signal.SIGKILL

    # Nobody heartbeats now: the row stays running until its lease expires.
    assert tasks.sleeps_then_returns.get_result(enqueued.id).status == TaskResultStatus.RUNNING

    rescuer = start_worker("--lease", "2", "--worker-id", "rescuer")
    wait_until(
        lambda: status_of(enqueued.id) == "succeeded",
        timeout=60,
        what="the rescuing worker to finish the task",
    )
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(30) == 0, rescuer.log

    result = tasks.sleeps_then_returns.get_result(enqueued.id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "woke up"
    assert result.attempts == 2
    assert result.worker_ids == [LOST_WORKER_ID, "rescuer"]
    [error] = result.errors
    assert error.exception_class_path == "django_arcature.tasks.results.LeaseExpired"
    # Run twice (at-least-once), completed once.
    assert tasks.started_count(marker) == 2
    assert len(Job.objects.get(pk=uuid.UUID(enqueued.id)).attempt_log) == 1


def test_worker_applies_the_tasks_retry_policy_and_timeout(start_worker: StartWorker) -> None:
    # tests/settings.py: OPTIONS["RETRY"] has no delay. always_fails: max_attempts=3.
    # async_sleeps: timeout=0.3, max_attempts=2.
    failing = tasks.always_fails.enqueue("still broken")
    sleeping = tasks.async_sleeps.enqueue(3)
    worker = start_worker("--burst")
    assert worker.wait(60) == 0, worker.log

    failed = tasks.always_fails.get_result(failing.id)
    assert (failed.status, failed.attempts) == (TaskResultStatus.FAILED, 3)
    timed_out = tasks.async_sleeps.get_result(sleeping.id)
    assert (timed_out.status, timed_out.attempts) == (TaskResultStatus.FAILED, 2)
    assert Job.objects.get(pk=uuid.UUID(sleeping.id)).error_kind == "timeout"
