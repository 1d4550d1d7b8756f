"""Batches: counters without scanning members, callbacks enqueued exactly once."""

from __future__ import annotations

import uuid

import pytest

from django_arcature import Batch
from django_arcature.models import Job, JobStatus
from django_arcature.testing import drain
from django_arcature.transitions import ClaimTransition
from django_arcature.workflows.models import BatchRun
from tests.testapp import workflow_jobs as wf

from .conftest import fresh

pytestmark = pytest.mark.django_db(transaction=True)


def callbacks(batch: Batch) -> list[str]:
    return sorted(
        Job.objects.filter(task_name="wf.batch_done", payload__args=[str(batch.id)]).values_list(
            "queue", flat=True
        )
    )


def finish(job_id: uuid.UUID, *, dead: bool = False) -> None:
    claimed = Job.objects.claim_job(job_id, "w", 60)
    assert claimed is not None
    if dead:
        outcome = Job.objects.mark_dead(job_id, claimed.claim_token, "permanent", "no")
    else:
        outcome = Job.objects.mark_succeeded(job_id, claimed.claim_token, None)
    assert outcome is ClaimTransition.UPDATED


def test_on_success_and_on_finish_fire_once_after_the_last_member() -> None:
    batch = Batch(on_success=wf.batch_done.using(queue="ok"), on_finish=wf.batch_done)
    members = [batch.add(wf.step, f"row {i}") for i in range(5)]
    batch.enqueue()
    assert batch.counts() == {"total": 5, "succeeded": 0, "dead": 0, "cancelled": 0, "pending": 5}
    for job_id in members[:4]:
        finish(job_id)
    assert callbacks(batch) == []
    assert batch.counts()["pending"] == 1
    finish(members[4])
    # Both callbacks, once each (the task name is what the batch stores), and their ids.
    fired = Job.objects.filter(task_name="wf.batch_done")
    assert fired.count() == 2
    run = BatchRun.objects.get(id=batch._id())
    assert {run.on_success_job_id, run.on_finish_job_id} == set(fired.values_list("id", flat=True))
    assert run.on_success_job_id != run.on_finish_job_id
    assert batch.counts() == {"total": 5, "succeeded": 5, "dead": 0, "cancelled": 0, "pending": 0}


def test_on_success_is_skipped_when_a_member_died() -> None:
    batch = Batch(on_success=wf.step, on_finish=wf.batch_done)
    first = batch.add(wf.step, "a")
    second = batch.add(wf.step, "b")
    batch.enqueue()
    finish(first, dead=True)
    finish(second)
    run = BatchRun.objects.get(id=batch._id())
    assert run.on_success_job_id is None  # a member died: on_success never enqueued
    assert run.on_finish_job_id is not None
    assert Job.objects.get(id=run.on_finish_job_id).task_name == "wf.batch_done"
    assert list(
        Job.objects.filter(task_name="wf.batch_done").values_list("payload", flat=True)
    ) == [{"args": [str(batch.id)], "kwargs": {}}]
    assert not Job.objects.filter(task_name="wf.step", payload__args=[str(batch.id)]).exists()
    assert batch.counts()["dead"] == 1


def test_members_added_later_to_an_open_batch() -> None:
    batch = Batch(on_finish=wf.batch_done)
    first = batch.add(wf.step, "a")
    batch.enqueue(close=False)
    assert batch.id is not None
    batch_id = batch.id
    finish(first)
    assert Job.objects.filter(task_name="wf.batch_done").count() == 0  # still open
    later = Batch.open(batch_id)
    second = later.add(wf.step, "b")
    later.enqueue(close=False)
    assert later.counts()["total"] == 2
    finish(second)
    assert Job.objects.filter(task_name="wf.batch_done").count() == 0
    later.close()
    assert Job.objects.filter(task_name="wf.batch_done").count() == 1
    later.close()  # closing again fires nothing more
    assert Job.objects.filter(task_name="wf.batch_done").count() == 1
    closed = Batch.open(batch_id)
    closed.add(wf.step, "c")
    with pytest.raises(ValueError, match="is closed"):
        closed.enqueue()


def test_cancelling_a_batch_cancels_members_and_fires_nothing() -> None:
    batch = Batch(on_finish=wf.batch_done)
    members = [batch.add(wf.step, f"{i}") for i in range(3)]
    batch.enqueue()
    finish(members[0])
    assert batch.cancel() == 2
    assert [fresh(m).status for m in members] == ["succeeded", "cancelled", "cancelled"]
    assert batch.counts() == {"total": 3, "succeeded": 1, "dead": 0, "cancelled": 2, "pending": 0}
    assert Job.objects.filter(task_name="wf.batch_done").count() == 0


def test_a_batch_cancelled_by_its_id_as_text_counts_its_members() -> None:
    """The members an operator's cancel let go are counted on the batch's shard rows
    by SQL that takes the batch id as the caller gave it (here its text), and a second
    cancel, with no member left to cancel, counts nothing."""
    batch = Batch(on_finish=wf.batch_done)
    members = [batch.add(wf.step, f"{i}") for i in range(2)]
    batch.enqueue()
    batch_id = BatchRun.objects.get().id
    assert Job.objects.cancel_batch(str(batch_id)) == 2  # type: ignore[arg-type]
    assert [fresh(m).status for m in members] == ["cancelled", "cancelled"]
    assert batch.counts() == {"total": 2, "succeeded": 0, "dead": 0, "cancelled": 2, "pending": 0}
    assert Job.objects.cancel_batch(batch_id) == 0
    assert batch.counts()["cancelled"] == 2


def test_requeued_member_counts_again_and_callbacks_stay_fired_once() -> None:
    batch = Batch(on_finish=wf.batch_done)
    member = batch.add(wf.step, "a")
    batch.enqueue()
    finish(member, dead=True)
    [callback] = Job.objects.filter(task_name="wf.batch_done").values_list("id", flat=True)
    stored = BatchRun.objects.filter(id=batch._id()).values_list(
        "on_success_job_id", "on_finish_job_id"
    )
    assert stored.get() == (None, callback)
    assert Job.objects.requeue_dead(member) == 1
    assert batch.counts()["pending"] == 1
    finish(member)
    assert batch.counts() == {"total": 1, "succeeded": 1, "dead": 0, "cancelled": 0, "pending": 0}
    assert Job.objects.filter(task_name="wf.batch_done").count() == 1
    assert stored.get() == (None, callback)  # not fired again, not overwritten


def test_batch_limit_is_a_setting() -> None:
    from django.test import override_settings

    with override_settings(ARCATURE={"BATCH_MAX_MEMBERS": 2}):
        batch = Batch()
        for i in range(3):
            batch.add(wf.step, f"{i}")
        with pytest.raises(ValueError, match="BATCH_MAX_MEMBERS"):
            batch.enqueue()
    assert not Job.objects.exists()


def test_drained_batch_runs_its_callback() -> None:
    batch = Batch(on_success=wf.batch_done)
    for i in range(4):
        batch.add(wf.step, f"{i}")
    batch.enqueue()
    summary = drain()
    assert summary.succeeded == 5
    done = Job.objects.get(task_name="wf.batch_done")
    assert (done.status, done.result) == (JobStatus.SUCCEEDED, str(batch.id))
