"""What the admin's pages ask the database: few queries, each bounded by an index.

On a table of millions of rows the usual admin costs are an unbounded COUNT(*),
``SELECT DISTINCT`` for filters and the date hierarchy, and loading every big
column of every listed row. These tests read the SQL the pages really send.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_arcature.admin import lists as admin_list
from django_arcature.models import Job

from .test_admin_support import enqueue, make_dead, make_running, make_succeeded

pytestmark = pytest.mark.django_db

TABLE = Job._meta.db_table


def job_queries(client: Client, url: str, **params: str) -> list[str]:
    """The SQL a page sends to the job table (sessions and users left out)."""
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params)
    assert response.status_code == 200
    return [q["sql"] for q in captured.captured_queries if TABLE in q["sql"]]


@pytest.fixture
def jobs() -> None:
    make_dead(3)
    make_succeeded(2)
    make_running(2)
    enqueue(30, "bulk")


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """Make 37 rows "a big table" for the paginator."""
    monkeypatch.setattr(admin_list.EstimatedCountPaginator, "exact_limit", 10)
    return 10


@pytest.mark.usefixtures("jobs")
def test_the_job_list_never_scans_for_distinct_values_or_loads_big_columns(
    admin_client: Client,
) -> None:
    queries = job_queries(admin_client, reverse("admin:django_arcature_job_changelist"))
    # Filter sample, bounded count, page; all 37 rows fit on the page, so the date
    # hierarchy takes its first and last date from them (more rows: test below).
    assert len(queries) == 3, queries
    assert not [q for q in queries if "DISTINCT" in q.upper()]
    [page] = [q for q in queries if "last_error" in q]  # the only query reading whole rows
    for column in ("payload", "last_traceback", "attempt_log", "result"):
        assert f'{column}"' not in page, f"the list loads {column}"
        assert f"{column}`" not in page, f"the list loads {column}"


@pytest.mark.usefixtures("jobs")
def test_a_count_past_the_limit_asks_the_planner_where_there_is_one(
    admin_client: Client, small_limit: int, vendor: str
) -> None:
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(reverse("admin:django_arcature_job_changelist"))
    queries = [q["sql"] for q in captured.captured_queries if TABLE in q["sql"]]
    counts = [q for q in queries if "COUNT(" in q.upper()]
    bounded = [q for q in counts if f"LIMIT {small_limit + 1}" in q]
    assert len(bounded) == 1, counts
    cl = response.context["cl"]
    if vendor == "sqlite":
        # SQLite keeps no row estimate: past the limit it counts exactly (one more COUNT).
        assert len(counts) == 2
        assert cl.result_count == 37
        assert not cl.count_is_estimate
    else:
        # PostgreSQL and MySQL/MariaDB: EXPLAIN, never a second, unbounded COUNT(*).
        assert counts == bounded
        assert [q for q in queries if q.upper().startswith("EXPLAIN")]
        assert cl.count_is_estimate
        assert cl.result_count > small_limit
        assert b"estimate, not an exact count" in response.content
    # The filter sample and the page, the EXPLAIN past the limit, and the date bounds
    # when the (estimated or exact) count needs more than one page.
    assert len(queries) == len(counts) + 2 + (vendor != "sqlite") + cl.multi_page, queries


@pytest.mark.usefixtures("jobs")
def test_the_dead_letter_page_reads_dead_rows_only(admin_client: Client) -> None:
    queries = job_queries(admin_client, reverse("admin:django_arcature_deadjob_changelist"))
    assert len(queries) == 3, queries
    for sql in queries:
        assert "\"status\" = 'dead'" in sql or "`status` = 'dead'" in sql, sql
    assert not [q for q in queries if "DISTINCT" in q.upper()]


@pytest.mark.usefixtures("jobs")
def test_filtered_and_searched_lists_stay_at_four_queries(admin_client: Client) -> None:
    """Three on one page (the date bounds come from its rows); a text search adds the
    oldest date of its window (admin/search.py)."""
    url = reverse("admin:django_arcature_job_changelist")
    assert len(job_queries(admin_client, url, status="pending", queue="bulk")) == 3
    searched = job_queries(admin_client, url, q="tests.add")
    assert len(searched) == 4
    [window] = [q for q in searched if "OFFSET 99999" in q.upper()]
    assert "LIKE" not in window.upper()


@pytest.mark.usefixtures("jobs")
def test_the_dashboard_sends_six_grouped_queries_and_two_bounded_ones(
    admin_client: Client,
) -> None:
    queries = job_queries(admin_client, reverse("admin:django_arcature_dashboard"))
    assert len(queries) == 8, queries
    grouped = [sql for sql in queries if "GROUP BY" in sql.upper()]
    assert len(grouped) == 6, queries
    bounded = [sql for sql in queries if "GROUP BY" not in sql.upper()]
    # The dead count stops at its limit; the run-time sample reads at most 2000 rows.
    assert sorted("LIMIT 10001" in sql for sql in bounded) == [False, True], bounded
    assert ["LIMIT 2000" in sql.upper() for sql in bounded].count(True) == 1, bounded
    for sql in queries:
        assert "status" in sql.split("WHERE", 1)[1], sql  # led by an index on status


@pytest.mark.usefixtures("jobs")
def test_the_dead_letter_list_breaks_ties_by_primary_key(admin_client: Client) -> None:
    """(status, finished_at) then gives the whole order on MariaDB (InnoDB's indexes
    end with the primary key); with created_at as the tie-break it sorted every dead
    row: 1.3 s a page with 20,000 dead jobs in 1,000,000."""
    queries = job_queries(admin_client, reverse("admin:django_arcature_deadjob_changelist"))
    [page] = [q for q in queries if "last_error" in q]
    order = page.upper().rsplit("ORDER BY", 1)[1]
    assert "CREATED_AT" not in order, order
    assert "FINISHED_AT" in order.split(",")[0], order
    assert '"ID" DESC' in order or "`ID` DESC" in order, order


@pytest.mark.usefixtures("jobs")
def test_the_rows_query_has_a_limit_even_when_every_row_fits(admin_client: Client) -> None:
    """Django sends the list's query without a LIMIT when all rows fit on one page; then
    MariaDB's planner chose a full scan and a sort for a search that matched nothing."""
    url = reverse("admin:django_arcature_job_changelist")
    for params in ({}, {"q": "nothing matches this"}, {"status": "dead"}):
        queries = job_queries(admin_client, url, **params)
        [page] = [q for q in queries if "last_error" in q and "COUNT(" not in q.upper()]
        assert "LIMIT 200" in page.upper(), (params, page)


@pytest.mark.usefixtures("jobs")
def test_a_list_of_several_pages_reads_its_first_and_last_date_in_one_statement(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_arcature.admin import JobAdmin

    monkeypatch.setattr(JobAdmin, "list_per_page", 10)
    queries = job_queries(admin_client, reverse("admin:django_arcature_job_changelist"))
    assert len(queries) == 4, queries
    [bounds] = [q for q in queries if "first" in q and "last" in q]
    assert bounds.upper().count("LIMIT 1") == 3, bounds  # each end, and the row they ride on
    assert "MIN(" not in bounds.upper(), bounds
