"""Workflow nodes and batch members, moved inside the transaction that finished their upstream.

This is the manager's only code that moves a ``waiting`` job (DESIGN §11). It is
called, never on its own, from the transactions that finish jobs:

- a fenced completion (``completions``): ``settle`` with the claims that landed,
- the sweep (``leases``): the jobs it killed as ``exhausted``,
- an operator's cancel, and a requeue of a dead node (``resume``).

A stale completion is fenced out before it gets here, so it releases nothing; a
completion whose acknowledgement was lost had released in the transaction that
committed, and is not settled again when it is recognised. Every step is one or
two indexed statements, and nothing is read when the finished jobs are not nodes
(one primary-key lookup per transaction).

**Edges are read, never written, when they are decided.** An upstream finishes
once per life (its completion is fenced), and its outcome decides every edge
leaving it: ``edge_states`` derives an edge stored ``open`` from its upstream's
status. Writing each one had been a fan-in node's largest cost (a non-HOT row
version in every index of the edge table, about six WAL records an edge). A
completion reads the edges leaving its jobs (``_open_edges``) and decides each
still-waiting dependent:

- an edge that is the only one into its dependent (``WorkflowEdge.sole``, fixed
  when the workflow is built) and met: the dependent is locked (in id order) and
  released in one statement, a compare-and-set on ``waiting``. That is every
  dependent of a wide fan-out's root.
- an edge its dependent's ``when`` does not accept: the dependent is cancelled,
  naming that upstream, and the cascade goes on from it.
- otherwise (a fan-in): the dependent's job row is locked (``SELECT … FOR
  UPDATE``, in id order) and the edges met here are taken off its count of open
  edges (``WorkflowNode.open_upstreams``), one ``UPDATE`` per dependent and
  flush. Every sibling's completion takes that lock before it counts, so of two
  finishing at once the second starts from the first's count (under READ
  COMMITTED an ``UPDATE`` reads the newest committed row; SQLite runs one writer
  at a time), and exactly one sees zero and releases the dependent.

A requeue of a finished upstream (``resume``) writes the edges its outcome decided
into dependents already released, reopens the others, and counts the open edges
of the waiting ones again.
"""

from __future__ import annotations

import logging
import uuid
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.db.models import F, Sum

from django_arcature.db import DatabaseNow
from django_arcature.db.base import MemberRow
from django_arcature.db.claimed import as_uuid
from django_arcature.states import JobStatus

from .keyed import keyed_id_list

if TYPE_CHECKING:
    from django_arcature.models import Job

logger = logging.getLogger(__name__)

#: How a job finished, as its dependents see it.
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"

#: The ``when`` values an outcome meets; every other ``when`` is then unmet.
MET_BY: dict[str, tuple[str, ...]] = {
    SUCCEEDED: ("succeeded", "always"),
    FAILED: ("failed", "always"),
    CANCELLED: ("always",),
}

#: The counter column (beside ``finished``) a node's own outcome adds to; a node
#: cancelled because of its upstream's outcome adds to ``finished`` only.
_COUNTED_AS = {SUCCEEDED: "", FAILED: "dead", CANCELLED: "cancelled"}

#: How a job status reads as an outcome.
OUTCOME_OF_STATUS = {
    JobStatus.SUCCEEDED: SUCCEEDED,
    JobStatus.DEAD: FAILED,
    JobStatus.CANCELLED: CANCELLED,
}


def _models() -> Any:
    from django_arcature.workflows import models

    return models


def settle_completions(
    using: str,
    model: type[Job],
    finished: Iterable[tuple[uuid.UUID, str]],
    nodes: Mapping[uuid.UUID, MemberRow] | None = None,
) -> None:
    """Settle the dependents of landed completions (``kind`` "succeeded"/"dead"/"retry").

    ``nodes``: the node rows of the finished jobs that are members, when the
    completion's own statement read them (then no job outside it is a member).
    """
    outcomes = {
        job_id: SUCCEEDED if kind == "succeeded" else FAILED
        for job_id, kind in finished
        if kind in ("succeeded", "dead")
    }
    settle(using, model, outcomes, nodes)


def settle(
    using: str,
    model: type[Job],
    finished: Mapping[uuid.UUID, str],
    known: Mapping[uuid.UUID, MemberRow] | None = None,
) -> list[uuid.UUID]:
    """Release or cancel what waits on ``finished`` (job id → outcome); must run in its transaction.

    ``known``: the node rows of those of ``finished`` that are nodes or members,
    already read (``_finished_nodes`` is their look-up otherwise). Returns the ids
    of the nodes released (now ``pending``).
    """
    if not finished:
        return []
    if known is None:
        nodes = _finished_nodes(using, list(finished))
    else:
        nodes = [known[job_id] for job_id in finished if job_id in known]
    if not nodes:
        return []
    # One pass over the rows: a flush of a wide fan-in's nodes sends 50 here, each
    # of the same workflow, and every dict lookup by UUID costs a Python-level hash.
    upstream: dict[uuid.UUID, str] = {}
    members: dict[uuid.UUID, tuple[uuid.UUID, str]] = {}
    ended: dict[uuid.UUID, tuple[uuid.UUID, str]] = {}
    sizes: dict[uuid.UUID, int] = {}
    for job_id, has, batch_id, workflow_id, size in nodes:
        outcome = finished[job_id]
        if has:
            upstream[job_id] = outcome
        if batch_id:
            members[job_id] = (batch_id, outcome)
        if workflow_id is not None:
            ended[job_id] = (workflow_id, _COUNTED_AS[outcome])
            if size is not None:
                sizes[workflow_id] = size
    # The counters first, the dependents' row locks last: a wide fan-in's dependent
    # is the row every sibling's completion queues on, so it is held for as little
    # of the transaction as can be (its lock, its count, the commit). The counts of
    # nodes the cascade cancels go to the shard already written.
    # On PostgreSQL the counter statements go in one round trip with the cascade's
    # first read of edges (``_open_edges``), in that order.
    deferred: list[tuple[str, list[Any]]] | None = (
        [] if upstream and _one_round_trip(connections[using]) else None
    )
    shards = _count_first(using, ended, sizes, deferred=deferred)
    released: list[uuid.UUID] = []
    busy: set[uuid.UUID] = set()
    if upstream:
        released, cancelled, busy = _cascade(using, model, upstream, deferred)
        if deferred:  # not sent with an edge UPDATE (none was needed): sent now
            _send(using, deferred)
        if cancelled:
            shards.update(_count_first(using, cancelled, sizes, shards))
    finish_workflows(using, set(shards) - busy)
    if members:
        count_members(using, model, members)
    if released:
        _wake_workers(using)
    return released


def _finished_nodes(using: str, ids: list[uuid.UUID]) -> list[MemberRow]:
    """(job id, has dependents, batch, workflow, the workflow's node count) of those of
    ``ids`` that are nodes or batch members.

    One primary-key lookup, written as SQL: every flush of every worker sends it,
    plain jobs' too (then it finds nothing), and through the ORM its compilation
    cost more client CPU than the rest of a plain flush's settling.
    """
    m = _models()
    connection = connections[using]
    qn = connection.ops.quote_name
    node = qn(m.WorkflowNode._meta.db_table)
    run = qn(m.WorkflowRun._meta.db_table)
    where, params = _id_list(connection, f"n.{qn('job_id')}", ids)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT n.{qn('job_id')}, n.{qn('has_dependents')}, n.{qn('batch_id')}, "
            f"n.{qn('workflow_id')}, r.{qn('node_count')} FROM {node} n "
            f"LEFT JOIN {run} r ON r.{qn('id')} = n.{qn('workflow_id')} WHERE {where}",
            params,
        )
        rows = cursor.fetchall()
    return [
        (
            as_uuid(job_id),
            bool(has_dependents),
            None if batch_id is None else as_uuid(batch_id),
            None if workflow_id is None else as_uuid(workflow_id),
            None if size is None else int(size),
        )
        for job_id, has_dependents, batch_id, workflow_id, size in rows
    ]


def _cascade(
    using: str,
    model: type[Job],
    frontier: dict[uuid.UUID, str],
    before: list[tuple[str, list[Any]]] | None = None,
) -> tuple[list[uuid.UUID], dict[uuid.UUID, tuple[uuid.UUID, str]], set[uuid.UUID]]:
    """Decide the still-waiting dependents of ``frontier`` (job id → outcome), round by round.

    ``before``: statements to send with the first read of edges, in the same round
    trip (emptied once sent).

    Returns the nodes released, the nodes cancelled (id → (workflow, outcome)) and
    the workflows left with a node this transaction saw unfinished (released or
    still waiting): those cannot have finished, so their counters are not checked.
    """
    released: list[uuid.UUID] = []
    cancelled: dict[uuid.UUID, tuple[uuid.UUID, str]] = {}
    # A node undecided in one round may be cancelled by a later one: whether its
    # workflow is busy is known at the end only.
    busy_nodes: set[uuid.UUID] = set()
    still_waiting: set[tuple[uuid.UUID, uuid.UUID]] = set()
    workflows: dict[uuid.UUID, uuid.UUID] = {}
    while frontier:
        # The open edges leaving this round's jobs, read, never written: each is
        # decided by its upstream's outcome, which ``edge_states`` derives for readers.
        workflow_of: dict[uuid.UUID, uuid.UUID] = {}
        sole_met: list[uuid.UUID] = []
        met: Counter[uuid.UUID] = Counter()
        unmet_edge: dict[uuid.UUID, int] = {}
        for outcome in sorted(set(frontier.values())):
            ups = [job_id for job_id, o in frontier.items() if o == outcome]
            met_by = MET_BY[outcome]
            for down, workflow, sole, when, count, first in _open_edges(using, ups, before):
                workflow_of[down] = workflow
                if when not in met_by:
                    # Of two unmet edges into one dependent, the first built names the reason.
                    if down not in unmet_edge or first < unmet_edge[down]:
                        unmet_edge[down] = first
                elif sole:
                    sole_met.append(down)
                else:
                    met[down] += count
        if not workflow_of:
            break
        workflows.update(workflow_of)
        # A dependent whose only edge this transaction just found met is ready: only
        # its upstream's completion, this one, decides that edge, so there is nothing
        # to count. Released by a compare-and-set on ``waiting`` (an operator may have
        # cancelled it), in id order. This is the wide fan-out's case: its root
        # releases 10,000 dependents here.
        if sole_met:
            ready_alone = _release_sole(using, model, sole_met)
            released.extend(ready_alone)
            busy_nodes.update(ready_alone)
        unmet = _upstreams_of(using, unmet_edge)
        deciding = sorted(set(met) | set(unmet))
        if not deciding:
            break
        # Locked in id order, so two transactions deciding on the same dependents
        # queue up instead of deadlocking; the open counts are then taken down under
        # those locks. (The sole dependents above were locked by this transaction
        # only: no other completion ever decides them.)
        decrements = {down: count for down, count in met.items() if down not in unmet}
        waiting, left = _lock_and_count(using, model, deciding, decrements)
        unmet = {down: up for down, up in unmet.items() if down in waiting}
        ready = [down for down in waiting if down not in unmet and left.get(down, 1) <= 0]
        if ready:
            _release(using, model, ready)
            released.extend(ready)
        busy_nodes.update(ready)
        still_waiting.update(
            (down, workflow_of[down])
            for down in waiting
            if down not in unmet and left.get(down, 1) > 0
        )
        frontier = {}
        if unmet:
            cancel_for_upstream(using, model, unmet)
            frontier = dict.fromkeys(unmet, CANCELLED)
            # Let go because of an upstream's outcome: finished, neither died nor cancelled.
            cancelled.update({down: (workflow_of[down], "") for down in unmet})
    busy = {workflows[job_id] for job_id in busy_nodes}
    busy.update(workflow for job_id, workflow in still_waiting if job_id not in cancelled)
    return released, cancelled, busy


# --- the cascade's statements ----------------------------------------------------
#
# Written as SQL, not through the ORM: the root of a wide fan-out sends each of them
# with 10,000 ids, which the ORM compiles one parameter at a time (about half of
# that transaction's client time, measured). On PostgreSQL the ids go as one array
# parameter (``= ANY(%s)``); elsewhere as an IN list of prepared values.


def _id_list(connection: Any, column: str, ids: Iterable[uuid.UUID]) -> tuple[str, list[Any]]:
    """``column`` is one of ``ids``: the SQL and its parameters."""
    values = list(ids)
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s)", [values]
    prep = _uuid_prep(connection)
    return f"{column} IN ({', '.join(['%s'] * len(values))})", [prep(v) for v in values]


def _uuid_prep(connection: Any) -> Any:
    from django.db.models import UUIDField

    field = UUIDField()
    return lambda value: field.get_db_prep_value(value, connection, prepared=False)


def _by_key(connection: Any, table: str, index: str) -> str:
    """``table`` (quoted), on MariaDB held to ``index``: the key the ids are looked up by.

    InnoDB's statistics of a table analysed while empty (or before a workflow was
    inserted) made MariaDB read the whole primary key for the root's edge UPDATE
    and for its dependents' release (``tests/integration/test_fan_out_release_plan.py``);
    a statement over a list of ids has one right path, the key of those ids.
    PostgreSQL and SQLite take it from the ids alone.
    """
    if connection.vendor == "mysql":
        return f"{table} FORCE INDEX ({index})"
    return table


def _still_waiting(connection: Any, column: str) -> str:
    """``column = %s`` (the status to recheck), on MariaDB and SQLite in a form no
    index can serve.

    The statements over dependents' ids filter on ``status = 'waiting'`` as a
    compare-and-set, not to find rows: the ids do that, by primary key. On
    statistics that saw no waiting row (taken while the table was empty, or
    before the workflow was inserted) SQLite chose its ``(status, created_at)``
    index instead, reading every waiting node of every workflow, and MariaDB the
    same for the lock (``tests/integration/test_fan_out_release_plan.py``). As an
    expression (SQLite's unary ``+``, MariaDB's ``CONCAT``) the recheck is left to
    the rows the key found. PostgreSQL keeps the plain comparison: without its
    status index it chose a sequential scan there, by cost, over the key.
    """
    if connection.vendor == "mysql":
        return f"CONCAT({column}, '') = %s"
    if connection.vendor == "sqlite":
        return f"+{column} = %s"
    return f"{column} = %s"


def _updates_returning(connection: Any) -> bool:
    """Whether ``UPDATE … RETURNING`` exists: PostgreSQL, SQLite from 3.35; not MariaDB."""
    if connection.vendor == "postgresql":
        return True
    if connection.vendor == "sqlite":
        import sqlite3

        return sqlite3.sqlite_version_info >= (3, 35)
    return False


def _open_edges(
    using: str, ups: list[uuid.UUID], before: list[tuple[str, list[Any]]] | None = None
) -> list[tuple[uuid.UUID, uuid.UUID, bool, str, int, int]]:
    """The edges leaving ``ups`` still stored ``open``, one row per dependent: (dependent,
    workflow, sole, its ``when``, how many of them, the first one's id).

    Only read. An upstream finishes once per life (its completion is fenced), and
    its edges stay stored ``open`` when it decides them: its own status says how
    (``edge_states``). Stored ``met`` or ``unmet`` are those that ``resume`` wrote
    before that upstream lived again (their dependent was already released), and
    those decided before migration 0020: both were decided, and are not read here.
    Nothing else writes these rows while the upstream's own row is locked by this
    transaction (a requeue locks it first). Grouped by dependent in the database: a
    flush of 200 of a fan-in's nodes reads one row, not 200 for Python to convert
    and count. ``before`` (PostgreSQL with client-side binding only) are statements
    without results sent ahead of this one in the same query, then emptied.
    """
    m = _models()
    connection = connections[using]
    qn = connection.ops.quote_name
    edge = _by_key(connection, qn(m.WorkflowEdge._meta.db_table), "arcature_edge_once")
    # By key on PostgreSQL (``keyed``): a flush's few hundred upstreams were read by
    # a scan of the whole edge table on a workflow's own statistics.
    where, params = keyed_id_list(connection, qn("upstream_id"), ups) or _id_list(
        connection, qn("upstream_id"), ups
    )
    grouped = ", ".join(qn(c) for c in ("downstream_id", "workflow_id", "sole", "when"))
    sql = (
        f"SELECT {grouped}, COUNT(*), MIN({qn('id')}) FROM {edge} "
        f"WHERE {where} AND {qn('state')} = %s GROUP BY {grouped}"
    )
    args = [*params, m.EdgeState.OPEN]
    with connection.cursor() as cursor:
        sent = before or []
        if sent and _one_round_trip(connection):
            cursor.execute(
                "; ".join([*(text for text, _ in sent), sql]),
                [*(value for _, values in sent for value in values), *args],
            )
            for _ in sent:
                cursor.nextset()
            sent.clear()
        else:
            assert not sent
            cursor.execute(sql, args)
        rows = cursor.fetchall()
    return [
        (as_uuid(down), as_uuid(workflow), bool(sole), when, int(count), int(first))
        for down, workflow, sole, when, count, first in rows
    ]


def _upstreams_of(using: str, edges: Mapping[uuid.UUID, int]) -> dict[uuid.UUID, uuid.UUID]:
    """Each dependent → the upstream of its edge ``edges`` names (by id): the node whose
    outcome ruled the dependent out. Read only when one was (not on the fast path)."""
    if not edges:
        return {}
    m = _models()
    upstream = dict(
        m.WorkflowEdge.objects.using(using)
        .filter(id__in=sorted(set(edges.values())))
        .values_list("id", "upstream_id")
    )
    return {down: upstream[edge_id] for down, edge_id in edges.items()}


def _lock_waiting_sql(
    connection: Any, model: type[Job], id_list: tuple[str, list[Any]], *, count: bool = False
) -> tuple[str, list[Any]]:
    """Lock those of ``ids`` still ``waiting``, in id order: the statement and its parameters.

    Every locker of dependents' job rows takes them in id order, so two completions
    deciding on the same dependents queue up instead of deadlocking; one builder
    keeps that order (and the recheck of ``waiting`` that ``FOR UPDATE`` does on a
    row changed while it waited) the same for all of them. It returns the ids
    locked, or with ``count`` only how many (the wide fan-out's root locks 10,000
    and needs none of them back). ``id_list`` is ``_id_list`` of the ids on the
    ``id`` column, which the caller may reuse for its next statement (on MariaDB and
    SQLite each id is converted once). SQLite has no ``FOR UPDATE``: it runs one
    writer at a time.
    """
    qn = connection.ops.quote_name
    where, params = id_list
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    sql = (
        f"SELECT {qn('id')} FROM {_by_key(connection, qn(model._meta.db_table), 'PRIMARY')} "
        f"WHERE {where} AND {_still_waiting(connection, qn('status'))} "
        f"ORDER BY {qn('id')}{lock}"
    )
    if count:
        sql = f"SELECT count(*) FROM ({sql}) locked"
    return sql, [*params, JobStatus.WAITING]


def _release_sole(using: str, model: type[Job], ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """Release those of ``ids`` still ``waiting``, locked in id order first: the ids released.

    For dependents whose only edge this transaction found met (``_cascade``). The
    lock (``SELECT … ORDER BY id FOR UPDATE``, which rechecks ``waiting`` on a row
    another transaction changed meanwhile) keeps the id order every locker of job
    rows uses; the ``UPDATE`` is a compare-and-set on ``waiting`` by the same id
    list. Each statement reads the list itself, never a join against the other's
    rows: with statistics taken while the table was empty, a join of 10,000 locked
    ids to 10,000 rows was planned as a nested loop (8 s of server CPU, measured).
    On PostgreSQL with client-side binding both go in one round trip, and the lock
    sends back a count, not the ids.
    """
    from django_arcature.db import now_sql

    connection = connections[using]
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    where, params = id_list = _id_list(connection, qn("id"), ids)
    lock_sql, lock_params = _lock_waiting_sql(connection, model, id_list, count=True)
    update_sql = (
        f"UPDATE {_by_key(connection, table, 'PRIMARY')} SET {qn('status')} = %s, "
        f"{qn('available_at')} = {now_sql(connection.vendor)} "
        f"WHERE {where} AND {_still_waiting(connection, qn('status'))}"
    )
    update_params = [JobStatus.PENDING, *params, JobStatus.WAITING]
    with connection.cursor() as cursor:
        if _one_round_trip(connection):
            cursor.execute(
                f"{lock_sql}; {update_sql} RETURNING {qn('id')}", [*lock_params, *update_params]
            )
            cursor.nextset()
            return [as_uuid(row[0]) for row in cursor.fetchall()]
        if _updates_returning(connection):
            cursor.execute(lock_sql, lock_params)
            cursor.execute(f"{update_sql} RETURNING {qn('id')}", update_params)
            return [as_uuid(row[0]) for row in cursor.fetchall()]
        # MariaDB: no RETURNING; the ids locked are the ids the update changes.
        cursor.execute(*_lock_waiting_sql(connection, model, id_list))
        waiting = [as_uuid(row[0]) for row in cursor.fetchall()]
    if waiting:
        _release(using, model, waiting)
    return waiting


def _lock_and_count(
    using: str, model: type[Job], ids: list[uuid.UUID], decrements: Mapping[uuid.UUID, int]
) -> tuple[list[uuid.UUID], dict[uuid.UUID, int]]:
    """Lock those of ``ids`` still waiting (in id order), then take ``decrements`` (id →
    edges this transaction met) off their open counts: the ids locked, and the counts
    left of those decremented.

    The count is taken down under the dependent's job-row lock, which every
    completion deciding on it takes first: of two siblings finishing at once the
    second waits for the first's commit, and its ``UPDATE`` then starts from the
    first's count, so exactly one of them sees zero. Only locked rows are counted
    down: a node that is not waiting keeps whatever count it had, and ``resume``
    counts it again if it comes back. One ``UPDATE`` per distinct decrement (a
    flush's dependents nearly always share one). On PostgreSQL with client-side
    binding the lock and the updates go in one round trip, each update limited to
    the rows the lock took (a later statement of one query sees them locked by it).
    """
    m = _models()
    connection = connections[using]
    qn = connection.ops.quote_name
    node = qn(m.WorkflowNode._meta.db_table)
    id_list = _id_list(connection, qn("id"), ids)
    lock_sql, lock_params = _lock_waiting_sql(connection, model, id_list)
    by_amount: dict[int, list[uuid.UUID]] = {}
    for down, amount in decrements.items():
        by_amount.setdefault(amount, []).append(down)
    left: dict[uuid.UUID, int] = {}

    def update_sql(amount: int, downs: list[uuid.UUID]) -> tuple[str, list[Any]]:
        where, params = _id_list(connection, qn("job_id"), sorted(downs))
        return (
            f"UPDATE {node} SET {qn('open_upstreams')} = {qn('open_upstreams')} - %s WHERE {where}",
            [amount, *params],
        )

    with connection.cursor() as cursor:
        if _one_round_trip(connection):
            job = qn(model._meta.db_table)
            updates = []
            for amount, downs in sorted(by_amount.items()):
                sql, params = update_sql(amount, downs)
                updates.append(
                    (
                        f"{sql} AND EXISTS (SELECT 1 FROM {job} j WHERE j.{qn('id')} = "
                        f"{node}.{qn('job_id')} AND j.{qn('status')} = %s) "
                        f"RETURNING {qn('job_id')}, {qn('open_upstreams')}",
                        [*params, JobStatus.WAITING],
                    )
                )
            cursor.execute(
                "; ".join([lock_sql, *(sql for sql, _ in updates)]),
                [*lock_params, *(v for _, values in updates for v in values)],
            )
            waiting = [as_uuid(row[0]) for row in cursor.fetchall()]
            for _ in updates:
                cursor.nextset()
                left.update((as_uuid(down), int(count)) for down, count in cursor.fetchall())
            return waiting, left
        cursor.execute(lock_sql, lock_params)
        waiting = [as_uuid(row[0]) for row in cursor.fetchall()]
        locked = set(waiting)
        counted = []
        for amount, downs in sorted(by_amount.items()):
            mine = [down for down in downs if down in locked]
            if mine:
                cursor.execute(*update_sql(amount, mine))
                counted.extend(mine)
        if counted:
            where, params = _id_list(connection, qn("job_id"), counted)
            cursor.execute(
                f"SELECT {qn('job_id')}, {qn('open_upstreams')} FROM {node} WHERE {where}", params
            )
            left.update((as_uuid(down), int(count)) for down, count in cursor.fetchall())
    return waiting, left


def _one_round_trip(connection: Any) -> bool:
    """Whether two statements may be sent as one query: PostgreSQL, client-side binding."""
    if connection.vendor != "postgresql":
        return False
    return not connection.settings_dict.get("OPTIONS", {}).get("server_side_binding")


def _release(using: str, model: type[Job], ids: list[uuid.UUID]) -> None:
    """The dependents decided ready (locked by this transaction) become claimable now."""
    from django_arcature.db import now_sql

    connection = connections[using]
    qn = connection.ops.quote_name
    where, params = _id_list(connection, qn("id"), ids)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_by_key(connection, qn(model._meta.db_table), 'PRIMARY')} "
            f"SET {qn('status')} = %s, "
            f"{qn('available_at')} = {now_sql(connection.vendor)} "
            f"WHERE {where} AND {_still_waiting(connection, qn('status'))}",
            [JobStatus.PENDING, *params, JobStatus.WAITING],
        )


def cancel_for_upstream(
    using: str, model: type[Job], causes: Mapping[uuid.UUID, uuid.UUID]
) -> None:
    """Cancel waiting nodes whose ``when`` can no longer be met, naming the upstream node."""
    m = _models()
    by_cause: dict[uuid.UUID, list[uuid.UUID]] = {}
    for node, cause in causes.items():
        by_cause.setdefault(cause, []).append(node)
    names = dict(
        m.WorkflowNode.objects.using(using)
        .filter(job_id__in=list(by_cause))
        .values_list("job_id", "name")
    )
    statuses = dict(
        model.objects.using(using).filter(id__in=list(by_cause)).values_list("id", "status")
    )
    for cause, nodes in by_cause.items():
        reason = (
            f"cancelled: its upstream node {names.get(cause, '?')!r} (job {cause}) "
            f"ended {statuses.get(cause, 'cancelled')}, so its 'when' cannot be met"
        )
        model.objects.using(using).filter(id__in=nodes, status=JobStatus.WAITING).update(
            status=JobStatus.CANCELLED,
            last_error=reason,
            finished_at=DatabaseNow(),
        )
        m.WorkflowNode.objects.using(using).filter(job_id__in=nodes).update(cancelled_by=cause)


# --- workflow counters -----------------------------------------------------------


def workflow_shards(node_count: int) -> int:
    """Counter rows of a workflow: one per node up to ``BATCH_COUNTER_SHARDS``."""
    return max(1, min(int(_models().BATCH_COUNTER_SHARDS), node_count))


def _count_first(
    using: str,
    ended: Mapping[uuid.UUID, tuple[uuid.UUID, str]],
    sizes: Mapping[uuid.UUID, int] | None = None,
    shards: Mapping[uuid.UUID, int] | None = None,
    *,
    deferred: list[tuple[str, list[Any]]] | None = None,
) -> dict[uuid.UUID, int]:
    """Add ``ended`` (id → (workflow, column)) to their workflows' counters; the shard
    written, per workflow.

    ``column`` is "dead" or "cancelled" (by an operator), or "" for the others.
    ``shards`` (workflow → shard) are the counter rows this transaction wrote
    already: a workflow's further counts go there, so no other row is locked.
    """
    m = _models()
    if not ended:
        return {}
    sizes = dict(sizes or {})
    unknown = {workflow for workflow, _ in ended.values()} - set(sizes)
    if unknown:
        sizes.update(
            m.WorkflowRun.objects.using(using)
            .filter(id__in=unknown)
            .order_by()
            .values_list("id", "node_count")
        )
    # All of a workflow's nodes this transaction finished go to one shard (that of
    # the smallest id among them): one UPDATE per workflow and transaction, where a
    # shard per node cost up to one per shard on every flush of a wide fan-in. Only
    # the sum over the shards means anything; two workers' flushes still land on
    # different shards nearly always.
    first: dict[uuid.UUID, uuid.UUID] = {}
    for job_id, (workflow, _) in ended.items():
        best = first.get(workflow)
        if best is None or job_id.int < best.int:
            first[workflow] = job_id
    first = {workflow: job_id for workflow, job_id in first.items() if workflow in sizes}
    given = shards or {}
    chosen = {
        workflow: given[workflow]
        if workflow in given
        else zlib.crc32(job_id.bytes) % workflow_shards(sizes[workflow])
        for workflow, job_id in first.items()
    }
    per_workflow: dict[uuid.UUID, Counter[str]] = {workflow: Counter() for workflow in chosen}
    for workflow, column in ended.values():
        found = per_workflow.get(workflow)
        if found is not None:
            found[column] += 1
    counts = {(workflow, chosen[workflow]): c for workflow, c in per_workflow.items()}
    _add_to_counters(using, counts, +1, deferred)
    return chosen


def _add_to_counters(
    using: str,
    counts: Mapping[tuple[uuid.UUID, int], Counter[str]],
    sign: int,
    deferred: list[tuple[str, list[Any]]] | None = None,
) -> None:
    """One UPDATE per (workflow, shard): ``finished`` by every node, ``dead`` and
    ``cancelled`` by those counted in them (column "" counts in ``finished`` only).

    With ``deferred`` the statements are appended to it, for the caller to send."""
    if not counts:
        return
    m = _models()
    connection = connections[using]
    qn = connection.ops.quote_name
    prep = (lambda value: value) if connection.vendor == "postgresql" else _uuid_prep(connection)
    # As SQL, not ``.update(F(…) + n)``: one of these goes with every flush of a
    # workflow's nodes, and the ORM's compilation of it was most of its cost.
    sql = (
        f"UPDATE {qn(m.WorkflowCounter._meta.db_table)} SET "
        + ", ".join(f"{qn(c)} = {qn(c)} + %s" for c in ("finished", "dead", "cancelled"))
        + f" WHERE {qn('workflow_id')} = %s AND {qn('shard')} = %s"
    )
    statements = [
        (
            sql,
            [
                sign * sum(columns.values()),
                sign * columns["dead"],
                sign * columns["cancelled"],
                prep(workflow),
                shard,
            ],
        )
        for (workflow, shard), columns in sorted(counts.items(), key=str)  # id order: no deadlock
    ]
    if deferred is not None:
        deferred.extend(statements)
    else:
        _send(using, statements)


def _send(using: str, statements: list[tuple[str, list[Any]]]) -> None:
    """Execute statements without results, in order; emptied once sent."""
    with connections[using].cursor() as cursor:
        for sql, params in statements:
            cursor.execute(sql, params)
    statements.clear()


def finish_workflows(using: str, workflow_ids: Iterable[uuid.UUID]) -> None:
    """Mark each workflow whose shard counts reach its node count finished, once.

    The workflow row is locked (in id order) and its shards read after the lock,
    as a batch's are: of two last nodes finishing at once, the second to get the
    lock sees the first's count. The outcome: ``failed`` if a node died,
    ``cancelled`` if an operator cancelled one, else ``succeeded`` (nodes let go
    because their ``when`` could not be met, such as an unneeded compensation,
    count as neither).
    """
    ids = sorted(workflow_ids)
    if not ids:  # a flush of a wide fan-in's nodes, nearly always: skip the ORM's work
        return
    m = _models()
    runs = list(
        m.WorkflowRun.objects.using(using)
        .filter(id__in=ids, outcome="")
        .order_by("id")
        .select_for_update()
        .values_list("id", "node_count")
    )
    for workflow, node_count in runs:
        sums = (
            m.WorkflowCounter.objects.using(using)
            .filter(workflow_id=workflow)
            .aggregate(finished=Sum("finished"), dead=Sum("dead"), cancelled=Sum("cancelled"))
        )
        if int(sums["finished"] or 0) < node_count:
            continue
        if sums["dead"]:
            outcome = m.Outcome.FAILED
        elif sums["cancelled"]:
            outcome = m.Outcome.CANCELLED
        else:
            outcome = m.Outcome.SUCCEEDED
        m.WorkflowRun.objects.using(using).filter(id=workflow, outcome="").update(
            outcome=outcome, finished_at=DatabaseNow(), live_key=None
        )
        logger.info("workflow %s finished: %s", workflow, outcome)


def uncount_nodes(using: str, workflow: uuid.UUID, back: Mapping[uuid.UUID, str]) -> None:
    """Nodes live again (id → the column they were counted in): off the counts, and the
    workflow in progress again."""
    m = _models()
    size = (
        m.WorkflowRun.objects.using(using)
        .filter(id=workflow)
        .values_list("node_count", flat=True)
        .first()
    )
    if size is None:
        return
    counts: dict[tuple[uuid.UUID, int], Counter[str]] = {}
    for job_id, column in back.items():
        shard = zlib.crc32(job_id.bytes) % workflow_shards(size)
        counts.setdefault((workflow, shard), Counter())[column] += 1
    _add_to_counters(using, counts, -1)
    # A cancelled workflow keeps the outcome it had when it was cancelled.
    m.WorkflowRun.objects.using(using).filter(id=workflow, cancelled_at__isnull=True).update(
        outcome="", finished_at=None
    )


# --- batches ---------------------------------------------------------------------


def shard_of(job_id: uuid.UUID) -> int:
    """The counter row a member's completion writes (stable across processes)."""
    return zlib.crc32(job_id.bytes) % int(_models().BATCH_COUNTER_SHARDS)


def count_members(
    using: str, model: type[Job], members: Mapping[uuid.UUID, tuple[uuid.UUID, str]]
) -> None:
    """Count finished members on a shard row per batch, then fire the callbacks of finished ones.

    Only the sum over a batch's shards means anything, so a transaction adds all
    of its members of one batch to *one* shard (that of its smallest member id):
    one ``UPDATE`` per batch and transaction however many members a worker's
    flush finishes, where a shard per member cost up to one statement per shard.
    Two workers' flushes still land on different shards nearly always.
    """
    column = {SUCCEEDED: "succeeded", FAILED: "dead", CANCELLED: "cancelled"}
    per_batch: dict[uuid.UUID, Counter[str]] = {}
    first: dict[uuid.UUID, uuid.UUID] = {}
    for job_id, (given, outcome) in members.items():
        batch_id = as_uuid(given)  # an operator's cancel passes the caller's id as given
        per_batch.setdefault(batch_id, Counter())[column[outcome]] += 1
        best, member = first.get(batch_id), as_uuid(job_id)
        if best is None or member.int < best.int:
            first[batch_id] = member
    done = _count_and_check(using, per_batch, {b: shard_of(j) for b, j in first.items()})
    if done:
        fire_finished_batches(using, model, done)


def _count_and_check(
    using: str, per_batch: Mapping[uuid.UUID, Counter[str]], shards: Mapping[uuid.UUID, int]
) -> list[uuid.UUID]:
    """Add the counts to one shard row per batch, then lock the batches that may fire
    and read their sums: the batches whose every member has finished.

    As SQL, not the ORM: every flush of a batch's members sends these, and the
    three ORM queries they were (the counter UPDATE, the batch row's lock, the sum
    of its shards) cost more client CPU than the flush's own completion UPDATE. The
    lock is taken in id order, and the sums are read by a statement of their own
    after it: under READ COMMITTED that statement sees every sibling flush that
    committed before the lock was granted, so of two last flushes the second to
    lock sees the first's count (``fire_finished_batches`` locks and reads again
    before it enqueues anything, so a batch seen finished here fires once). On
    PostgreSQL with client-side binding the three go in one round trip (each
    statement of a multi-statement query takes its own snapshot).
    """
    if not per_batch:  # an operator's cancel of a batch with no member left to cancel
        return []
    m = _models()
    connection = connections[using]
    qn = connection.ops.quote_name
    prep = (lambda value: value) if connection.vendor == "postgresql" else _uuid_prep(connection)
    ids = sorted(per_batch)  # one row each, in id order: no deadlock
    names = ("succeeded", "dead", "cancelled")
    update = (
        f"UPDATE {qn(m.BatchCounter._meta.db_table)} SET "
        + ", ".join(f"{qn(c)} = {qn(c)} + %s" for c in names)
        + f" WHERE {qn('batch_id')} = %s AND {qn('shard')} = %s"
    )
    statements = [(update, [*(per_batch[b][c] for c in names), prep(b), shards[b]]) for b in ids]
    where, params = _id_list(connection, qn("id"), ids)
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    lock_sql = (
        f"SELECT {qn('id')}, {qn('total')} FROM {qn(m.BatchRun._meta.db_table)} "
        f"WHERE {where} AND {qn('closed')} AND {qn('fired_at')} IS NULL "
        f"AND {qn('cancelled_at')} IS NULL ORDER BY {qn('id')}{lock}"
    )
    on_batch, batch_params = _id_list(connection, qn("batch_id"), ids)
    sums_sql = (
        f"SELECT {qn('batch_id')}, "
        + ", ".join(f"SUM({qn(c)})" for c in names)
        + f" FROM {qn(m.BatchCounter._meta.db_table)} WHERE {on_batch} GROUP BY {qn('batch_id')}"
    )
    with connection.cursor() as cursor:
        if _one_round_trip(connection):
            cursor.execute(
                "; ".join([*(sql for sql, _ in statements), lock_sql, sums_sql]),
                [*(v for _, values in statements for v in values), *params, *batch_params],
            )
            for _ in statements:
                cursor.nextset()
            locked = cursor.fetchall()
            cursor.nextset()
            sums = cursor.fetchall() if locked else []
        else:
            for sql, values in statements:
                cursor.execute(sql, values)
            cursor.execute(lock_sql, params)
            locked = cursor.fetchall()
            sums = []
            if locked:
                cursor.execute(sums_sql, batch_params)
                sums = cursor.fetchall()
    finished = {as_uuid(b): sum(int(v or 0) for v in values) for b, *values in sums}
    return [
        as_uuid(batch_id)
        for batch_id, total in locked
        if finished.get(as_uuid(batch_id), 0) >= int(total)
    ]


def uncount_member(using: str, job_id: uuid.UUID, batch_id: uuid.UUID, outcome: str) -> None:
    """A requeued member is live again: take it off the batch's count.

    Its own shard, which need not be the one its completion added it to: a shard
    may go below zero, the sum stays right.
    """
    m = _models()
    name = {SUCCEEDED: "succeeded", FAILED: "dead", CANCELLED: "cancelled"}[outcome]
    m.BatchCounter.objects.using(using).filter(batch_id=batch_id, shard=shard_of(job_id)).update(
        **{name: F(name) - 1}
    )


def batch_counts(using: str, batch_id: uuid.UUID, total: int | None = None) -> dict[str, int]:
    """total, succeeded, dead, cancelled and pending: the batch row and its shard rows.

    ``total`` if the caller holds the batch row already (locked), else read here.
    """
    m = _models()
    if total is None:
        found = m.BatchRun.objects.using(using).filter(id=batch_id).values_list("total", flat=True)
        total = int(found.first() or 0)
    sums = (
        m.BatchCounter.objects.using(using)
        .filter(batch_id=batch_id)
        .aggregate(succeeded=Sum("succeeded"), dead=Sum("dead"), cancelled=Sum("cancelled"))
    )
    counts = {name: int(value or 0) for name, value in sums.items()}
    counts["total"] = total
    counts["pending"] = counts["total"] - counts["succeeded"] - counts["dead"] - counts["cancelled"]
    return counts


def fire_finished_batches(using: str, model: type[Job], batch_ids: Iterable[uuid.UUID]) -> None:
    """Enqueue the callbacks of each closed batch whose every member has finished, once.

    The batch row is locked (in id order) and its counters read after the lock, as a
    dependent's edges are; ``fired_at`` is set in the same transaction.
    """
    m = _models()
    batches = list(
        m.BatchRun.objects.using(using)
        .filter(
            id__in=sorted(batch_ids), closed=True, fired_at__isnull=True, cancelled_at__isnull=True
        )
        .order_by("id")
        .select_for_update()
    )
    for batch in batches:
        counts = batch_counts(using, batch.id, batch.total)  # read under the lock
        if counts["pending"] > 0:
            continue
        clean = counts["dead"] == 0 and counts["cancelled"] == 0
        due = ["on_success"] if batch.on_success and clean else []
        if batch.on_finish:
            due.append("on_finish")
        handles = [getattr(batch, role) for role in due]
        # Each callback's job id is stored with fired_at (the admin links them).
        callback_jobs = {
            f"{role}_job_id": _enqueue_callback(
                using, model, batch.id, getattr(batch, role), role, batch.callback_options
            )
            for role in due
        }
        outcome = m.Outcome.SUCCEEDED if clean else m.Outcome.FAILED
        m.BatchRun.objects.using(using).filter(id=batch.id).update(
            fired_at=DatabaseNow(), outcome=outcome, **callback_jobs
        )
        logger.info("batch %s finished (%s); enqueued %s", batch.id, counts, handles or "nothing")


def _enqueue_callback(
    using: str,
    model: type[Job],
    batch_id: uuid.UUID,
    name: str,
    role: str,
    stored: Any,
) -> uuid.UUID:
    """The callback's job, with its stored ``.using()`` options, also when its handler
    refuses it now.

    The name was checked when the batch was built; a deploy since may have renamed
    the handler or changed what it takes. Raising here would abort the last
    member's completion, and every worker claiming that member again would stop the
    same way: the callback is stored regardless, and dead-lettered by the worker
    with the refusal as its reason. Options refused now (a queue name or priority
    edited out of range) are dropped with a warning, for the same reason.
    """
    from django_arcature.exceptions import MalformedPayload, UnknownTask
    from django_arcature.workflows.callback_options import enqueue_options

    manager = model.objects.db_manager(using)
    options = enqueue_options(batch_id, role, stored)
    try:
        try:
            return manager.enqueue(name, args=[str(batch_id)], **options).pk
        except (ValueError, TypeError) as exc:
            if not options or isinstance(exc, MalformedPayload):
                raise
            logger.warning(
                "batch %s: callback %r refused its stored options %r (%s); enqueued without them",
                batch_id,
                name,
                options,
                exc,
            )
            return manager.enqueue(name, args=[str(batch_id)]).pk
    except (UnknownTask, MalformedPayload) as exc:
        logger.warning(
            "batch %s: its callback %r is refused by this deploy (%s); it is stored "
            "and will be dead-lettered with that reason",
            batch_id,
            name,
            exc,
        )
        return manager.enqueue_stored_name(name, args=[str(batch_id)]).pk


# --- operators -------------------------------------------------------------------


def resume(using: str, model: type[Job], job_id: uuid.UUID) -> list[uuid.UUID]:
    """A dead node was requeued: bring back as ``waiting`` the nodes its death cancelled.

    Walked in dependency order: a cancelled node comes back unless another
    upstream, one that stays finished, still rules out its ``when`` (it then stays
    cancelled, naming that one, and a requeue of that one brings it back). Edges
    from the nodes that come back to every dependent not yet released are opened
    again; a dependent already released (``when="failed"`` after the death) stays
    as it is. Returns the ids that came back.
    """
    m = _models()
    nodes = m.WorkflowNode.objects.using(using)
    row = (
        nodes.filter(job_id=job_id)
        .values_list("batch_id", "workflow_id", "workflow__cancelled_at")
        .first()
    )
    if row is None:
        return []
    batch_id, workflow_id, workflow_cancelled = row
    if batch_id is not None:
        uncount_member(using, job_id, batch_id, FAILED)
    if workflow_id is None:
        return []
    edges = m.WorkflowEdge.objects.using(using)
    if workflow_cancelled is not None:
        uncount_nodes(using, workflow_id, {job_id: "dead"})
        # Its death decided these (stored open, read from its status) and nothing
        # reopens them here: written as decided, so a reader does not take them for
        # open while it runs again, and its next outcome leaves them as they are.
        _write_decided(edges.filter(upstream_id=job_id), FAILED)
        return []  # a cancelled workflow stays cancelled; only this job runs again
    # Every node cancelled, directly or not, because of this one.
    cancelled: set[uuid.UUID] = set()
    level = {job_id}
    while level:
        level = (
            set(
                nodes.filter(cancelled_by__in=list(level))
                .filter(
                    job_id__in=model.objects.using(using)
                    .filter(status=JobStatus.CANCELLED)
                    .values("id")
                )
                .values_list("job_id", flat=True)
            )
            - cancelled
        )
        cancelled |= level
    back: set[uuid.UUID] = {job_id}
    returning: list[uuid.UUID] = []
    if cancelled:
        incoming: dict[uuid.UUID, list[tuple[uuid.UUID, str]]] = {}
        stored = list(
            edges.filter(downstream_id__in=list(cancelled)).values_list(
                "downstream_id", "upstream_id", "when", "state"
            )
        )
        # Their upstreams' rows are locked (in id order) before their statuses are
        # read: a completion of one in flight is waited for, so the states read here,
        # and the open counts written below, see it finished or not at all.
        status_of = _locked_statuses(using, model, {up for _, up, _, _ in stored})
        for down, up, when, state in stored:
            incoming.setdefault(down, []).append((up, _derived(state, when, status_of.get(up))))
        order = _dependency_order(cancelled, incoming)
        ruled_out: dict[uuid.UUID, uuid.UUID] = {}
        for node in order:
            blockers = [
                up
                for up, state in incoming.get(node, [])
                if state == m.EdgeState.UNMET and up not in back
            ]
            if blockers:
                ruled_out[node] = blockers[0]
            else:
                back.add(node)
        returning = [node for node in order if node in back]
        if returning:
            model.objects.using(using).filter(id__in=returning, status=JobStatus.CANCELLED).update(
                status=JobStatus.WAITING, last_error="", finished_at=None
            )
            # Those a concurrent prune deleted first are not back (read after the
            # update, which waited for the prune): they stay counted as finished.
            came_back = set(
                model.objects.using(using)
                .filter(id__in=returning, status=JobStatus.WAITING)
                .values_list("id", flat=True)
            )
            back -= set(returning) - came_back
            returning = [node for node in returning if node in came_back]
            nodes.filter(job_id__in=returning).update(cancelled_by=None)
        for node, cause in ruled_out.items():
            nodes.filter(job_id=node).update(cancelled_by=cause)
    uncount_nodes(using, workflow_id, {node: "dead" if node == job_id else "" for node in back})
    # Their outcomes are undone: every dependent not released yet (waiting, or still
    # cancelled by another upstream) waits for them again.
    unreleased = (
        model.objects.using(using)
        .filter(status__in=(JobStatus.WAITING, JobStatus.CANCELLED))
        .values("id")
    )
    # An edge into a dependent already released was met (that release says so), but
    # stored open its state is read from its upstream, which is about to run again:
    # written ``met`` now, so its next completion leaves it and a reader does not
    # take it for open. The others reopen.
    leaving = edges.filter(upstream_id__in=list(back))
    leaving.exclude(downstream_id__in=unreleased).filter(state=m.EdgeState.OPEN).update(
        state=m.EdgeState.MET
    )
    leaving.filter(downstream_id__in=unreleased).update(state=m.EdgeState.OPEN)
    waiting_below = set(
        model.objects.using(using)
        .filter(id__in=leaving.values("downstream_id"), status=JobStatus.WAITING)
        .values_list("id", flat=True)
    )
    _count_open_again(using, model, waiting_below | set(returning))
    return sorted(back - {job_id})


def _derived(state: str, when: str, upstream_status: str | None) -> str:
    """An edge's state: as stored unless stored ``open``, then its upstream's outcome
    decides it (``met`` if its ``when`` accepts it), or it is open (upstream live)."""
    m = _models()
    if state != m.EdgeState.OPEN or upstream_status is None:
        return state
    outcome = OUTCOME_OF_STATUS.get(JobStatus(upstream_status))
    if outcome is None:
        return state
    return str(m.EdgeState.MET if when in MET_BY[outcome] else m.EdgeState.UNMET)


def _locked_statuses(
    using: str, model: type[Job], ids: Iterable[uuid.UUID]
) -> dict[uuid.UUID, str]:
    """The status of each of ``ids``, their rows locked first, in id order."""
    wanted = sorted(ids)
    found: dict[uuid.UUID, str] = {}
    for start in range(0, len(wanted), 500):  # SQLite's limit on parameters
        found.update(
            model.objects.using(using)
            .filter(id__in=wanted[start : start + 500])
            .order_by("id")
            .select_for_update()
            .values_list("id", "status")
        )
    return found


def _count_open_again(using: str, model: type[Job], ids: set[uuid.UUID]) -> None:
    """Count anew the open edges (``WorkflowNode.open_upstreams``) of the waiting ``ids``.

    For the nodes ``resume`` brought back and the waiting dependents of those that
    live again. Their job rows are locked first (in id order), the lock every
    completion deciding on them takes before it counts down: one in flight is
    waited for, or waits, and its count-down then starts from this count. An edge
    is open when stored so and its upstream has not finished.
    """
    if not ids:
        return
    m = _models()
    waiting = sorted(
        job_id
        for job_id, status in _locked_statuses(using, model, ids).items()
        if status == JobStatus.WAITING
    )
    incoming = list(
        m.WorkflowEdge.objects.using(using)
        .filter(downstream_id__in=waiting, state=m.EdgeState.OPEN)
        .values_list("downstream_id", "upstream_id")
    )
    ups = sorted({up for _, up in incoming})
    live = {JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING}
    alive: set[uuid.UUID] = set()
    for start in range(0, len(ups), 500):
        alive.update(
            job_id
            for job_id, status in model.objects.using(using)
            .filter(id__in=ups[start : start + 500])
            .values_list("id", "status")
            if status in live
        )
    counts = Counter(down for down, up in incoming if up in alive)
    by_count: dict[int, list[uuid.UUID]] = {}
    for down in waiting:
        by_count.setdefault(counts[down], []).append(down)
    nodes = m.WorkflowNode.objects.using(using)
    for count, downs in sorted(by_count.items()):
        nodes.filter(job_id__in=downs).update(open_upstreams=count)


def _write_decided(edges: Any, outcome: str) -> None:
    """Write as decided by ``outcome`` the ``edges`` stored open (of one upstream that
    finished so and is about to live again): ``met`` where their ``when`` accepts it."""
    m = _models()
    still_open = edges.filter(state=m.EdgeState.OPEN)
    still_open.filter(when__in=MET_BY[outcome]).update(state=m.EdgeState.MET)
    still_open.update(state=m.EdgeState.UNMET)


def edge_states(
    using: str, model: type[Job], workflow_id: uuid.UUID | None = None
) -> dict[int, str]:
    """Each edge's state (edge id → ``open``, ``met`` or ``unmet``), of one workflow or all.

    A completion leaves its edges stored ``open`` (``_open_edges``): an edge stored
    so is met or unmet once its upstream's status is an outcome (by whether its
    ``when`` accepts it), open while it is not. Stored ``met`` and ``unmet`` are as
    written (``resume``, or a completion before migration 0020). For readers (the
    tests, an operator's console): the release path never needs it.
    """
    m = _models()
    edges = m.WorkflowEdge.objects.using(using)
    if workflow_id is not None:
        edges = edges.filter(workflow_id=workflow_id)
    rows = list(edges.values_list("id", "upstream_id", "when", "state"))
    open_state = m.EdgeState.OPEN
    asked = sorted({up for _, up, _, state in rows if state == open_state})
    status_of: dict[uuid.UUID, str] = {}
    for start in range(0, len(asked), 500):  # SQLite's limit on parameters
        status_of.update(
            model.objects.using(using)
            .filter(id__in=asked[start : start + 500])
            .values_list("id", "status")
        )
    return {edge_id: _derived(state, when, status_of.get(up)) for edge_id, up, when, state in rows}


def _dependency_order(
    group: set[uuid.UUID], incoming: Mapping[uuid.UUID, list[tuple[uuid.UUID, str]]]
) -> list[uuid.UUID]:
    """``group`` ordered so each node comes after its upstream nodes within the group."""
    left = {node: {up for up, _ in incoming.get(node, []) if up in group} for node in group}
    order: list[uuid.UUID] = []
    while left:
        ready = sorted(node for node, ups in left.items() if not ups)
        if not ready:  # impossible for a workflow (refused at build); keep going anyway
            ready = sorted(left)
        for node in ready:
            del left[node]
            order.append(node)
        for ups in left.values():
            ups.difference_update(ready)
    return order


def _wake_workers(using: str) -> None:
    """Nudge this host's idle workers once the released nodes are committed."""
    from django_arcature.conf import get_settings
    from django_arcature.hints import hint_directory, send_hints

    conf = get_settings()
    if not conf.wake_hints:
        return
    directory = hint_directory(using, conf)
    transaction.on_commit(lambda: send_hints(using, directory), using=using)


def in_transaction(using: str) -> bool:
    return connections[using].in_atomic_block
