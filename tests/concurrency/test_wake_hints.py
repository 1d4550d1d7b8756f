"""An enqueue on the same host nudges an idle worker at commit, on every database.

The worker here polls only every 10 s and does not LISTEN, so a job picked up
within a second was picked up because of the hint, not by a poll. (How fast a
hint wakes a worker is measured in benchmarks/, not here.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from django.db import transaction

from django_arcature.hints import hint_directory
from django_arcature.models import Job, JobStatus
from tests.concurrency.conftest import WorkerProcess, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

StartWorker = Callable[..., WorkerProcess]


def _sockets() -> set[str]:
    """The hint sockets in the folder now (an earlier test's SIGKILLed worker may have
    left one, which the next enqueue's hint removes: only this worker's are compared)."""
    directory = hint_directory("default")
    return {path.name for path in directory.glob("*.sock")} if directory.exists() else set()


def test_an_idle_polling_worker_wakes_on_the_commit(start_worker: StartWorker) -> None:
    before = _sockets()
    worker = start_worker("--poll-interval", "10", "--no-listen")
    wait_until(lambda: "started" in worker.log, what="the worker to start")
    wait_until(lambda: _sockets() - before, what="the worker's hint socket")
    ours = _sockets() - before
    time.sleep(3)  # idle long enough that its next poll is seconds away

    with transaction.atomic():
        job = Job.objects.enqueue("tests.add", args=[2, 3])
        time.sleep(0.5)  # uncommitted: no hint yet, and the worker cannot see it
        assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING
    committed = time.monotonic()
    wait_until(
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED,
        timeout=20,
        what="the job to run",
    )
    assert time.monotonic() - committed < 2.0, "picked up by a poll, not by the hint"
    worker.signal(15)
    assert worker.wait(30) == 0, worker.log
    assert not ours & _sockets(), "a stopped worker removes its socket"
