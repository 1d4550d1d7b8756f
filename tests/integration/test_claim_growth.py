"""Under a backlog of short jobs a worker's claims grow, bounded, and shrink back at once.

Most of a claim's cost is per statement, so a worker whose claims keep coming back
full doubles the next one, up to ``batch_max`` (``ARCATURE["BATCH_SIZE_MAX"]``;
by default four batches when no batch size was set, else the batch itself).
A claim that comes back short, or slow jobs, bring it back to the batch. The worker
here is never run: its claims are made one by one, with no handler thread to take
the jobs, so what each claim asked for and what it held is a fact, not a timing.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_arcature.models import Job, JobStatus
from django_arcature.worker import Worker, loop
from django_arcature.worker.loop import CLAIM_GROWTH
from tests.faults.conftest import run_worker
from tests.integration.conftest import MakeJobs

pytestmark = pytest.mark.django_db(transaction=True)


def _fast_worker(**options: object) -> Worker:
    """A worker (not running) whose jobs so far took 1 ms: it claims ahead of its threads."""
    worker = Worker(duties=False, listen=False, install_signal_handlers=False, **options)  # type: ignore[arg-type]
    worker._avg_job_seconds = 0.001
    return worker


def test_full_claims_double_up_to_the_bound_and_a_short_one_resets(
    make_jobs: MakeJobs,
) -> None:
    make_jobs(50 + 100 + 200 + 30)
    worker = _fast_worker(concurrency=4)
    assert (worker.batch, worker.batch_max) == (50, 50 * CLAIM_GROWTH)

    sizes = [worker._maybe_claim() for _ in range(3)]
    assert sizes == [50, 100, 200]
    # Two claims' worth (400) and the threads' 4 may wait: 350 are held, so the next
    # full claim does not fit and none is made while enough wait for the threads.
    assert worker._maybe_claim() == 0
    assert len(worker._inflight) == 350

    worker._inflight.clear()  # as if they had all run and been written
    assert worker._maybe_claim() == 30  # asked for 200: the backlog is gone
    assert worker._last_request == 200
    assert worker._maybe_claim() == 0
    assert worker._last_request == 50  # back to the batch at once


def test_slow_jobs_claim_no_more_than_the_batch(make_jobs: MakeJobs) -> None:
    make_jobs(120)
    worker = _fast_worker(concurrency=2)
    assert worker._maybe_claim() == 50
    worker._avg_job_seconds = 1.0  # the jobs became slow: only the threads' share
    worker._inflight.clear()
    assert worker._maybe_claim() == 2
    worker._inflight.clear()
    worker._avg_job_seconds = 0.001
    assert worker._maybe_claim() == 50  # the growth started over from the batch


def test_jobs_held_for_a_thread_are_heartbeated_with_the_running_ones(
    make_jobs: MakeJobs,
) -> None:
    """A grown claim holds jobs longer before a thread takes them; their leases live on."""
    ids = make_jobs(150)
    worker = _fast_worker(concurrency=1, lease=30)
    assert [worker._maybe_claim(), worker._maybe_claim()] == [50, 100]
    assert not any(entry.started for entry in worker._inflight.values())
    before = dict(Job.objects.filter(id__in=ids).values_list("id", "lease_expires_at"))

    worker.lease = 3000  # the heartbeat's extension shows plainly beside the 30 s lease
    worker._next_heartbeat = 0.0
    worker._maybe_heartbeat()

    after = dict(Job.objects.filter(id__in=ids).values_list("id", "lease_expires_at"))
    extended = [
        (old, new)
        for job_id in ids
        if (old := before[job_id]) is not None and (new := after[job_id]) is not None
    ]
    assert len(extended) == len(ids)
    assert all(new - old > timedelta(seconds=2000) for old, new in extended)


def test_the_bound_follows_the_batch_and_the_settings() -> None:
    assert Worker(duties=False).batch_max == 50 * CLAIM_GROWTH  # the default batch grows
    # A batch chosen by --batch or BATCH_SIZE is kept exactly, as documented before.
    assert Worker(duties=False, batch=7).batch_max == 7
    with override_settings(ARCATURE={"BATCH_SIZE": 20}):
        assert Worker(duties=False).batch_max == 20
    # An explicit bound applies to any batch; one below the batch is the batch.
    with override_settings(ARCATURE={"BATCH_SIZE_MAX": 30}):
        assert Worker(duties=False, batch=5).batch_max == 30
        assert Worker(duties=False, batch=40).batch_max == 40
    assert Worker(duties=False, batch=5, batch_max=12).batch_max == 12
    with pytest.raises(ValueError, match="batch_max"):
        Worker(duties=False, batch_max=0)


def test_a_batch_set_to_the_default_value_is_a_ceiling_too() -> None:
    """``BATCH_SIZE = 50`` written out, or ``--batch 50``, is a choice of that size:
    claims stay at 50. Only a batch nobody set grows (to ``CLAIM_GROWTH`` batches)."""
    with override_settings(ARCATURE={"BATCH_SIZE": 50}):
        assert Worker(duties=False).batch_max == 50
        assert Worker(duties=False, batch_max=120).batch_max == 120  # a bound is a bound
    with override_settings(ARCATURE={"BATCH_SIZE": 50, "BATCH_SIZE_MAX": None}):
        assert Worker(duties=False).batch_max == 50
    assert Worker(duties=False, batch=50).batch_max == 50
    with override_settings(ARCATURE={"CONCURRENCY": 2}):  # other keys set: still the default
        assert Worker(duties=False).batch_max == 50 * CLAIM_GROWTH
    with override_settings(ARCATURE={}):
        assert Worker(duties=False).batch_max == 50 * CLAIM_GROWTH


@pytest.mark.parametrize(
    ("args", "said"), [((), "batch 50 (up to 200),"), (("--batch", "50"), "batch 50,")]
)
def test_arcature_worker_grows_only_without_batch(
    args: tuple[str, ...], said: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The command passes ``--batch`` on: given, even as 50, it is the ceiling."""
    with caplog.at_level(logging.INFO, logger="django_arcature.worker"):
        call_command("arcature_worker", "--burst", "--no-listen", *args, stdout=StringIO())
    started = [r.getMessage() for r in caplog.records if " started: " in r.getMessage()]
    assert len(started) == 1, started
    assert said in started[0], started


class _RecordingWorker(Worker):
    """Records the size of every claim that took jobs."""

    def __init__(self, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.claims: list[int] = []

    def _maybe_claim(self) -> int:
        claimed = super()._maybe_claim()
        if claimed:
            self.claims.append(claimed)
        return claimed


@pytest.mark.slow
def test_a_drain_with_growing_claims_runs_every_job_once(
    make_jobs: MakeJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = make_jobs(700)
    monkeypatch.setattr(loop, "FAST_JOB_SECONDS", 60.0)  # every job counts as short
    result = run_worker(
        120, worker_class=_RecordingWorker, concurrency=2, batch=10, batch_max=80, duties=False
    )
    assert result.finished, f"the worker did not finish ({result.error!r})"
    assert result.status == 0
    worker = result.worker
    assert isinstance(worker, _RecordingWorker)
    assert sum(worker.claims) == 700
    assert max(worker.claims) == 80, worker.claims
    assert worker.stats.succeeded == 700
    rows = Job.objects.filter(id__in=ids)
    assert set(rows.values_list("status", "attempts")) == {(JobStatus.SUCCEEDED, 1)}
