"""The main thread steps aside after a claim that emptied the queue (worker.loop).

Not timed: the wait is made long (``HAND_OFF_WAIT``) so that whether it happened,
and whether it was skipped where it must be, shows as a fact, not a duration.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connections

from django_arcature.models import Job, JobStatus
from django_arcature.worker import Worker, loop
from django_arcature.worker.loop import _InFlight
from tests.integration.conftest import MakeJobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: Longer than run_worker's timeout: a wait that does not end by the job starting
#: (or a full claim that waits) fails the run instead of passing slowly.
FOREVER = 120.0


class RecordingWorker(Worker):
    """Records, as each claim returns, whether its last job had started on a thread."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.started_on_return: list[bool] = []

    def _maybe_claim(self) -> int:
        before = set(self._inflight)
        claimed = super()._maybe_claim()
        new = [entry for key, entry in self._inflight.items() if key not in before]
        if new:
            self.started_on_return.append(new[-1].started)
        return claimed


def run(monkeypatch: pytest.MonkeyPatch, **options: Any) -> RecordingWorker:
    monkeypatch.setattr(loop, "HAND_OFF_WAIT", FOREVER)
    options.setdefault("burst", True)
    options.setdefault("install_signal_handlers", False)
    options.setdefault("shutdown_timeout", 1.0)
    options.setdefault("duties", False)
    options.setdefault("listen", False)
    worker = RecordingWorker(**options)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["status"] = worker.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, name="test-worker")
    thread.start()
    thread.join(30)
    if thread.is_alive():
        worker.stop()
        thread.join(FOREVER + 10)
        pytest.fail("the worker did not finish: it waited for a hand-off that never came")
    assert box.get("status") == 0
    return worker


def test_a_claim_that_empties_the_queue_returns_once_its_job_has_started(
    make_jobs: MakeJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_id,) = make_jobs(1)
    worker = run(monkeypatch, concurrency=2, batch=10)
    assert worker.started_on_return == [True]
    assert Job.objects.get(pk=job_id).status == JobStatus.SUCCEEDED


def test_a_full_claim_does_not_wait_for_its_jobs_to_start(
    make_jobs: MakeJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that came back full says more jobs wait: the next claim goes at once.
    With one thread and batches of one, each claim is full; waiting on it would hang
    the run (``FOREVER``) only if the thread never came, so this also checks the run."""
    ids = make_jobs(3)
    worker = run(monkeypatch, concurrency=1, batch=1)
    assert len(worker.started_on_return) >= 3
    assert Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == 3


def test_the_wait_is_bounded_when_no_thread_takes_the_job(
    make_jobs: MakeJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No handler thread is running here: the wait gives up at its bound."""
    make_jobs(1)
    monkeypatch.setattr(loop, "HAND_OFF_WAIT", 0.05)
    worker = Worker(burst=True, install_signal_handlers=False, duties=False, listen=False)
    (claimed,) = Job.objects.claim("w1", lease=60, batch=1)
    entry = _InFlight(claimed, worker._context_for(claimed))
    worker._let_handlers_take(entry)
    assert entry.started is False
