"""Finished jobs are written in batches larger than a claim (worker.loop).

The write of finished jobs costs mostly per statement, so the worker lets up to
``FLUSH_CLAIMS`` claims' worth gather before writing, and finished jobs waiting for
that write hold no place among the jobs it may claim ahead. Not timed: the wait
for company (``FLUSH_DELAY``) is made longer than the test, so that which writes
happened, and how large, shows as a fact.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_arcature.models import Job, JobStatus
from django_arcature.worker import Worker, loop
from tests.faults.conftest import run_worker
from tests.integration.conftest import MakeJobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FOREVER = 120.0


class RecordingWorker(Worker):
    """Records the size of every claim and of every write of finished jobs."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.claims: list[int] = []
        self.writes: list[int] = []

    def _maybe_claim(self) -> int:
        claimed = super()._maybe_claim()
        if claimed:
            self.claims.append(claimed)
        return claimed

    def _flush(self, force: bool = False) -> None:
        before = len(self._finished)
        super()._flush(force)
        if before and not self._finished:
            self.writes.append(before)


def run(monkeypatch: pytest.MonkeyPatch, **options: Any) -> RecordingWorker:
    monkeypatch.setattr(loop, "FLUSH_DELAY", FOREVER)
    result = run_worker(60, worker_class=RecordingWorker, duties=False, listen=False, **options)
    assert result.finished, f"the worker did not finish ({result.error!r})"
    assert result.status == 0
    assert isinstance(result.worker, RecordingWorker)
    return result.worker


def test_finished_jobs_are_written_in_batches_larger_than_a_claim(
    make_jobs: MakeJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = make_jobs(60)
    worker = run(monkeypatch, concurrency=2, batch=5)

    assert sum(worker.writes) == 60
    assert max(worker.writes) > 5, worker.writes  # more than one claim's worth at once
    assert set(Job.objects.filter(id__in=ids).values_list("status", flat=True)) == {
        JobStatus.SUCCEEDED
    }


def test_finished_jobs_waiting_for_their_write_do_not_shrink_the_claims(
    make_jobs: MakeJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_jobs(60)
    worker = run(monkeypatch, concurrency=2, batch=5)

    # The first claim is of `concurrency` (no job has run yet to say jobs are fast),
    # the last takes what is left; every one between is a whole batch, although up to
    # two batches' worth of finished jobs wait for their write meanwhile.
    assert worker.claims[1:-1] == [5] * (len(worker.claims) - 2), worker.claims
    assert sum(worker.claims) == 60
