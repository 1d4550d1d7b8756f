"""The hot statements reach their rows by primary key, whatever the statistics say.

In production finished rows dominate the job table, and the statistics the last
ANALYZE took say "there are no pending (or running) rows". Measured with 3,000,000
finished rows, the PostgreSQL claim's outer UPDATE then became a nested-loop
semi-join over every pending row, found through a status index: 117 ms per claim
instead of about 1 ms. SQLite did the same on a table never analysed. These tests
rebuild both situations on a modest table (the plan shape, not the time, is what
gives it away) and check, with the database's own EXPLAIN, how each hot statement
the worker sends reaches the job table:

* the claim, the heartbeat of a batch and the batched completion touch the job
  rows they change through the primary key (PostgreSQL, MariaDB, SQLite);
* no statement of theirs nor of the sweep reads the whole job table, or joins
  against every pending or running row.

Not timed: a plan that collapses fails here on any machine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_arcature.db import ClaimedJob
from django_arcature.managers import Completion
from django_arcature.models import Job
from tests.integration.conftest import MakeJobs
from tests.plans import (
    Statement,
    explained,
    explained_after,
    finished_rows_sql,
    mysql_tables,
    pg_nodes,
    pg_primary_key_search,
)

# MariaDB's ANALYZE TABLE commits the open transaction: each test leaves a clean table.
pytestmark = pytest.mark.django_db(transaction=True)

TABLE = Job._meta.db_table
FINISHED = 20_000
PENDING = 1_000
RUNNING = 150


def analyse() -> None:
    """Fresh statistics, taken now: they see the rows there are, nothing pending."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"ANALYZE {connection.ops.quote_name(TABLE)}")
        elif connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {connection.ops.quote_name(TABLE)}")
            cursor.fetchall()
        else:
            cursor.execute("ANALYZE")


@pytest.fixture(params=["fresh statistics", "no statistics", "analysed empty"])
def big_table(request: pytest.FixtureRequest, make_jobs: MakeJobs) -> list[ClaimedJob]:
    """20,000 finished rows, then 1,000 pending jobs, 150 of them claimed.

    Either analysed while only finished rows existed, or never analysed (SQLite
    databases usually are not, and a never-analysed SQLite table made the claim walk
    every pending row through a status index).
    """
    with connection.cursor() as cursor:
        cursor.execute(
            finished_rows_sql(
                connection.vendor, connection.ops.quote_name(TABLE), 1, FINISHED + 1, FINISHED
            )
        )
    if request.param == "fresh statistics":
        analyse()
    elif request.param == "analysed empty":
        # The queue drained and pruned, then analysed before its pages were reused:
        # the statistics say "pages, but no rows", so the planner takes the job
        # table for one row until the next ANALYZE (a fan-out drain of 10,000
        # nodes seq-scanned the table in every claim, 15x slower).
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {connection.ops.quote_name(TABLE)}")
        analyse()
    elif connection.vendor == "sqlite":
        # ANALYZE of an earlier test left its statistics behind (a flush keeps them),
        # and a connection keeps what it loaded: drop them, and reconnect.
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS sqlite_stat1")
        connection.close()
    make_jobs(PENDING)
    running = Job.objects.claim("w-running", 300, RUNNING)
    assert len(running) == RUNNING
    return running


def updates(sql: str) -> bool:
    return sql.lstrip().upper().startswith(("UPDATE", "WITH"))


def reads_and_writes(sql: str) -> bool:
    return sql.lstrip().upper().startswith(("UPDATE", "WITH", "SELECT"))


def plans_of(call: Callable[[], object], wanted: Callable[[str], bool]) -> list[Any]:
    found = explained("default", call, wanted)
    assert found, "the call sent no statement to explain"
    return found


# --- what "reaches its rows by primary key" means on each database -----------------------------


def pg_job_scans(plan: Any) -> list[dict[str, Any]]:
    """The plan's reads of the job table (the UPDATE's own ModifyTable node is no read)."""
    return [
        node
        for node in pg_nodes(plan)
        if node.get("Relation Name") == TABLE and node["Node Type"] != "ModifyTable"
    ]


def assert_pg_shape(statement: Statement, plan: Any, *, by_pk: bool) -> None:
    nodes = list(pg_nodes(plan))
    shape = [(n["Node Type"], n.get("Join Type"), n.get("Index Name")) for n in nodes]
    for node in nodes:
        assert node["Node Type"] != "Seq Scan" or node.get("Relation Name") != TABLE, shape
        # The collapse: a semi-join that compares every pending row with each picked id.
        assert node.get("Join Type") != "Semi", shape
    if not by_pk:
        return
    # The rows the UPDATE changes are the ones its target scan (the table's own alias,
    # not the claim's inner SELECT) finds: that scan must be a primary-key lookup.
    targets = [n for n in pg_job_scans(plan) if n.get("Alias") == TABLE]
    assert targets, shape
    for node in targets:
        # By the picked ids: not a walk of the whole key, each row compared with the
        # picked ones (the join of a table the statistics call empty).
        pg_primary_key_search(node, TABLE, shape)


def assert_mysql_shape(statement: Statement, plan: Any, *, by_pk: bool) -> None:
    tables = [t for t in mysql_tables(plan) if t.get("table_name") in {TABLE, "v"}]
    job = [t for t in tables if t.get("table_name") == TABLE]
    assert job, plan
    for access in job:
        assert access.get("access_type") != "ALL", (statement.sql, plan)
        if by_pk and statement.sql.lstrip().upper().startswith("UPDATE"):
            assert access.get("key") == "PRIMARY", (statement.sql, plan)


def assert_sqlite_shape(statement: Statement, plan: Any, *, by_pk: bool) -> None:
    details = [str(row[-1]) for row in plan]
    for detail in details:
        assert detail != f"SCAN {TABLE}", (statement.sql, details)
    if by_pk and statement.sql.lstrip().upper().startswith(("UPDATE", "WITH")):
        # The row the UPDATE changes is found through the primary key's own index.
        target = [d for d in details if d.startswith(f"SEARCH {TABLE} ")]
        assert target, details
        assert any("sqlite_autoindex" in d or "PRIMARY KEY" in d for d in target), details


def assert_shape(call: Callable[[], object], wanted: Callable[[str], bool], by_pk: bool) -> None:
    check = {
        "postgresql": assert_pg_shape,
        "mysql": assert_mysql_shape,
        "sqlite": assert_sqlite_shape,
    }[connection.vendor]
    for statement, plan in plans_of(call, wanted):
        check(statement, plan, by_pk=by_pk)


# --- the hot statements ------------------------------------------------------------------------


def test_claim_reaches_the_rows_it_takes_by_primary_key(big_table: list[ClaimedJob]) -> None:
    assert_shape(lambda: Job.objects.claim("w1", 30, 50), updates, by_pk=True)


def test_claim_on_named_queues_reaches_rows_by_primary_key(big_table: list[ClaimedJob]) -> None:
    assert_shape(lambda: Job.objects.claim("w1", 30, 50, queues=["default"]), updates, by_pk=True)


def test_claim_still_takes_the_oldest_jobs_first(big_table: list[ClaimedJob]) -> None:
    """The plan fix changes how rows are reached, not which: priority, then oldest."""
    expected = list(
        Job.objects.filter(status="pending")
        .order_by("-priority", "available_at")
        .values_list("id", flat=True)[:50]
    )
    claimed = Job.objects.claim("w1", 30, 50)
    assert [job.id for job in claimed] == expected


def test_heartbeat_of_a_batch_reaches_rows_by_primary_key(big_table: list[ClaimedJob]) -> None:
    claims = [(job.id, job.claim_token) for job in big_table[:50]]
    assert_shape(lambda: Job.objects.heartbeat_many(claims, 30), updates, by_pk=True)


def test_batched_completion_reaches_rows_by_primary_key(big_table: list[ClaimedJob]) -> None:
    done = [Completion(job.id, job.claim_token, "succeeded") for job in big_table[:50]]
    assert_shape(lambda: Job.objects.complete_batch(done), updates, by_pk=True)


def test_sweep_reads_neither_the_whole_table_nor_every_running_row(
    big_table: list[ClaimedJob],
) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {connection.ops.quote_name(TABLE)} SET lease_expires_at = locked_at "
            "WHERE status = 'running'"
        )
    assert_shape(lambda: Job.objects.sweep_expired_leases(), reads_and_writes, by_pk=False)


def test_single_fenced_writes_reach_their_row_by_primary_key(big_table: list[ClaimedJob]) -> None:
    """heartbeat and mark_* of one job: the same fence, one row, by primary key.

    (``release``, sent once per job at a worker's shutdown, keeps its plain UPDATE.)
    """
    first, second, third = big_table[:3]
    assert_shape(lambda: Job.objects.heartbeat(first.id, first.claim_token, 30), updates, True)
    assert_shape(
        lambda: Job.objects.mark_succeeded(second.id, second.claim_token, None), updates, True
    )
    assert_shape(
        lambda: Job.objects.mark_dead(third.id, third.claim_token, "permanent", "no"),
        updates,
        True,
    )


# --- PostgreSQL: a batch's keys searched once, not once per row ---------------------------------


def pg_target_conditions(plan: Any) -> list[str]:
    """The primary-key conditions of the scans that find the rows the UPDATE changes."""
    return [
        str(pg_primary_key_search(node, TABLE, plan)["Index Cond"])
        for node in pg_job_scans(plan)
        if node.get("Alias") == TABLE
    ]


def assert_keys_searched_once(
    call: Callable[[], object], *, in_autocommit: bool = False, expect: str = ""
) -> None:
    """The batch's ids reach the primary key as one list (``= ANY``), in a scan that
    runs once: not a lookup per row with that list in its condition too. PostgreSQL 15
    descends the index once per element of such a list, on each of the lookups: a claim
    or completion of 200 cost 200 x 200 descents, and the drain's server CPU per
    completion doubled, on any statistics (benchmarks/drain_steps.py: 27-38 -> 67-71 us).

    ``in_autocommit``: the call runs as the worker runs it, outside a transaction (a
    statement sent only there), and its statements are explained after it; ``expect``
    is a word the statement that matters must contain.
    """
    found = explained_after("default", call, updates) if in_autocommit else plans_of(call, updates)
    assert any(expect in statement.sql for statement, _ in found), [s.sql for s, _ in found]
    for statement, plan in found:
        conditions = pg_target_conditions(plan)
        assert conditions, statement.sql
        for condition in conditions:
            assert "ANY" in condition, (condition, statement.sql)
            # A per-row lookup names the joined row: ``v.arcature_id`` or ``picked.id``.
            assert "arcature_id" not in condition, condition
            assert "picked" not in condition, condition


@pytest.mark.only_on("postgresql", reason="the key list is PostgreSQL's statement shape")
def test_postgresql_claim_searches_the_picked_keys_once(big_table: list[ClaimedJob]) -> None:
    assert_keys_searched_once(lambda: Job.objects.claim("w1", 30, 50))
    # As the worker sends it: in autocommit, its commit relaxed from within.
    assert_keys_searched_once(
        lambda: Job.objects.claim("w1", 30, 50), in_autocommit=True, expect="relaxed_commit"
    )


@pytest.mark.only_on("postgresql", reason="the key list is PostgreSQL's statement shape")
def test_postgresql_plain_completions_search_their_keys_once(
    big_table: list[ClaimedJob],
) -> None:
    """The worker's flush: plain jobs in one autocommit statement that names members."""
    done = [Completion(job.id, job.claim_token, "succeeded") for job in big_table[:50]]
    assert_keys_searched_once(
        lambda: Job.objects.write_completions(done, plain_alone=True),
        in_autocommit=True,
        expect="EXCEPT ALL",  # the plain jobs' statement, which hands members back
    )


@pytest.mark.only_on("postgresql", reason="the key list is PostgreSQL's statement shape")
def test_postgresql_batched_writes_search_their_keys_once(big_table: list[ClaimedJob]) -> None:
    claims = [(job.id, job.claim_token) for job in big_table[:50]]
    assert_keys_searched_once(lambda: Job.objects.heartbeat_many(claims, 30))
    done = [Completion(job.id, job.claim_token, "succeeded") for job in big_table[50:100]]
    assert_keys_searched_once(lambda: Job.objects.complete_batch(done))


@pytest.mark.only_on("postgresql", reason="partial indexes are PostgreSQL's (migration 0005)")
def test_postgresql_claim_and_sweep_indexes_hold_live_rows_only() -> None:
    from django.core.management import call_command
    from django.db.migrations.loader import MigrationLoader

    def definitions() -> dict[str, str]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s "
                "AND indexname IN ('arcature_claim_any_idx', 'arcature_claim_queue_idx', "
                "'arcature_sweep_idx')",
                [TABLE],
            )
            return dict(cursor.fetchall())

    partial = definitions()
    assert "WHERE ((status)::text = 'pending'::text)" in partial["arcature_claim_any_idx"]
    assert "WHERE ((status)::text = 'pending'::text)" in partial["arcature_claim_queue_idx"]
    assert "WHERE ((status)::text = 'running'::text)" in partial["arcature_sweep_idx"]
    loader = MigrationLoader(connection)
    (mine,) = (
        migration
        for (app, name), migration in loader.disk_migrations.items()
        if app == "django_arcature" and name.endswith("_postgresql_partial_indexes")
    )
    (before,) = mine.dependencies
    try:
        call_command("migrate", *before, verbosity=0)
        full = definitions()
        assert sorted(full) == sorted(partial)
        assert not any("WHERE" in definition for definition in full.values()), full
    finally:
        call_command("migrate", "django_arcature", verbosity=0)
    assert definitions() == partial


@pytest.mark.only_on("postgresql", reason="partial indexes are PostgreSQL's (migration 0018)")
def test_postgresql_finished_index_leaves_pending_rows_out(make_jobs: MakeJobs) -> None:
    """0018: ``arcature_finished_idx`` holds the rows that finished or are not pending;
    reversing the migration gives back the full index, and re-applying it the partial."""
    from django.core.management import call_command
    from django.db.migrations.loader import MigrationLoader

    def definition() -> str:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = %s "
                "AND indexname = 'arcature_finished_idx'",
                [TABLE],
            )
            (row,) = cursor.fetchall()
        return str(row[0])

    def entries() -> int:
        """The index's entries, as an index-only count over all of it."""
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_bitmapscan = off")
            sql = (
                f"SELECT COUNT(*) FROM {TABLE} WHERE finished_at IS NOT NULL OR status <> 'pending'"
            )
            cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            assert any(
                node.get("Index Name") == "arcature_finished_idx" for node in pg_nodes(plan)
            ), plan
            cursor.execute(sql)
            return int(cursor.fetchone()[0])

    partial = definition()
    assert "WHERE ((finished_at IS NOT NULL) OR ((status)::text <> 'pending'::text))" in partial
    make_jobs(5)
    Job.objects.filter(pk__in=list(Job.objects.values_list("pk", flat=True)[:2])).update(
        status="cancelled", finished_at=timezone.now()
    )
    assert entries() == 2  # the three pending rows wrote none
    loader = MigrationLoader(connection)
    (mine,) = (
        migration
        for (app, name), migration in loader.disk_migrations.items()
        if app == "django_arcature" and name.endswith("_postgresql_finished_idx_partial")
    )
    (before,) = mine.dependencies
    try:
        call_command("migrate", *before, verbosity=0)
        full = definition()
        assert "WHERE" not in full, full
        assert full.endswith("(status, finished_at)"), full
    finally:
        call_command("migrate", "django_arcature", verbosity=0)
    assert definition() == partial


@pytest.mark.only_on("postgresql", reason="the sweep index without the lease is 0008's")
def test_postgresql_sweep_reads_only_running_rows(big_table: list[ClaimedJob]) -> None:
    """0008's sweep index holds the running jobs' ids, no lease: the sweep reads them all.

    Half of the running jobs' leases have expired. Whatever index the planner picks
    (the sweep's, or the finished index by status), the job table's scan may read the
    running rows, and not one pending or finished row.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {connection.ops.quote_name(TABLE)} SET lease_expires_at = locked_at "
            "WHERE id IN (SELECT id FROM "
            f"{connection.ops.quote_name(TABLE)} WHERE status = 'running' LIMIT %s)",
            [RUNNING // 2],
        )
    found = explained(
        "default",
        lambda: Job.objects.sweep_expired_leases(),
        lambda sql: sql.lstrip().upper().startswith("SELECT"),
        analyze=True,
    )
    assert found
    _statement, plan = found[0]
    scans = pg_job_scans(plan)
    assert scans, plan
    for node in scans:
        read = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        assert read <= RUNNING, (node["Node Type"], node.get("Index Name"), read)
    assert plan[0]["Plan"]["Actual Rows"] == RUNNING // 2


@pytest.mark.only_on("postgresql", reason="HOT updates are PostgreSQL's (migration 0008)")
def test_postgresql_heartbeats_are_hot_updates(make_jobs: MakeJobs) -> None:
    """A heartbeat changes no indexed column (0008), so PostgreSQL updates it in place.

    Before 0008 the sweep index held ``lease_expires_at`` and no heartbeat was HOT.
    A few jobs, so their page has room for the new row versions (on a full page a
    HOT update waits for the page to be pruned; benchmarks/churn.py measures that).
    Counted in the heartbeat's own transaction: PostgreSQL 15's ``pg_stat_get_xact_*``
    also hold earlier transactions' counts not yet reported, hence before and after.
    """
    make_jobs(5)
    claimed = Job.objects.claim("w-hot", 30, 5)
    claims = [(job.id, job.claim_token) for job in claimed]
    query = (
        "SELECT pg_stat_get_xact_tuples_updated(%s::regclass), "
        "pg_stat_get_xact_tuples_hot_updated(%s::regclass)"
    )
    for beat in (
        lambda: Job.objects.heartbeat_many(claims, 60),
        lambda: Job.objects.heartbeat(claims[0][0], claims[0][1], 90),
    ):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(query, [TABLE, TABLE])
            updated_before, hot_before = cursor.fetchone()
            beat()
            cursor.execute(query, [TABLE, TABLE])
            updated, hot = cursor.fetchone()
        assert updated - updated_before > 0
        assert hot - hot_before == updated - updated_before
