"""Capture the SQL a manager call sends and ask the database how it would run it.

Used by the plan-shape tests (``tests/integration/test_plans.py``) and by the big-table
benchmark (``benchmarks/bigtable.py``): both need "the statements the claim really
sends", not a copy of them that could drift from the code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction


@dataclass(frozen=True)
class Statement:
    sql: str
    params: Any


def capture(using: str, call: Callable[[], object]) -> list[Statement]:
    """Run ``call`` and return every statement it sent on ``using``, in order."""
    sent: list[Statement] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(Statement(sql, params))
        return execute(sql, params, many, context)

    with connections[using].execute_wrapper(wrapper):
        call()
    return sent


def explained(
    using: str,
    call: Callable[[], object],
    wanted: Callable[[str], bool],
    *,
    analyze: bool = False,
) -> list[tuple[Statement, Any]]:
    """Plans of the statements ``call`` sends that ``wanted(sql)`` selects.

    Each selected statement is explained just before it runs, in the same
    transaction and with the rows earlier statements changed, and everything is
    rolled back afterwards. PostgreSQL gives its JSON plan (``analyze`` runs the
    statement too, with buffer counts), MariaDB its JSON plan (``ANALYZE
    FORMAT=JSON`` with ``analyze``), SQLite its ``EXPLAIN QUERY PLAN`` rows.
    """
    connection = connections[using]
    plans: list[tuple[Statement, Any]] = []
    inside = False  # the EXPLAIN itself passes through this wrapper too

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal inside
        if not many and not inside and wanted(sql):
            inside = True
            try:
                plan = _explain(connection, sql, params, analyze=analyze)
            finally:
                inside = False
            plans.append((Statement(sql, params), plan))
        return execute(sql, params, many, context)

    with transaction.atomic(using=using):
        with connection.execute_wrapper(wrapper):
            call()
        transaction.set_rollback(True, using=using)
    return plans


def explained_after(
    using: str, call: Callable[[], object], wanted: Callable[[str], bool]
) -> list[tuple[Statement, Any]]:
    """Plans of the statements ``call`` sends that ``wanted(sql)`` selects, explained
    once it has returned, for a call that sends them only outside a transaction (in
    autocommit), where :func:`explained`'s enclosing transaction would change them.
    The call's writes stay; the plans see the statistics, not the rows it changed."""
    connection = connections[using]
    assert connection.get_autocommit()
    assert not connection.in_atomic_block
    sent = [s for s in capture(using, call) if wanted(s.sql)]
    return [(s, _explain(connection, s.sql, s.params, analyze=False)) for s in sent]


def _explain(connection: Any, sql: str, params: Any, *, analyze: bool) -> Any:
    vendor = connection.vendor
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
            cursor.execute(f"EXPLAIN ({options}) {sql}", params)
            plan = cursor.fetchone()[0]
            return json.loads(plan) if isinstance(plan, str) else plan
        if vendor == "mysql":
            verb = "ANALYZE" if analyze else "EXPLAIN"
            cursor.execute(f"{verb} FORMAT=JSON {sql}", params)
            return json.loads(cursor.fetchone()[0])
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return [tuple(row) for row in cursor.fetchall()]


def pg_nodes(plan: Any) -> Iterator[dict[str, Any]]:
    """Every node of a PostgreSQL JSON plan, depth first (init plans and CTEs included)."""
    stack = [plan[0]["Plan"]] if isinstance(plan, list) else [plan]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.get("Plans", [])))


def pg_primary_key_search(node: dict[str, Any], table: str, shape: Any) -> dict[str, Any]:
    """The search that finds a target scan's rows, checked to be one of ``table``'s
    primary key by its ids (``Index Cond``), not a walk of the whole key: the index
    scan itself, or a bitmap heap scan's bitmap index scan (all ids at once)."""
    if node["Node Type"] == "Bitmap Heap Scan":
        (node,) = node["Plans"]
        assert node["Node Type"] == "Bitmap Index Scan", shape
    else:
        assert node["Node Type"] == "Index Scan", shape
    assert node["Index Name"] == f"{table}_pkey", shape
    assert "Index Cond" in node, shape
    return node


def pg_text(using: str, sql: str, params: Any, *, analyze: bool = True) -> str:
    """The plan as text (``EXPLAIN (ANALYZE, BUFFERS)``), rolled back; for reports."""
    connection = connections[using]
    options = "ANALYZE, BUFFERS" if analyze else "COSTS"
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN ({options}) {sql}", params)
        text = "\n".join(row[0] for row in cursor.fetchall())
        transaction.set_rollback(True, using=using)
    return text


def mysql_tables(plan: Any) -> Iterator[dict[str, Any]]:
    """Every ``table`` access of a MariaDB/MySQL JSON plan."""
    stack = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "table" in node and isinstance(node["table"], dict):
                yield node["table"]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


# --- a table of finished rows, built by the database itself ---------------------------------

COLUMNS = (
    "id, task_name, queue, priority, payload, status, attempts, max_attempts, available_at, "
    "locked_at, locked_by, lease_seconds, lease_expires_at, claim_token, unique_key, error_kind, "
    "last_error, last_traceback, result, attempt_log, backend, trace_context, created_at, "
    "started_at, finished_at, failed_at"
)


def finished_rows_sql(vendor: str, table: str, start: int, stop: int, total: int) -> str:
    """One INSERT … SELECT of finished rows ``start`` to ``stop - 1`` of ``total``, in SQL.

    Row g finished at "30 days ago + g/total of 30 days"; one in 50 is dead (exhausted),
    one in 97 cancelled, the rest succeeded; one in 10 ran on queue 'email'.
    """
    status = (
        "CASE WHEN g % 50 = 0 THEN 'dead' WHEN g % 97 = 0 THEN 'cancelled' ELSE 'succeeded' END"
    )
    kind = "CASE WHEN g % 50 = 0 THEN 'exhausted' ELSE '' END"
    queue = "CASE WHEN g % 10 = 0 THEN 'email' ELSE 'default' END"
    if vendor == "postgresql":
        moment = f"(now() - interval '30 days' + g * (interval '30 days' / {total}))"
        ident, later, source = "gen_random_uuid()", f"{moment} + interval '3 ms'", ""
        rows = f"generate_series({start}, {stop - 1}) AS g"
    elif vendor == "mysql":
        step = 2_592_000_000_000 // total  # microseconds in 30 days, per row
        moment = f"TIMESTAMPADD(MICROSECOND, g * {step}, UTC_TIMESTAMP(6) - INTERVAL 30 DAY)"
        ident, later, source = "UUID()", f"{moment} + INTERVAL 3000 MICROSECOND", ""
        rows = f"(SELECT seq AS g FROM seq_{start}_to_{stop - 1}) AS s"
    else:
        seconds = f"(-2592000.0 + g * 2592000.0 / {total})"
        moment = f"STRFTIME('%Y-%m-%d %H:%M:%f', 'now', {seconds} || ' seconds') || '000'"
        ident = "LOWER(HEX(RANDOMBLOB(16)))"
        later = f"STRFTIME('%Y-%m-%d %H:%M:%f', 'now', ({seconds} + 0.003) || ' seconds') || '000'"
        source = (
            f"WITH RECURSIVE s(g) AS (SELECT {start} UNION ALL "
            f"SELECT g + 1 FROM s WHERE g < {stop - 1}) "
        )
        rows = "s"
    return (
        f"{source}INSERT INTO {table} ({COLUMNS}) "
        f"SELECT {ident}, 'bench.noop', {queue}, 0, '{{\"args\": [], \"kwargs\": {{}}}}', "
        f"{status}, 1, 3, {moment}, {moment}, 'bench-worker', 30, NULL, NULL, NULL, {kind}, "
        f"'', '', NULL, '[]', '', '{{}}', {moment}, {moment}, {later}, NULL FROM {rows}"
    )
