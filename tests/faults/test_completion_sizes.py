"""Issue 19 B1: an oversized completion must never reach the database.

The attempt log grew one entry per attempt with no cap, each up to
``TRACEBACK_MAX_BYTES``: 500 attempts of a 32 KiB traceback are 16 MiB of JSON,
over MariaDB's default ``max_allowed_packet`` (16 MiB), which answers by
dropping the connection; the worker then retried the same write for ever. Now
the log keeps its first and latest entries and counts the dropped ones, and a
row is cut to a per-statement budget before it is sent. Every statement the
completions send is measured here as the server would receive it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from django_arcature.conf import get_settings
from django_arcature.core.attempt_log import (
    ATTEMPT_LOG_KEEP_FIRST,
    ATTEMPT_LOG_KEEP_LATEST,
    ATTEMPT_LOG_MAX_BYTES,
    dropped_count,
)
from django_arcature.core.text import json_size
from django_arcature.db.budget import SMALLEST_PACKET_BYTES, statement_budget
from django_arcature.models import Job
from django_arcature.tasks.results import DROPPED_WORKER_ID, LOST_WORKER_ID, attempt_history
from django_arcature.transitions import ClaimTransition, Completion, wrote_claim
from tests.integration.conftest import MakeJobs, fresh

pytestmark = pytest.mark.django_db(transaction=True)


def statement_bytes(sql: str, params: Any) -> int:
    """How many bytes the server receives for one statement, as its driver sends it."""
    if connection.vendor == "mysql":
        raw = connection.connection
        with raw.cursor() as cursor:
            text = cursor.mogrify(sql, params) if params else sql
        return len(text.encode() if isinstance(text, str) else text)
    size = len(sql.encode())
    for value in params or ():
        obj = getattr(value, "obj", value)  # psycopg's Json/Jsonb wrappers
        if isinstance(obj, str | bytes):
            size += len(obj.encode() if isinstance(obj, str) else obj)
        elif isinstance(obj, dict | list):
            size += json_size(obj)
        else:
            size += 16
    return size


@contextmanager
def measured() -> Iterator[list[int]]:
    """The size of every statement run on ``connection`` inside the block."""
    sizes: list[int] = []

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        if not many:
            sizes.append(statement_bytes(sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield sizes


def big_log(attempts: int, traceback_bytes: int) -> list[dict[str, Any]]:
    """One entry per failed attempt, each with a traceback of ``traceback_bytes``."""
    return [
        {
            "worker": f"w{n}",
            "error": {
                "exception_class_path": "builtins.RuntimeError",
                "traceback": f"attempt {n}: " + "é\"\\'" * (traceback_bytes // 6),
            },
        }
        for n in range(attempts)
    ]


def server_packet() -> int:
    if connection.vendor != "mysql":
        return SMALLEST_PACKET_BYTES
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@max_allowed_packet")
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("method", ["mark_retry", "complete_batch"])
def test_500_attempts_with_long_tracebacks_land_with_a_bounded_log(
    make_jobs: MakeJobs, method: str
) -> None:
    [job_id] = make_jobs(1, max_attempts=1000)
    [claimed] = Job.objects.claim("w1", lease=60, batch=1)
    traceback_bytes = get_settings().traceback_max_bytes
    log = [*big_log(500, traceback_bytes), {"worker": "w1", "error": {"traceback": "last"}}]
    # The size arithmetic of the defect: this log alone is over MariaDB's default packet.
    assert json_size(log) > SMALLEST_PACKET_BYTES

    with measured() as sizes:
        if method == "mark_retry":
            outcome = Job.objects.mark_retry(
                job_id, claimed.claim_token, timezone.now(), "boom", attempt_log=log
            )
        else:
            [outcome] = Job.objects.complete_batch(
                [
                    Completion(
                        job_id,
                        claimed.claim_token,
                        "retry",
                        available_at=timezone.now(),
                        message="boom",
                        attempt_log=log,
                    )
                ]
            )

    assert outcome is ClaimTransition.UPDATED
    assert max(sizes) <= statement_budget(connection.alias) <= server_packet()
    row = fresh(job_id)
    assert row.status == "pending"
    stored = row.attempt_log
    assert len(stored) <= ATTEMPT_LOG_KEEP_FIRST + ATTEMPT_LOG_KEEP_LATEST + 1
    assert json_size(stored) <= ATTEMPT_LOG_MAX_BYTES
    assert stored[0]["worker"] == "w0"  # the first attempt is kept
    assert stored[-1]["error"]["traceback"] == "last"  # and the latest, with its claim
    assert wrote_claim(stored, claimed.claim_token)
    kept = len(stored) - 1
    assert dropped_count(stored) == 501 - kept


def test_a_bounded_log_stays_bounded_attempt_after_attempt(make_jobs: MakeJobs) -> None:
    """Each write keeps the same first entry and adds up the dropped count."""
    [job_id] = make_jobs(1, max_attempts=1000)
    for attempt in range(1, 31):
        [claimed] = Job.objects.claim("w1", lease=60, batch=1)
        log = [*claimed.attempt_log, {"worker": f"w{attempt}", "error": {"traceback": "x"}}]
        assert (
            Job.objects.mark_retry(
                job_id, claimed.claim_token, timezone.now(), "boom", attempt_log=log
            )
            is ClaimTransition.UPDATED
        )
    stored = fresh(job_id).attempt_log
    entries = [entry for entry in stored if "worker" in entry]
    assert entries[0]["worker"] == "w1"
    assert entries[-1]["worker"] == "w30"
    assert len(entries) == ATTEMPT_LOG_KEEP_FIRST + ATTEMPT_LOG_KEEP_LATEST
    assert dropped_count(stored) + len(entries) == 30
    # django.tasks still sees one worker and one error per attempt, the dropped ones named.
    history = attempt_history(stored, 30, last_logged=True)
    assert len(history.worker_ids) == len(history.errors) == 30
    assert history.worker_ids[:2] == ["w1", DROPPED_WORKER_ID]
    assert history.worker_ids[-1] == "w30"
    assert LOST_WORKER_ID not in history.worker_ids


def test_a_row_over_the_statement_budget_is_cut_before_it_is_sent(
    make_jobs: MakeJobs, settings: Any
) -> None:
    """The largest result allowed, all emoji, with a long log of emoji tracebacks.

    1M emoji are 4 MiB of JSON, the most MAX_PAYLOAD_BYTES allows, and 14 MB as
    mysqlclient sends them (``\\ud83d\\ude00`` each); with the log, the row was over
    the budget. The log is cut (the first and last entries stay) and the result
    lands whole.
    """
    settings.ARCATURE = {"MAX_PAYLOAD_BYTES": 4 * 1024 * 1024}
    [job_id] = make_jobs(1)
    [claimed] = Job.objects.claim("w1", lease=60, batch=1)
    result = "\U0001f600" * (1024 * 1024 - 8)
    log = [{"worker": f"w{n}", "error": {"traceback": "\U0001f4a5" * 8000}} for n in range(60)] + [
        {"worker": "w1", "error": None}
    ]
    with measured() as sizes:
        outcome = Job.objects.mark_succeeded(job_id, claimed.claim_token, result, attempt_log=log)
    assert outcome is ClaimTransition.UPDATED
    assert max(sizes) <= statement_budget(connection.alias) <= server_packet()
    row = fresh(job_id)
    assert row.status == "succeeded"
    assert row.result == result
    assert row.attempt_log[0]["worker"] == "w0"
    assert row.attempt_log[-1]["worker"] == "w1"
    assert wrote_claim(row.attempt_log, claimed.claim_token)
    assert dropped_count(row.attempt_log) > 0


def test_many_large_rows_are_split_into_statements_under_the_budget(make_jobs: MakeJobs) -> None:
    ids = make_jobs(12, max_attempts=1000)
    claimed = Job.objects.claim("w1", lease=60, batch=12)
    assert len(claimed) == 12
    log = big_log(30, get_settings().traceback_max_bytes)
    completions = [
        Completion(
            job.id,
            job.claim_token,
            "succeeded",
            result="r" * 500_000,
            attempt_log=[*log, {"worker": "w1", "error": None}],
        )
        for job in claimed
    ]
    with measured() as sizes:
        outcomes = Job.objects.complete_batch(completions)
    assert outcomes == [ClaimTransition.UPDATED] * 12
    assert max(sizes) <= statement_budget(connection.alias)
    assert {fresh(job_id).status for job_id in ids} == {"succeeded"}
