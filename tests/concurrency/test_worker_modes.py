"""The worker's ending modes with real processes: --burst vs --drain, recycling, exclusions."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from django_arcature.models import Job, JobStatus
from tests.concurrency.conftest import WorkerProcess

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

StartWorker = Callable[..., WorkerProcess]


def status(job: Job) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


def test_burst_leaves_a_job_due_in_seconds_and_drain_finishes_it(
    start_worker: StartWorker,
) -> None:
    now = Job.objects.enqueue("tests.noop")
    # Due after the burst worker has started and gone: 2 s was too short for a worker's
    # start on a loaded machine (3 test environments on 2 cores), which then ran it too.
    later = Job.objects.enqueue("tests.noop", delay=8)
    assert start_worker("--burst").wait(30) == 0
    assert (status(now), status(later)) == (JobStatus.SUCCEEDED, JobStatus.PENDING)
    started = time.monotonic()
    worker = start_worker("--drain", "--drain-timeout", "30")
    assert worker.wait(40) == 0, worker.log
    assert status(later) == JobStatus.SUCCEEDED
    assert time.monotonic() - started < 30


def test_drain_waits_for_a_retry(start_worker: StartWorker) -> None:
    flaky = Job.objects.enqueue("tests.flaky_once")  # fails once, retried at once
    assert start_worker("--drain", "--drain-timeout", "30").wait(40) == 0
    row = Job.objects.get(pk=flaky.pk)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)


def test_drain_timeout_exits_1_with_the_job_still_pending(start_worker: StartWorker) -> None:
    far = Job.objects.enqueue("tests.noop", delay=600)
    worker = start_worker("--drain", "--drain-timeout", "1s")
    assert worker.wait(30) == 1
    assert "drain timed out with 1 job(s)" in worker.log
    assert status(far) == JobStatus.PENDING


def test_exclude_queue(start_worker: StartWorker) -> None:
    video = Job.objects.enqueue("tests.noop", queue="video")
    email = Job.objects.enqueue("tests.noop", queue="email")
    default = Job.objects.enqueue("tests.noop")
    worker = start_worker("--drain", "--drain-timeout", "30", "--exclude-queue", "video")
    assert worker.wait(40) == 0, worker.log
    assert (status(video), status(email), status(default)) == (
        JobStatus.PENDING,
        JobStatus.SUCCEEDED,
        JobStatus.SUCCEEDED,
    )


def test_max_runtime_ends_the_worker_cleanly(start_worker: StartWorker) -> None:
    running = Job.objects.enqueue("tests.sleep", args=[1.0])
    started = time.monotonic()
    worker = start_worker("--max-runtime", "2s", "--shutdown-timeout", "30")
    assert worker.wait(30) == 0, worker.log
    assert 1.5 < time.monotonic() - started < 25
    assert "recycling: it ran for" in worker.log
    assert status(running) == JobStatus.SUCCEEDED  # finished, not abandoned


def test_max_memory_ends_the_worker_cleanly(start_worker: StartWorker) -> None:
    worker = start_worker("--max-memory", "1")  # any Python process is bigger
    assert worker.wait(30) == 0, worker.log
    assert "recycling: it uses" in worker.log


@pytest.mark.only_on("postgresql", reason="pause and resume are announced on the LISTEN channel")
def test_resume_reaches_an_idle_worker_at_once_on_postgresql(start_worker: StartWorker) -> None:
    from django_arcature.queues.control import pause, resume
    from tests.concurrency.conftest import wait_until

    pause("p")
    # A long poll interval: only the notification can make this worker look again soon.
    worker = start_worker("--poll-interval", "30")
    wait_until(lambda: "started" in worker.log, what="the worker to start")
    job = Job.objects.enqueue("tests.noop", queue="p")
    time.sleep(1.0)
    assert status(job) == JobStatus.PENDING  # woken by the enqueue, but the queue is paused
    resumed = time.monotonic()
    assert resume("p")
    wait_until(lambda: status(job) == JobStatus.SUCCEEDED, timeout=10, what="the resumed job")
    assert time.monotonic() - resumed < 5  # not the 30 s poll
