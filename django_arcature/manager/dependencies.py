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

**Fan-in without a hot counter.** Each upstream completion writes only the edges
that leave its own job. Deciding on a dependent needs to see every sibling's
edge, so the dependent's job row is locked (``SELECT … FOR UPDATE``, in id order)
as the transaction's last step, and its edges are read after the lock: under READ
COMMITTED (PostgreSQL, and Django's MySQL/MariaDB default) that read sees every
sibling that committed before the lock was granted, and a sibling still in flight
waits for this one, then sees its edge. SQLite runs one writer at a time. The
release itself is a compare-and-set on ``status = 'waiting'``, so a dependent moves
once however many siblings look at it.

**Fan-out without the probe, and without writing the edge.** An edge that is the
only one into its dependent (``WorkflowEdge.sole``, fixed when the workflow is
built) is decided by exactly one completion, that of its upstream (fenced: a job
finishes once per life). No sibling exists to wait for, so the dependent is locked
(in id order) and released in one statement, a compare-and-set on ``waiting``,
without reading its edges back. When it is met the edge is not even written: the
dependent's own row going ``waiting`` → ``pending`` in that transaction says it,
and ``edge_states`` derives it for readers from the upstream's status (a requeue
of that upstream writes it first, ``resume``). That is every dependent of a wide
fan-out's root: 10,000 edge rows it no longer rewrites, each a new version in every
index of the edge table.
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
    # of the transaction as can be (its lock, its probe, the commit). The counts of
    # nodes the cascade cancels go to the shard already written.
    # On PostgreSQL the counter statements go in one round trip with the cascade's
    # first edge UPDATE (``_mark_edges``), in that order.
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
    """Mark the edges leaving ``frontier``, then decide each still-waiting dependent.

    ``before``: statements to send with the first edge UPDATE, in the same round
    trip (emptied once sent).

    Returns the nodes released, the nodes cancelled (id → (workflow, outcome)) and
    the workflows left with a node this transaction saw unfinished (released or
    still waiting): those cannot have finished, so their counters are not checked.
    """
    m = _models()
    edges = m.WorkflowEdge.objects.using(using)
    released: list[uuid.UUID] = []
    cancelled: dict[uuid.UUID, tuple[uuid.UUID, str]] = {}
    # A node undecided in one round may be cancelled by a later one: whether its
    # workflow is busy is known at the end only.
    busy_nodes: set[uuid.UUID] = set()
    still_waiting: set[tuple[uuid.UUID, uuid.UUID]] = set()
    workflows: dict[uuid.UUID, uuid.UUID] = {}
    while frontier:
        # One statement per outcome marks this round's edges and, where the database
        # has UPDATE … RETURNING, names their dependents: only a transaction that
        # changed one of a dependent's edges can be the one to decide it.
        workflow_of: dict[uuid.UUID, uuid.UUID] = {}
        sole_met: list[uuid.UUID] = []
        for outcome in sorted(set(frontier.values())):
            ups = [job_id for job_id, o in frontier.items() if o == outcome]
            marked, sole = _mark_edges(using, ups, outcome, before)
            workflow_of.update(marked)
            sole_met.extend(sole)
        if not workflow_of:
            break
        workflows.update(workflow_of)
        # A dependent whose only edge this transaction just found met is ready: only
        # its upstream's completion, this one, decides that edge, so there is nothing
        # to probe. Released by a compare-and-set on ``waiting`` (an operator may have
        # cancelled it), in id order. This is the wide fan-out's case: its root
        # releases 10,000 dependents here.
        if sole_met:
            ready_alone = _release_sole(using, model, sole_met)
            released.extend(ready_alone)
            busy_nodes.update(ready_alone)
        shared = set(workflow_of).difference(sole_met)
        if not shared:
            break
        # Locked in id order, so two transactions deciding on the same dependents
        # queue up instead of deadlocking. (The sole dependents above were locked by
        # this transaction only: no other completion ever decides them.)
        waiting, flags = _lock_and_probe(using, model, sorted(shared))
        if not waiting:
            break
        undecided: set[uuid.UUID] = set()
        ruled_out: list[uuid.UUID] = []
        for job_id, has_open, has_unmet in flags:
            if has_open:
                undecided.add(job_id)
            if has_unmet:
                ruled_out.append(job_id)
        unmet: dict[uuid.UUID, uuid.UUID] = {}
        if ruled_out:
            for down, up in (
                edges.filter(downstream_id__in=ruled_out, state=m.EdgeState.UNMET)
                .order_by("id")
                .values_list("downstream_id", "upstream_id")
            ):
                # The upstream this round finished names the reason when it is one.
                if down not in unmet or (up in frontier and unmet[down] not in frontier):
                    unmet[down] = up
        undecided -= set(unmet)
        ready = [job_id for job_id in waiting if job_id not in undecided and job_id not in unmet]
        if ready:
            _release(using, model, ready)
            released.extend(ready)
        busy_nodes.update(ready)
        still_waiting.update((job_id, workflow_of[job_id]) for job_id in undecided)
        frontier = {}
        if unmet:
            cancel_for_upstream(using, model, unmet)
            frontier = dict.fromkeys(unmet, CANCELLED)
            # Let go because of an upstream's outcome: finished, neither died nor cancelled.
            cancelled.update({job_id: (workflow_of[job_id], "") for job_id in unmet})
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


def _mark_edges(
    using: str,
    ups: list[uuid.UUID],
    outcome: str,
    before: list[tuple[str, list[Any]]] | None = None,
) -> tuple[dict[uuid.UUID, uuid.UUID], list[uuid.UUID]]:
    """Mark the open edges leaving ``ups`` met or unmet: their dependent → workflow,
    and the dependents whose only edge (``sole``) is one of those now met.

    Met where the dependent's ``when`` accepts ``outcome``. A sole edge that is met
    is *not written*: its dependent's own row going ``waiting`` → ``pending`` in
    this transaction says it (``edge_states`` derives it for readers), and writing
    it was half the server's work of a wide fan-out's root (10,000 edge rows, each
    a new version in every index of the table). Those edges are read instead. The
    others are marked by one ``UPDATE``, with ``RETURNING`` where the database has
    it; on MariaDB one ``SELECT`` before it reads both kinds, still open. ``before``
    (PostgreSQL with client-side binding only) are statements without results sent
    ahead of them in the same query, then emptied.
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
    met_by = MET_BY[outcome]
    accepts = f"{qn('when')} IN ({', '.join(['%s'] * len(met_by))})"
    sole_met_here = f"{qn('sole')} AND {accepts}"
    sql = (
        f"UPDATE {edge} SET {qn('state')} = CASE WHEN {accepts} THEN %s ELSE %s END "
        f"WHERE {where} AND {qn('state')} = %s AND NOT ({sole_met_here})"
    )
    args = [*met_by, m.EdgeState.MET, m.EdgeState.UNMET, *params, m.EdgeState.OPEN, *met_by]
    columns = f"{qn('downstream_id')}, {qn('workflow_id')}, {qn('sole')}, {qn('state')}"
    sole_sql = (
        f"SELECT {columns} FROM {edge} WHERE {where} AND {qn('state')} = %s AND {sole_met_here}"
    )
    sole_args = [*params, m.EdgeState.OPEN, *met_by]
    with connection.cursor() as cursor:
        if _one_round_trip(connection):
            sent = before or []
            cursor.execute(
                "; ".join([*(text for text, _ in sent), sql + f" RETURNING {columns}", sole_sql]),
                [*(value for _, values in sent for value in values), *args, *sole_args],
            )
            for _ in sent:
                cursor.nextset()
            sent.clear()
            rows = cursor.fetchall()
            cursor.nextset()
            rows += cursor.fetchall()
        elif _updates_returning(connection):
            assert not before
            cursor.execute(sql + f" RETURNING {columns}", args)
            rows = cursor.fetchall()
            cursor.execute(sole_sql, sole_args)
            rows += cursor.fetchall()
        else:
            # MariaDB (no RETURNING): the open edges are read before the UPDATE
            # decides them, so the rows named are exactly those this statement
            # decides (or, sole and met, leaves unwritten). Read after it, as
            # ``state <> 'open'``, they included every edge decided earlier: after a
            # rerun of a dead upstream, those into the dependents its death had
            # released, each sent again to be locked and found not waiting. Only
            # this completion writes these edges (its job row, which a requeue locks
            # first, stays locked by it), so nothing changes them in between.
            cursor.execute(
                f"SELECT {columns}, {qn('when')} FROM {edge} WHERE {where} AND {qn('state')} = %s",
                [*params, m.EdgeState.OPEN],
            )
            met, unmet_state = m.EdgeState.MET, m.EdgeState.UNMET
            rows = [
                (down, workflow, sole, met if when in met_by else unmet_state)
                for down, workflow, sole, _, when in cursor.fetchall()
            ]
            cursor.execute(sql, args)
    workflow_of: dict[uuid.UUID, uuid.UUID] = {}
    sole_met: list[uuid.UUID] = []
    unmet = m.EdgeState.UNMET
    for down, workflow, sole, state in rows:
        down_id = as_uuid(down)
        workflow_of[down_id] = as_uuid(workflow)
        if sole and state != unmet:
            sole_met.append(down_id)
    return workflow_of, sole_met


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


def _lock_and_probe(
    using: str, model: type[Job], ids: list[uuid.UUID]
) -> tuple[list[uuid.UUID], list[tuple[uuid.UUID, bool, bool]]]:
    """Lock those of ``ids`` still waiting (in id order), then probe their edges.

    Two statements, the probe after the lock (``_edge_flags`` says why). On
    PostgreSQL with client-side parameter binding (Django's default) both go in one
    round trip: each statement of a multi-statement query takes its own snapshot
    under READ COMMITTED, so the probe still reads what committed while the lock was
    awaited, and the dependent's lock is held one round trip less. The probe's rows
    are kept to those the lock statement returned (a row that became waiting between
    the two is not ours to decide).
    """
    connection = connections[using]
    id_list = _id_list(connection, connection.ops.quote_name("id"), ids)
    lock_sql, lock_params = _lock_waiting_sql(connection, model, id_list)
    with connection.cursor() as cursor:
        if _one_round_trip(connection):
            probe_sql, probe_params = _edge_flags_sql(connection, model, ids)
            cursor.execute(f"{lock_sql}; {probe_sql}", [*lock_params, *probe_params])
            waiting = [as_uuid(row[0]) for row in cursor.fetchall()]
            cursor.nextset()
            locked = set(waiting)
            flags = [row for row in _flag_rows(cursor.fetchall()) if row[0] in locked]
            return waiting, flags
        cursor.execute(lock_sql, lock_params)
        waiting = [as_uuid(row[0]) for row in cursor.fetchall()]
    return waiting, (_edge_flags(using, model, waiting) if waiting else [])


def _one_round_trip(connection: Any) -> bool:
    """Whether two statements may be sent as one query: PostgreSQL, client-side binding."""
    if connection.vendor != "postgresql":
        return False
    return not connection.settings_dict.get("OPTIONS", {}).get("server_side_binding")


def _edge_flags(
    using: str, model: type[Job], ids: list[uuid.UUID]
) -> list[tuple[uuid.UUID, bool, bool]]:
    """Whether each dependent still has an open edge, or one that can no longer be met.

    One statement, each EXISTS stopping at its first edge (index
    arcature_edge_down_idx), so a completion of a wide fan-in probes instead of
    reading every edge still open (quadratic over the fan-in), and the dependent's
    lock, held from the statement before to the commit, is held one round trip less.
    It must be its own statement, after the lock: a subquery of the locking
    statement would read the edges as they were before that statement waited.
    """
    connection = connections[using]
    sql, params = _edge_flags_sql(connection, model, ids)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return _flag_rows(cursor.fetchall())


def _edge_flags_sql(
    connection: Any, model: type[Job], ids: list[uuid.UUID]
) -> tuple[str, list[Any]]:
    m = _models()
    qn = connection.ops.quote_name
    job, edge = qn(model._meta.db_table), qn(m.WorkflowEdge._meta.db_table)
    where, params = _id_list(connection, f"j.{qn('id')}", ids)
    probe = (
        f"SELECT 1 FROM {edge} e "
        f"WHERE e.{qn('downstream_id')} = j.{qn('id')} AND e.{qn('state')} = %s"
    )
    sql = (
        f"SELECT j.{qn('id')}, EXISTS({probe}), EXISTS({probe}) FROM {job} j "
        f"WHERE {where} AND {_still_waiting(connection, 'j.' + qn('status'))}"
    )
    return sql, [m.EdgeState.OPEN, m.EdgeState.UNMET, *params, JobStatus.WAITING]


def _flag_rows(rows: Iterable[Any]) -> list[tuple[uuid.UUID, bool, bool]]:
    return [(as_uuid(job_id), bool(is_open), bool(unmet)) for job_id, is_open, unmet in rows]


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
        # Its death met these (stored open, ``_mark_edges``) and nothing reopens them
        # here: written met, or its next outcome would decide them again (unmet).
        _write_sole_met(edges, [job_id])
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
    if cancelled:
        incoming: dict[uuid.UUID, list[tuple[uuid.UUID, str]]] = {}
        for down, up, state in edges.filter(downstream_id__in=list(cancelled)).values_list(
            "downstream_id", "upstream_id", "state"
        ):
            incoming.setdefault(down, []).append((up, state))
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
    # A sole edge met was left unwritten (``_mark_edges``): its upstream's status said
    # it, and that upstream is about to run again. Written now, as it used to be at
    # the completion, so its next completion leaves it (state ``met``) and a reader
    # does not take it for open. Only a released dependent's: the others reopen.
    _write_sole_met(edges.exclude(downstream_id__in=unreleased), back)
    edges.filter(upstream_id__in=list(back), downstream_id__in=unreleased).update(
        state=m.EdgeState.OPEN
    )
    return sorted(back - {job_id})


def _write_sole_met(edges: Any, ups: Iterable[uuid.UUID]) -> None:
    """Write ``met`` the sole edges leaving ``ups`` (finished nodes about to live again)
    that are stored open: a finished upstream's sole edge is written unmet, or left
    open because its outcome met it (``_mark_edges``)."""
    edges.filter(upstream_id__in=list(ups), sole=True, state=_models().EdgeState.OPEN).update(
        state=_models().EdgeState.MET
    )


def edge_states(
    using: str, model: type[Job], workflow_id: uuid.UUID | None = None
) -> dict[int, str]:
    """Each edge's state (edge id → ``open``, ``met`` or ``unmet``), of one workflow or all.

    What is stored, except for the sole edges a completion met without writing them
    (``_mark_edges``): stored ``open``, they are met when their upstream's status is
    an outcome their ``when`` accepts. For readers (the tests, an operator's
    console): the release path never needs it.
    """
    m = _models()
    edges = m.WorkflowEdge.objects.using(using)
    if workflow_id is not None:
        edges = edges.filter(workflow_id=workflow_id)
    rows = list(edges.values_list("id", "upstream_id", "when", "state", "sole"))
    open_state = m.EdgeState.OPEN
    asked = sorted({up for _, up, _, state, sole in rows if sole and state == open_state})
    outcomes: dict[uuid.UUID, str] = {}
    for start in range(0, len(asked), 500):  # SQLite's limit on parameters
        for job_id, status in (
            model.objects.using(using)
            .filter(id__in=asked[start : start + 500])
            .values_list("id", "status")
        ):
            outcome = OUTCOME_OF_STATUS.get(JobStatus(status))
            if outcome is not None:
                outcomes[job_id] = outcome
    found: dict[int, str] = {}
    for edge_id, up, when, state, sole in rows:
        met = sole and state == open_state and when in MET_BY.get(outcomes.get(up, ""), ())
        found[edge_id] = m.EdgeState.MET if met else state
    return found


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
