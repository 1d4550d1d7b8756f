"""Defect 2 of issue 10: in-flight work is keyed by (job id, claim token), not by job id.

A job can come back to the same worker under a new claim while the worker still
holds the old, lost one (lease swept, job re-claimed). The stale completion must
be fenced out and reported lost, without touching the fresh claim: its outcome,
its event and its place in the worker's in-flight map are its own.
"""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import transaction

from django_arcature.db import DatabaseNow
from django_arcature.models import Job
from django_arcature.transitions import ClaimTransition, Completion
from tests.faults import jobs as fault_jobs
from tests.faults.conftest import start_worker_thread, wait_for
from tests.integration.conftest import MakeJobs, Recorder, fresh

pytestmark = pytest.mark.django_db(transaction=True)


def expire_and_sweep(job_id: uuid.UUID) -> None:
    """Age the job's lease on the database's clock and sweep it back to pending.

    One transaction: the aged row stays locked until the sweep has taken it, so a
    heartbeat of the running worker cannot renew the lease in between (it waits,
    then finds its claim gone, as after any real expiry).
    """
    with transaction.atomic():
        Job.objects.filter(pk=job_id).update(lease_expires_at=DatabaseNow(-60))
        assert Job.objects.sweep_expired_leases() == 1


def success(job_id: uuid.UUID, token: uuid.UUID, result: object) -> Completion:
    return Completion(
        job_id, token, "succeeded", result=result, attempt_log=[{"worker": "w1", "error": None}]
    )


@pytest.mark.parametrize("method", ["complete_batch", "complete_many"])
@pytest.mark.parametrize("stale_first", [True, False])
def test_stale_and_fresh_completion_of_one_job_in_one_batch(
    make_jobs: MakeJobs, events: Recorder, method: str, stale_first: bool
) -> None:
    (job_id,) = make_jobs(1)
    (stale,) = Job.objects.claim("w1", lease=60, batch=1)
    expire_and_sweep(job_id)
    (current,) = Job.objects.claim("w1", lease=60, batch=1)
    assert (current.id, current.attempts) == (job_id, 2)
    events.clear()
    batch = [success(job_id, stale.claim_token, "stale"), success(job_id, current.claim_token, 2)]
    if not stale_first:
        batch.reverse()

    outcomes = getattr(Job.objects, method)(batch)

    expected = [ClaimTransition.LOST, ClaimTransition.UPDATED]
    assert outcomes == (expected if stale_first else expected[::-1])
    row = fresh(job_id)
    assert (row.status, row.result, row.attempts) == ("succeeded", 2, 2)
    assert sorted(events.names()) == ["job_claim_lost", "job_succeeded"]
    lost = next(kwargs for name, kwargs in events.events if name == "job_claim_lost")
    assert lost["claim_token"] == stale.claim_token
    done = next(kwargs for name, kwargs in events.events if name == "job_succeeded")
    assert done["completion"].claim_token == current.claim_token


def test_heartbeat_of_a_stale_and_a_fresh_claim_of_one_job(
    make_jobs: MakeJobs, events: Recorder
) -> None:
    (job_id,) = make_jobs(1)
    (stale,) = Job.objects.claim("w1", lease=60, batch=1)
    expire_and_sweep(job_id)
    (current,) = Job.objects.claim("w1", lease=60, batch=1)
    events.clear()
    lost = Job.objects.heartbeat_many(
        [(job_id, stale.claim_token), (job_id, current.claim_token)], lease=60
    )
    assert lost == {(job_id, stale.claim_token)}
    assert events.names() == ["job_claim_lost"]
    assert events.events[0][1]["claim_token"] == stale.claim_token


def test_worker_keeps_the_fresh_claim_when_the_stale_one_finishes() -> None:
    """Lost claim, re-claim by the same worker, then the stale attempt returns.

    Before the fix the stale completion popped the fresh claim from the worker's
    in-flight map: nothing heartbeated it any more, its lease ran out and a sweep
    took the job away from the attempt that was still running.
    """
    fault_jobs.reset_gates(2)
    job_id = Job.objects.enqueue("faults.gated").id
    lease = 2
    worker, thread, box = start_worker_thread(lease=lease, concurrency=2, batch=1)
    try:
        assert fault_jobs.STARTED[1].wait(20), "the first attempt did not start"
        expire_and_sweep(job_id)  # the first claim is lost; the worker re-claims the job
        assert fault_jobs.STARTED[2].wait(20), "the job was not claimed again"
        assert fresh(job_id).attempts == 2
        fault_jobs.GATES[1].set()  # the stale attempt returns: its write is fenced out
        wait_for(lambda: worker.stats.lost >= 1, what="the stale completion to be written")
        time.sleep(lease * 1.5)  # past the lease: only heartbeats keep the fresh claim
        assert Job.objects.sweep_expired_leases() == 0, "the fresh claim stopped heartbeating"
        row = fresh(job_id)
        assert (row.status, row.attempts) == ("running", 2)
        fault_jobs.GATES[2].set()
        wait_for(lambda: fresh(job_id).status == "succeeded", what="the fresh attempt")
    finally:
        for gate in fault_jobs.GATES.values():
            gate.set()
        worker.stop()
        thread.join(20)
    assert "error" not in box, box
    row = fresh(job_id)
    assert (row.status, row.result, row.attempts) == ("succeeded", "attempt 2", 2)
    assert (worker.stats.succeeded, worker.stats.lost) == (1, 1)
