"""PostgreSQL: a running job that is cancelled sees ``cancel_requested`` at once.

The worker runs with a 10-minute lease, so its next heartbeat is 200 s away:
only the cancel notification (migration 0013, ``cancel:<id>`` on
``arcature_jobs``) can make the handler stop within the test's 30 s. Either way
the attempt ends ``cancelled`` through the fenced path: the handler's return is
discarded.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest
from django.db import connection

from django_arcature.models import Job, JobStatus
from tests.concurrency.conftest import WorkerProcess, read_events, wait_started, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.only_on("postgresql", reason="the cancel NOTIFY exists there only"),
]

LONG_LEASE = "600"


def _stop(worker: WorkerProcess) -> None:
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log


def test_a_sync_handler_sees_the_cancel_before_the_next_heartbeat(
    start_worker: object, events: Path
) -> None:
    job = Job.objects.enqueue("tests.wait_for_cancel", args=[120])
    worker = start_worker("--lease", LONG_LEASE)  # type: ignore[operator]
    wait_started(events, job.pk)
    assert Job.objects.cancel(job.pk) == 1
    wait_until(
        lambda: ("job_claim_lost", str(job.pk)) in read_events(events),
        what="the worker to see the cancel (its heartbeat is 200 s away)",
    )
    wait_until(lambda: "result was discarded" in worker.log, what="the handler to return")
    _stop(worker)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result, row.claim_token) == (JobStatus.CANCELLED, None, None)
    assert "job_succeeded" not in [name for name, _ in read_events(events)]


def test_an_async_handler_gets_cancelled_error_at_once(
    start_worker: object, events: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "cancelled.txt"
    job = Job.objects.enqueue("wf.async_until_cancelled", args=[str(marker), 120])
    worker = start_worker("--lease", LONG_LEASE)  # type: ignore[operator]
    wait_started(events, job.pk)
    assert Job.objects.cancel(job.pk) == 1
    wait_until(marker.exists, what="CancelledError inside the async handler")
    _stop(worker)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result) == (JobStatus.CANCELLED, None)
    assert marker.read_text() == "cancelled"


def test_a_cancel_notification_for_another_job_changes_nothing(
    start_worker: object, events: Path
) -> None:
    """Every worker hears every running job's cancel; only the one holding it acts."""
    running = Job.objects.enqueue("tests.wait_for_cancel", args=[3])
    worker = start_worker("--lease", LONG_LEASE)  # type: ignore[operator]
    wait_started(events, running.pk)
    with connection.cursor() as cursor:
        for payload in (f"cancel:{uuid.uuid4()}", "cancel:not-a-uuid", "cancel:"):
            cursor.execute("SELECT pg_notify('arcature_jobs', %s)", [payload])
    wait_until(
        lambda: Job.objects.get(pk=running.pk).status == JobStatus.SUCCEEDED,
        what="the running job to finish untouched",
    )
    _stop(worker)
    assert Job.objects.get(pk=running.pk).result == "finished"
