"""A batch callback keeps its ``.using()`` options until it fires.

The callback is enqueued by the last member's completion, in a worker, from what
the batch row stored. Before, only the task name was stored:
``Batch(on_success=notify.using(queue="high"))`` went to the default queue. And
what is stored is read back without ever aborting that completion: a row edited
by hand loses the options it garbled, not the member's completion or the callback.
"""

from __future__ import annotations

import io
import logging
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_arcature import Batch
from django_arcature.models import Job, JobStatus
from django_arcature.workflows.build import WorkflowError
from django_arcature.workflows.models import BatchRun
from tests.testapp import workflow_jobs as wf

pytestmark = pytest.mark.django_db(transaction=True)


def _drain_default_queue() -> None:
    """Run the members (queue ``default``) and nothing queued elsewhere."""
    call_command(
        "arcature_worker", "--burst", "--no-duties", "--queue", "default", stdout=io.StringIO()
    )


def _batch_id(batch: Batch) -> uuid.UUID:
    assert batch.id is not None
    return batch.id


def _callbacks(batch: Batch) -> tuple[Job | None, Job | None]:
    run = BatchRun.objects.get(id=_batch_id(batch))
    assert run.fired_at is not None
    found = [
        None if job_id is None else Job.objects.get(id=job_id)
        for job_id in (run.on_success_job_id, run.on_finish_job_id)
    ]
    return found[0], found[1]


def test_each_callback_is_enqueued_with_its_own_options() -> None:
    later = timezone.now() + timedelta(hours=2)
    batch = Batch(
        on_success=wf.batch_done.using(queue="high", priority=7, max_attempts=5),
        on_finish=wf.batch_note.using(run_at=later, queue="reports"),
    )
    member = batch.add(wf.step, "row")
    batch.enqueue()

    _drain_default_queue()

    assert Job.objects.get(id=member).status == JobStatus.SUCCEEDED
    success, finish = _callbacks(batch)
    assert success is not None
    assert finish is not None
    assert (success.queue, success.priority, success.max_attempts) == ("high", 7, 5)
    assert success.status == JobStatus.PENDING  # on a queue this worker does not serve
    assert finish.queue == "reports"
    assert abs((finish.available_at - later).total_seconds()) < 1
    assert finish.max_attempts == 1  # the handler's own default, not overridden


def test_a_delay_counts_from_when_the_callback_fires() -> None:
    batch = Batch(on_finish=wf.batch_note.using(delay=timedelta(minutes=10)))
    batch.add(wf.step, "row")
    batch.enqueue(close=False)
    # Members added later, in another transaction, to the same open batch.
    reopened = Batch.open(_batch_id(batch))
    reopened.add(wf.step, "late row")
    reopened.enqueue()

    _drain_default_queue()

    _, finish = _callbacks(batch)
    assert finish is not None
    assert finish.status == JobStatus.PENDING
    wait = (finish.available_at - finish.created_at).total_seconds()
    assert 590 <= wait <= 610, wait


def test_options_stored_on_an_open_batch_survive_reopening() -> None:
    batch = Batch(on_success=wf.batch_done.using(queue="high"))
    batch.add(wf.step, "row")
    batch.enqueue(close=False)
    stored = BatchRun.objects.get(id=_batch_id(batch)).callback_options
    assert stored == {"on_success": {"queue": "high"}}
    Batch.open(batch.id).close()  # type: ignore[arg-type]

    _drain_default_queue()

    success, _ = _callbacks(batch)
    assert success is not None
    assert success.queue == "high"


def test_a_callback_with_its_own_unique_key_is_refused_when_built() -> None:
    with pytest.raises(WorkflowError, match="unique_key"):
        Batch(on_success=wf.batch_done.using(unique_key="once"))
    assert not BatchRun.objects.exists()


@pytest.mark.parametrize(
    "garbled",
    [
        {"on_success": {"queue": 5, "priority": "high", "delay": "soon", "colour": "red"}},
        {"on_success": {"queue": "q" * 500}},  # past the queue name's length
        {"on_success": {"priority": 2**40}},  # past the 32-bit column
        {"on_success": {"run_at": "not a time"}},
        {"on_success": "not an object"},
        ["not", "a", "mapping"],
    ],
)
def test_garbled_stored_options_lose_only_themselves(
    garbled: object, caplog: pytest.LogCaptureFixture
) -> None:
    batch = Batch(on_success=wf.batch_done.using(queue="high"))
    member = batch.add(wf.step, "row")
    batch.enqueue()
    BatchRun.objects.filter(id=_batch_id(batch)).update(callback_options=garbled)  # edited by hand

    with caplog.at_level(logging.WARNING):
        _drain_default_queue()

    assert Job.objects.get(id=member).status == JobStatus.SUCCEEDED
    success, _ = _callbacks(batch)
    assert success is not None
    # Enqueued once, on the handler's own queue, and run by the worker serving it.
    assert success.queue == "default"
    assert success.status == JobStatus.SUCCEEDED
    assert Job.objects.count() == 2
    assert any("option" in record.getMessage() for record in caplog.records), [
        record.getMessage() for record in caplog.records
    ]
