"""Adversarial reads of the worker's flush (``write_completions(plain_alone=True)``).

The worker keeps finished jobs up to ``FLUSH_DELAY`` before writing them, and on
PostgreSQL writes the plain ones in one autocommit statement before the members'
transaction. These tests drive that write directly (the same call the worker's flush
makes) with what may happen to a job between its handler's end and its write:

* an operator cancels it (a plain job, and a workflow member whose dependents the
  cancel settles) while it waits in the worker's finished list;
* the write lands but its acknowledgement is lost, an operator then cancels, and the
  worker writes the same batch again;
* its result holds what the database cannot store (NUL, a lone surrogate, NaN, an
  integer out of range) next to good rows, in the one-statement form.

Each is a fixed sequence of calls: no thread, no sleep.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import OperationalError, connection

from django_arcature.models import Job, JobStatus
from django_arcature.transitions import ClaimTransition, Completion

from .conftest import MakeJobs, Recorder, fresh, member_flow

pytestmark = pytest.mark.django_db(transaction=True)

REPLACEMENT = "\ufffd"


def claimed(job_id: uuid.UUID) -> uuid.UUID:
    """Claim ``job_id`` as worker w1; its claim token."""
    job = Job.objects.claim_job(job_id, "w1", 60)
    assert job is not None, f"{job_id} was not claimable"
    return job.claim_token


def succeeded(job_id: uuid.UUID, result: Any = None) -> Completion:
    """What a worker's handler thread leaves in the finished list (with its attempt log,
    which is what lets a landed write be recognised)."""
    log = [{"worker": "w1", "error": None}]
    return Completion(job_id, claimed(job_id), "succeeded", result=result, attempt_log=log)


def flush(completions: list[Completion]) -> list[ClaimTransition]:
    """The worker's flush call."""
    return [w.outcome for w in Job.objects.write_completions(completions, plain_alone=True)]


@contextmanager
def answer_lost_after_first_update() -> Iterator[None]:
    """The first UPDATE runs, then its answer is lost (the connection breaks before the
    client reads it): the statement's effect stands where it committed by itself."""
    seen = 0

    def lose(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        nonlocal seen
        result = execute(sql, params, many, ctx)
        if "UPDATE" in sql:
            seen += 1
            if seen == 1:
                raise OperationalError("server closed the connection unexpectedly")
        return result

    with connection.execute_wrapper(lose):
        yield


def outcome_events(events: Recorder) -> list[tuple[str, uuid.UUID]]:
    """The completion events sent, as (name, job id), sorted."""
    names = {"job_succeeded", "job_retried", "job_dead", "job_claim_lost"}
    return sorted((name, kw["job_id"]) for name, kw in events.events if name in names)


def test_a_cancel_while_finished_jobs_wait_for_their_write_fences_them_out(
    make_jobs: MakeJobs, events: Recorder
) -> None:
    """Finished but not yet written (``FLUSH_DELAY``), a plain job and a workflow member
    are cancelled by an operator: the flush may not overwrite either cancel, nor release
    the member's dependent; the plain jobs beside them still land, each event once."""
    root, child = member_flow("cancelled while unflushed")
    kept, cancelled_plain, last = make_jobs(3)
    completions = [succeeded(kept), succeeded(cancelled_plain), succeeded(root), succeeded(last)]
    assert Job.objects.cancel(cancelled_plain) == 1
    assert Job.objects.cancel(root) == 1
    assert fresh(child).status == JobStatus.CANCELLED  # the cancel settled the dependent
    events.clear()

    outcomes = flush(completions)

    assert outcomes == [
        ClaimTransition.UPDATED,
        ClaimTransition.LOST,
        ClaimTransition.LOST,
        ClaimTransition.UPDATED,
    ]
    assert [fresh(job_id).status for job_id in (kept, cancelled_plain, root, child, last)] == [
        JobStatus.SUCCEEDED,
        JobStatus.CANCELLED,
        JobStatus.CANCELLED,
        JobStatus.CANCELLED,
        JobStatus.SUCCEEDED,
    ]
    assert fresh(cancelled_plain).result is None
    assert outcome_events(events) == sorted(
        [
            ("job_succeeded", kept),
            ("job_claim_lost", cancelled_plain),
            ("job_claim_lost", root),
            ("job_succeeded", last),
        ]
    )


def test_a_lost_answer_then_a_cancel_then_the_same_flush_again(
    make_jobs: MakeJobs, events: Recorder
) -> None:
    """The flush's first UPDATE lands but its answer is lost; an operator's cancel then
    finds the plain jobs finished where that UPDATE committed alone (PostgreSQL) and
    cancels them where it did not (the batch rolled back with its transaction). The
    worker's second flush must agree with the rows: recognised as landed where they
    landed, fenced out where cancelled; never both events for one job, none twice."""
    first, second = make_jobs(2)
    completions = [succeeded(first, 1), succeeded(second, 2)]

    with answer_lost_after_first_update(), pytest.raises(OperationalError):
        flush(completions)
    landed_alone = fresh(first).status == JobStatus.SUCCEEDED
    # Where the UPDATE ran in the batch's transaction the error rolled it back.
    assert landed_alone == (connection.vendor == "postgresql")
    assert fresh(second).status == fresh(first).status
    assert Job.objects.cancel(second) == (0 if landed_alone else 1)
    events.clear()

    outcomes = flush(completions)

    if landed_alone:
        assert outcomes == [ClaimTransition.UPDATED, ClaimTransition.UPDATED]
        assert [fresh(first).result, fresh(second).result] == [1, 2]
        assert outcome_events(events) == sorted(
            [("job_succeeded", first), ("job_succeeded", second)]
        )
    else:
        assert outcomes == [ClaimTransition.UPDATED, ClaimTransition.LOST]
        assert fresh(first).status == JobStatus.SUCCEEDED
        assert fresh(second).status == JobStatus.CANCELLED
        assert outcome_events(events) == sorted(
            [("job_succeeded", first), ("job_claim_lost", second)]
        )


@pytest.mark.parametrize(
    "bad",
    [float("nan"), {"deep": [float("inf")]}, 10**5000],
    ids=["nan", "inf", "huge-int"],
)
def test_an_unstorable_result_in_the_one_statement_flush_is_isolated_to_its_row(
    make_jobs: MakeJobs, events: Recorder, bad: Any
) -> None:
    """A value the JSON column cannot hold, amid plain jobs written alone: the other rows
    land with their results, the poison row ends dead, and nothing is written twice."""
    ids = make_jobs(4)
    results: list[Any] = [1, bad, {"n": 3}, "four"]
    completions = [succeeded(job_id, result) for job_id, result in zip(ids, results, strict=True)]
    events.clear()

    assert flush(completions) == [ClaimTransition.UPDATED] * 4

    good = [ids[0], ids[2], ids[3]]
    assert [fresh(job_id).result for job_id in good] == [1, {"n": 3}, "four"]
    assert {fresh(job_id).status for job_id in good} == {JobStatus.SUCCEEDED}
    poison = fresh(ids[1])
    assert (poison.status, poison.result, poison.claim_token) == (JobStatus.DEAD, None, None)
    assert "could not be stored" in poison.last_error
    assert outcome_events(events) == sorted(
        [("job_succeeded", job_id) for job_id in good] + [("job_dead", ids[1])]
    )


def test_nul_and_lone_surrogates_in_the_one_statement_flush_are_replaced(
    make_jobs: MakeJobs,
) -> None:
    """NUL (which PostgreSQL's jsonb refuses) and lone surrogates in a result's keys and
    values, through the plain jobs' one statement: stored as U+FFFD, the row succeeded."""
    hostile, plain = make_jobs(2)
    completions = [
        succeeded(hostile, {"key\x00": ["a\ud800b", "\udfff", "x\x00y"], "n": 1.5}),
        succeeded(plain, "ok"),
    ]

    assert flush(completions) == [ClaimTransition.UPDATED] * 2

    row = fresh(hostile)
    assert (row.status, row.result) == (
        JobStatus.SUCCEEDED,
        {f"key{REPLACEMENT}": [f"a{REPLACEMENT}b", REPLACEMENT, f"x{REPLACEMENT}y"], "n": 1.5},
    )
    assert (fresh(plain).status, fresh(plain).result) == (JobStatus.SUCCEEDED, "ok")
