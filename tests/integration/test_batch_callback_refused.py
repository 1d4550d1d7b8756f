"""A batch whose stored callback this deploy refuses still finishes, on every worker.

A callback's name is checked when the batch is built, but it is enqueued much later,
by the last member's completion, in a worker. A deploy in between may rename the
handler or change its arguments. The completion must land anyway and the callback
must not vanish: it is stored and dead-lettered with the refusal as its reason.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from django_arcature import Batch
from django_arcature.models import Job, JobStatus
from django_arcature.workflows.models import BatchRun
from tests.testapp import workflow_jobs as wf

pytestmark = pytest.mark.django_db(transaction=True)


def _drain() -> None:
    call_command("arcature_worker", "--burst", "--no-duties", stdout=io.StringIO())


@pytest.mark.parametrize(
    ("stored", "kind", "reason"),
    [
        ("wf.batch_done_renamed", "unknown", "wf.batch_done_renamed"),
        ("wf.always_snooze", "malformed", "always_snooze"),  # takes no batch id
    ],
)
def test_a_refused_callback_is_dead_lettered_and_the_member_lands(
    stored: str, kind: str, reason: str
) -> None:
    batch = Batch(on_finish=wf.batch_done)
    member = batch.add(wf.step, "row")
    batch.enqueue()
    assert batch.id is not None
    BatchRun.objects.filter(id=batch.id).update(on_finish=stored)  # the deploy since

    _drain()

    assert Job.objects.get(id=member).status == JobStatus.SUCCEEDED
    run = BatchRun.objects.get(id=batch.id)
    assert run.fired_at is not None
    assert run.outcome == "succeeded"
    assert run.on_finish_job_id is not None
    callback = Job.objects.get(id=run.on_finish_job_id)
    assert callback.task_name == stored
    assert callback.payload["args"] == [str(batch.id)]
    assert callback.status == JobStatus.DEAD
    assert callback.error_kind == kind
    assert reason in callback.last_error
    assert Job.objects.count() == 2  # the member and its one callback, nothing twice


def test_a_refused_callback_beside_a_good_one_keeps_both() -> None:
    batch = Batch(on_success=wf.batch_done, on_finish=wf.batch_note)
    batch.add(wf.step, "row")
    batch.enqueue()
    assert batch.id is not None
    BatchRun.objects.filter(id=batch.id).update(on_success="wf.gone")

    _drain()

    run = BatchRun.objects.get(id=batch.id)
    assert run.on_success_job_id is not None
    assert run.on_finish_job_id is not None
    assert Job.objects.get(id=run.on_success_job_id).status == JobStatus.DEAD
    good = Job.objects.get(id=run.on_finish_job_id)
    assert good.status == JobStatus.SUCCEEDED
    assert good.task_name == "wf.batch_note"
