"""The few places where PostgreSQL, MySQL/MariaDB and SQLite must be told apart.

Everything vendor-specific lives here and branches on ``connection.vendor``;
the manager asks this module for "the claim", "the database's clock" and
"was that a lock conflict", and stays the same on every database.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, Func
from django.db.models.sql.compiler import SQLCompiler
from django.utils import timezone

logger = logging.getLogger(__name__)

#: MySQL/MariaDB error codes that mean "another transaction holds what you need":
#: 1213 deadlock (the server rolled us back), 1205 lock wait timeout.
MYSQL_LOCK_ERRORS = frozenset({1213, 1205})
#: How many times a statement that hit a lock conflict is tried in all.
LOCK_RETRY_ATTEMPTS = 8


# --- The database's clock -----------------------------------------------------


class DatabaseNow(Func):
    """The database server's current time in UTC, plus ``seconds`` if given.

    Leases are stamped and compared with this, never with a worker's clock, so
    a worker host whose clock runs ahead cannot declare a live lease expired.
    Django's own ``Now()`` is not used: on MySQL it reads the session time zone.
    """

    output_field = DateTimeField()
    arity = 0

    def __init__(self, seconds: float = 0) -> None:
        super().__init__()
        self.seconds = float(seconds)

    def as_sql(  # type: ignore[override]
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, list[Any]]:
        return now_sql(connection.vendor, self.seconds), []


def now_sql(vendor: str, seconds: float = 0) -> str:
    """SQL for "now + seconds" on the database's clock, in UTC."""
    seconds = float(seconds)
    if vendor == "postgresql":
        base = "STATEMENT_TIMESTAMP()"
        return f"({base} + make_interval(secs => {seconds!r}))" if seconds else base
    if vendor == "mysql":
        micros = round(seconds * 1_000_000)
        base = "UTC_TIMESTAMP(6)"
        return f"TIMESTAMPADD(MICROSECOND, {micros}, {base})" if micros else base
    if vendor == "sqlite":
        # SQLite's clock has millisecond resolution, Django stores microseconds, and
        # the values compare as text: '…57.123456' sorts after '…57.123'. Reading
        # "now" as the end of its millisecond ('…57.123999') keeps a job enqueued
        # earlier in that same millisecond claimable at once.
        shift = f", '{seconds:+.3f} seconds'" if seconds else ""
        return f"(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'now'{shift}) || '999')"
    raise NotImplementedError(f"django-arcature does not support the {vendor!r} database")


# --- Lock conflicts -----------------------------------------------------------------


def is_lock_conflict(exc: BaseException, vendor: str) -> bool:
    """True when ``exc`` means "try again shortly", not "this is wrong"."""
    if not isinstance(exc, DatabaseError):
        return False
    if vendor == "mysql":
        code = exc.args[0] if exc.args else None
        return code in MYSQL_LOCK_ERRORS
    if vendor == "sqlite":
        text = str(exc).lower()
        return "database is locked" in text or "database table is locked" in text
    if vendor == "postgresql":
        cause = exc.__cause__
        sqlstate = getattr(cause, "sqlstate", None)
        return sqlstate in {"40001", "40P01", "55P03"}  # serialization, deadlock, lock n/a
    return False


def retry_on_lock_conflict[T](using: str, operation: Callable[[], T]) -> T:
    """Run ``operation``, again after a short random pause if it hit a lock conflict.

    Only when no outer transaction is open: inside one, the failed statement
    has already spoiled the caller's transaction and retrying would hide it.
    Bounded, so a database that stays locked is reported, not waited out forever.
    """
    connection = connections[using]
    for attempt in range(1, LOCK_RETRY_ATTEMPTS + 1):
        try:
            return operation()
        except OperationalError as exc:
            if (
                connection.in_atomic_block
                or attempt == LOCK_RETRY_ATTEMPTS
                or not is_lock_conflict(exc, connection.vendor)
            ):
                raise
            pause = min(0.005 * 2**attempt, 0.5) * (0.5 + random.random())
            logger.debug("lock conflict on %s (%s); retry %d in %.3fs", using, exc, attempt, pause)
            time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


# --- The claim -----------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimedJob:
    """What a worker needs to run a job it now owns, and to fence its writes."""

    id: uuid.UUID
    task_name: str
    queue: str
    priority: int
    payload: Any
    attempts: int
    max_attempts: int
    claim_token: uuid.UUID
    lease_seconds: int
    backend: str = ""
    attempt_log: list[Any] = field(default_factory=list)


CLAIM_COLUMNS = (
    "id",
    "task_name",
    "queue",
    "priority",
    "payload",
    "attempts",
    "max_attempts",
    "claim_token",
    "lease_seconds",
    "backend",
    "attempt_log",
)


def _as_uuid(value: object) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _as_json(value: object) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def claimed_from_row(row: Sequence[Any], *, json_decoded: bool = False) -> ClaimedJob:
    """Build the claimed job from a row of ``CLAIM_COLUMNS``.

    Rows from a raw cursor carry JSON columns as text (Django has the drivers
    leave decoding to the field); rows from ``values_list`` are decoded already,
    and decoding those again would turn a payload that is a bare JSON string
    into something else, or fail. ``json_decoded`` says which kind this is.
    """
    values = dict(zip(CLAIM_COLUMNS, row, strict=True))
    decode = (lambda value: value) if json_decoded else _as_json
    log = decode(values["attempt_log"])
    return ClaimedJob(
        id=_as_uuid(values["id"]),
        task_name=values["task_name"],
        queue=values["queue"],
        priority=values["priority"],
        payload=decode(values["payload"]),
        attempts=values["attempts"],
        max_attempts=values["max_attempts"],
        claim_token=_as_uuid(values["claim_token"]),
        lease_seconds=values["lease_seconds"],
        backend=values["backend"] or "",
        attempt_log=log if isinstance(log, list) else [],
    )


def claim_in_one_statement(
    using: str,
    table: str,
    worker_id: str,
    lease_seconds: int,
    batch: int,
    queues: Sequence[str] | None,
) -> list[ClaimedJob]:
    """PostgreSQL and SQLite: pick, lock and stamp a batch in a single UPDATE … RETURNING.

    On PostgreSQL the picking SELECT skips rows other claimers hold (SKIP LOCKED),
    so concurrent workers divide the queue without waiting on each other. It is a
    MATERIALIZED CTE, run exactly once: written as ``id IN (SELECT … LIMIT n FOR
    UPDATE SKIP LOCKED)`` the planner may re-run the subquery for every row it
    updates, each run skipping the rows this statement just changed and picking
    new ones, so a claim of 1 took several jobs. SQLite has one writer at a time;
    the outer ``status = 'pending'`` re-check is the compare-and-set that makes a
    stale read claim nothing.
    """
    connection = connections[using]
    vendor = connection.vendor
    qn = connection.ops.quote_name
    now = now_sql(vendor)
    expires = now_sql(vendor, lease_seconds)
    if vendor == "postgresql":
        token = "gen_random_uuid()"
        lock = "FOR UPDATE SKIP LOCKED"
        materialized = "MATERIALIZED"
    else:
        token = "LOWER(HEX(RANDOMBLOB(16)))"  # Django stores UUIDs as 32 hex chars here
        lock = ""
        materialized = ""
    params: list[Any] = ["pending"]
    queue_filter = ""
    if queues:
        queue_filter = f"AND {qn('queue')} IN ({', '.join(['%s'] * len(queues))})"
        params.extend(queues)
    params.extend([batch, "running", worker_id, lease_seconds, "pending"])
    # available_at comes back too, only to put the batch in claim order.
    returning = ", ".join(qn(c) for c in (*CLAIM_COLUMNS, "available_at"))
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
            {qn("claim_token")} = {token},
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
    rows.sort(key=lambda row: (-row[priority], row[-1]))
    return [claimed_from_row(row[:-1]) for row in rows]


def uses_single_statement_claim(vendor: str) -> bool:
    """MySQL cannot ``UPDATE … WHERE id IN (SELECT … LIMIT n)`` and has no RETURNING."""
    return vendor in {"postgresql", "sqlite"}


# --- Planner estimates (the admin's job list) ------------------------------------------


def estimate_rows(using: str, sql: str, params: Sequence[Any]) -> int | None:
    """The query planner's guess at how many rows ``sql`` returns; None where there is none.

    The admin asks only once an exact count has passed its bound, so a list of
    millions of jobs never waits on a full COUNT(*). PostgreSQL's estimate is
    the plan's row count; MySQL/MariaDB report rows examined (times ``filtered``
    where the server gives it); SQLite has no estimate and is counted exactly.
    """
    connection = connections[using]
    vendor = connection.vendor
    if vendor not in {"postgresql", "mysql"}:
        return None
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
            if isinstance(plan, str):
                plan = json.loads(plan)
            return int(plan[0]["Plan"]["Plan Rows"])
        cursor.execute("EXPLAIN " + sql, params)
        columns = [column[0].lower() for column in cursor.description]
        rows = cursor.fetchall()
    if not rows or "rows" not in columns:
        return None
    first = dict(zip(columns, rows[0], strict=True))
    examined = float(first["rows"] or 0)
    filtered = first.get("filtered")
    return int(examined * float(filtered) / 100) if filtered is not None else int(examined)


# --- Batched fenced completions (the worker's hot path) -----------------------------------


#: Rows per statement, well under every driver's parameter limit.
BATCH_COMPLETION_ROWS = 500


def supports_batch_completion(vendor: str) -> bool:
    """PostgreSQL and SQLite (3.35+) UPDATE … FROM a VALUES list … RETURNING; MySQL and
    MariaDB lock the batch's rows, then UPDATE … JOIN a derived table of its values."""
    if vendor in {"postgresql", "mysql"}:
        return True
    if vendor == "sqlite":
        import sqlite3

        return sqlite3.sqlite_version_info >= (3, 35, 0)
    return False


@dataclass
class _BatchParts:
    """One transition's SET clause for many rows: shared values once, varying ones per row."""

    assignments: list[str]
    shared_params: list[Any]
    row_columns: list[str]
    row_placeholders: list[str]
    row_params: list[list[Any]]


def _batch_parts(
    connection: BaseDatabaseWrapper,
    model: Any,
    rows: Sequence[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]],
) -> _BatchParts:
    """Split a batch's fields into those every row shares and those that vary by row.

    The varying ones (result, attempt log, retry time…) travel in a derived table
    joined on id and token; ``DatabaseNow`` values become the database's clock.
    """
    vendor = connection.vendor
    qn = connection.ops.quote_name
    meta = model._meta

    def cast(field: Any) -> str:
        return f"::{field.db_type(connection)}" if vendor == "postgresql" else ""

    pk_field = meta.get_field("id")
    token_field = meta.get_field("claim_token")
    parts = _BatchParts(
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
    for name in rows[0][2]:
        field = meta.get_field(name)
        first = rows[0][2][name]
        if isinstance(first, DatabaseNow):
            parts.assignments.append(f"{qn(field.column)} = {now_sql(vendor, first.seconds)}")
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


def complete_in_one_statement(
    using: str,
    model: Any,
    rows: Sequence[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]],
) -> set[uuid.UUID]:
    """Apply one transition to many jobs in a single UPDATE; return the ids it changed.

    Every row of ``rows`` is ``(job_id, claim_token, fields)`` and all carry the
    same field names (one named transition). The fence is kept row by row: a row
    is updated only on its own id *and* token, and only while ``status =
    'running'``, so a lost claim in the batch changes nothing and is simply
    absent from the returned ids. Must run inside a transaction.
    """
    if not rows:
        return set()
    connection = connections[using]
    if connection.vendor == "mysql":
        return _complete_joined(using, model, rows)
    qn = connection.ops.quote_name
    parts = _batch_parts(connection, model, rows)
    values_sql = ", ".join([f"({', '.join(parts.row_placeholders)})"] * len(rows))
    table = qn(model._meta.db_table)
    sql = (
        f"WITH v ({', '.join(qn(c) for c in parts.row_columns)}) AS (VALUES {values_sql}) "
        f"UPDATE {table} SET {', '.join(parts.assignments)} FROM v "
        f"WHERE {table}.{qn('id')} = v.{qn('arcature_id')} "
        f"AND {table}.{qn('claim_token')} = v.{qn('arcature_token')} "
        f"AND {table}.{qn('status')} = %s "
        f"RETURNING {table}.{qn('id')}"
    )
    params = [value for row in parts.row_params for value in row]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *parts.shared_params, "running"])
        return {_as_uuid(row[0]) for row in cursor.fetchall()}


def _complete_joined(
    using: str,
    model: Any,
    rows: Sequence[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]],
) -> set[uuid.UUID]:
    """MySQL/MariaDB, which have no UPDATE … RETURNING: lock, then one UPDATE … JOIN.

    ``SELECT … FOR UPDATE`` on the rows still under their claims tells exactly
    which ones this batch will change, and holds them so nothing can move them
    before the UPDATE (which repeats the fence) lands.
    """
    from django.db.models import Q

    fence = Q()
    for job_id, token, _ in rows:
        fence |= Q(id=job_id, claim_token=token)
    held = set(
        model._default_manager.using(using)
        .select_for_update()
        .filter(fence, status="running")
        .values_list("id", flat=True)
    )
    if not held:
        return set()
    rows = [row for row in rows if row[0] in held]
    connection = connections[using]
    qn = connection.ops.quote_name
    parts = _batch_parts(connection, model, rows)
    first = ", ".join(
        f"{placeholder} AS {qn(column)}"
        for placeholder, column in zip(parts.row_placeholders, parts.row_columns, strict=True)
    )
    others = f" UNION ALL SELECT {', '.join(parts.row_placeholders)}" * (len(rows) - 1)
    table = qn(model._meta.db_table)
    sql = (
        f"UPDATE {table} INNER JOIN (SELECT {first}{others}) AS v "
        f"ON {table}.{qn('id')} = v.{qn('arcature_id')} "
        f"AND {table}.{qn('claim_token')} = v.{qn('arcature_token')} "
        f"SET {', '.join(parts.assignments)} "
        f"WHERE {table}.{qn('status')} = %s"
    )
    params = [value for row in parts.row_params for value in row]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *parts.shared_params, "running"])
        if cursor.rowcount != len(rows):  # the rows are locked by us: this would be a bug
            raise DatabaseError(f"batch completion changed {cursor.rowcount} of {len(rows)} rows")
    return {_as_uuid(job_id) for job_id, _, _ in rows}


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, DatabaseNow) or isinstance(b, DatabaseNow):
        return isinstance(a, DatabaseNow) and isinstance(b, DatabaseNow) and a.seconds == b.seconds
    return type(a) is type(b) and a == b


# --- Bulk insert (enqueue_many) ------------------------------------------------------------


def insert_rows(
    using: str,
    model: Any,
    objs: Sequence[Any],
    varying: Collection[str],
    batch_size: int,
) -> None:
    """Insert the unsaved ``objs`` of ``model`` in as few statements as the database allows.

    Only the fields named in ``varying`` may differ between the rows; every
    other value is converted for the database once, from the first row, by its
    field. A varying value goes through the same conversion its field's
    ``get_db_prep_save`` applies, so each stored row is the one ``save()`` would
    write. The ORM's ``bulk_create`` spent most of a bulk enqueue compiling
    25 parameters per row; here PostgreSQL gets one ``COPY`` (whose INSERT
    trigger sends its single NOTIFY at commit), MySQL/MariaDB one INSERT per
    ``batch_size`` rows with the shared values written into the row template
    once, and SQLite (or PostgreSQL under psycopg2) one prepared INSERT run
    for every row. Must run inside a transaction.
    """
    if not objs:
        return
    connection = connections[using]
    copy = connection.vendor == "postgresql" and _has_copy_from_python()
    fields = list(model._meta.concrete_fields)
    first = objs[0]
    shared: list[Any] = []
    converters: list[tuple[int, str, Callable[[Any], Any]]] = []
    for position, model_field in enumerate(fields):
        attname = model_field.attname
        if attname in varying:
            shared.append(None)
            convert = _db_value_converter(model_field, connection, as_text=copy)
            converters.append((position, attname, convert))
        else:
            shared.append(model_field.get_db_prep_save(getattr(first, attname), connection))

    if copy:
        # COPY dumps every value of every row: JSON that all rows share is rendered once.
        shared = [_json_text(value) for value in shared]

    def rows() -> Iterator[list[Any]]:
        for obj in objs:
            row = shared.copy()
            for position, attname, convert in converters:
                row[position] = convert(getattr(obj, attname))
            yield row

    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    columns = ", ".join(qn(model_field.column) for model_field in fields)
    with connection.cursor() as cursor:
        if copy:
            # The driver's own cursor: Django's wrapper has no COPY. Same
            # connection, so the same transaction as everything else here.
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as stream:
                for row in rows():
                    stream.write_row(row)
        elif connection.vendor == "mysql":
            _insert_multi_row(
                cursor, connection, table, columns, shared, converters, rows(), batch_size
            )
        else:
            placeholders = ", ".join(["%s"] * len(fields))
            cursor.executemany(
                f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", list(rows())
            )


def _insert_multi_row(
    cursor: Any,
    connection: BaseDatabaseWrapper,
    table: str,
    columns: str,
    shared: Sequence[Any],
    converters: Sequence[tuple[int, str, Callable[[Any], Any]]],
    rows: Iterable[list[Any]],
    batch_size: int,
) -> None:
    """MySQL/MariaDB: ``INSERT … VALUES (…), (…)`` with only the varying values as parameters.

    mysqlclient quotes every parameter in Python; the values all rows share are
    quoted once, by the driver's own ``literal``, and written into the row
    template, which is exactly what it would have sent for them as parameters.
    """
    raw = connection.connection
    encoding = raw.encoding
    varying_at = {position for position, _, _ in converters}
    template = ", ".join(
        "%s" if position in varying_at else raw.literal(value).decode(encoding).replace("%", "%%")
        for position, value in enumerate(shared)
    )
    row_sql = f"({template})"
    order = [position for position, _, _ in converters]
    batch: list[Any] = []
    count = 0
    for row in rows:
        batch.extend(row[position] for position in order)
        count += 1
        if count == batch_size:
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES {', '.join([row_sql] * count)}", batch
            )
            batch, count = [], 0
    if count:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) VALUES {', '.join([row_sql] * count)}", batch
        )


def _db_value_converter(
    model_field: Any, connection: BaseDatabaseWrapper, *, as_text: bool = False
) -> Callable[[Any], Any]:
    """``field.get_db_prep_save(value, connection)`` for the values an enqueue stores.

    The general method checks and coerces its input on every call; for values
    already of the field's type (UUIDs, aware datetimes, JSON-ready data) it comes
    down to the one backend step taken here.
    """
    kind = model_field.get_internal_type()
    if kind == "UUIDField":
        if connection.features.has_native_uuid_field:
            return _same
        return _uuid_hex
    if kind == "DateTimeField" and settings.USE_TZ:
        adapt_datetime = connection.ops.adapt_datetimefield_value

        def datetime_value(value: Any) -> Any:
            if value is None:
                return None
            if timezone.is_naive(value):  # let the field warn and convert, as save() would
                return model_field.get_db_prep_save(value, connection)
            return adapt_datetime(value)

        return datetime_value
    if kind == "JSONField":
        adapt_json = connection.ops.adapt_json_value
        encoder = model_field.encoder

        def json_value(value: Any) -> Any:
            if value is None or hasattr(value, "as_sql"):
                return model_field.get_db_prep_save(value, connection)
            return adapt_json(value, encoder)

        if as_text:  # for COPY: the JSON text itself, not the driver's wrapper around it
            # The backend's wrapper carries the dumps() Django chose for this encoder.
            dumps = getattr(adapt_json({}, encoder), "dumps", None)
            if dumps is not None:

                def json_text(value: Any) -> Any:
                    if value is None or hasattr(value, "as_sql"):
                        return _json_text(model_field.get_db_prep_save(value, connection))
                    return dumps(value)

                return json_text
        return json_value
    return functools.partial(model_field.get_db_prep_save, connection=connection)


def _same(value: Any) -> Any:
    return value


def _uuid_hex(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return value.hex
    return value if value is None else _as_uuid(value).hex


def _json_text(value: Any) -> Any:
    """The text a psycopg ``Jsonb``/``Json`` parameter carries, rendered by its own
    ``dumps`` (Django always sets one); any other value unchanged."""
    from psycopg.types.json import Json, Jsonb

    if isinstance(value, Jsonb | Json) and value.dumps is not None:
        return value.dumps(value.obj)
    return value


def _has_copy_from_python() -> bool:
    """psycopg 3 streams rows into COPY; under psycopg2 the rows go by executemany."""
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)
