"""``Batch.counts()`` reads the batch row and its counter shards, never its members (issue 20).

A progress bar polled on a batch of 100,000 members must cost the same as on a batch
of two. The admin page's query count was pinned; the public ``counts()`` was not.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_arcature import Batch
from django_arcature.models import Job
from django_arcature.testing import drain
from django_arcature.workflows.models import BatchCounter, BatchRun, WorkflowNode
from tests.testapp import workflow_jobs as wf

pytestmark = pytest.mark.django_db(transaction=True)


def counted(batch: Batch) -> tuple[dict[str, int], list[str]]:
    """``batch.counts()`` and the SQL it sent."""
    with CaptureQueriesContext(connection) as queries:
        counts = batch.counts()
    return counts, [query["sql"] for query in queries.captured_queries]


def test_counts_read_neither_the_members_nor_their_jobs() -> None:
    small, large = Batch(name="small"), Batch(name="large")
    for i in range(2):
        small.add(wf.step, f"s{i}")
    for i in range(100):
        large.add(wf.step, f"l{i}")
    small.enqueue()
    large.enqueue()
    drain(limit=200)
    small_counts, small_sql = counted(small)
    large_counts, large_sql = counted(large)
    assert small_counts == {"total": 2, "succeeded": 2, "dead": 0, "cancelled": 0, "pending": 0}
    assert large_counts == {
        "total": 100,
        "succeeded": 100,
        "dead": 0,
        "cancelled": 0,
        "pending": 0,
    }
    # The same statements for 2 members as for 100, touching only the batch's own rows.
    assert len(small_sql) == len(large_sql)
    tables = (BatchRun._meta.db_table, BatchCounter._meta.db_table)
    for sql in large_sql:
        assert any(table in sql for table in tables), sql
        assert WorkflowNode._meta.db_table not in sql, sql
        assert not re.search(rf"\b{Job._meta.db_table}\b", sql), sql
