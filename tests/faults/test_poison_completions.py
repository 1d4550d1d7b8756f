"""Defect 1 of issue 10: a completion the database refuses must not freeze the worker.

Before the fix, one row whose value the database refused (``NaN`` in a result,
NUL or a lone surrogate in text on PostgreSQL) failed the whole batched UPDATE;
the worker retried that batch forever, heartbeating every job it held, and
``--burst`` never exited. Now the refusal is isolated to its row: the other rows
land, the offending job ends ``dead`` with a reason naming what could not be
stored, and every stored text goes through one sanitizer first.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from django_arcature.models import Job
from django_arcature.transitions import ClaimTransition, Completion
from tests.faults import jobs as fault_jobs
from tests.faults.conftest import run_worker
from tests.integration.conftest import MakeJobs, Recorder, fresh

pytestmark = pytest.mark.django_db(transaction=True)

REPLACEMENT = "\ufffd"
#: A result our sanitizer accepts and the database refuses (see ``refusing_database``).
REFUSED_RESULT = "refused by the database"


@pytest.fixture
def refusing_database() -> Iterator[None]:
    """Make the database itself refuse one result value, as a constraint the worker cannot
    foresee would: a CHECK constraint on PostgreSQL and MariaDB, a trigger on SQLite."""
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                f"CREATE TRIGGER arcature_test_refuse BEFORE UPDATE ON {table} "
                f"WHEN NEW.result = '\"{REFUSED_RESULT}\"' "
                "BEGIN SELECT RAISE(ABORT, 'refused by a test trigger'); END"
            )
        else:
            cast = "::text" if connection.vendor == "postgresql" else ""
            cursor.execute(
                f"ALTER TABLE {table} ADD CONSTRAINT arcature_test_refuse "
                f"CHECK (result IS NULL OR result{cast} <> '\"{REFUSED_RESULT}\"')"
            )
    yield
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("DROP TRIGGER arcature_test_refuse")
        else:
            cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT arcature_test_refuse")


def claim_all(count: int) -> list[Any]:
    claimed = Job.objects.claim("w1", lease=60, batch=count)
    assert len(claimed) == count
    return sorted(claimed, key=lambda job: job.id)


def success(job: Any, result: Any) -> Completion:
    return Completion(
        job.id,
        job.claim_token,
        "succeeded",
        result=result,
        attempt_log=[{"worker": "w1", "error": None}],
    )


@pytest.mark.parametrize("method", ["complete_batch", "complete_many"])
@pytest.mark.parametrize(
    "bad",
    [float("nan"), {"deep": [float("inf")]}, [1, float("-inf")], 10**5000, REFUSED_RESULT],
    ids=["nan", "inf", "-inf", "huge-int", "refused-by-the-database"],
)
def test_a_refused_result_is_isolated_to_its_row(
    make_jobs: MakeJobs, events: Recorder, method: str, bad: Any, refusing_database: None
) -> None:
    make_jobs(4)
    first, poison, third, fourth = claim_all(4)
    events.clear()

    outcomes = getattr(Job.objects, method)(
        [success(first, 1), success(poison, bad), success(third, {"n": 3}), success(fourth, 4)]
    )

    assert outcomes == [ClaimTransition.UPDATED] * 4  # the poison row's dead write landed
    assert [fresh(job.id).result for job in (first, third, fourth)] == [1, {"n": 3}, 4]
    assert {fresh(job.id).status for job in (first, third, fourth)} == {"succeeded"}
    row = fresh(poison.id)
    assert (row.status, row.error_kind, row.result, row.claim_token) == (
        "dead",
        "permanent",
        None,
        None,
    )
    assert "could not be stored" in row.last_error
    assert "result" in row.last_error
    assert row.finished_at is not None
    assert events.names().count("job_succeeded") == 3
    dead = [kwargs for name, kwargs in events.events if name == "job_dead"]
    assert [event["job_id"] for event in dead] == [poison.id]
    assert dead[0]["completion"].error_kind == "permanent"
    assert "job_claim_lost" not in events.names()


def test_a_batch_of_only_refused_rows_lands_each_as_dead(
    make_jobs: MakeJobs, refusing_database: None
) -> None:
    make_jobs(4)
    claimed = claim_all(4)
    Job.objects.complete_batch(
        [success(job, float("nan") if n % 2 else REFUSED_RESULT) for n, job in enumerate(claimed)]
    )
    assert [fresh(job.id).status for job in claimed] == ["dead"] * 4


def test_stale_rows_next_to_a_refused_row_stay_lost(
    make_jobs: MakeJobs, events: Recorder, refusing_database: None
) -> None:
    make_jobs(3)
    good, poison, cancelled = claim_all(3)
    Job.objects.cancel(cancelled.id)
    events.clear()
    outcomes = Job.objects.complete_batch(
        [success(good, 1), success(poison, REFUSED_RESULT), success(cancelled, 3)]
    )
    assert outcomes == [ClaimTransition.UPDATED, ClaimTransition.UPDATED, ClaimTransition.LOST]
    assert (fresh(cancelled.id).status, fresh(cancelled.id).result) == ("cancelled", None)
    assert sorted(events.names()) == ["job_claim_lost", "job_dead", "job_succeeded"]


@pytest.mark.parametrize("method", ["complete_batch", "complete_many"])
def test_every_stored_text_is_sanitized_the_same_on_every_database(
    make_jobs: MakeJobs, method: str
) -> None:
    """NUL and lone surrogates become U+FFFD in results, errors, tracebacks and attempt logs."""
    make_jobs(3)
    succeeded, retried, dead = claim_all(3)
    hostile_error = {
        "exception_class_path": "builtins.RuntimeError\x00",
        "traceback": "Traceback\x00 with a lone \ud800 surrogate",
    }
    getattr(Job.objects, method)(
        [
            success(succeeded, {"text\x00": ["a\ud800b", "ok"], "n": 1.5}),
            Completion(
                retried.id,
                retried.claim_token,
                "retry",
                available_at=fresh(retried.id).available_at,
                message="boom\x00",
                traceback="tb \udfff",
                attempt_log=[{"worker": "w1\x00", "error": hostile_error}],
            ),
            Completion(
                dead.id,
                dead.claim_token,
                "dead",
                error_kind="permanent",
                message="\ud83d half an emoji",
                traceback="\x00",
                attempt_log=[{"worker": "w1", "error": hostile_error}],
            ),
        ]
    )
    row = fresh(succeeded.id)
    assert (row.status, row.result) == (
        "succeeded",
        {f"text{REPLACEMENT}": [f"a{REPLACEMENT}b", "ok"], "n": 1.5},
    )
    row = fresh(retried.id)
    assert (row.status, row.last_error, row.last_traceback) == (
        "pending",
        f"boom{REPLACEMENT}",
        f"tb {REPLACEMENT}",
    )
    entry = row.attempt_log[-1]
    assert entry["worker"] == f"w1{REPLACEMENT}"
    assert entry["error"] == {
        "exception_class_path": f"builtins.RuntimeError{REPLACEMENT}",
        "traceback": f"Traceback{REPLACEMENT} with a lone {REPLACEMENT} surrogate",
    }
    row = fresh(dead.id)
    assert (row.status, row.last_error, row.last_traceback) == (
        "dead",
        f"{REPLACEMENT} half an emoji",
        REPLACEMENT,
    )
    assert row.attempt_log[-1]["error"]["traceback"].startswith(f"Traceback{REPLACEMENT}")


def test_an_attempt_log_traceback_is_cut_to_the_traceback_limit(make_jobs: MakeJobs) -> None:
    from django_arcature.conf import get_settings

    limit = get_settings().traceback_max_bytes
    make_jobs(1)
    (job,) = claim_all(1)
    huge = "x" * (limit * 3)
    Job.objects.complete_batch(
        [
            Completion(
                job.id,
                job.claim_token,
                "dead",
                error_kind="permanent",
                message="m",
                traceback=huge,
                attempt_log=[
                    {
                        "worker": "w1",
                        "error": {"exception_class_path": "builtins.E", "traceback": huge},
                    }
                ],
            )
        ]
    )
    row = fresh(job.id)
    stored = row.attempt_log[-1]["error"]["traceback"]
    assert len(stored.encode()) <= limit
    assert len(row.last_traceback.encode()) <= limit


# --- the same through a real worker loop ------------------------------------------------


def enqueue(task: str, *args: Any, **kwargs: Any) -> uuid.UUID:
    return Job.objects.enqueue(task, args=list(args), kwargs=kwargs).id


def test_a_worker_with_hostile_results_and_errors_drains_and_exits() -> None:
    assert fault_jobs.HOSTILE  # the handlers are registered by importing the module
    good = [enqueue("faults.ok", n) for n in range(6)]
    results = {kind: enqueue("faults.return_hostile", kind) for kind in fault_jobs.HOSTILE}
    permanent = {
        kind: enqueue("faults.raise_hostile", kind, permanent=True) for kind in ("nul", "surrogate")
    }
    retried = {kind: enqueue("faults.raise_hostile", kind) for kind in ("nul", "surrogate")}

    run = run_worker(timeout=30, concurrency=2, batch=20)

    assert run.finished, f"the worker did not finish: {run.worker.stats.summary()} {run.error!r}"
    assert run.status == 0
    assert [fresh(job_id).result for job_id in good] == list(range(6))
    assert not Job.objects.filter(status__in=["pending", "running"]).exists()
    # A @job's return value is checked as its arguments are (text PostgreSQL refuses,
    # NaN): refused the same way on every database, before the write path's sanitizer.
    for kind in ("nul", "surrogate", "nul_key", "surrogate_deep", "nan", "inf", "nested_nan"):
        row = fresh(results[kind])
        assert (row.status, row.error_kind, row.result) == ("dead", "permanent", None), kind
    for job_id in [*permanent.values(), *retried.values()]:
        row = fresh(job_id)
        assert row.status == "dead"
        assert REPLACEMENT in row.last_error
        assert "\x00" not in row.last_traceback
        assert all(REPLACEMENT in entry["error"]["traceback"] for entry in row.attempt_log)
    assert [fresh(job_id).attempts for job_id in retried.values()] == [2, 2]
    stats = run.worker.stats
    assert (stats.lost, stats.claimed) == (0, stats.succeeded + stats.retried + stats.dead)


def test_a_refused_result_does_not_stop_good_jobs_of_the_same_batch() -> None:
    """A value only the database can refuse (NaN from django.tasks), straight into the batch."""
    good = [enqueue("faults.ok", n) for n in range(5)]
    claimed = Job.objects.claim("w1", lease=60, batch=10)
    completions = [
        success(job, float("nan") if index == 2 else index) for index, job in enumerate(claimed)
    ]
    Job.objects.complete_batch(completions)
    statuses = sorted(fresh(job_id).status for job_id in good)
    assert statuses == ["dead", "succeeded", "succeeded", "succeeded", "succeeded"]
    results = [fresh(job_id).result for job_id in good]
    assert not [value for value in results if isinstance(value, float) and math.isnan(value)]


def test_a_result_over_the_size_limit_ends_dead_saying_so(make_jobs: MakeJobs) -> None:
    from django_arcature.core.text import DEFAULT_RESULT_MAX_BYTES

    make_jobs(2)
    small, big = claim_all(2)
    Job.objects.complete_batch(
        [success(small, "ok"), success(big, "x" * (DEFAULT_RESULT_MAX_BYTES + 1))]
    )
    assert fresh(small.id).status == "succeeded"
    row = fresh(big.id)
    assert (row.status, row.error_kind, row.result) == ("dead", "permanent", None)
    assert "over the limit" in row.last_error


def test_a_batch_larger_than_a_statement_may_be_is_written_in_parts(
    make_jobs: MakeJobs, events: Recorder
) -> None:
    """20 results just under the limit: 18 MiB, more than MariaDB's 16 MiB max_allowed_packet."""
    from django_arcature.core.text import DEFAULT_RESULT_MAX_BYTES

    make_jobs(20)
    claimed = claim_all(20)
    events.clear()
    payload = "y" * (DEFAULT_RESULT_MAX_BYTES - 1000)
    # Each row's own value (equal values would be sent once, shared by every row).
    outcomes = Job.objects.complete_batch(
        [success(job, f"{n:02d}{payload}") for n, job in enumerate(claimed)]
    )
    assert outcomes == [ClaimTransition.UPDATED] * 20
    assert Job.objects.filter(status="succeeded").count() == 20
    assert events.names().count("job_succeeded") == 20
