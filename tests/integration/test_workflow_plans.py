"""Waiting workflow nodes leave the claim's plan and its rows untouched (DESIGN §11).

The claim reads ``status = 'pending'``; a waiting node has ``status = 'waiting'``.
On PostgreSQL the claim's indexes are partial on pending rows (0005), so waiting
rows are not in them at all; MariaDB and SQLite reach the pending key range of
``(status, …)`` indexes. This test takes the claim's plan with 1,000 pending jobs
beside many finished rows (20,000 here; 1,000,000 under ``ARCATURE_SOAK=1``), the
situation ``test_plans`` pins, then turns every finished row into a waiting node,
takes fresh statistics again, and checks that the plan is the same, node for node,
that it reads no table whole, and that the claim still takes only pending jobs.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.db import connection

from django_arcature.models import Job, JobStatus
from tests.integration.conftest import MakeJobs
from tests.integration.test_plans import analyse, updates
from tests.plans import explained, finished_rows_sql, mysql_tables, pg_nodes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TABLE = Job._meta.db_table
WAITING = 1_000_000 if os.environ.get("ARCATURE_SOAK") == "1" else 20_000


def claim_shape() -> list[Any]:
    """The claim's plans, reduced to what a plan change would change."""
    found = explained("default", lambda: Job.objects.claim("w1", 30, 50), updates)
    assert found, "the claim sent no statement to explain"
    shapes: list[Any] = []
    for _statement, plan in found:
        if connection.vendor == "postgresql":
            shapes.append(
                [
                    (n["Node Type"], n.get("Index Name"), n.get("Relation Name"))
                    for n in pg_nodes(plan)
                ]
            )
        elif connection.vendor == "mysql":
            shapes.append(
                [
                    (t.get("table_name"), t.get("access_type"), t.get("key"))
                    for t in mysql_tables(plan)
                ]
            )
        else:
            shapes.append([str(row[-1]) for row in plan])
    return shapes


def add_finished_rows(count: int) -> None:
    qn = connection.ops.quote_name
    step = 100_000
    with connection.cursor() as cursor:
        for start in range(1, count + 1, step):
            stop = min(start + step, count + 1)
            cursor.execute(finished_rows_sql(connection.vendor, qn(TABLE), start, stop, count))


def make_them_waiting(status: str = "waiting") -> None:
    """The finished rows become waiting nodes (as a workflow's nodes are inserted)."""
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {qn(TABLE)} SET {qn('status')} = %s, {qn('finished_at')} = NULL, "
            f"{qn('error_kind')} = '' WHERE {qn('task_name')} = 'bench.noop'",
            [status],
        )


def test_many_waiting_nodes_leave_the_claim_plan_unchanged(make_jobs: MakeJobs) -> None:
    add_finished_rows(WAITING)
    make_jobs(1_000)
    analyse()
    before = claim_shape()
    make_them_waiting()
    analyse()
    assert Job.objects.filter(status=JobStatus.WAITING).count() == WAITING
    after = claim_shape()
    assert after == before
    for shape in after:
        assert ("Seq Scan", None, TABLE) not in shape  # PostgreSQL
        assert (TABLE, "ALL", None) not in shape  # MariaDB
        assert f"SCAN {TABLE}" not in shape  # SQLite
        assert not any("ANY(status)" in str(step) for step in shape)  # SQLite's skip-scan
    claimed = Job.objects.claim("w1", 30, 50)
    assert len(claimed) == 50
    assert {job.task_name for job in claimed} == {"tests.noop"}
