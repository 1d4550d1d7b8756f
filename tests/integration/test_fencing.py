"""The seed's two fencing scenarios, made the way production makes them.

A zombie is not invented by writing a made-up token into the row: that would
only prove the WHERE clause rejects a value that was never there. Instead the
first worker claims with a one-second lease, really stops heartbeating, the
lease runs out on the database's clock, the sweep takes the job back, and a
second worker claims it. The first worker still holds its old token and still
believes it owns the job. Every write it makes must be refused.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from django_arcature.models import ErrorKind, Job, JobStatus
from django_arcature.transitions import ClaimTransition, Completion

from .conftest import MakeJobs, Recorder, claim_one, fresh

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: The shortest lease the schema allows (CHECK lease_seconds >= 1).
SHORT_LEASE = 1
#: Long enough that the server's clock has passed locked_at + 1 s, however the
#: test and the server disagree about the sub-second part.
PAST_THE_LEASE = 1.6


def zombie_and_owner(make_jobs: MakeJobs) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """(job, the zombie's token, the owner's token), the way production makes them."""
    (job_id,) = make_jobs(1)
    first = claim_one("zombie", lease=60)
    assert first.id == job_id
    zombie = first.claim_token

    assert Job.objects.sweep_expired_leases(10) == 0, "the sweep took a live lease"
    # The zombie's last heartbeat, with the shortest lease; then it goes silent. (Claimed
    # with that lease, the check above raced it: a loaded machine that took a second
    # between the claim and the sweep saw the lease swept as it expired.)
    assert Job.objects.heartbeat(job_id, zombie, lease=SHORT_LEASE)
    time.sleep(PAST_THE_LEASE)
    assert Job.objects.sweep_expired_leases(10) == 1, "the expired lease was not swept"
    swept = fresh(job_id)
    assert swept.status == JobStatus.PENDING
    assert swept.claim_token is None

    second = claim_one("owner", lease=60)
    assert second.id == job_id, "the requeued job was not claimable again"
    owner = second.claim_token
    assert owner != zombie, "the reclaim reused the token it fences on"
    return job_id, zombie, owner


def row(job_id: uuid.UUID) -> tuple[str, int, uuid.UUID | None]:
    job = fresh(job_id)
    return job.status, job.attempts, job.claim_token


def test_a_zombie_worker_cannot_complete_a_job_it_no_longer_owns(
    make_jobs: MakeJobs, events: Recorder
) -> None:
    job_id, zombie, owner = zombie_and_owner(make_jobs)
    events.clear()

    refused = Job.objects.mark_succeeded(job_id, zombie, result="stale")
    assert refused is ClaimTransition.LOST, "a stale worker completed a job it had lost"
    assert row(job_id) == ("running", 2, owner), "the zombie's write touched the row"
    assert fresh(job_id).result is None
    assert events.names() == ["job_claim_lost"]

    accepted = Job.objects.mark_succeeded(job_id, owner, result="fresh")
    assert accepted is ClaimTransition.UPDATED, "the owner was fenced out of its own job"
    assert row(job_id) == ("succeeded", 2, None), "a finished job kept its claim token"
    assert fresh(job_id).result == "fresh"
    assert events.names() == ["job_claim_lost", "job_succeeded"]


def test_a_zombie_worker_cannot_retry_kill_or_heartbeat_a_lost_job(
    make_jobs: MakeJobs, events: Recorder
) -> None:
    job_id, zombie, owner = zombie_and_owner(make_jobs)
    before = fresh(job_id)
    events.clear()

    retried = Job.objects.mark_retry(job_id, zombie, timezone.now(), "stale retry")
    assert retried is ClaimTransition.LOST, "a stale worker requeued a job"
    killed = Job.objects.mark_dead(job_id, zombie, ErrorKind.UNKNOWN, "stale death")
    assert killed is ClaimTransition.LOST, "a stale worker killed a job"
    assert not Job.objects.heartbeat(job_id, zombie, lease=600), "a stale lease was extended"
    assert Job.objects.release(job_id, zombie) is ClaimTransition.LOST

    # None of them touched the row.
    after = fresh(job_id)
    assert row(job_id) == ("running", 2, owner)
    assert after.lease_seconds == 60
    assert after.locked_at == before.locked_at
    assert after.lease_expires_at == before.lease_expires_at
    assert after.last_error == before.last_error
    assert after.error_kind == ""
    assert events.names() == ["job_claim_lost"] * 4

    # The owner's own writes still work: the refusals above were about the token.
    assert Job.objects.heartbeat(job_id, owner, lease=600), "the owner lost its own lease"
    assert fresh(job_id).lease_seconds == 600
    assert Job.objects.mark_dead(job_id, owner, ErrorKind.PERMANENT, "real") is (
        ClaimTransition.UPDATED
    )
    assert row(job_id) == ("dead", 2, None)


@pytest.mark.parametrize("kind", ["succeeded", "retry", "dead"])
def test_a_zombie_is_fenced_out_of_the_workers_batched_write(
    make_jobs: MakeJobs, events: Recorder, kind: str
) -> None:
    """The worker's hot path (``complete_batch``: one statement per transition) keeps
    the fence row by row: in a batch that mixes the zombie's stale write with an
    owner's live one, only the live one lands."""
    job_id, zombie, owner = zombie_and_owner(make_jobs)
    (other_id,) = make_jobs(1)
    other = claim_one("owner", lease=60)
    assert other.id == other_id
    retry_at = timezone.now() + timedelta(minutes=5)
    fields = {
        "succeeded": {"result": "stale"},
        "retry": {"available_at": retry_at, "message": "stale"},
        "dead": {"error_kind": ErrorKind.PERMANENT, "message": "stale"},
    }[kind]
    events.clear()

    outcomes = Job.objects.complete_batch(
        [
            Completion(job_id, zombie, kind, **fields),  # type: ignore[arg-type]
            Completion(other_id, other.claim_token, kind, **fields),  # type: ignore[arg-type]
        ]
    )

    assert outcomes == [ClaimTransition.LOST, ClaimTransition.UPDATED]
    assert row(job_id) == ("running", 2, owner), "the zombie's batched write touched the row"
    assert fresh(job_id).result is None
    assert fresh(other_id).claim_token is None
    landed = {"succeeded": "job_succeeded", "retry": "job_retried", "dead": "job_dead"}[kind]
    assert sorted(events.names()) == sorted(["job_claim_lost", landed])


def test_sweep_of_an_exhausted_job_makes_it_dead_exhausted(
    make_jobs: MakeJobs, events: Recorder
) -> None:
    (job_id,) = make_jobs(1, max_attempts=1)
    zombie = claim_one("crashed", lease=SHORT_LEASE).claim_token
    time.sleep(PAST_THE_LEASE)
    events.clear()
    assert Job.objects.sweep_expired_leases(10) == 1
    job = fresh(job_id)
    assert job.status == JobStatus.DEAD
    assert job.error_kind == ErrorKind.EXHAUSTED
    assert job.claim_token is None
    assert job.failed_at is not None
    assert "lease expired" in job.last_error
    assert events.names() == ["jobs_swept"]
    assert events.events[0][1] == {"job_ids": [job_id], "requeued": 0, "dead": 1}
    # Dead, not claimable, and the crashed worker's late success is refused.
    assert Job.objects.claim("w", lease=60, batch=10) == []
    assert Job.objects.mark_succeeded(job_id, zombie) is ClaimTransition.LOST
    assert fresh(job_id).status == JobStatus.DEAD


def test_sweep_splits_expired_jobs_by_attempts_left(make_jobs: MakeJobs) -> None:
    (last_try,) = make_jobs(1, max_attempts=1, queue="a")
    (has_more,) = make_jobs(1, max_attempts=3, queue="b")
    (alive,) = make_jobs(1, queue="c")
    claim_one(lease=SHORT_LEASE, queues=["a"])
    claim_one(lease=SHORT_LEASE, queues=["b"])
    alive_token = claim_one(lease=60, queues=["c"]).claim_token
    time.sleep(PAST_THE_LEASE)
    assert Job.objects.sweep_expired_leases(10) == 2
    assert row(last_try) == ("dead", 1, None)
    assert row(has_more) == ("pending", 1, None)
    assert row(alive) == ("running", 1, alive_token)


def test_sweep_takes_at_most_a_batch(make_jobs: MakeJobs) -> None:
    make_jobs(5)
    Job.objects.claim("crashed", lease=SHORT_LEASE, batch=5)
    time.sleep(PAST_THE_LEASE)
    assert Job.objects.sweep_expired_leases(2) == 2
    assert Job.objects.sweep_expired_leases(2) == 2
    assert Job.objects.sweep_expired_leases(2) == 1
    assert Job.objects.sweep_expired_leases(2) == 0
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 5


def test_a_heartbeat_keeps_a_lease_alive_past_its_first_expiry(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    claimed = claim_one(lease=SHORT_LEASE)
    time.sleep(0.5)
    assert Job.objects.heartbeat(job_id, claimed.claim_token, lease=3)
    time.sleep(1.1)  # past the first lease, well inside the second
    assert Job.objects.sweep_expired_leases(10) == 0
    assert row(job_id) == ("running", 1, claimed.claim_token)


def test_a_cancelled_running_job_fences_out_its_worker(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    token = claim_one(lease=60).claim_token
    assert Job.objects.cancel(job_id) == 1
    assert Job.objects.mark_succeeded(job_id, token) is ClaimTransition.LOST
    assert not Job.objects.heartbeat(job_id, token, lease=60)
    assert row(job_id) == ("cancelled", 1, None)
    assert fresh(job_id).finished_at is not None
    assert fresh(job_id).finished_at < timezone.now() + timedelta(seconds=5)  # type: ignore[operator]


def test_concurrent_sweepers_take_each_expired_job_once(
    make_jobs: MakeJobs, events: Recorder
) -> None:
    """Every worker sweeps; the same expired job must be reported by one sweep only."""
    ids = make_jobs(60, max_attempts=2)
    ids_set = set(ids)
    Job.objects.claim("crashed", lease=SHORT_LEASE, batch=60)
    # Half of them on their last attempt: those go dead, the rest back to pending.
    Job.objects.filter(id__in=ids[:30]).update(max_attempts=1)
    time.sleep(PAST_THE_LEASE)
    events.clear()
    totals: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def sweeper() -> None:
        try:
            start.wait(timeout=30)
            while swept := Job.objects.sweep_expired_leases(7):
                totals.append(swept)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweeper) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sum(totals) == 60
    reported = [
        job_id for name, kw in events.events if name == "jobs_swept" for job_id in kw["job_ids"]
    ]
    assert sorted(reported) == sorted(ids_set)
    assert sum(kw["dead"] for _, kw in events.events) == 30
    assert Job.objects.filter(status=JobStatus.DEAD, error_kind=ErrorKind.EXHAUSTED).count() == 30
    assert Job.objects.filter(status=JobStatus.PENDING, claim_token__isnull=True).count() == 30
