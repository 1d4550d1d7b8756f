"""A flush of a wide fan-in's middle nodes reaches the edges leaving them by key.

A worker writes the completions of a few hundred middle nodes of a 1 -> N -> 1
workflow at a time, and their settling reads the edges leaving them by those ids
(then counts down the sink's open edges, by its key). On PostgreSQL the ids were a
constant list (``= ANY(%s)``), and on the statistics of a workflow of that size
(taken fresh here: a few thousand edges) the planner read the whole edge table for
each of those statements of every flush instead of the key (``manager/keyed.py``).
This builds that workflow, analyses the tables, and explains each statement of one
flush of 200 that reads the edge table or writes the node table just before it
runs (``tests.plans.explained``): each reaches it through an index, never by a scan
of the table. Not timed.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from django_arcature.manager import dependencies
from django_arcature.models import Job
from django_arcature.transitions import ClaimTransition, Completion
from django_arcature.workflows.models import WorkflowEdge, WorkflowNode
from tests.plans import explained, mysql_tables, pg_nodes

from .test_fan_out_release_plan import analyse, fan

# MariaDB's ANALYZE TABLE commits the open transaction: each test leaves a clean table.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EDGE = WorkflowEdge._meta.db_table
NODE = WorkflowNode._meta.db_table
WIDTH, FLUSH = 2_000, 200


def table_scans(plan: Any, tables: set[str]) -> list[str]:
    """The reads of ``tables`` in ``plan`` that go through no index."""
    if connection.vendor == "postgresql":
        return [
            f"{n['Node Type']} {n['Relation Name']}"
            for n in pg_nodes(plan)
            if n.get("Relation Name") in tables and n["Node Type"] == "Seq Scan"
        ]
    if connection.vendor == "mysql":
        return [
            f"{t.get('table_name')} {t.get('access_type')}"
            for t in mysql_tables(plan)
            if t.get("table_name") in tables and t.get("access_type") in ("ALL", "index")
        ]
    return [
        str(row[-1])
        for row in plan
        if any(str(row[-1]).startswith(f"SCAN {table}") for table in tables)
    ]


def test_a_flush_of_fan_in_nodes_reads_nodes_and_edges_by_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, _middle = fan(WIDTH)
    claimed_root = Job.objects.claim_job(root.job_id, "w1", 60)
    assert claimed_root is not None
    assert (
        Job.objects.mark_succeeded(root.job_id, claimed_root.claim_token) is ClaimTransition.UPDATED
    )
    claimed = Job.objects.claim("w1", 60, FLUSH)
    assert len(claimed) == FLUSH
    analyse()
    # One statement per query, so each can be explained (the statements are the
    # same text either way).
    monkeypatch.setattr(dependencies, "_one_round_trip", lambda _connection: False)
    completions = [
        Completion(job.id, job.claim_token, "succeeded", attempt_log=[]) for job in claimed
    ]

    def wanted(sql: str) -> bool:
        text = sql.lstrip().upper()
        head = text.split("WHERE")[0]
        on_edges = text.startswith(("SELECT", "UPDATE")) and EDGE.upper() in head
        return on_edges or (text.startswith("UPDATE") and NODE.upper() in head)

    plans = explained("default", lambda: Job.objects.write_completions(completions), wanted)
    # The read of the edges leaving the flush (never an UPDATE of them), and the
    # count-down of the sink's open edges.
    kinds = sorted({(s.sql.split()[0].upper(), EDGE in s.sql.split("WHERE")[0]) for s, _ in plans})
    assert kinds == [("SELECT", True), ("UPDATE", False)], [s.sql for s, _ in plans]
    for statement, plan in plans:
        assert not table_scans(plan, {EDGE, NODE}), (statement.sql, plan)
    # Nothing changed: the plans were taken in a transaction rolled back.
    assert Job.objects.filter(id__in=[job.id for job in claimed], status="running").count() == FLUSH
