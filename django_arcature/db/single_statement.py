"""The one-statement claim PostgreSQL and SQLite share: pick in a CTE, stamp, return.

Both can ``UPDATE … WHERE id IN (SELECT … LIMIT n) … RETURNING``; they differ
only in the token they mint, the lock clause and whether the CTE must be
materialized, which each driver passes in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .claimed import CLAIM_COLUMNS, ClaimedJob, claimed_from_row


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
) -> list[ClaimedJob]:
    """The one-statement claim PostgreSQL and SQLite share: pick in a CTE, stamp, return.

    The outer ``status = 'pending'`` re-check is the compare-and-set that makes a
    stale pick claim nothing.
    """
    qn = connection.ops.quote_name
    params: list[Any] = ["pending"]
    queue_filter = ""
    if queues:
        queue_filter = f"AND {qn('queue')} IN ({', '.join(['%s'] * len(queues))})"
        params.extend(queues)
    if exclude:
        queue_filter += f" AND {qn('queue')} NOT IN ({', '.join(['%s'] * len(exclude))})"
        params.extend(exclude)
    params.extend([batch, "running", worker_id, lease_seconds, "pending"])
    returning = ", ".join(qn(c) for c in CLAIM_COLUMNS)
    sql = f"""
        WITH picked AS {materialized} (
            SELECT {qn("id")} FROM {qn(table)}
            WHERE {qn("status")} = %s AND {qn("available_at")} <= {now} {queue_filter}
            ORDER BY {qn("priority")} DESC, {qn("available_at")}
            LIMIT %s {lock}
        )
        UPDATE {qn(table)} SET
            {qn("status")} = %s,
            {qn("attempts")} = {qn("attempts")} + 1,
            {qn("claim_token")} = {token_sql},
            {qn("locked_by")} = %s,
            {qn("locked_at")} = {now},
            {qn("lease_seconds")} = %s,
            {qn("lease_expires_at")} = {expires},
            {qn("started_at")} = COALESCE({qn("started_at")}, {now})
        WHERE {qn("id")} IN (SELECT {qn("id")} FROM picked) AND {qn("status")} = %s
        RETURNING {returning}
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    # RETURNING follows no order: restore the claim's (priority desc, then oldest).
    priority = CLAIM_COLUMNS.index("priority")
    available_at = CLAIM_COLUMNS.index("available_at")
    rows.sort(key=lambda row: (-row[priority], row[available_at]))
    return [claimed_from_row(row) for row in rows]
