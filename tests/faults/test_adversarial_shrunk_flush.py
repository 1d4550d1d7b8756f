"""A lost answer, then failed retries, then the worker's shrunk write (worker.loop ``_shrunk``).

After ``FLUSH_SHRINK_TRIES`` failed writes of the same finished jobs the worker
writes them with their smallest attempt log and texts (``smallest_completion``).
On PostgreSQL the plain jobs' write is one autocommit statement: its first try may
have landed with the answer lost. The shrunk completion differs from what landed,
so this checks it still carries what lets the manager recognise that write as
landed: the job ends succeeded with one ``job_succeeded`` and no ``job_claim_lost``.

Deterministic: a wrapper around the worker's own flush decides, by the flush's
ordinal, whether its statements run, run then lose their answer, or fail; no sleep.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, connection, connections

from django_arcature.models import Job, JobStatus
from django_arcature.transitions import wrote_claim
from django_arcature.worker import Worker, loop
from tests.faults.conftest import run_worker
from tests.integration.conftest import Recorder

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: An earlier life of the job: a log that ``smallest_completion`` must cut.
HISTORY = [
    {"worker": f"old{n}", "error": {"exception_class_path": "x.Y", "traceback": "t" * 2000}}
    for n in range(10)
]


#: A statement that writes job rows (plain ``UPDATE`` or one under a ``WITH``), not a
#: ``SELECT ... FOR UPDATE``.
WRITES_JOBS = re.compile(r"\bUPDATE\s+[\"`]?" + re.escape(Job._meta.db_table), re.IGNORECASE)


class LostAnswerWorker(Worker):
    """Its first flush runs its first UPDATE and then loses the answer; the next
    ``FLUSH_SHRINK_TRIES - 1`` flushes fail before any statement; later ones run."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.flushes = 0  # flushes that reached the database
        self.shrunk: list[tuple[Any, Any]] = []  # (before, after) of each changed completion

    def _shrunk(self, done: Any) -> Any:
        smaller = super()._shrunk(done)
        if smaller is not done:
            self.shrunk.append((done.completion, smaller.completion))
        return smaller

    def _flush(self, force: bool = False) -> None:
        counted = False

        def fault(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
            nonlocal counted
            if not counted:
                counted = True
                self.flushes += 1
            if self.flushes == 1:
                result = execute(sql, params, many, ctx)
                if WRITES_JOBS.search(sql):
                    raise OperationalError("server closed the connection unexpectedly")
                return result
            if self.flushes <= loop.FLUSH_SHRINK_TRIES:
                raise OperationalError("the test drops this write")
            return execute(sql, params, many, ctx)

        with connections[self.using].execute_wrapper(fault):
            super()._flush(force)


def test_a_shrunk_rewrite_of_a_landed_plain_job_is_recognised_as_landed(
    events: Recorder,
) -> None:
    """Landed (PostgreSQL) or rolled back (MariaDB, SQLite) at the first try, failed at
    the next two, shrunk at the fourth: one succeeded row, one event, nothing lost."""
    job_id = Job.objects.enqueue("tests.noop").id
    Job.objects.filter(id=job_id).update(attempt_log=HISTORY)  # an earlier life, set up
    events.clear()

    result = run_worker(60, worker_class=LostAnswerWorker, duties=False, listen=False)

    assert result.finished, f"the worker did not finish ({result.error!r})"
    assert result.status == 0
    worker = result.worker
    assert isinstance(worker, LostAnswerWorker)
    assert worker.flushes == loop.FLUSH_SHRINK_TRIES + 1
    assert len(worker.shrunk) == 1  # the last write was the shrunk one, a different log
    before, after = worker.shrunk[0]
    assert len(json.dumps(after.attempt_log)) < len(json.dumps(before.attempt_log))

    row = Job.objects.get(id=job_id)
    assert (row.status, row.claim_token) == (JobStatus.SUCCEEDED, None)
    assert wrote_claim(row.attempt_log, before.claim_token)
    stored = len(json.dumps(row.attempt_log))
    if connection.vendor == "postgresql":
        # The first statement committed alone: its full log stands; the shrunk one was
        # fenced out and recognised, not written over it.
        assert stored > len(json.dumps(after.attempt_log)) + 4096
    else:
        # The first try rolled back with its transaction: the shrunk write is what landed.
        assert stored < len(json.dumps(before.attempt_log))
    outcomes = [
        (name, kw["job_id"])
        for name, kw in events.events
        if name in {"job_succeeded", "job_retried", "job_dead", "job_claim_lost"}
    ]
    assert outcomes == [("job_succeeded", job_id)]
    assert (worker.stats.succeeded, worker.stats.lost) == (1, 0)
