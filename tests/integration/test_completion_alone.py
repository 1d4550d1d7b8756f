"""A flush of plain jobs is one autocommit statement; members still settle in a transaction.

On PostgreSQL the worker's batched completion writes the jobs that are no workflow or
batch member in one statement outside any transaction (``Driver.complete_plain``), and
hands the members back to the transaction that settles their dependents. These tests
hold what that may not change: a member's completion and its release commit together,
a failure between the two writes loses nothing and releases once, a write that had
landed before the failure is recognised, and inside a caller's transaction nothing is
written outside it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction

from django_arcature.models import Job, JobStatus
from django_arcature.transitions import ClaimTransition, Completion
from django_arcature.workflows.models import WorkflowNode

from .conftest import MakeJobs, fresh, member_flow

pytestmark = pytest.mark.django_db(transaction=True)


def claim_token(job_id: uuid.UUID) -> uuid.UUID:
    claimed = Job.objects.claim_job(job_id, "w1", 60)
    assert claimed is not None, f"{job_id} was not claimable"
    return claimed.claim_token


def succeeded(job_id: uuid.UUID) -> Completion:
    """A worker's completion: it carries an attempt log, so a landed write is recognised."""
    log = [{"worker": "w1", "error": None}]
    return Completion(job_id, claim_token(job_id), "succeeded", attempt_log=log)


def write(completions: list[Completion]) -> list[ClaimTransition]:
    """The worker's flush: plain jobs may go alone (``plain_alone``)."""
    return [w.outcome for w in Job.objects.write_completions(completions, plain_alone=True)]


@contextmanager
def statements() -> Iterator[list[tuple[str, bool]]]:
    """Each statement sent while inside: (its SQL, whether it ran in a transaction)."""
    seen: list[tuple[str, bool]] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        seen.append((sql, connection.in_atomic_block or not connection.get_autocommit()))
        return execute(sql, params, many, ctx)

    with connection.execute_wrapper(record):
        yield seen


@contextmanager
def failing_after_first_update() -> Iterator[None]:
    """The connection fails on the statement after the batch's first UPDATE (the members'
    write), as if the server went away between the two writes."""
    updates = 0

    def fail(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        nonlocal updates
        if "UPDATE" in sql:
            updates += 1
            if updates == 2:
                raise OperationalError("server closed the connection unexpectedly")
        return execute(sql, params, many, ctx)

    with connection.execute_wrapper(fail):
        yield


@pytest.mark.only_on("postgresql", reason="PostgreSQL's driver writes plain jobs alone")
def test_a_flush_of_plain_jobs_is_one_statement_outside_any_transaction(
    make_jobs: MakeJobs,
) -> None:
    plain = make_jobs(5)
    completions = [succeeded(job_id) for job_id in plain]

    with statements() as seen:
        assert write(completions) == [ClaimTransition.UPDATED] * 5

    assert len(seen) == 1, seen
    sql, in_transaction = seen[0]
    assert "UPDATE" in sql
    assert WorkflowNode._meta.db_table in sql
    assert not in_transaction
    assert {fresh(job_id).status for job_id in plain} == {JobStatus.SUCCEEDED}


@pytest.mark.only_on("postgresql", reason="PostgreSQL's driver writes plain jobs alone")
def test_members_are_written_with_their_release_in_one_transaction(make_jobs: MakeJobs) -> None:
    root, child = member_flow("alone and members")
    plain = make_jobs(2)
    completions = [succeeded(plain[0]), succeeded(root), succeeded(plain[1])]

    with statements() as seen:
        outcomes = write(completions)

    assert outcomes == [ClaimTransition.UPDATED] * 3
    updates = [(sql, inside) for sql, inside in seen if sql.lstrip().startswith("WITH")]
    assert [inside for _, inside in updates] == [False, True]  # plain alone, then the member
    # Everything after the plain jobs' statement (the member and its release) was inside.
    assert all(inside for _, inside in seen[1:]), seen
    assert fresh(root).status == JobStatus.SUCCEEDED
    assert fresh(child).status == JobStatus.PENDING


def test_a_failure_between_the_two_writes_loses_nothing_and_releases_once(
    make_jobs: MakeJobs,
) -> None:
    root, child = member_flow("cut between writes")
    plain = make_jobs(3)
    completions = [succeeded(plain[0]), succeeded(root), succeeded(plain[1]), succeeded(plain[2])]

    with failing_after_first_update(), pytest.raises(OperationalError):
        write(completions)
    # Where the plain jobs went alone, they landed; the member did not, nor its release.
    assert fresh(root).status == JobStatus.RUNNING
    assert fresh(child).status == JobStatus.WAITING

    # The worker writes the same batch again once the database answers.
    assert write(completions) == [ClaimTransition.UPDATED] * 4
    assert {fresh(job_id).status for job_id in plain} == {JobStatus.SUCCEEDED}
    assert fresh(root).status == JobStatus.SUCCEEDED
    assert fresh(child).status == JobStatus.PENDING
    assert Job.objects.filter(id=child, status=JobStatus.PENDING).count() == 1


def test_inside_a_callers_transaction_nothing_is_written_outside_it(make_jobs: MakeJobs) -> None:
    plain = make_jobs(3)
    completions = [succeeded(job_id) for job_id in plain]

    with statements() as seen, transaction.atomic():
        outcomes = write(completions)
        transaction.set_rollback(True)  # the caller rolls back

    assert outcomes == [ClaimTransition.UPDATED] * 3
    assert seen
    # (SQLite's BEGIN IMMEDIATE is the statement that opens the transaction.)
    assert all(inside for sql, inside in seen if not sql.startswith("BEGIN")), seen
    assert {fresh(job_id).status for job_id in plain} == {JobStatus.RUNNING}


def test_a_stale_claim_next_to_plain_jobs_stays_lost(make_jobs: MakeJobs) -> None:
    plain = make_jobs(2)
    stale = make_jobs(1)[0]
    stale_completion = succeeded(stale)
    Job.objects.filter(id=stale).update(claim_token=uuid.uuid4())  # re-claimed elsewhere
    completions = [succeeded(plain[0]), stale_completion, succeeded(plain[1])]

    outcomes = write(completions)

    assert outcomes == [ClaimTransition.UPDATED, ClaimTransition.LOST, ClaimTransition.UPDATED]
    assert fresh(stale).status == JobStatus.RUNNING


def test_complete_batch_still_writes_the_whole_batch_in_one_transaction(
    make_jobs: MakeJobs,
) -> None:
    """The public ``complete_batch`` promises one transaction: without ``plain_alone``
    a failure while settling the member leaves the plain jobs unwritten as well."""
    root, child = member_flow("one transaction")
    plain = make_jobs(2)
    completions = [succeeded(plain[0]), succeeded(root), succeeded(plain[1])]

    with failing_after_first_update(), pytest.raises(OperationalError):
        Job.objects.complete_batch(completions)

    assert {fresh(job_id).status for job_id in [*plain, root]} == {JobStatus.RUNNING}
    assert fresh(child).status == JobStatus.WAITING
