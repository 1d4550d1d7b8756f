"""One named transition's SET clause for many rows: what the batched completions share.

PostgreSQL joins the rows of one JSON parameter (:func:`update_from_json`), SQLite a
``VALUES`` list, MySQL/MariaDB a derived table; all split a batch's fields the same
way, here.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import JSONField

from django_arcature.core.payloads import ExactJSONEncoder

from .base import CompletionRow, MemberRow, MemberTable, driver_class
from .claimed import as_uuid
from .clock import DatabaseNow, now_sql


@dataclass
class BatchParts:
    """Shared values once, varying ones per row."""

    assignments: list[str]
    shared_params: list[Any]
    row_columns: list[str]
    row_placeholders: list[str]
    row_params: list[list[Any]]

    def flat_row_params(self) -> list[Any]:
        return [value for row in self.row_params for value in row]


def batch_parts(
    connection: BaseDatabaseWrapper,
    model: Any,
    rows: Sequence[CompletionRow],
    *,
    typed_placeholders: bool = False,
    status_column: bool = False,
) -> BatchParts:
    """Split a batch's fields into those every row shares and those that vary by row.

    The varying ones (result, attempt log, retry time…) travel in a derived table
    joined on id and token; ``DatabaseNow`` values become the database's clock.
    ``typed_placeholders`` casts each placeholder to its column type (PostgreSQL
    cannot infer the types of a ``VALUES`` list's columns). ``status_column`` adds
    the fence's ``'running'`` to every row, as ``arcature_status``.
    """
    vendor = connection.vendor
    qn = connection.ops.quote_name
    meta = model._meta

    def cast(field: Any) -> str:
        return f"::{field.db_type(connection)}" if typed_placeholders else ""

    pk_field = meta.get_field("id")
    token_field = meta.get_field("claim_token")
    parts = BatchParts(
        assignments=[],
        shared_params=[],
        row_columns=["arcature_id", "arcature_token"],
        row_placeholders=[f"%s{cast(pk_field)}", f"%s{cast(token_field)}"],
        row_params=[
            [
                pk_field.get_db_prep_save(job_id, connection),
                token_field.get_db_prep_save(token, connection),
            ]
            for job_id, token, _ in rows
        ],
    )
    if status_column:
        parts.row_columns.append("arcature_status")
        parts.row_placeholders.append(f"%s{cast(meta.get_field('status'))}")
        for params in parts.row_params:
            params.append("running")
    for name in rows[0][2]:
        field = meta.get_field(name)
        first = rows[0][2][name]
        if isinstance(first, DatabaseNow) and all(_same_value(row[2][name], first) for row in rows):
            parts.assignments.append(f"{qn(field.column)} = {now_sql(vendor, first.seconds)}")
        elif isinstance(first, DatabaseNow):
            # Each row its own offset from the database's now (retries with their backoff).
            parts.row_columns.append(f"v_{name}")
            parts.row_placeholders.append("%s::double precision" if typed_placeholders else "%s")
            column = f"v.{qn('v_' + name)}"
            parts.assignments.append(
                f"{qn(field.column)} = {driver_class(vendor).now_plus_sql(column)}"
            )
            for params, (_, _, fields) in zip(parts.row_params, rows, strict=True):
                params.append(_seconds_of(fields[name]))
        elif all(_same_value(row[2][name], first) for row in rows):
            parts.assignments.append(f"{qn(field.column)} = %s{cast(field)}")
            parts.shared_params.append(field.get_db_prep_save(first, connection))
        else:
            parts.row_columns.append(f"v_{name}")
            parts.row_placeholders.append(f"%s{cast(field)}")
            parts.assignments.append(f"{qn(field.column)} = v.{qn('v_' + name)}")
            for params, (_, _, fields) in zip(parts.row_params, rows, strict=True):
                params.append(field.get_db_prep_save(fields[name], connection))
    return parts


def _seconds_of(value: Any) -> float:
    if not isinstance(value, DatabaseNow):
        raise TypeError(f"a batch mixes the database's clock with a fixed time: {value!r}")
    return value.seconds


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, DatabaseNow) or isinstance(b, DatabaseNow):
        return isinstance(a, DatabaseNow) and isinstance(b, DatabaseNow) and a.seconds == b.seconds
    return type(a) is type(b) and a == b


def update_from_values(
    connection: BaseDatabaseWrapper,
    model: Any,
    rows: Sequence[CompletionRow],
    *,
    typed: bool,
    members: MemberTable | None = None,
) -> set[uuid.UUID]:
    """``UPDATE … FROM (VALUES …) … RETURNING id``: SQLite's batched write, and
    PostgreSQL's for a batch :func:`update_from_json` cannot carry.

    The fence's status travels in each row and is compared as a join condition.
    Compared with the constant ``'running'``, it let PostgreSQL reach the rows through
    a status index, walking every running row, whenever statistics taken while
    nothing ran called that cheap; joined, the rows are found by primary key. The
    list is a MATERIALIZED CTE because a one-row ``VALUES`` would otherwise be
    folded back into constants. With ``members``, see :func:`update_from_json_members`.
    """
    return _changed(_values_rows(connection, model, rows, typed=typed, members=members))


def _values_rows(
    connection: BaseDatabaseWrapper,
    model: Any,
    rows: Sequence[CompletionRow],
    *,
    typed: bool,
    members: MemberTable | None,
) -> list[tuple[Any, ...]]:
    qn = connection.ops.quote_name
    parts = batch_parts(connection, model, rows, typed_placeholders=typed, status_column=True)
    values_sql = ", ".join([f"({', '.join(parts.row_placeholders)})"] * len(rows))
    table = qn(model._meta.db_table)
    columns = ", ".join(qn(c) for c in parts.row_columns)
    sql = (
        f"WITH v ({columns}) AS MATERIALIZED (VALUES {values_sql}) "
        f"UPDATE {table} SET {', '.join(parts.assignments)} "
        f"FROM v{_member_join(connection, members, 'v.' + qn('arcature_id'))} "
        f"WHERE {table}.{qn('id')} = v.{qn('arcature_id')} "
        f"AND {table}.{qn('claim_token')} = v.{qn('arcature_token')} "
        f"AND {table}.{qn('status')} = v.{qn('arcature_status')} "
        f"RETURNING {_returning(connection, table, members)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*parts.flat_row_params(), *parts.shared_params])
        return list(cursor.fetchall())


def _member_join(connection: BaseDatabaseWrapper, members: MemberTable | None, job_id: str) -> str:
    """With ``members``, the joins (after ``FROM v``) to each row's node and workflow run.

    Left joins, each by primary key (the node's job id, the run's id): a plain job
    finds no node. Joined in the ``FROM`` of the ``UPDATE`` (PostgreSQL), so its
    ``RETURNING`` reads the node's columns (:func:`_returning`). Each is a LATERAL
    subquery with LIMIT 1, which the planner cannot flatten into a join of whole
    tables: one primary-key probe per row, as the plain jobs' member probe is
    (:func:`_build_json_sql`), where a join of the node table was planned as a
    hash join over all of it. The run is read, never locked.
    """
    if members is None:
        return ""
    qn = connection.ops.quote_name
    member_table, column, run_table = members
    node_columns = ", ".join(
        qn(name) for name in (column, "has_dependents", "batch_id", "workflow_id")
    )
    # Two subqueries of one table each: with the run joined inside the node's, the
    # planner chose, on statistics that saw no node, a whole index of the node table
    # per row (``test_member_flush``).
    return (
        f" LEFT JOIN LATERAL (SELECT {node_columns} FROM {qn(member_table)}"
        f" WHERE {qn(column)} = {job_id} LIMIT 1) AS arcature_m ON true"
        f" LEFT JOIN LATERAL (SELECT {qn('node_count')} FROM {qn(run_table)}"
        f" WHERE {qn('id')} = arcature_m.{qn('workflow_id')} LIMIT 1) AS arcature_r ON true"
    )


def _returning(connection: BaseDatabaseWrapper, table: str, members: MemberTable | None) -> str:
    """The ``RETURNING`` list: the id, and with ``members`` whether the job is one and
    its node's row (``MemberRow``), from :func:`_member_join`'s joins.

    Why the row and not only "is a member": settling the members needs it, and read
    here it costs no look-up of the nodes after the write (a round trip, and a list
    of ids sent, per flush). A member row is written in the transaction that inserts
    its job (``manager.workflow_writes``) and pruned only after its job finished, so
    the statement's snapshot holds it for every job it changes.
    """
    qn = connection.ops.quote_name
    job_id = f"{table}.{qn('id')}"
    if members is None:
        return job_id
    _, column, _ = members
    return (
        f"{job_id}, arcature_m.{qn(column)} IS NOT NULL, arcature_m.{qn('has_dependents')}, "
        f"arcature_m.{qn('batch_id')}, arcature_m.{qn('workflow_id')}, "
        f"arcature_r.{qn('node_count')}"
    )


def _changed(rows: Sequence[Sequence[Any]]) -> set[uuid.UUID]:
    return {as_uuid(row[0]) for row in rows}


def _members(rows: Sequence[Sequence[Any]]) -> set[uuid.UUID]:
    return {as_uuid(row[0]) for row in rows if row[1]}


def _member_rows(rows: Sequence[Sequence[Any]]) -> dict[uuid.UUID, MemberRow]:
    """The members among ``rows`` (as :func:`_returning` lists them), by job id."""
    found: dict[uuid.UUID, MemberRow] = {}
    for job_id, member, has_dependents, batch_id, workflow_id, size in rows:
        if member:
            job = as_uuid(job_id)
            found[job] = (
                job,
                bool(has_dependents),
                None if batch_id is None else as_uuid(batch_id),
                None if workflow_id is None else as_uuid(workflow_id),
                None if size is None else int(size),
            )
    return found


# --- PostgreSQL: the rows as one JSON parameter --------------------------------------------

#: How a column of the batch is written (see :func:`update_from_json`).
_NOW, _NOW_ROW, _SHARED = "now", "now_row", "shared"
_JSON, _JSON_TEXT, _SCALAR = "json", "json_text", "scalar"
#: The statement text of each shape already built: (table, ((field, how, offset?), …)).
#: A shape is which columns vary and which are shared, never a value: a handful exist.
_JSON_STATEMENTS: dict[tuple[Any, ...], str] = {}
_MAX_STATEMENTS = 256
#: Whole batches are encoded by this encoder; a JSON column that has it too is embedded
#: as JSON, any other JSON column as the text its own encoder writes.
_ENCODER = ExactJSONEncoder()
#: Plain JSON scalars, sent as they are.
_PLAIN = (str, int, bool)


class _NotPlain(Exception):
    """A value the JSON form cannot carry as Django would send it: use ``VALUES``."""


def update_from_json(
    connection: BaseDatabaseWrapper, model: Any, rows: Sequence[CompletionRow]
) -> set[uuid.UUID]:
    """PostgreSQL's batched write: the rows as one ``json`` parameter, fenced by join.

    ``jsonb_array_elements`` turns the parameter back into typed rows (id, token, the
    fence's status and the values that vary by row) inside a MATERIALIZED CTE, joined
    on primary key, token and status exactly as the ``VALUES`` form of
    :func:`update_from_values` is. Why: the ``VALUES`` form's text grows with the
    batch (three placeholders and casts a row), so the driver parses it anew on every
    call and quotes every value one by one, which cost about as much client CPU per
    row as the rest of the completion; here the text depends only on the batch's
    shape (which columns vary, which are shared), is built once per shape and stays
    in psycopg's statement cache, and the rows cost one C-encoded ``json.dumps``. The
    values are what Django would send: JSON columns encoded by their own encoder, the
    rest as the field prepares them; a value of any other kind (an expression, bytes,
    a non-finite float) sends the batch through :func:`update_from_values` instead.
    """
    return _changed(_json_rows(connection, model, rows, None))


def update_from_json_members(
    connection: BaseDatabaseWrapper,
    model: Any,
    rows: Sequence[CompletionRow],
    members: MemberTable,
) -> tuple[set[uuid.UUID], dict[uuid.UUID, MemberRow]]:
    """:func:`update_from_json`, also saying which changed jobs have a row in ``members``,
    and that row (``MemberRow``: what settling the member reads).

    Why: a completion settles a workflow's or a batch's dependents, and a plain job
    (most of a drain) has none to settle. Asking in the same statement, one index
    probe per changed row in its ``RETURNING``, spares every batch of plain jobs the
    separate round trip, and its ORM query, that looked the ids up. A member row is
    written in the transaction that inserts its job (``manager.workflow_writes``),
    so it is there, committed, before the job can be claimed: the probe, on the
    statement's snapshot, sees every member a later lookup would.
    """
    found = _json_rows(connection, model, rows, members)
    return _changed(found), _member_rows(found)


def update_plain_from_json(
    connection: BaseDatabaseWrapper,
    model: Any,
    rows: Sequence[CompletionRow],
    members: MemberTable,
) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
    """:func:`update_from_json` of the rows whose jobs are not in ``members``, in one
    statement that needs no transaction; returns (changed ids, member ids left alone).

    Why: a flush of plain jobs is then one round trip in autocommit, not ``BEGIN``,
    the ``UPDATE`` and ``COMMIT`` (two thirds of a flush's round trips, and of the
    server's statements, in a drain). A member is never written here: its completion
    and the settling of its dependents share one transaction, which the caller opens
    for the members named back. The probe sees every member, for the reason given in
    :func:`update_from_json_members`. A batch the JSON form cannot carry is written
    by nobody here: every row is handed back, to the caller's transaction.
    """
    try:
        sql, params = _json_statement(connection, model, rows, members, alone=True)
    except _NotPlain:
        return set(), {as_uuid(job_id) for job_id, _, _ in rows}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    return {as_uuid(row[0]) for row in found if not row[1]}, _members(found)


def _json_rows(
    connection: BaseDatabaseWrapper,
    model: Any,
    rows: Sequence[CompletionRow],
    members: MemberTable | None,
) -> list[tuple[Any, ...]]:
    try:
        sql, params = _json_statement(connection, model, rows, members)
    except _NotPlain:
        return _values_rows(connection, model, rows, typed=True, members=members)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _json_statement(
    connection: BaseDatabaseWrapper,
    model: Any,
    rows: Sequence[CompletionRow],
    members: MemberTable | None = None,
    *,
    alone: bool = False,
) -> tuple[str, list[Any]]:
    meta = model._meta
    first_fields = rows[0][2]
    shape: list[tuple[str, str, float]] = []
    shared: list[Any] = []
    varying: list[tuple[str, str, Any]] = []  # (name, how, field)
    for name, first in first_fields.items():
        field = meta.get_field(name)
        if isinstance(first, DatabaseNow):
            seconds = first.seconds
            if all(_same_now(row[2][name], seconds) for row in rows):
                # An offset (a lease, a backoff) is a parameter, not part of the text:
                # one statement for every offset, and a cache that cannot grow with them.
                shape.append((name, _NOW, 1.0 if seconds else 0.0))
                if seconds:
                    shared.append(seconds)
                continue
            how = _NOW_ROW
        elif hasattr(first, "resolve_expression"):
            raise _NotPlain(name)  # an expression: only the VALUES form compiles it
        elif _all_same(rows, name, first):
            shape.append((name, _SHARED, 0.0))
            shared.append(field.get_db_prep_save(first, connection))
            continue
        elif isinstance(field, JSONField):
            how = _JSON if field.encoder is ExactJSONEncoder else _JSON_TEXT
        else:
            how = _SCALAR
        shape.append((name, how, 0.0))
        varying.append((name, how, field))
    key = (meta.db_table, tuple(shape), members, alone)
    sql = _JSON_STATEMENTS.get(key)
    if sql is None:
        if len(_JSON_STATEMENTS) >= _MAX_STATEMENTS:  # never reached by the transitions
            _JSON_STATEMENTS.clear()
        sql = _JSON_STATEMENTS[key] = _build_json_sql(
            connection, model, shape, members, alone=alone
        )
    # UUIDs as their 32 hex digits, which PostgreSQL's uuid input takes as it takes the
    # hyphenated form: ``.hex`` costs a third of ``str()``, twice a row.
    document = [
        [
            as_uuid(job_id).hex,
            as_uuid(token).hex,
            "running",
            *[_json_value(connection, how, field, fields[name]) for name, how, field in varying],
        ]
        for job_id, token, fields in rows
    ]
    return sql, [_ENCODER.encode(document), *shared]


def _build_json_sql(
    connection: BaseDatabaseWrapper,
    model: Any,
    shape: Sequence[tuple[str, str, float]],
    members: MemberTable | None = None,
    *,
    alone: bool = False,
) -> str:
    """The statement of one shape; the rows come as ``[[id, token, value, …], …]``.

    ``alone`` (with ``members``): the form of :func:`update_plain_from_json`, whose
    rows are ``(id, is a member)``: the members are named, never updated.
    """
    qn = connection.ops.quote_name
    meta = model._meta
    vendor = connection.vendor
    table = qn(meta.db_table)
    # Element 0 is the id, 1 the token, 2 the fence's status, 3… the varying values in
    # the shape's order. The status travels in each row, as in update_from_values.
    picks = [
        f"(e->>0)::{meta.get_field('id').db_type(connection)} AS arcature_id",
        f"(e->>1)::{meta.get_field('claim_token').db_type(connection)} AS arcature_token",
        f"(e->>2)::{meta.get_field('status').db_type(connection)} AS arcature_status",
    ]
    assignments = []
    position = 3
    for name, how, seconds in shape:
        field = meta.get_field(name)
        column = qn(field.column)
        if how == _NOW:
            offset = driver_class(vendor).now_plus_sql("%s::double precision")
            assignments.append(f"{column} = {offset if seconds else now_sql(vendor)}")
            continue
        if how == _SHARED:
            assignments.append(f"{column} = %s::{field.db_type(connection)}")
            continue
        alias = qn(f"v_{name}")
        if how == _NOW_ROW:
            picks.append(f"(e->>{position})::double precision AS {alias}")
            assignments.append(f"{column} = {driver_class(vendor).now_plus_sql('v.' + alias)}")
        elif how == _JSON:
            picks.append(f"NULLIF(e->{position}, 'null'::jsonb) AS {alias}")
            assignments.append(f"{column} = v.{alias}")
        elif how == _JSON_TEXT:
            picks.append(f"(e->>{position})::jsonb AS {alias}")
            assignments.append(f"{column} = v.{alias}")
        else:
            picks.append(f"(e->>{position})::{field.db_type(connection)} AS {alias}")
            assignments.append(f"{column} = v.{alias}")
        position += 1
    # The join's key again, as a condition the job table's scan can search. On
    # statistics an ANALYZE took of a drained table ("pages, no rows") the planner
    # otherwise hashed the whole primary key against ``v`` (tests/integration/
    # test_plans.py, "analysed empty"), as the claim did (db/single_statement.py).
    by_key = f"AND {table}.{qn('id')} = ANY(ARRAY(SELECT arcature_id FROM v))"
    if alone:
        assert members is not None
        member_table, member_column, _ = members
        # `m` is read once, by the key list and by the final SELECT alike (a CTE is
        # evaluated once per statement), so each row's member probe runs one time.
        # The members leave the key list itself (EXCEPT ALL), not the join: as an
        # anti-join of ``v`` with ``m`` the planner counted on one row left, looked
        # the job table up once per row with the whole key list in the same index
        # condition (PostgreSQL 15 descends once per element: 200 x 200 descents a
        # flush of 200), and the drain's server CPU per completion doubled
        # (benchmarks/drain_steps.py: 27-38 -> 67-71 us). The key list alone, one
        # index scan hashed against ``v``, is planned so on every statistics.
        plain_by_key = (
            f"AND {table}.{qn('id')} = ANY(ARRAY("
            f"SELECT arcature_id FROM v EXCEPT ALL SELECT arcature_id FROM m))"
        )
        # The probe is a LATERAL subquery with LIMIT 1, which the planner cannot turn
        # into a join: one primary-key probe per row. As ``EXISTS`` it was planned as
        # a hash semi-join reading the whole node table (a sequential scan of 20,000
        # nodes, 5-9 ms a flush of 50 plain jobs, with fresh statistics or stale).
        return (
            f"WITH v AS MATERIALIZED (SELECT {', '.join(picks)} "
            f"FROM jsonb_array_elements(%s::jsonb) AS e), "
            f"m AS MATERIALIZED (SELECT v.arcature_id FROM v CROSS JOIN LATERAL "
            f"(SELECT 1 FROM {qn(member_table)} AS arcature_m "
            f"WHERE arcature_m.{qn(member_column)} = v.arcature_id LIMIT 1) AS arcature_hit), "
            f"u AS (UPDATE {table} SET {', '.join(assignments)} FROM v "
            f"WHERE {table}.{qn('id')} = v.arcature_id {plain_by_key} "
            f"AND {table}.{qn('claim_token')} = v.arcature_token "
            f"AND {table}.{qn('status')} = v.arcature_status "
            f"RETURNING {table}.{qn('id')}) "
            f"SELECT u.{qn('id')}, false FROM u UNION ALL SELECT m.arcature_id, true FROM m"
        )
    return (
        f"WITH v AS MATERIALIZED (SELECT {', '.join(picks)} "
        f"FROM jsonb_array_elements(%s::jsonb) AS e) "
        f"UPDATE {table} SET {', '.join(assignments)} "
        f"FROM v{_member_join(connection, members, 'v.arcature_id')} "
        f"WHERE {table}.{qn('id')} = v.arcature_id {by_key} "
        f"AND {table}.{qn('claim_token')} = v.arcature_token "
        f"AND {table}.{qn('status')} = v.arcature_status "
        f"RETURNING {_returning(connection, table, members)}"
    )


def _same_now(value: Any, seconds: float) -> bool:
    return isinstance(value, DatabaseNow) and value.seconds == seconds


def _all_same(rows: Sequence[CompletionRow], name: str, first: Any) -> bool:
    kind = type(first)
    for row in rows:
        value = row[2][name]
        if value is not first and (type(value) is not kind or value != first):
            return False
    return True


def _json_value(connection: BaseDatabaseWrapper, how: str, field: Any, value: Any) -> Any:
    """One varying value as the JSON document carries it (see :func:`update_from_json`)."""
    if how == _JSON:
        if hasattr(value, "resolve_expression"):
            raise _NotPlain(field.name)
        return value  # encoded with the rest, by the field's own encoder
    if how == _NOW_ROW:
        return _seconds_of(value)
    prepared = field.get_db_prep_save(value, connection)
    if how == _JSON_TEXT:
        if prepared is None:
            return None
        dumps = getattr(prepared, "dumps", None)
        if dumps is None or not hasattr(prepared, "obj"):
            raise _NotPlain(field.name)
        return dumps(prepared.obj)
    if prepared is None or type(prepared) in _PLAIN:
        return prepared
    if isinstance(prepared, float):
        if not math.isfinite(prepared):
            raise _NotPlain(field.name)  # JSON has no NaN; the VALUES form sends it
        return prepared
    if isinstance(prepared, uuid.UUID | Decimal):
        return str(prepared)
    if isinstance(prepared, datetime | date | time):
        return prepared.isoformat()
    raise _NotPlain(field.name)
