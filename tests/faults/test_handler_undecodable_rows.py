"""A claimed row that cannot be decoded ends ``dead`` ``malformed``; its batch runs on.

The rows are written with raw SQL, as a bad import, a manual fix or a restore
from an older release could leave them: JSON nested deeper than Python's
decoder goes (RecursionError), and on SQLite text that is not UTF-8. Where the
database itself checks JSON (SQLite's and MariaDB's CHECK constraints), the
check is switched off for that one statement, as a raw import would have.
Before the fix, such a row failed the whole claim: on PostgreSQL and SQLite
after the batch was committed as ``running`` (orphaned until the leases
expired), on MariaDB before (so the poison row blocked every claim).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from django_arcature.models import Job, JobStatus
from django_arcature.testing import run_job
from tests.concurrency import conftest as process_fixtures
from tests.concurrency.conftest import WorkerProcess
from tests.faults.handler_support import outcome, run_worker

# The worker-process fixtures of tests/concurrency, used here too.
events = process_fixtures.events
start_worker = process_fixtures.start_worker

pytestmark = pytest.mark.django_db(transaction=True)

#: Deeper than Python's JSON decoder goes (about 10,000 levels) and within what
#: PostgreSQL's jsonb accepts with its default stack (about 14,500).
DEPTH = 12_000
DEEP_ARGS = '{"args": [' + "[" * DEPTH + "]" * DEPTH + '], "kwargs": {}}'
DEEP_LOG = "[" + "[" * DEPTH + "]" * DEPTH + "]"
#: Valid JSON to every database's own check, but Python refuses to turn more than
#: 4,300 digits into an int (ValueError): the one undecodable row all three can hold.
HUGE_INT_ARGS = '{"args": [' + "7" * 5000 + '], "kwargs": {}}'


def write_raw(job_id: uuid.UUID, column: str, sql_value: str, params: list[Any]) -> None:
    """``UPDATE job SET column = <sql_value>`` with the database's JSON checks off."""
    table = connection.ops.quote_name(Job._meta.db_table)
    key = Job._meta.get_field("id").get_db_prep_value(job_id, connection)
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA ignore_check_constraints = ON")
        elif connection.vendor == "mysql":
            cursor.execute("SET SESSION check_constraint_checks = 0")
        try:
            cursor.execute(
                f"UPDATE {table} SET {connection.ops.quote_name(column)} = {sql_value} "
                "WHERE id = %s",
                [*params, key],
            )
            assert cursor.rowcount == 1
        finally:
            if connection.vendor == "sqlite":
                cursor.execute("PRAGMA ignore_check_constraints = OFF")
            elif connection.vendor == "mysql":
                cursor.execute("SET SESSION check_constraint_checks = 1")


def poison(kind: str) -> uuid.UUID:
    """A job whose stored row cannot be turned into a ClaimedJob, in one of several ways."""
    job_id = Job.objects.enqueue("tests.add", args=[1, 2], priority=5).pk
    if kind == "huge int in payload":
        write_raw(job_id, "payload", "%s", [HUGE_INT_ARGS])
    elif kind == "deep payload":
        write_raw(job_id, "payload", "%s", [DEEP_ARGS])
    elif kind == "deep attempt log":
        write_raw(job_id, "attempt_log", "%s", [DEEP_LOG])
    elif kind == "payload not UTF-8":
        # {"args": ["\xff"], "kwargs": {}} with a raw 0xFF byte inside the string
        write_raw(
            job_id,
            "payload",
            "CAST(X'7b2261726773223a205b22ff225d2c20226b7761726773223a207b7d7d' AS TEXT)",
            [],
        )
    elif kind == "task name not UTF-8":
        write_raw(job_id, "task_name", "CAST(X'7465737473ff2e616464' AS TEXT)", [])
    else:
        raise ValueError(kind)
    return job_id


def rows(ids: list[uuid.UUID]) -> dict[uuid.UUID, Job]:
    """The rows without the columns this process cannot read back (the poison is still there)."""
    safe = ("id", "status", "error_kind", "attempts", "claim_token", "last_error", "result")
    return {row.pk: row for row in Job.objects.only(*safe).filter(pk__in=ids)}


KINDS_EVERYWHERE = ["huge int in payload"]
KINDS_DEEP = ["deep payload", "deep attempt log"]
KINDS_SQLITE = ["payload not UTF-8", "task name not UTF-8"]
#: MariaDB's JSON_VALID refuses nesting past 31 levels, and it checks every CHECK
#: constraint of a row on each UPDATE: a row that fails one can be neither stored
#: with the checks on nor moved by any write, so it cannot reach a claim.
ONLY_DEEP = pytest.mark.only_on(
    "postgresql", "sqlite", reason="MariaDB cannot store JSON nested past 31 levels"
)


def _check_malformed(row: Job, kind: str) -> None:
    assert outcome(row) == (JobStatus.DEAD, "malformed", 1), kind
    assert row.claim_token is None
    assert "could not be read" in row.last_error, row.last_error
    assert len(row.last_error) < 2048


def _claim_all_then_run(kind: str) -> None:
    bad = poison(kind)
    good = [Job.objects.enqueue("tests.add", args=[i, 10]).pk for i in range(5)]
    worker, status = run_worker(concurrency=2, batch=10)
    assert status == 0
    found = rows([bad, *good])
    _check_malformed(found[bad], kind)
    assert [outcome(found[pk]) for pk in good] == [(JobStatus.SUCCEEDED, "", 1)] * 5
    assert [found[pk].result for pk in good] == [10, 11, 12, 13, 14]
    assert (worker.stats.dead, worker.stats.succeeded) == (1, 5)


@pytest.mark.heavy
@pytest.mark.parametrize("kind", KINDS_EVERYWHERE)
def test_an_undecodable_row_dies_malformed_and_its_batch_runs(kind: str) -> None:
    _claim_all_then_run(kind)


@pytest.mark.heavy
@ONLY_DEEP
@pytest.mark.parametrize("kind", KINDS_DEEP)
def test_json_nested_too_deep_dies_malformed_and_its_batch_runs(kind: str) -> None:
    _claim_all_then_run(kind)


@pytest.mark.heavy
@pytest.mark.only_on("sqlite", reason="the other databases refuse text that is not UTF-8")
@pytest.mark.parametrize("kind", KINDS_SQLITE)
def test_text_that_is_not_utf8_dies_malformed_and_its_batch_runs(kind: str) -> None:
    _claim_all_then_run(kind)


@pytest.mark.parametrize("kind", KINDS_EVERYWHERE)
def test_the_claim_returns_the_whole_batch_with_the_bad_row_marked(kind: str) -> None:
    bad = poison(kind)
    good = Job.objects.enqueue("tests.add", args=[2, 2]).pk
    claimed = {job.id: job for job in Job.objects.claim("w", 30, 10)}
    assert set(claimed) == {bad, good}
    assert claimed[bad].undecodable
    assert not claimed[good].undecodable
    assert claimed[good].payload == {"args": [2, 2], "kwargs": {}}


@pytest.mark.parametrize("kind", KINDS_EVERYWHERE)
def test_run_job_on_an_undecodable_row_records_it_malformed(kind: str) -> None:
    bad = poison(kind)
    returned = run_job(bad)
    assert returned.pk == bad
    _check_malformed(rows([bad])[bad], kind)


@pytest.mark.heavy
@pytest.mark.slow
def test_worker_process_runs_the_batch_around_an_undecodable_row(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    bad = poison("huge int in payload")
    good = [Job.objects.enqueue("tests.add", args=[i, 1]).pk for i in range(6)]
    worker = start_worker("--burst", "--batch", "10")
    assert worker.wait(60) == 0, worker.log
    found = rows([bad, *good])
    _check_malformed(found[bad], "huge int in payload")
    assert [found[pk].result for pk in good] == [1, 2, 3, 4, 5, 6]
    assert "7 processed: 6 succeeded, 0 to retry, 1 dead" in worker.log


@ONLY_DEEP
@pytest.mark.parametrize("kind", KINDS_DEEP)
def test_the_claim_returns_a_deep_row_marked(kind: str) -> None:
    bad = poison(kind)
    claimed = {job.id: job for job in Job.objects.claim("w", 30, 10)}
    assert claimed[bad].undecodable


@ONLY_DEEP
@pytest.mark.parametrize("kind", KINDS_DEEP)
def test_run_job_on_a_deep_row_records_it_malformed(kind: str) -> None:
    bad = poison(kind)
    assert run_job(bad).pk == bad
    _check_malformed(rows([bad])[bad], kind)


@pytest.mark.only_on("sqlite", reason="the other databases refuse text that is not UTF-8")
@pytest.mark.parametrize("kind", KINDS_SQLITE)
def test_run_job_on_text_that_is_not_utf8_records_it_malformed(kind: str) -> None:
    bad = poison(kind)
    assert run_job(bad).pk == bad
    _check_malformed(rows([bad])[bad], kind)
