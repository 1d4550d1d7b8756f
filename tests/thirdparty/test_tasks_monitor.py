"""django-tasks-monitor records each task's life from django.tasks' signals, on our backend.

The package (unchanged, from PyPI) listens to ``task_enqueued`` in the enqueueing
process and to ``task_started`` / ``task_finished`` in the worker's handler threads,
and keeps one ``TaskRecord`` per result: status, attempts, the worker's id, the
duration, the exception's class and traceback. Its ``retry()`` enqueues the task
again with the arguments it recorded, through ``task.using(...)``. Each field it
reads off our ``TaskResult`` is checked against the job row it came from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from django.tasks import TaskResultStatus
from tasks_monitor.models import TaskRecord
from tasks_monitor.retry import retry

from django_arcature.models import Job
from tests.thirdparty.django6_site.tasks import refuse, shout

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SHOUT = "tests.thirdparty.django6_site.tasks.shout"
REFUSE = "tests.thirdparty.django6_site.tasks.refuse"


def test_each_task_is_recorded_from_enqueue_to_its_end_and_a_failure_can_be_retried(
    drain: Callable[..., Counter[str]],
) -> None:
    loud = shout.enqueue("hello")
    refused = refuse.enqueue("not today")
    records = {record.result_id: record for record in TaskRecord.objects.all()}
    assert set(records) == {loud.id, refused.id}
    assert records[loud.id].status == TaskResultStatus.READY
    assert records[loud.id].args == ["hello"]
    assert records[loud.id].enqueued_at is not None

    assert drain(failing={REFUSE}) == Counter({SHOUT: 1, REFUSE: 1})

    done = TaskRecord.objects.get(result_id=loud.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.attempts == 1
    # One attempt, one worker: the id our result reports is the one the framework's
    # get_result() gives for the finished job.
    assert done.worker_ids == shout.get_result(loud.id).worker_ids
    assert len(done.worker_ids) == 1
    assert done.worker_ids[0]
    assert done.started_at is not None
    assert done.finished_at is not None
    assert done.duration is not None
    assert done.duration.total_seconds() >= 0
    assert shout.get_result(loud.id).return_value == "HELLO"

    failed = TaskRecord.objects.get(result_id=refused.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.attempts == 1
    assert failed.exception_class == "tests.thirdparty.django6_site.tasks.Refused"
    assert "not today" in failed.traceback

    again = retry(failed)
    assert again.retry_of == failed
    assert again.args == ["not today"]
    assert Job.objects.get(pk=again.result_id).task_name == REFUSE
    assert drain(failing={REFUSE}) == Counter({REFUSE: 1})
    again.refresh_from_db()
    assert again.status == TaskResultStatus.FAILED
    assert TaskRecord.objects.count() == 3
