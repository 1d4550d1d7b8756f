"""A worker's flushes of workflow nodes send one completion statement each, not two.

The worker writes its finished jobs with ``plain_alone``: on PostgreSQL the plain
jobs go in one autocommit statement, which names the members it left for their
own transaction. A flush of a wide fan-in's nodes holds only members, so that
statement wrote nothing, and the members' statement wrote every row again after
it (a JSON parse and a member probe per row, twice). After a flush that held only
members the next goes straight to the members' transaction; a flush that lands a
plain job there sends the one after it through the plain statement again.
Elsewhere every flush is the members' transaction already: one statement.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from django.db import connection

from django_arcature import Workflow
from django_arcature.db.claimed import ClaimedJob
from django_arcature.models import Job, JobStatus
from django_arcature.transitions import ClaimTransition, Completion
from tests.plans import capture
from tests.testapp import workflow_jobs as wf
from tests.testapp.jobs import noop

# Autocommit, as the worker writes: ``plain_alone`` needs it.
pytestmark = pytest.mark.django_db(transaction=True)

JOB = Job._meta.db_table


def completion_statements(completions: list[Completion]) -> tuple[int, bool]:
    """How many statements writing fenced job rows one flush sent (all of which
    landed), and whether one was PostgreSQL's plain statement (``alone``)."""
    sent = capture("default", lambda: _flush(completions))
    writes = [s.sql for s in sent if JOB in s.sql and "claim_token" in s.sql and _writes(s.sql)]
    return len(writes), any(" u AS (UPDATE " in sql for sql in writes)


def _writes(sql: str) -> bool:
    """An UPDATE (PostgreSQL and SQLite: in a WITH), not a read back ``FOR UPDATE``."""
    return sql.lstrip().upper().startswith(("UPDATE", "WITH"))


def _flush(completions: list[Completion]) -> None:
    written = Job.objects.write_completions(completions, plain_alone=True)
    assert [w.outcome for w in written] == [ClaimTransition.UPDATED] * len(completions)


def succeeded(claimed: Sequence[ClaimedJob]) -> list[Completion]:
    return [Completion(job.id, job.claim_token, "succeeded", attempt_log=[]) for job in claimed]


def test_flushes_of_members_only_send_one_completion_statement() -> None:
    flow = Workflow("fan")
    root = flow.add(wf.step, "root")
    middle = [flow.add(wf.step, f"m{i}", after=[root]) for i in range(6)]
    sink = flow.add(wf.step, "sink", after=middle)
    flow.enqueue()
    claimed_root = Job.objects.claim_job(root.job_id, "w1", 60)
    assert claimed_root is not None
    on_postgresql = connection.vendor == "postgresql"
    # PostgreSQL: the plain statement (which wrote nothing), then the members' one.
    first = completion_statements(succeeded([claimed_root]))
    assert first == ((2, True) if on_postgresql else (1, False))
    for _ in range(2):
        claimed = Job.objects.claim("w1", 60, 3, queues=["workflow"]) or Job.objects.claim(
            "w1", 60, 3
        )
        assert len(claimed) == 3
        assert completion_statements(succeeded(claimed)) == (1, False)
    # Every middle node landed and settled: the sink is released, once.
    assert Job.objects.get(id=sink.job_id).status == JobStatus.PENDING

    # A flush with a plain job among members: written in the members' transaction,
    # and the next flush of plain jobs goes through the plain statement again.
    plain = [noop.enqueue().id for _ in range(2)]
    claimed = Job.objects.claim("w1", 60, 10)
    assert {job.id for job in claimed} == {sink.job_id, *plain}
    assert completion_statements(succeeded(claimed)) == (1, False)
    more = [noop.enqueue().id for _ in range(2)]
    claimed = Job.objects.claim("w1", 60, 10)
    assert {job.id for job in claimed} == set(more)
    assert completion_statements(succeeded(claimed)) == (1, on_postgresql)
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 1 + 6 + 1 + 4
