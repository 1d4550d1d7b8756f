"""A cancelled running job keeps its concurrency slot until its handler is gone (issue 19, B5).

In-process, on the real database: the claim's count, the hold a cancel writes
in its own transaction, a worker's release and extension of holds, and the
expiry that keeps a crashed worker's holds from taking a slot forever.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_arcature.models import Job, JobStatus
from django_arcature.queues.gate import QueueGate
from django_arcature.queues.limits import QueueLimit
from django_arcature.queues.models import SlotHold
from django_arcature.queues.occupancy import (
    Held,
    count_held,
    extend_holds,
    hold_slots,
    purge_expired,
    release_holds,
)

pytestmark = pytest.mark.django_db(transaction=True)

LIMITS = {"one": {"concurrency": 1}}


@pytest.fixture
def limited(settings: Any) -> None:
    """The enqueuing side (here the test) knows the limits too, as a shared settings file does."""
    settings.ARCATURE = {**settings.ARCATURE, "QUEUES": LIMITS}


def gate() -> QueueGate:
    return QueueGate("default", limits={"one": QueueLimit(concurrency=1)}, refresh_seconds=0)


def test_cancelling_a_running_job_keeps_its_slot_until_the_worker_releases_it(
    limited: None,
) -> None:
    Job.objects.enqueue_many("tests.noop", [(), ()], queue="one")
    [running] = gate().claim(Job.objects, "w1", 60, 5)
    assert Job.objects.cancel(running.id) == 1
    assert Job.objects.get(pk=running.id).status == JobStatus.CANCELLED
    # The handler may still be running on w1: the slot is not free.
    hold = SlotHold.objects.get()
    assert (hold.claim_token, hold.job_id, hold.queue, hold.worker_id) == (
        running.claim_token,
        running.id,
        "one",
        "w1",
    )
    assert gate().claim(Job.objects, "w2", 60, 5) == []
    # The worker saw its handler end: the slot is free again.
    assert release_holds("default", [running.claim_token]) == 1
    assert len(gate().claim(Job.objects, "w2", 60, 5)) == 1


def test_a_crashed_workers_hold_expires_with_the_lease_and_is_purged(limited: None) -> None:
    Job.objects.enqueue_many("tests.noop", [(), ()], queue="one")
    [running] = gate().claim(Job.objects, "w1", 60, 5)
    Job.objects.cancel(running.id)
    assert count_held("default", "one") == 1
    # w1 died: nobody extends its hold, which lasts until the claim's lease would have ended.
    SlotHold.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert count_held("default", "one") == 0
    assert len(gate().claim(Job.objects, "w2", 60, 5)) == 1
    assert purge_expired("default") == 1
    assert not SlotHold.objects.exists()


def test_holds_are_idempotent_and_extended_like_leases() -> None:
    job = Job.objects.enqueue("tests.noop", queue="one")
    [claimed] = gate().claim(Job.objects, "w1", 60, 1)
    held = Held(claimed.claim_token, claimed.id, "one")
    assert hold_slots("default", [held], "w1", lease_seconds=1) == 1
    hold_slots("default", [held], "w1", lease_seconds=1)  # a retried write whose ack was lost
    assert SlotHold.objects.count() == 1
    before = SlotHold.objects.get().expires_at
    assert extend_holds("default", [claimed.claim_token], 600) == 1
    assert SlotHold.objects.get().expires_at >= before + timedelta(seconds=500)
    # Held and running at once (a write-off in flight): counted twice, never not at all.
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    assert gate().claim(Job.objects, "w2", 60, 1) == []


def test_cancelling_in_an_unlimited_queue_or_a_pending_job_writes_no_hold(limited: None) -> None:
    free = Job.objects.enqueue("tests.noop", queue="free")
    [claimed] = Job.objects.claim("w1", 60, 1, ["free"])
    waiting = Job.objects.enqueue("tests.noop", queue="one")
    assert Job.objects.cancel(claimed.id) == 1
    assert Job.objects.cancel(waiting.pk) == 1
    assert Job.objects.cancel(waiting.pk) == 0
    assert not SlotHold.objects.exists()
    assert Job.objects.get(pk=free.pk).status == JobStatus.CANCELLED


@pytest.mark.parametrize("group", ["workflow", "batch"])
def test_cancelling_a_workflow_or_batch_keeps_its_running_nodes_slot(
    limited: None, group: str
) -> None:
    """A workflow's or batch's cancel writes the same hold as ``Job.objects.cancel``: the
    running node's handler may run on, and no second handler may take its slot meanwhile."""
    from django_arcature import Batch, Workflow
    from tests.testapp import workflow_jobs

    one = workflow_jobs.step.using(queue="one")
    if group == "workflow":
        flow = Workflow("limited flow")
        first = flow.add(one, "a")
        flow.add(one, "b", after=[first])
        flow.enqueue()
    else:
        batch = Batch()
        batch.add(one, "a")
        batch.add(one, "b")
        batch.enqueue()
    [running] = gate().claim(Job.objects, "w1", 60, 5)
    Job.objects.enqueue("tests.noop", queue="one")  # would take the slot if it were free
    if group == "workflow":
        assert flow.id is not None
        assert Job.objects.cancel_workflow(flow.id) == 2
    else:
        assert batch.id is not None
        assert Job.objects.cancel_batch(batch.id) == 2
    hold = SlotHold.objects.get()
    assert (hold.claim_token, hold.job_id, hold.queue, hold.worker_id) == (
        running.claim_token,
        running.id,
        "one",
        "w1",
    )
    assert gate().claim(Job.objects, "w2", 60, 5) == []
    assert release_holds("default", [running.claim_token]) == 1
    assert len(gate().claim(Job.objects, "w2", 60, 5)) == 1
