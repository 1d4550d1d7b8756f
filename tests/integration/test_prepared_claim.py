"""The PostgreSQL claim prepared on the server, where a project binds on the server.

With ``OPTIONS["server_side_binding"] = True`` and a ``prepare_threshold``, Django's own
cursor is psycopg's server-binding one, and psycopg prepares every statement it sends
that often, the worker's claim included. After five executions PostgreSQL may stop
planning the claim and keep a generic plan, whose parameters it cannot see: these
tests run claims past that point and check what a claim promises (each job once, in
priority order, a token that fences, the relaxed commit of its own transaction only),
then change the schema and the session under the prepared statement, and check that
the generic plan reaches the rows by index (the statuses are literals in the claim's
text for that: with ``status = $1`` the generic plan scanned the table).

Under Django's default binding nothing is prepared (``prepare_threshold`` alone
prepares only the enqueue's INSERT): a generic claim plan made while the table was
small is kept until the table's next ANALYZE, and a claim so planned on an empty table
took 271 ms instead of 0.8 ms once 200,000 finished rows had been added
(benchmarks/README.md, "the claim, taken apart").
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections, transaction

from django_arcature.db.claimed import ClaimedJob
from django_arcature.models import Job, JobStatus
from tests.plans import pg_nodes, pg_primary_key_search

from .conftest import MakeJobs, claim_one, fresh
from .test_plans import big_table  # noqa: F401  (the fixture)
from .test_relaxed_claim import relaxed_claim_statement, synchronous_commit

pytestmark = [
    pytest.mark.only_on("postgresql", reason="psycopg prepares statements on PostgreSQL only"),
    pytest.mark.pgbouncer(False, reason="prepared statements live in one server session"),
    pytest.mark.django_db(transaction=True),
]

TABLE = Job._meta.db_table


@pytest.fixture
def preparing() -> Iterator[None]:
    """The connection reopened binding on the server, preparing what it sends once;
    restored afterwards."""
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    connection.close()
    options.update(server_side_binding=True, prepare_threshold=1)
    try:
        yield
    finally:
        connection.close()
        options.clear()
        options.update(saved)


def prepared_claims(using: str = "default") -> list[tuple[int, int]]:
    """(generic plans, custom plans) of each claim statement this session holds prepared."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans, statement FROM pg_prepared_statements "
            "WHERE NOT from_sql"
        )
        return [
            (int(generic), int(custom))
            for generic, custom, statement in cursor.fetchall()
            if statement.lstrip().startswith("WITH picked AS MATERIALIZED")
        ]


def test_without_server_binding_the_claim_is_not_prepared(make_jobs: MakeJobs) -> None:
    """Django's default, and ``prepare_threshold`` alone (which prepares the enqueue's
    INSERT): the claim is not prepared, so its plan is made afresh from the table as it
    is, and a transaction-mode pooler keeps working."""
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    try:
        for extra in ({}, {"prepare_threshold": 1}):
            connection.close()
            options.update(extra)
            make_jobs(3)
            for _ in range(3):
                claim_one()
            assert prepared_claims() == []
    finally:
        connection.close()
        options.clear()
        options.update(saved)


def test_a_prepared_claim_past_its_generic_plan_takes_jobs_in_order_once(
    preparing: None, make_jobs: MakeJobs
) -> None:
    """Twelve claims of one job each, past the point where PostgreSQL keeps a generic
    plan: highest priority first, then oldest, each job once, each claim running."""
    low = make_jobs(6, priority=0)
    high = make_jobs(6, priority=5)
    claimed = [claim_one("w1") for _ in range(12)]
    # One enqueue_many stamps one available_at: within a priority the order is free.
    assert {job.id for job in claimed[:6]} == set(high)
    assert {job.id for job in claimed[6:]} == set(low)
    assert Job.objects.claim("w1", lease=60, batch=1) == []
    (plans,) = prepared_claims()
    assert plans[0] > 0, f"PostgreSQL never used a generic plan of the claim: {plans}"
    for job in claimed:
        row = fresh(job.id)
        assert (row.status, row.claim_token, row.attempts) == (
            JobStatus.RUNNING,
            job.claim_token,
            1,
        )
    assert len({job.claim_token for job in claimed}) == 12


def test_a_prepared_claim_token_fences_the_stale_worker(
    preparing: None, make_jobs: MakeJobs
) -> None:
    """The job comes back (its lease taken away) and is claimed again by the prepared
    statement: the first worker's token no longer renews it, the second one's does."""
    (job_id,) = make_jobs(1)
    for _ in range(6):  # prepared, and its generic plan in use
        make_jobs(1, queue="other")
        claim_one("warm", queues=["other"])
    first = claim_one("w1")
    Job.objects.filter(pk=job_id).update(
        status=JobStatus.PENDING, claim_token=None, locked_by="", lease_expires_at=None
    )
    second = claim_one("w2")
    assert (first.id, second.id) == (job_id, job_id)
    assert second.claim_token != first.claim_token
    assert second.attempts == 2
    assert not Job.objects.heartbeat(job_id, first.claim_token, lease=60)
    assert Job.objects.heartbeat(job_id, second.claim_token, lease=60)


def test_two_sessions_claiming_at_once_with_prepared_claims_share_no_job(
    preparing: None, make_jobs: MakeJobs
) -> None:
    """Two threads, each its own prepared session, claim one job at a time from the
    same 40 until none is left: no job twice, none left behind."""
    ids = set(make_jobs(40))
    start = threading.Barrier(2)
    taken: dict[str, list[ClaimedJob]] = {"a": [], "b": []}
    errors: list[BaseException] = []

    def claimer(name: str) -> None:
        try:
            start.wait(10)
            while got := Job.objects.claim(name, lease=60, batch=1):
                taken[name].extend(got)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(name,)) for name in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    claimed = [job.id for jobs in taken.values() for job in jobs]
    assert len(claimed) == len(set(claimed)) == 40
    assert set(claimed) == ids


def test_a_prepared_relaxed_claim_relaxes_only_its_own_transaction(
    preparing: None, make_jobs: MakeJobs
) -> None:
    """The relaxed commit is evaluated by every execution of the prepared statement,
    its generic plan included, and ends with the claim's transaction each time."""
    server_default = synchronous_commit()
    ids = make_jobs(8)
    claimed: list[uuid.UUID] = []
    for _ in range(8):
        with transaction.atomic():
            claimed += [job.id for job in relaxed_claim_statement()]
            assert synchronous_commit() == "off"
        assert synchronous_commit() == server_default
    assert claimed == ids


def test_a_returned_column_changing_type_under_a_prepared_claim(
    preparing: None, make_jobs: MakeJobs
) -> None:
    """Another session changes the type of a column the claim returns while this one
    holds the claim prepared: PostgreSQL refuses the prepared statement from then on
    ("cached plan must not change result type"). The refused claim takes nothing, and
    once the session is closed (what the worker does after a failed claim,
    ``Worker._on_fault``) the next one prepares afresh and takes every job, once."""
    make_jobs(6)
    before = [claim_one() for _ in range(6)]
    after_ids = make_jobs(3)
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{TABLE}" ALTER COLUMN "lease_seconds" TYPE bigint')
        with pytest.raises(DatabaseError, match="cached plan must not change result type"):
            Job.objects.claim("w1", lease=60, batch=3)
        connection.close()
        after = [claim_one() for _ in range(3)]
        assert prepared_claims(), "the new session did not prepare the claim again"
    finally:
        connection.close()
        with other.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{TABLE}" ALTER COLUMN "lease_seconds" TYPE integer')
        other.close()
    assert sorted(job.id for job in after) == sorted(after_ids)
    assert len({job.id for job in before + after}) == 9


def generic_claim_plan() -> Any:
    """The plan PostgreSQL keeps for the worker's claim once prepared: the claim's text
    as the server-binding cursor sends it, its generic plan forced and explained."""
    sent: list[str] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        claim_one("w-warm", lease=60)  # the claim's text, with its placeholders
    (sql,) = [s for s in sent if "RETURNING" in s]
    numbered = iter(range(1, sql.count("%s") + 1))
    server_sql = re.sub("%s", lambda _: f"${next(numbered)}", sql)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("PREPARE arcature_test_claim(bigint, text, int) AS " + server_sql)
        try:
            cursor.execute("EXPLAIN (FORMAT JSON) EXECUTE arcature_test_claim(10, 'w1', 60)")
            plan = cursor.fetchone()[0]
        finally:
            cursor.execute("DEALLOCATE arcature_test_claim")
    return json.loads(plan) if isinstance(plan, str) else plan


@pytest.mark.usefixtures("big_table")
def test_the_generic_plan_of_the_claim_reaches_its_rows_by_index() -> None:
    """With 20,000 finished rows beside the pending ones (analysed, or not), the plan
    a prepared claim keeps picks through an index and updates through the primary key:
    its statuses are literals, so the partial claim indexes' predicate is provable
    without seeing a parameter's value."""
    plan = generic_claim_plan()
    shape = [(n["Node Type"], n.get("Index Name")) for n in pg_nodes(plan)]
    job_reads = [
        n
        for n in pg_nodes(plan)
        if n.get("Relation Name") == TABLE and n["Node Type"] != "ModifyTable"
    ]
    assert job_reads, shape
    assert all(n["Node Type"] != "Seq Scan" for n in job_reads), shape
    targets = [n for n in job_reads if n.get("Alias") == TABLE]
    assert len(targets) == 1, shape
    pg_primary_key_search(targets[0], TABLE, shape)
    picks = [n for n in job_reads if n.get("Alias") != TABLE]
    assert picks, shape
    assert all(n.get("Index Name", "").startswith("arcature_claim_") for n in picks), shape
