"""``complete_batch`` (the worker's batched completion) writes what ``complete_many`` writes.

Same fields, same per-row fence, same events — whether the database takes the
single-statement path (PostgreSQL, SQLite) or locks then joins (MySQL/MariaDB).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_arcature.db import ClaimedJob
from django_arcature.models import Job
from django_arcature.transitions import ClaimTransition, Completion
from tests.integration.conftest import MakeJobs, Recorder, fresh

pytestmark = pytest.mark.django_db


def completions_for(claimed: list[ClaimedJob], now: object) -> list[Completion]:
    retry_at = timezone.now() + timedelta(minutes=5)
    log = [{"worker": "w1", "error": None}]
    return [
        Completion(
            claimed[0].id, claimed[0].claim_token, "succeeded", result={"n": 1}, attempt_log=log
        ),
        Completion(claimed[1].id, claimed[1].claim_token, "succeeded", result=[2], attempt_log=[]),
        Completion(
            claimed[2].id,
            claimed[2].claim_token,
            "retry",
            available_at=retry_at,
            message="flaky",
            traceback="tb",
        ),
        Completion(
            claimed[3].id, claimed[3].claim_token, "dead", error_kind="permanent", message="no"
        ),
        Completion(claimed[4].id, claimed[4].claim_token, "succeeded", result=None),
    ]


@pytest.mark.parametrize("method", ["complete_batch", "complete_many"])
def test_batch_matches_one_by_one_and_fences_each_row(
    make_jobs: MakeJobs, events: Recorder, method: str
) -> None:
    make_jobs(5)
    claimed = sorted(Job.objects.claim("w1", lease=60, batch=5), key=lambda job: job.id)
    assert len(claimed) == 5
    Job.objects.cancel(claimed[4].id)  # its claim is lost before the write
    events.clear()
    batch = completions_for(claimed, None)

    outcomes = getattr(Job.objects, method)(batch)

    assert outcomes == [ClaimTransition.UPDATED] * 4 + [ClaimTransition.LOST]
    first, second, retried, dead, cancelled = (fresh(job.id) for job in claimed)
    assert (first.status, first.result, first.attempt_log) == (
        "succeeded",
        {"n": 1},
        [{"worker": "w1", "error": None}],
    )
    assert first.finished_at is not None
    assert first.claim_token is None
    assert (second.status, second.result) == ("succeeded", [2])
    assert (retried.status, retried.last_error, retried.last_traceback) == (
        "pending",
        "flaky",
        "tb",
    )
    assert retried.available_at == batch[2].available_at
    assert retried.claim_token is None
    assert retried.finished_at is None
    assert (dead.status, dead.error_kind, dead.last_error) == ("dead", "permanent", "no")
    assert dead.failed_at is not None
    assert (cancelled.status, cancelled.result) == ("cancelled", None)
    assert events.names().count("job_succeeded") == 2
    assert events.names().count("job_retried") == 1
    assert events.names().count("job_dead") == 1
    lost = [kw for name, kw in events.events if name == "job_claim_lost"]
    assert [kw["job_id"] for kw in lost] == [claimed[4].id]


def test_stale_token_is_fenced_out_in_a_batch(make_jobs: MakeJobs) -> None:
    make_jobs(2)
    first, second = Job.objects.claim("w1", lease=60, batch=2)
    stale = Completion(first.id, second.claim_token, "succeeded")  # right id, wrong token
    good = Completion(second.id, second.claim_token, "succeeded")
    assert Job.objects.complete_batch([stale, good]) == [
        ClaimTransition.LOST,
        ClaimTransition.UPDATED,
    ]
    assert fresh(first.id).status == "running"
    assert fresh(second.id).status == "succeeded"
