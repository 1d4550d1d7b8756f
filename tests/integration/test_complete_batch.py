"""``complete_batch`` (the worker's batched completion) writes what ``complete_many`` writes.

Same fields, same per-row fence, same events — whether the database takes the
single-statement path (PostgreSQL, SQLite) or locks then joins (MySQL/MariaDB).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

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
        # This attempt's entry carries its claim token: proof, after a lost
        # acknowledgement, that this claim's write is the one that landed.
        [{"worker": "w1", "error": None, "claim": claimed[0].claim_token.hex}],
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


@pytest.mark.parametrize("method", ["complete_batch", "complete_many"])
def test_each_row_of_one_batch_keeps_its_own_values(make_jobs: MakeJobs, method: str) -> None:
    """Rows of one transition that differ in every column a batch varies by row: fixed
    retry times, backoffs on the database's clock, attempt counts, texts with quotes,
    backslashes and emoji, results of every JSON kind (PostgreSQL sends them as one
    JSON parameter; a float the JSON form could misread must come back a float)."""
    make_jobs(8)
    claimed = sorted(Job.objects.claim("w1", lease=60, batch=8), key=lambda job: job.id)
    at = timezone.now().replace(microsecond=123456) + timedelta(hours=1)
    results: list[object] = [None, {"a": [1, 2.5, None], "b": {}}, 1e16, 'q"\\é😀', []]
    done = [
        Completion(job.id, job.claim_token, "succeeded", result=result, attempt_log=[{"n": i}])
        for i, (job, result) in enumerate(zip(claimed, results, strict=False))
    ]
    done += [
        Completion(
            claimed[5].id,
            claimed[5].claim_token,
            "retry",
            available_at=at,
            message='say "hi"\\',
            traceback="tb\n\tline",
            attempts=0,
        ),
        Completion(
            claimed[6].id,
            claimed[6].claim_token,
            "retry",
            available_at=at + timedelta(minutes=1),
            message="second",
            attempts=3,
        ),
    ]
    outcomes = getattr(Job.objects, method)(done)

    assert outcomes == [ClaimTransition.UPDATED] * 7
    for job, result in zip(claimed, results, strict=False):
        row = fresh(job.id)
        assert (row.status, row.result, type(row.result)) == ("succeeded", result, type(result))
    first, second = fresh(claimed[5].id), fresh(claimed[6].id)
    assert (first.status, first.available_at, first.attempts) == ("pending", at, 0)
    assert (first.last_error, first.last_traceback) == ('say "hi"\\', "tb\n\tline")
    assert (second.available_at, second.attempts, second.last_error) == (
        at + timedelta(minutes=1),
        3,
        "second",
    )
    assert fresh(claimed[7].id).status == "running"  # not in the batch: untouched


def test_retries_on_the_database_clock_keep_each_rows_backoff(make_jobs: MakeJobs) -> None:
    make_jobs(2)
    claimed = sorted(Job.objects.claim("w1", lease=60, batch=2), key=lambda job: job.id)
    delays = [5.0, 3600.0]
    done = [
        Completion(job.id, job.claim_token, "retry", message="later", retry_delay=delay)
        for job, delay in zip(claimed, delays, strict=True)
    ]

    assert Job.objects.complete_batch(done) == [ClaimTransition.UPDATED] * 2

    soon, later = (fresh(job.id) for job in claimed)
    gap = (later.available_at - soon.available_at).total_seconds()
    assert 3590 <= gap <= 3600  # the same statement's clock, each its own offset


@pytest.mark.only_on("postgresql", reason="only PostgreSQL sends a batch as one JSON parameter")
def test_one_statement_text_serves_every_batch_of_a_shape(make_jobs: MakeJobs) -> None:
    """The text depends on which columns vary, not on how many rows: psycopg parses it
    once (it caches statements of up to 4 KiB and 50 parameters)."""
    from django.db import connection

    from django_arcature.db.batch import _json_statement
    from django_arcature.transitions import transition_fields

    make_jobs(7)
    claimed = Job.objects.claim("w1", lease=60, batch=7)
    rows = [
        (
            job.id,
            job.claim_token,
            transition_fields(
                Completion(job.id, job.claim_token, "succeeded", attempt_log=[{"worker": str(i)}])
            ),
        )
        for i, job in enumerate(claimed)
    ]
    small_sql, small_params = _json_statement(connection, Job, rows[:2])
    large_sql, large_params = _json_statement(connection, Job, rows)

    assert small_sql == large_sql
    assert len(small_params) == len(large_params) < 50
    assert len(large_sql.encode()) <= 4096
    assert (
        Job.objects.complete_batch(
            [Completion(job.id, job.claim_token, "succeeded", attempt_log=[]) for job in claimed]
        )
        == [ClaimTransition.UPDATED] * 7
    )


def test_a_backoff_every_row_shares_is_counted_from_the_database_clock(
    make_jobs: MakeJobs,
) -> None:
    make_jobs(2)
    claimed = Job.objects.claim("w1", lease=60, batch=2)
    done = [
        Completion(job.id, job.claim_token, "retry", message="later", retry_delay=3600.0)
        for job in claimed
    ]

    assert Job.objects.complete_batch(done) == [ClaimTransition.UPDATED] * 2

    for job in claimed:
        row = fresh(job.id)
        assert row.status == "pending"
        assert row.finished_at is None
        assert row.started_at is not None
        ahead = (row.available_at - row.started_at).total_seconds()
        assert 3590 <= ahead <= 3700


@pytest.mark.only_on("postgresql", reason="only PostgreSQL sends a batch as one JSON parameter")
def test_offsets_are_parameters_so_the_statements_do_not_grow_with_them(
    make_jobs: MakeJobs,
) -> None:
    """A backoff or lease every row shares is sent as a parameter: backoffs drawn with
    jitter must not each build (and keep) a statement of their own."""
    from django.db import connection

    from django_arcature.db import batch
    from django_arcature.transitions import transition_fields

    make_jobs(2)
    claimed = Job.objects.claim("w1", lease=60, batch=2)

    def rows(delay: float) -> list[tuple[Any, Any, dict[str, Any]]]:
        return [
            (
                job.id,
                job.claim_token,
                transition_fields(
                    Completion(job.id, job.claim_token, "retry", message="m", retry_delay=delay)
                ),
            )
            for job in claimed
        ]

    first_sql, first_params = batch._json_statement(connection, Job, rows(3.5))
    known = len(batch._JSON_STATEMENTS)
    second_sql, second_params = batch._json_statement(connection, Job, rows(7.25))

    assert first_sql == second_sql
    assert len(batch._JSON_STATEMENTS) == known
    assert first_params[1:] != second_params[1:]  # the offsets themselves
