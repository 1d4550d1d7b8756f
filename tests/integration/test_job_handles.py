"""``job.wait()``, ``Snooze``, ``current_job().progress()`` and ``cancel_requested``."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.test import override_settings

from django_arcature import JobWaitTimeout, Snooze
from django_arcature.context import JobContext
from django_arcature.models import Job, JobStatus
from django_arcature.testing import drain, run_job
from django_arcature.workflows.results import progress_of
from tests.testapp import workflow_jobs as wf

pytestmark = pytest.mark.django_db(transaction=True)


def finish_soon(job: Job, delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        try:
            run_job(Job.objects.get(pk=job.pk))
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_wait_returns_the_finished_job() -> None:
    job = wf.step.enqueue("x")
    thread = finish_soon(job, 0.2)
    done = job.wait(timeout=10)
    thread.join()
    assert (done.status, done.result) == (JobStatus.SUCCEEDED, "x")


def test_wait_raises_on_timeout() -> None:
    job = wf.step.enqueue("x")
    started = time.monotonic()
    with pytest.raises(JobWaitTimeout, match=r"still pending after 0\.2s"):
        job.wait(timeout=0.2)
    assert time.monotonic() - started < 2


def test_wait_inside_a_transaction_is_refused() -> None:
    job = wf.step.enqueue("x")
    with transaction.atomic(), pytest.raises(RuntimeError, match="inside a transaction"):
        job.wait(timeout=1)


def test_async_wait() -> None:
    """On an event loop of its own thread, as an ASGI server runs an async view."""
    job = wf.step.enqueue("y")
    thread = finish_soon(job, 0.2)
    done: list[Job] = []

    def close_all() -> None:
        for alias in connections:
            connections[alias].close()

    async def wait_then_close() -> None:
        try:
            done.append(await job.async_wait(timeout=10))
        finally:
            # The reads ran on sync_to_async's thread: close the connection there.
            await sync_to_async(close_all)()

    loop_thread = threading.Thread(target=lambda: asyncio.run(wait_then_close()))
    loop_thread.start()
    loop_thread.join()
    thread.join()
    assert [row.result for row in done] == ["y"]


def test_snooze_gives_the_attempt_back(tmp_path: Path) -> None:
    job = wf.snooze_once.enqueue(str(tmp_path / "marker"))
    first = run_job(job)
    assert (first.status, first.attempts) == (JobStatus.PENDING, 0)
    assert first.attempt_log[-1]["snoozed"] == 0
    second = run_job(first)
    assert (second.status, second.attempts, second.result) == (JobStatus.SUCCEEDED, 1, "woke")


@override_settings(ARCATURE={"MAX_SNOOZES": 3})
def test_snoozing_is_bounded() -> None:
    job = wf.always_snooze.enqueue()
    summary = drain()
    row = Job.objects.get(pk=job.pk)
    # 3 free snoozes, then 2 that use the job's 2 attempts: dead, with the reason.
    assert summary.runs == 5
    assert (row.status, row.error_kind) == (JobStatus.DEAD, "exhausted")
    assert "MAX_SNOOZES" in row.last_error


def test_snooze_refuses_bad_seconds() -> None:
    with pytest.raises(ValueError, match="0 to 604800"):
        Snooze(-1)


@override_settings(ARCATURE={"PROGRESS_INTERVAL": 3600})
def test_progress_is_throttled_and_fenced() -> None:
    job = wf.report_progress.enqueue()
    done = run_job(job)
    # The first write lands, the next four are throttled, the final 1.0 always lands.
    assert done.result == [True, False, False, False, False, True]
    assert progress_of(job.pk) == (1.0, "done")
    stale = JobContext(
        job_id=job.pk,
        task_name="wf.report_progress",
        queue="default",
        attempt=1,
        max_attempts=1,
        claim_token=job.claim_token or __import__("uuid").uuid4(),
    )
    assert stale.progress(1.0, "from a lost claim") is False  # fenced: not running
    assert progress_of(job.pk) == (1.0, "done")


def test_cancel_requested_follows_the_cancel_event() -> None:
    context = JobContext(
        job_id=__import__("uuid").uuid4(), task_name="t", queue="q", attempt=1, max_attempts=1
    )
    assert context.cancel_requested is False
    context.cancel("lost")
    assert context.cancel_requested is True


def test_django_tasks_reports_a_waiting_node_as_ready() -> None:
    """A node's id given to the django.tasks backend: waiting reads as READY (not started)."""
    from django_arcature.tasks.compat import TaskResultStatus
    from tests.integration import backend_tasks

    result = backend_tasks.add.enqueue(1, 2)
    # Stands in for a workflow node of that task, still waiting for its dependencies.
    Job.objects.filter(pk=result.id).update(status=JobStatus.WAITING)
    assert backend_tasks.add.get_result(result.id).status == TaskResultStatus.READY
