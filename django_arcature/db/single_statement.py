"""The one-statement claim PostgreSQL and SQLite share: pick in a CTE, stamp, return.

Both can ``UPDATE … WHERE id IN (SELECT … LIMIT n) … RETURNING``; they differ
only in the token they mint, the lock clause and whether the CTE must be
materialized, which each driver passes in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from .claimed import CLAIM_COLUMNS, ClaimedJob, claimed_from_rows, returning_columns

_PRIORITY = CLAIM_COLUMNS.index("priority")
_AVAILABLE_AT = CLAIM_COLUMNS.index("available_at")


def claim_with_cte(
    connection: Any,
    table: str,
    worker_id: str,
    lease_seconds: int,
    batch: int,
    queues: Sequence[str] | None,
    *,
    exclude: Sequence[str] = (),
    token_sql: str,
    lock: str,
    materialized: str,
    now: str,
    expires: str,
    recheck: bool,
    also_from: str = "",
) -> list[ClaimedJob]:
    """The one-statement claim PostgreSQL and SQLite share: pick in a CTE, stamp, return.

    With ``recheck`` (SQLite, which has no row locks) the outer ``status =
    'pending'`` re-check is the compare-and-set that makes a stale pick claim
    nothing. Without it (PostgreSQL) the picked rows are found by primary key and
    nothing else: ``FOR UPDATE`` already re-evaluated the CTE's ``WHERE`` on each
    row as it locked it, and the row stays locked, so still pending, until this
    statement commits. Given an outer ``status = 'pending'``, PostgreSQL may instead
    reach the rows through a status index, walking every pending row and comparing it
    with each picked id, when its statistics (taken while the table held only
    finished jobs) call that cheap: 187 ms a claim with 3,000,000 finished and 20,000
    pending rows, instead of under 1 ms (benchmarks/scale.md).

    ``also_from`` (PostgreSQL only, without ``recheck``) is the UPDATE's whole
    ``FROM``: a one-row subquery evaluated once per statement, which is how
    :mod:`.relaxed_claim` turns the claim's own commit asynchronous without a round
    trip of its own.
    """
    if recheck:
        params: list[Any] = ["pending", *(queues or ()), *exclude, batch, "running"]
        params.extend([worker_id, lease_seconds, "pending"])
    else:  # the statuses are written into the text (see _claim_sql)
        params = [*(queues or ()), *exclude, batch, worker_id, lease_seconds]
    shape = _Shape(
        type(connection.ops),
        connection.vendor,
        table,
        len(queues or ()),
        len(exclude),
        token_sql,
        lock,
        materialized,
        now,
        expires,
        recheck,
        also_from,
    )
    sql = _STATEMENTS.get(shape)
    if sql is None:
        sql = _claim_sql(connection.ops.quote_name, shape)
        if len(_STATEMENTS) >= _MAX_STATEMENTS:  # a lease or queue count per call: bounded
            _STATEMENTS.clear()
        _STATEMENTS[shape] = sql
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    # RETURNING follows no order: restore the claim's (priority desc, then oldest).
    rows.sort(key=lambda row: (-row[_PRIORITY], row[_AVAILABLE_AT]))
    return claimed_from_rows(rows)


class _Shape(NamedTuple):
    """What the claim's SQL text depends on; the values travel as parameters."""

    ops: type
    vendor: str
    table: str
    queues: int
    exclude: int
    token_sql: str
    lock: str
    materialized: str
    now: str
    expires: str
    recheck: bool
    also_from: str


#: The claim's SQL per shape. Written for every claim it cost more of an idle pickup's
#: CPU than the statement's own trip through the driver (35 ``quote_name`` calls and
#: the f-strings: about 60 µs of the 260 µs a one-job claim took on PostgreSQL).
_STATEMENTS: dict[_Shape, str] = {}
#: A worker uses one or two shapes; a caller varying the lease or the queue count
#: call by call must not grow the cache without end.
_MAX_STATEMENTS = 64


def _claim_sql(qn: Any, shape: _Shape) -> str:
    """The claim's text for ``shape``; its ``%s`` follow the order ``claim_with_cte`` fills."""
    queue_filter = ""
    if shape.queues:
        queue_filter = f"AND {qn('queue')} IN ({', '.join(['%s'] * shape.queues)})"
    if shape.exclude:
        queue_filter += f" AND {qn('queue')} NOT IN ({', '.join(['%s'] * shape.exclude)})"
    table = shape.table
    # PostgreSQL: the statuses are literals, not parameters. Django's default binding
    # merged them into the text already; with ``server_side_binding`` psycopg prepares
    # the claim, and the generic plan PostgreSQL then keeps can prove ``status =
    # 'pending'`` implies the partial claim indexes' predicate and use them. With
    # ``status = $1`` it could not, and scanned the table (tests/integration/
    # test_prepared_claim.py, 20,000 finished rows).
    pending, running = ("%s", "%s") if shape.recheck else ("'pending'", "'running'")
    if shape.recheck:
        # The unary + keeps SQLite from reaching the rows through a status index
        # (it does, on a table never analysed, walking every pending row): the
        # compare-and-set stays, and the rows are found by primary key.
        target = f"WHERE {qn('id')} IN (SELECT {qn('id')} FROM picked) AND +{qn('status')} = %s"
        prefix = ""
    else:
        # The picked ids as one key list, ``= ANY(ARRAY(…))``, and no join with
        # ``picked``: the target scan searches the primary key once for all of them
        # whatever the statistics. Joined, statistics an ANALYZE took of a drained
        # table ("pages, no rows") made the job table one row to the planner, which
        # then walked the whole primary key against the picked ids (760 ms a claim of
        # 200 beside 10,000 pending fan-out nodes instead of 13 ms; tests/integration/
        # test_plans.py, "analysed empty"); joined *and* keyed, on ordinary statistics
        # each picked row's lookup carried the whole list in its index condition
        # (PostgreSQL 15 descends once per element: 200 x 200 for a claim of 200).
        target = (
            f"{'FROM ' + shape.also_from + ' ' if shape.also_from else ''}"
            f"WHERE {qn(table)}.{qn('id')} = ANY(ARRAY(SELECT {qn('id')} FROM picked))"
        )
        prefix = f"{qn(table)}."
    # SQLite: the unary + keeps ``available_at`` out of the index search. With
    # statistics of a table holding two statuses (many waiting workflow nodes, or
    # only succeeded rows, beside the pending ones), SQLite otherwise skip-scanned
    # every status and priority for ``available_at <= now``, reading every waiting
    # row, then sorted (tests/integration/test_workflow_plans.py). The claim's own
    # plan, ``status = ?`` in index order with LIMIT, filters the time anyway.
    due = f"+{qn('available_at')}" if shape.recheck else qn("available_at")
    returning = returning_columns(shape.vendor, qn, prefix)
    now = shape.now
    return f"""
        WITH picked AS {shape.materialized} (
            SELECT {qn("id")} FROM {qn(table)}
            WHERE {qn("status")} = {pending} AND {due} <= {now} {queue_filter}
            ORDER BY {qn("priority")} DESC, {qn("available_at")}
            LIMIT %s {shape.lock}
        )
        UPDATE {qn(table)} SET
            {qn("status")} = {running},
            {qn("attempts")} = {qn("attempts")} + 1,
            {qn("claim_token")} = {shape.token_sql},
            {qn("locked_by")} = %s,
            {qn("locked_at")} = {now},
            {qn("lease_seconds")} = %s,
            {qn("lease_expires_at")} = {shape.expires},
            {qn("started_at")} = COALESCE({qn("started_at")}, {now})
        {target}
        RETURNING {returning}
    """
