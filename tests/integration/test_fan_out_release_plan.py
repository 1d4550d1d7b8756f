"""The root of a wide fan-out reaches its dependents by key, on stale statistics.

The root's completion sends four statements over its 10,000 dependents' ids: the
UPDATE that marks its edges (none, as each is the only one into its dependent), the
read of the sole edges met, the lock of the dependents' job rows (``FOR UPDATE``
in id order) and their release. A first version joined the locked ids to the job
rows; on statistics taken while the tables were empty (a fresh deployment) that
join was planned as a nested loop and took about 10 s of server time. This test
rebuilds two stale situations, the tables analysed empty, or analysed holding only
finished jobs (production: ANALYZE saw no waiting row, and 10,000 inserts are far
below its threshold on a big table). Then another workflow's 3,000 nodes wait
beside the 10,000 of the one whose root completes, and each of the root's
statements is explained just before it runs (``tests.plans.explained``): none
joins anything, and each reaches its table once. The edges are reached by their
``(upstream, downstream)`` key everywhere (MariaDB read its whole primary key); the
job rows by their primary key on MariaDB, and on SQLite by that key or one scan,
never through the status index (which read every waiting node of every workflow).
PostgreSQL and SQLite choose by cost between the key and one scan of the job table:
in the whole suite's run the "analysed empty" variant scanned, alone it did not.

Not timed: a plan that collapses fails here on any machine.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from django_arcature import Workflow
from django_arcature.manager import dependencies
from django_arcature.models import Job, JobStatus
from django_arcature.transitions import ClaimTransition
from django_arcature.workflows.build import Node
from django_arcature.workflows.models import WorkflowEdge, WorkflowNode
from tests.plans import explained, finished_rows_sql, mysql_tables, pg_nodes
from tests.testapp import workflow_jobs as wf

# MariaDB's ANALYZE TABLE commits the open transaction: each test leaves a clean table.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

JOB, EDGE = Job._meta.db_table, WorkflowEdge._meta.db_table
WIDTH = 10_000
#: The other workflow's nodes, waiting all along; and the finished jobs of one variant.
OTHER, FINISHED = 3_000, 200_000


def analyse() -> None:
    """Statistics of the job, node and edge tables as they are now."""
    tables = [JOB, EDGE, WorkflowNode._meta.db_table]
    with connection.cursor() as cursor:
        for table in tables:
            quoted = connection.ops.quote_name(table)
            if connection.vendor == "postgresql":
                cursor.execute(f"ANALYZE {quoted}")
            elif connection.vendor == "mysql":
                cursor.execute(f"ANALYZE TABLE {quoted}")
                cursor.fetchall()
        if connection.vendor == "sqlite":
            cursor.execute("ANALYZE")


def fan(width: int) -> tuple[Node, list[Node]]:
    """A 1 -> ``width`` -> 1 workflow, enqueued: its root and its middle nodes."""
    with override_settings(ARCATURE={"WORKFLOW_MAX_NODES": width + 2}):
        flow = Workflow(f"fan-out of {width}")
        root = flow.add(wf.step, "root")
        middle = [flow.add(wf.step, f"m{i}", after=[root]) for i in range(width)]
        flow.add(wf.step, "sink", after=middle)
        flow.enqueue()
    return root, middle


@pytest.fixture(params=["analysed empty", "analysed with finished jobs only"])
def stale(request: pytest.FixtureRequest) -> str:
    """A big job table whose statistics were taken before any workflow node existed:
    while empty (then the finished jobs arrived), or holding the finished jobs."""
    with connection.cursor() as cursor:
        if request.param == "analysed empty":
            analyse()
        table = connection.ops.quote_name(JOB)
        step = 50_000
        for start in range(1, FINISHED + 1, step):
            stop = min(start + step, FINISHED + 1)
            cursor.execute(finished_rows_sql(connection.vendor, table, start, stop, FINISHED))
    if request.param != "analysed empty":
        analyse()
    return str(request.param)


def shape(plan: Any) -> list[tuple[Any, ...]]:
    """What a plan change would change: how each table is reached."""
    if connection.vendor == "postgresql":
        return [
            (n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in pg_nodes(plan)
        ]
    if connection.vendor == "mysql":
        return [
            (t.get("table_name"), t.get("access_type"), t.get("key")) for t in mysql_tables(plan)
        ]
    return [(str(row[-1]),) for row in plan]


#: The key each statement must reach its table by.
KEYS = {
    "postgresql": {JOB: f"{JOB}_pkey", EDGE: "arcature_edge_once"},
    "mysql": {JOB: "PRIMARY", EDGE: "arcature_edge_once"},
    "sqlite": {JOB: f"sqlite_autoindex_{JOB}_1", EDGE: f"sqlite_autoindex_{EDGE}_1"},
}


def assert_by_key(found: list[tuple[Any, ...]], table: str, sql: str) -> None:
    """``found`` (a ``shape``) joins nothing and reaches ``table`` once: the edges by
    their key everywhere; the job rows by their key on MariaDB (named), and on SQLite
    by their key or one scan, never through the status index; on PostgreSQL by one
    index or one scan, as its costs choose."""
    key = KEYS[connection.vendor][table]
    if connection.vendor == "postgresql":
        types = [node_type for node_type, _, _ in found]
        assert not {"Nested Loop", "Hash Join", "Merge Join"} & set(types), (sql, found)
        reads = [n for n in found if n[1] == table or n[0].startswith("Bitmap Index")]
        assert len([n for n in reads if n[0] != "ModifyTable"]) <= 2, (sql, found)
        indexes = {index for _, _, index in found if index}
        if table == EDGE:
            assert "Seq Scan" not in types, (sql, found)
            assert indexes == {key}, (sql, found)
        else:
            assert len(indexes) <= 1, (sql, found)
    elif connection.vendor == "mysql":
        assert found, sql
        for name, access, used in found:
            assert name == table, (sql, found)
            assert access not in ("ALL", "index"), (sql, found)  # "index": all of it
            assert used == key, (sql, found)
    else:
        steps = [step for (step,) in found if table in step]
        assert len(steps) == 1, (sql, found)
        (step,) = steps
        if table == EDGE:
            assert step.startswith(f"SEARCH {table} USING INDEX {key} ("), (sql, found)
        else:
            assert step.startswith((f"SEARCH {table} USING INDEX {key} (", f"SCAN {table}")), (
                sql,
                found,
            )


def test_the_roots_release_goes_by_key_on_stale_statistics(
    stale: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fan(OTHER)  # waits beside it, its root never run
    root, _ = fan(WIDTH)
    claimed = Job.objects.claim_job(root.job_id, "w1", 60)
    assert claimed is not None
    # One statement per query, so each can be explained (on PostgreSQL the lock and
    # the release are otherwise sent together, as are the counters and the edge mark;
    # the statements are the same text either way).
    monkeypatch.setattr(dependencies, "_one_round_trip", lambda _connection: False)
    sent: list[str] = []

    def complete_root() -> None:
        outcome = Job.objects.mark_succeeded(root.job_id, claimed.claim_token)
        assert outcome is ClaimTransition.UPDATED

    def wanted(sql: str) -> bool:
        text = sql.upper()
        by_id = f"ORDER BY {connection.ops.quote_name('id')}".upper()
        chosen = (
            (text.startswith("UPDATE") and EDGE.upper() in text)
            # The open edges, read instead of written.
            or (text.startswith("SELECT") and EDGE.upper() in text.split("WHERE")[0])
            or (text.startswith("SELECT") and JOB.upper() in text and by_id in text)
            # The release, not the root's own completion (which sets finished_at).
            or (
                text.startswith("UPDATE")
                and JOB.upper() in text
                and "AVAILABLE_AT" in text
                and "FINISHED_AT" not in text
            )
        )
        if chosen:
            sent.append(sql)
        return chosen

    plans = explained("default", complete_root, wanted)
    kinds = sorted(
        {sql.split()[0].upper() + (" edges" if EDGE in sql else " jobs") for sql in sent}
    )
    # The read of the root's open edges (none is written), the lock (a plain read on
    # SQLite, which runs one writer at a time), the release.
    assert kinds == ["SELECT edges", "SELECT jobs", "UPDATE jobs"], sent
    assert len(plans) == len(sent)
    for statement, plan in plans:
        found = shape(plan)
        on_edges = EDGE in statement.sql.split("WHERE")[0]
        assert_by_key(found, EDGE if on_edges else JOB, statement.sql)
    # Nothing changed: the plans were taken in a transaction rolled back.
    assert Job.objects.filter(status=JobStatus.WAITING).count() == (WIDTH + 1) + (OTHER + 1)
