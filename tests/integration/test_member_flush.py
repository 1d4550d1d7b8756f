"""A worker's flush of batch members and workflow nodes: counted once, fired once.

On PostgreSQL the statement that writes the members reads their node rows in its
``RETURNING``, and settling them uses those rows instead of looking the nodes up
again (``Driver.complete_batch_members``). These tests hold what must not change
with that, on every database: only the members whose claim held are counted, a
batch's callback is enqueued once, by the flush that finishes it, a workflow
finishes when its last node does, and a dependent is released by its upstream's
flush.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, transaction

from django_arcature import Batch, Workflow
from django_arcature.models import Job, JobStatus
from django_arcature.transitions import ClaimTransition, Completion
from django_arcature.workflows.models import BatchRun, WorkflowNode, WorkflowRun
from tests.plans import explained, pg_nodes
from tests.testapp import workflow_jobs as wf

from .conftest import MakeJobs, fresh

pytestmark = pytest.mark.django_db(transaction=True)


def succeeded(job_id: uuid.UUID) -> Completion:
    claimed = Job.objects.claim_job(job_id, "w1", 60)
    assert claimed is not None, f"{job_id} was not claimable"
    log = [{"worker": "w1", "error": None}]
    return Completion(job_id, claimed.claim_token, "succeeded", attempt_log=log)


def flush(completions: list[Completion]) -> list[ClaimTransition]:
    """The worker's flush (``plain_alone``)."""
    return [w.outcome for w in Job.objects.write_completions(completions, plain_alone=True)]


def callbacks() -> int:
    return Job.objects.filter(task_name="wf.batch_done").count()


@contextmanager
def statements() -> Iterator[list[tuple[str, bool]]]:
    """Each statement sent while inside: (its SQL, whether it ran in a transaction)."""
    seen: list[tuple[str, bool]] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        seen.append((sql, connection.in_atomic_block or not connection.get_autocommit()))
        return execute(sql, params, many, ctx)

    with connection.execute_wrapper(record):
        yield seen


def test_members_of_a_flush_are_counted_once_and_the_last_flush_fires(
    make_jobs: MakeJobs,
) -> None:
    batch = Batch(on_success=wf.batch_done, name="flushed")
    members = [batch.add(wf.step, f"member {i}") for i in range(5)]
    batch.enqueue()
    plain = make_jobs(2)
    stale = succeeded(members[2])
    current = uuid.uuid4()
    Job.objects.filter(id=members[2]).update(claim_token=current)  # re-claimed elsewhere

    first = [succeeded(plain[0]), succeeded(members[0]), stale, succeeded(members[1])]
    first.append(succeeded(plain[1]))
    outcomes = flush(first)

    assert (
        outcomes
        == [ClaimTransition.UPDATED] * 2 + [ClaimTransition.LOST] + [ClaimTransition.UPDATED] * 2
    )
    assert batch.counts()["succeeded"] == 2
    assert callbacks() == 0

    # The stale member under its new claim, and the last two: this flush finishes it.
    log = [{"worker": "w2", "error": None}]
    last = [Completion(members[2], current, "succeeded", attempt_log=log)]
    last += [succeeded(job_id) for job_id in members[3:]]
    assert flush(last) == [ClaimTransition.UPDATED] * 3

    assert batch.counts() == {
        "total": 5,
        "succeeded": 5,
        "dead": 0,
        "cancelled": 0,
        "pending": 0,
    }
    assert callbacks() == 1
    assert batch.id is not None
    assert BatchRun.objects.get(id=batch.id).fired_at is not None
    assert {fresh(job_id).status for job_id in [*members, *plain]} == {JobStatus.SUCCEEDED}


def test_a_flush_of_nodes_and_members_releases_counts_and_finishes_once(
    make_jobs: MakeJobs,
) -> None:
    flow = Workflow("flushed flow")
    root = flow.add(wf.step, "root")
    child = flow.add(wf.step, "child", after=[root])
    leaf = flow.add(wf.step, "leaf")
    flow.enqueue()
    batch = Batch(on_success=wf.batch_done, name="beside a flow")
    members = [batch.add(wf.step, f"member {i}") for i in range(2)]
    batch.enqueue()
    plain = make_jobs(1)

    mixed = [succeeded(root.job_id), succeeded(plain[0]), succeeded(members[0])]
    mixed += [succeeded(leaf.job_id), succeeded(members[1])]
    assert flush(mixed) == [ClaimTransition.UPDATED] * 5

    assert fresh(child.job_id).status == JobStatus.PENDING  # released by its root's flush
    assert callbacks() == 1  # both members in one flush: fired by it, once
    assert flow.run is not None
    run = WorkflowRun.objects.get(id=flow.run.id)
    assert run.outcome == ""  # the child is still to run

    assert flush([succeeded(child.job_id)]) == [ClaimTransition.UPDATED]
    run.refresh_from_db()
    assert run.outcome == "succeeded"
    assert callbacks() == 1


@pytest.mark.only_on("postgresql", reason="PostgreSQL's completion statement reads the nodes")
def test_a_flush_of_members_reads_their_nodes_only_in_the_statement_that_writes_them(
    make_jobs: MakeJobs,
) -> None:
    batch = Batch(on_success=wf.batch_done, name="read once")
    members = [batch.add(wf.step, f"member {i}") for i in range(3)]
    batch.enqueue()
    plain = make_jobs(2)
    completions = [succeeded(plain[0]), *(succeeded(job_id) for job_id in members)]
    completions.append(succeeded(plain[1]))
    node_table = connection.ops.quote_name(WorkflowNode._meta.db_table)

    with statements() as seen:
        assert flush(completions) == [ClaimTransition.UPDATED] * 5

    # In the members' transaction: their UPDATE, which reads their node rows in its
    # RETURNING, then the batch's counters and the callback's enqueue; settling them
    # reads no node again.
    inside = [sql for sql, in_transaction in seen if in_transaction]
    reading_nodes = [sql for sql in inside if node_table in sql]
    assert len(reading_nodes) == 1, reading_nodes
    assert "UPDATE" in reading_nodes[0]
    assert callbacks() == 1
    assert batch.counts()["succeeded"] == 3


OTHER_NODES = 20_000


def other_nodes(statistics: str) -> None:
    """20,000 nodes of other workflows, and the node table's statistics as named."""
    qn = connection.ops.quote_name
    nodes = qn(WorkflowNode._meta.db_table)
    insert = (
        f"INSERT INTO {nodes} ({qn('job_id')}, {qn('name')}, {qn('when')}, "
        f"{qn('has_dependents')}) SELECT gen_random_uuid(), 'other ' || g, 'succeeded', "
        f"false FROM generate_series(1, {OTHER_NODES}) g"
    )
    with connection.cursor() as cursor:
        if statistics == "taken while empty":
            cursor.execute(f"ANALYZE {nodes}")
        cursor.execute(insert)
        if statistics == "after a prune":  # every node deleted, not yet vacuumed
            cursor.execute(f"DELETE FROM {nodes}")
        if statistics != "taken while empty":
            cursor.execute(f"ANALYZE {nodes}")


def node_reads(plan: Any) -> list[tuple[str, str | None, bool]]:
    """(node type, index, whether it probes by a key) of each read of the node table."""
    table = WorkflowNode._meta.db_table
    return [
        (node["Node Type"], node.get("Index Name"), "Index Cond" in node)
        for node in pg_nodes(plan)
        if node.get("Relation Name") == table
    ]


def probes_by_key(reads: list[tuple[str, str | None, bool]]) -> bool:
    key = WorkflowNode._meta.db_table + "_pkey"
    return bool(reads) and all(
        kind in ("Index Scan", "Index Only Scan") and index == key and by_key
        for kind, index, by_key in reads
    )


STATISTICS = ["fresh", "taken while empty", "after a prune"]


@pytest.mark.only_on("postgresql", reason="PostgreSQL's completion statement reads the nodes")
@pytest.mark.parametrize("statistics", STATISTICS)
def test_the_members_update_reads_their_nodes_by_key(statistics: str) -> None:
    """Beside 20,000 other nodes, the members' ``UPDATE`` reads their nodes one
    primary-key probe each, whatever the statistics say (DESIGN §5)."""
    other_nodes(statistics)
    batch = Batch(on_success=wf.batch_done, name="by key")
    members = [batch.add(wf.step, f"member {i}") for i in range(5)]
    batch.enqueue()
    completions = [succeeded(job_id) for job_id in members]

    found = explained(
        "default",
        lambda: Job.objects.complete_batch(completions),
        lambda sql: sql.lstrip().startswith("WITH") and "UPDATE" in sql,
    )

    assert len(found) == 1
    reads = node_reads(found[0][1])
    assert probes_by_key(reads), reads


@pytest.mark.only_on("postgresql", reason="PostgreSQL's driver writes plain jobs alone")
@pytest.mark.parametrize("statistics", STATISTICS)
def test_a_flush_of_plain_jobs_probes_the_node_table_by_key(
    statistics: str, make_jobs: MakeJobs
) -> None:
    """The plain jobs' statement asks, per job, whether it is a member: one
    primary-key probe each, never a scan of the node table. As an ``EXISTS``
    semi-join it was planned as a hash join over all 20,000 nodes (5-9 ms a flush
    of 50), with fresh statistics as with stale ones."""
    from django_arcature.db.batch import _json_statement
    from django_arcature.manager.completions import _member_table
    from django_arcature.transitions import transition_fields

    other_nodes(statistics)
    rows = []
    for completion in (succeeded(job_id) for job_id in make_jobs(50)):
        rows.append((completion.job_id, completion.claim_token, transition_fields(completion)))
    sql, params = _json_statement(connection, Job, rows, _member_table(), alone=True)

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
        transaction.set_rollback(True)

    reads = node_reads(plan)
    assert probes_by_key(reads), reads
