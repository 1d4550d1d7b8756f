"""The admin's pages read few rows of a table of mostly finished jobs, on every database.

benchmarks/bigadmin.py found pages whose time grew with the table (benchmarks/scale.md,
"Admin pages, enqueue and sweep on a big table"). Each cause is rebuilt here on a
modest table, with statistics taken before any job was pending (as on a big table,
which is re-analysed rarely), and checked with the database's own account of the
work a statement did, not with a clock:

* the job list filtered by ``status=pending`` comes in index order (no sort of every
  pending row), and its date hierarchy reads one row at each end;
* the date hierarchy of the whole list reads one row at each end (SQLite's ``MIN``
  and ``MAX`` in one query read the whole index);
* the dashboard's per-minute count reads the last hour, not every finished row
  (SQLite walked the claim index to save a sort);
* a text search that matches nothing reads the newest ``ADMIN_SEARCH_WINDOW`` rows,
  not the table.

"Work" is the rows a statement read from the job table: ``EXPLAIN ANALYZE`` on
PostgreSQL, ``ANALYZE FORMAT=JSON`` on MariaDB; SQLite has neither, so there it is
the virtual machine's instructions (``set_progress_handler``), compared with those
of a statement that reads every row.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.urls import reverse

from django_arcature.models import Job
from tests.integration.conftest import MakeJobs
from tests.plans import finished_rows_sql, mysql_tables, pg_nodes

# MariaDB's ANALYZE TABLE commits the open transaction: each test leaves a clean table.
pytestmark = pytest.mark.django_db(transaction=True)

TABLE = Job._meta.db_table
FINISHED = 20_000
PENDING = 1_000
WINDOW = 2_000
JOBS = "admin:django_arcature_job_changelist"


@pytest.fixture
def big_table(make_jobs: MakeJobs) -> None:
    """20,000 finished rows over the last 30 days, analysed; then 1,000 pending jobs."""
    quoted = connection.ops.quote_name(TABLE)
    with connection.cursor() as cursor:
        cursor.execute(finished_rows_sql(connection.vendor, quoted, 1, FINISHED + 1, FINISHED))
        if connection.vendor == "postgresql":
            cursor.execute(f"ANALYZE {quoted}")
        elif connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {quoted}")
            cursor.fetchall()
        else:
            cursor.execute("ANALYZE")
    make_jobs(PENDING)


def statements(client: Client, url: str, **params: str) -> list[tuple[str, Any]]:
    """The SELECTs a page sends to the job table, with their parameters."""
    sent: list[tuple[str, Any]] = []

    def wrapper(execute: Any, sql: str, sql_params: Any, many: bool, context: Any) -> Any:
        if TABLE in sql and sql.lstrip().upper().startswith("SELECT"):
            sent.append((sql, sql_params))
        return execute(sql, sql_params, many, context)

    with connection.execute_wrapper(wrapper):
        response = client.get(url, params)
    assert response.status_code == 200
    return sent


def _pg_rows(plan: Any) -> int:
    total = 0
    for node in pg_nodes(plan):
        if node.get("Relation Name") == TABLE:
            read = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            total += read * node.get("Actual Loops", 1)
    return total


def _mysql_rows(plan: Any) -> int:
    total = 0
    for table in mysql_tables(plan):
        if table.get("table_name") == TABLE:
            total += int(float(table.get("r_rows", 0)) * float(table.get("r_loops", 1)))
    return total


def work(sql: str, params: Any) -> int:
    """How much of the job table running ``sql`` read (see the module's docstring)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
            plan = cursor.fetchone()[0]
            return _pg_rows(json.loads(plan) if isinstance(plan, str) else plan)
        if connection.vendor == "mysql":
            cursor.execute(f"ANALYZE FORMAT=JSON {sql}", params)
            return _mysql_rows(json.loads(cursor.fetchone()[0]))
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        raw = connection.connection
        raw.set_progress_handler(count, 10)
        try:
            cursor.execute(sql, params)
            cursor.fetchall()
        finally:
            raw.set_progress_handler(None, 0)
        return steps[0] * 10


@pytest.fixture
def whole_table(big_table: None) -> int:
    """The work of a statement that reads every row once: the yardstick."""
    quoted = connection.ops.quote_name(TABLE)
    column = connection.ops.quote_name("last_error")
    return work(f"SELECT COUNT(*) FROM {quoted} WHERE {column} LIKE %s", ["%no such text%"])


def sorts(sql: str, params: Any) -> list[str]:
    """The plan's sorts of whole row sets (none: index order).

    A sort of the ties only (the admin adds ``-pk`` after ``-created_at``): PostgreSQL's
    "Incremental Sort" and SQLite's "RIGHT PART OF ORDER BY" follow the index and stop
    at the page's last row, so they are not counted.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            return [n["Node Type"] for n in pg_nodes(plan) if n["Node Type"] == "Sort"]
        if connection.vendor == "mysql":
            cursor.execute(f"EXPLAIN FORMAT=JSON {sql}", params)
            text = cursor.fetchone()[0]
            return ["filesort"] if "filesort" in text else []
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return [str(row[-1]) for row in cursor.fetchall() if "B-TREE FOR ORDER BY" in str(row[-1])]


def bounds_statement(found: list[tuple[str, Any]]) -> tuple[str, Any]:
    """The date hierarchy's statement: the one that selects its ``first`` and ``last``."""
    [statement] = [(sql, p) for sql, p in found if re.search(r"AS [`\"]first[`\"]", sql)]
    return statement


def page_statement(found: list[tuple[str, Any]]) -> tuple[str, Any]:
    """The statement that loads the listed rows (the only one reading ``last_error``)."""
    [statement] = [
        (sql, p) for sql, p in found if "last_error" in sql and "COUNT(" not in sql.upper()
    ]
    return statement


@pytest.mark.usefixtures("big_table")
def test_pending_jobs_come_newest_first_in_index_order(admin_client: Client) -> None:
    found = statements(admin_client, reverse(JOBS), status__exact="pending")
    sql, params = page_statement(found)
    assert sorts(sql, params) == [], sql


@pytest.mark.usefixtures("big_table")
def test_dead_letters_come_newest_first_in_index_order(
    admin_client: Client, whole_table: int
) -> None:
    """The dead-letter page walks ``(status, finished_at)`` from its newest entry: no
    sort of every dead row, and a small part of the table read. On PostgreSQL that
    index leaves the pending rows out (migration 0018): the page's ``status = 'dead'``
    must still let the planner use it."""
    found = statements(admin_client, reverse("admin:django_arcature_deadjob_changelist"))
    sql, params = page_statement(found)
    assert sorts(sql, params) == [], sql
    assert work(sql, params) < whole_table / 10, sql


def test_date_hierarchy_reads_one_row_at_each_end(admin_client: Client, whole_table: int) -> None:
    for params in ({}, {"status__exact": "pending"}):
        found = statements(admin_client, reverse(JOBS), **params)
        sql, sql_params = bounds_statement(found)
        assert work(sql, sql_params) < whole_table / 50, (params, sql)


def test_dashboard_reads_the_last_hour_not_every_finished_row(
    admin_client: Client, whole_table: int
) -> None:
    found = statements(admin_client, reverse("admin:django_arcature_dashboard"))
    finished = [(sql, p) for sql, p in found if "finished_at" in sql]
    assert len(finished) >= 3, found
    for sql, params in finished:
        assert work(sql, params) < whole_table / 10, sql


@pytest.mark.usefixtures("big_table")
def test_a_search_that_matches_nothing_reads_the_window_not_the_table(
    admin_client: Client,
) -> None:
    """Against the same search over every row (``ADMIN_SEARCH_WINDOW = None``): the
    window is 2,000 of 21,000 rows, so the search's statements do about a tenth of
    the work (the filter sample, which ignores the search, is left out)."""

    def searching(window: int | None) -> tuple[int, list[str]]:
        with override_settings(ARCATURE={"ADMIN_SEARCH_WINDOW": window}):
            found = statements(admin_client, reverse(JOBS), q="no-such-task")
        searched = [(sql, p) for sql, p in found if "%no-such-task%" in str(p)]
        # The bounded count and the page (the date bounds come from the empty page).
        assert len(searched) == 2, found
        return sum(work(sql, p) for sql, p in searched), [sql for sql, _ in searched]

    everything, _ = searching(None)
    windowed, sqls = searching(WINDOW)
    for sql in sqls:
        assert 'created_at" >= ' in sql or "created_at` >= " in sql, sql
    assert windowed < everything / 3, (windowed, everything)


@pytest.mark.only_on("sqlite", reason="the UUID primary key is not SQLite's rowid")
@pytest.mark.usefixtures("big_table")
def test_bounded_counts_read_an_index_alone(admin_client: Client) -> None:
    """Selecting the primary key in the counted subquery made SQLite look up every
    counted row in the table (10 ms against 0.4 ms for 10,001 of 1,000,000 rows)."""
    for url in (reverse("admin:django_arcature_deadjob_changelist"), reverse(JOBS)):
        found = statements(admin_client, url)
        [(sql, params)] = [(s, p) for s, p in found if "LIMIT 10001" in s]
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            reads = [str(row[-1]) for row in cursor.fetchall() if TABLE in str(row[-1])]
        assert reads, sql
        assert all("COVERING INDEX" in read for read in reads), reads
