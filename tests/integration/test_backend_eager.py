"""``ARCATURE = {"EAGER": True}`` with django.tasks: the returned TaskResult describes
the attempt that already ran, as ``@job``'s eager enqueue returns the finished row.

Found by following docs/howto/test-jobs.md with a ``@task``: the job had run (its row
said succeeded) while ``enqueue`` still answered ``READY``, and ``return_value``
raised, so an eager test of a task could not read its outcome without ``refresh()``.
"""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from django_arcature.models import Job
from django_arcature.tasks.compat import TaskResultStatus
from tests.integration import backend_tasks as tasks

pytestmark = pytest.mark.django_db

EAGER = override_settings(ARCATURE={"EAGER": True})


@EAGER
def test_eager_enqueue_returns_the_finished_result() -> None:
    result = tasks.add.enqueue(2, 3)
    assert Job.objects.get(pk=uuid.UUID(result.id)).status == "succeeded"
    assert (result.status, result.return_value, result.attempts) == (
        TaskResultStatus.SUCCESSFUL,
        5,
        1,
    )
    assert result.is_finished
    assert result.finished_at is not None
    assert result.task is tasks.add


@EAGER
def test_eager_enqueue_of_a_failing_task_is_failed_with_its_error() -> None:
    result = tasks.refuses.enqueue("no")
    assert result.status == TaskResultStatus.FAILED
    assert [error.exception_class_path for error in result.errors] == [
        "django_arcature.exceptions.Permanent"
    ]


@EAGER
def test_eager_retry_left_pending_stays_ready() -> None:
    result = tasks.always_fails.enqueue("disk full")  # attempt 1 of 3 failed: pending
    assert Job.objects.get(pk=uuid.UUID(result.id)).status == "pending"
    assert result.status == TaskResultStatus.READY


@EAGER
def test_eager_aenqueue_returns_the_finished_result() -> None:
    result = async_to_sync(tasks.add.aenqueue)(1, 1)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 2)


def test_without_eager_enqueue_is_ready() -> None:
    assert tasks.add.enqueue(1, 2).status == TaskResultStatus.READY
