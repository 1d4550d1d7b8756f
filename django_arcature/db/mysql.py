"""MySQL 8 and MariaDB ≥ 10.6 (mysqlclient): SELECT … SKIP LOCKED, then a fenced UPDATE.

MySQL cannot ``UPDATE … WHERE id IN (SELECT … LIMIT n)`` and has no
``UPDATE … RETURNING``, so the claim locks its picks first and stamps them in a
second statement of the same transaction; batched completions lock the rows
still under their claims, then ``UPDATE … JOIN`` a derived table of values.
Deadlocks (1213) and lock-wait timeouts (1205) are lock conflicts, retried.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from django.db import DatabaseError, transaction
from django.db.models import Q

from .base import ClaimedFields, CompletionRow, Driver
from .batch import batch_parts
from .claimed import (
    CLAIM_COLUMNS,
    JSON_COLUMNS,
    ClaimedJob,
    as_uuid,
    claimed_from_rows,
)
from .rows import Converter, prepare_rows

_ATTEMPTS = CLAIM_COLUMNS.index("attempts")
_CLAIM_TOKEN = CLAIM_COLUMNS.index("claim_token")
_LEASE_SECONDS = CLAIM_COLUMNS.index("lease_seconds")

#: MySQL/MariaDB error codes that mean "another transaction holds what you need":
#: 1213 deadlock (the server rolled us back), 1205 lock wait timeout.
MYSQL_LOCK_ERRORS = frozenset({1213, 1205})

logger = logging.getLogger(__name__)


class MySQLDriver(Driver):
    vendor = "mysql"
    BATCH_COMPLETION_ROWS: ClassVar[int] = 500

    @classmethod
    def now_sql(cls, seconds: float = 0) -> str:
        micros = round(float(seconds) * 1_000_000)
        base = "UTC_TIMESTAMP(6)"
        return f"TIMESTAMPADD(MICROSECOND, {micros}, {base})" if micros else base

    @classmethod
    def now_plus_sql(cls, seconds_sql: str) -> str:
        return f"TIMESTAMPADD(MICROSECOND, ROUND({seconds_sql} * 1000000), UTC_TIMESTAMP(6))"

    @classmethod
    def is_lock_conflict(cls, exc: BaseException) -> bool:
        if not isinstance(exc, DatabaseError):
            return False
        code = exc.args[0] if exc.args else None
        return code in MYSQL_LOCK_ERRORS

    #: How long an enqueue waits for its turn at a unique key (seconds) before it
    #: tries its INSERT anyway: the turn only avoids deadlocks, the index decides.
    KEY_TURN_TIMEOUT: ClassVar[int] = 10

    @contextmanager
    def one_inserter_per_key(self, key: str) -> Iterator[None]:
        """A named lock (``GET_LOCK``) around one enqueue's INSERT of ``key``.

        InnoDB makes every INSERT that finds an uncommitted holder of a unique key
        wait with a shared lock on that entry; when two such waiters then both need
        to insert (the holder rolled back, or its entry was a deleted one not yet
        purged), each waits for the other's shared lock and one of them is killed
        with error 1213. Outside a transaction the enqueue retries that; inside the
        caller's ``transaction.atomic()`` it cannot (MariaDB has rolled the whole
        transaction back), so there it reached the caller: about one race in 60 of
        16 threads enqueueing one key. Taking turns per key leaves at most one
        waiter at a time. The lock is the session's, released once the INSERT
        (or the read of the job that won the key) is done, not at commit, or
        when the connection ends.
        """
        name = "arcature:key:" + hashlib.sha256(key.encode()).hexdigest()[:40]
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT GET_LOCK(%s, %s)", [name, self.KEY_TURN_TIMEOUT])
            row = cursor.fetchone()
        got = bool(row and row[0] == 1)
        if not got:
            logger.debug(
                "no turn at unique key %r within %ss; inserting anyway", key, self.KEY_TURN_TIMEOUT
            )
        try:
            yield
        finally:
            if got:
                try:
                    with self.connection.cursor() as cursor:
                        cursor.execute("SELECT RELEASE_LOCK(%s)", [name])
                except DatabaseError:  # the session is gone, and its named locks with it
                    logger.debug("releasing the unique-key turn failed", exc_info=True)

    def claim(
        self,
        model: Any,
        worker_id: str,
        lease_seconds: int,
        batch: int,
        queues: Sequence[str] | None,
        claimed_fields: ClaimedFields,
        exclude: Sequence[str] = (),
    ) -> list[ClaimedJob]:
        """``SELECT … FOR UPDATE SKIP LOCKED``, then one compare-and-set UPDATE.

        Both statements are written once per shape (how many queues, how many
        rows) and sent through Django's cursor: built with the ORM for every claim,
        they cost more Python than the database took to run them (about 2 ms of a
        6 ms idle pickup on MariaDB). Outside any transaction the claim opens its
        own with ``START TRANSACTION``, and ends it with ``COMMIT``: Django's
        ``atomic()`` turns autocommit off and on again around it, two more round
        trips on every claim, empty ones included. Inside the caller's transaction
        (a limited queue's claim), it runs in that one.
        """
        connection = self.connection
        statements = _claim_statements(connection, model, lease_seconds)
        select = statements.select(len(queues or ()), len(exclude), batch)
        params: list[Any] = ["pending", *(queues or ()), *exclude]
        if connection.in_atomic_block or not connection.get_autocommit():
            with transaction.atomic(using=self.using):
                return self._claim_rows(statements, select, params, worker_id)
        with connection.cursor() as cursor:
            cursor.execute("START TRANSACTION")
            try:
                claimed = self._claim_rows(statements, select, params, worker_id)
                cursor.execute("COMMIT")
            except BaseException:
                try:
                    cursor.execute("ROLLBACK")
                except Exception:  # the connection is gone, and the transaction with it
                    logger.debug("rolling back a failed claim failed", exc_info=True)
                raise
        return claimed

    def _claim_rows(
        self, statements: _ClaimStatements, select: str, params: list[Any], worker_id: str
    ) -> list[ClaimedJob]:
        """Lock the picks and stamp them, in the transaction the caller opened."""
        with self.connection.cursor() as cursor:
            cursor.execute(select, params)
            # JSON stays undecoded here: one row that cannot be decoded must not fail
            # (and, on every retry, block) the claim of the whole batch.
            rows = cursor.fetchall()
            if not rows:
                return []
            tokens = [uuid.uuid4() for _ in rows]
            cursor.execute(
                statements.update(len(rows)),
                statements.update_params(
                    self.connection, [row[0] for row in rows], tokens, worker_id
                ),
            )
            updated = cursor.rowcount
        if updated != len(rows):  # the rows are locked by us: this would be a bug
            raise RuntimeError(f"claimed {updated} of {len(rows)} locked rows")
        stamped = []
        for row, token in zip(rows, tokens, strict=True):
            values = list(row)
            values[_ATTEMPTS] += 1
            values[_CLAIM_TOKEN] = token
            values[_LEASE_SECONDS] = statements.lease_seconds
            stamped.append(values)
        return claimed_from_rows(stamped)

    def packet_limit(self) -> int | None:
        """The server's ``max_allowed_packet``, read once per connection (an operator may
        have set it below the 16 MiB default; a statement over it drops the connection)."""
        connection = self.connection
        connection.ensure_connection()
        raw = connection.connection
        cached = getattr(connection, "_arcature_packet", None)
        if cached is not None and cached[0] is raw:
            return int(cached[1])
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@max_allowed_packet")
            packet = int(cursor.fetchone()[0])
        connection._arcature_packet = (raw, packet)
        return packet

    def supports_batch_completion(self) -> bool:
        return True

    def complete_batch(self, model: Any, rows: Sequence[CompletionRow]) -> set[uuid.UUID]:
        """Lock, then one ``UPDATE … JOIN`` (there is no ``UPDATE … RETURNING``).

        ``SELECT … FOR UPDATE`` on the rows still under their claims tells exactly
        which ones this batch will change, and holds them so nothing can move them
        before the UPDATE (which repeats the fence) lands.
        """
        if not rows:
            return set()
        fence = Q()
        for job_id, token, _ in rows:
            fence |= Q(id=job_id, claim_token=token)
        held = set(
            model._default_manager.using(self.using)
            .select_for_update()
            .filter(fence, status="running")
            .values_list("id", flat=True)
        )
        if not held:
            return set()
        rows = [row for row in rows if row[0] in held]
        connection = self.connection
        qn = connection.ops.quote_name
        parts = batch_parts(connection, model, rows)
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
        with connection.cursor() as cursor:
            cursor.execute(sql, [*parts.flat_row_params(), *parts.shared_params, "running"])
            if cursor.rowcount != len(rows):  # the rows are locked by us: this would be a bug
                raise DatabaseError(
                    f"batch completion changed {cursor.rowcount} of {len(rows)} rows"
                )
        return {as_uuid(job_id) for job_id, _, _ in rows}

    def insert_rows(
        self, model: Any, objs: Sequence[Any], varying: Collection[str], batch_size: int
    ) -> None:
        """``INSERT … VALUES (…), (…)`` with only the varying values as parameters.

        mysqlclient quotes every parameter in Python; the values all rows share
        are quoted once, by the driver's own ``literal``, and written into the
        row template, which is exactly what it would have sent for them as
        parameters.
        """
        if not objs:
            return
        connection = self.connection
        prepared = prepare_rows(connection, model, objs, varying)
        qn = connection.ops.quote_name
        table = qn(model._meta.db_table)
        columns = ", ".join(qn(field.column) for field in prepared.fields)
        with connection.cursor() as cursor:
            _insert_multi_row(
                cursor,
                connection,
                table,
                columns,
                prepared.shared,
                prepared.converters,
                prepared,
                batch_size,
            )

    def estimate_rows(self, sql: str, params: Sequence[Any]) -> int | None:
        """Rows examined, times ``filtered`` where the server gives it."""
        with self.connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + sql, params)
            columns = [column[0].lower() for column in cursor.description]
            rows = cursor.fetchall()
        if not rows or "rows" not in columns:
            return None
        first = dict(zip(columns, rows[0], strict=True))
        examined = float(first["rows"] or 0)
        filtered = first.get("filtered")
        return int(examined * float(filtered) / 100) if filtered is not None else int(examined)


#: The most one multi-row INSERT carries: half of MariaDB's and MySQL's default
#: ``max_allowed_packet`` (16 MiB), which refuses a larger statement outright.
STATEMENT_BYTES = 8 * 1024 * 1024


def _insert_multi_row(
    cursor: Any,
    connection: Any,
    table: str,
    columns: str,
    shared: Sequence[Any],
    converters: Sequence[Converter],
    rows: Iterable[list[Any]],
    batch_size: int,
) -> None:
    raw = connection.connection
    encoding = raw.encoding
    varying_at = {position for position, _, _ in converters}
    template = ", ".join(
        "%s" if position in varying_at else raw.literal(value).decode(encoding).replace("%", "%%")
        for position, value in enumerate(shared)
    )
    row_sql = f"({template})"
    order = [position for position, _, _ in converters]
    base_bytes = len(template) + len(columns) + 64
    batch: list[Any] = []
    count = 0
    statement_bytes = 0
    for row in rows:
        values = [row[position] for position in order]
        # Quoting can double a text (every quote and backslash escaped): count it twice.
        row_bytes = base_bytes + sum(
            2 * len(value) if isinstance(value, str | bytes) else 32 for value in values
        )
        if count and statement_bytes + row_bytes > STATEMENT_BYTES:
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES {', '.join([row_sql] * count)}", batch
            )
            batch, count, statement_bytes = [], 0, 0
        batch.extend(values)
        count += 1
        statement_bytes += row_bytes
        if count == batch_size:
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES {', '.join([row_sql] * count)}", batch
            )
            batch, count, statement_bytes = [], 0, 0
    if count:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) VALUES {', '.join([row_sql] * count)}", batch
        )


class _ClaimStatements:
    """A claim's two statements for one table and lease, kept per shape.

    The SQL is what the ORM wrote for the same claim (the same columns, the
    same ``CAST`` of the JSON columns to text, the same order and lock), with
    every value a parameter prepared by its own field.
    """

    def __init__(self, connection: Any, model: Any, lease_seconds: int) -> None:
        qn = connection.ops.quote_name
        meta = model._meta
        self.lease_seconds = lease_seconds
        self.table = qn(meta.db_table)
        self._token_field = meta.get_field("claim_token")
        self._columns = ", ".join(
            f"CAST({qn(column)} AS char)" if column in JSON_COLUMNS else qn(column)
            for column in CLAIM_COLUMNS
        )
        self._selects: dict[tuple[int, int, int], str] = {}
        self._updates: dict[int, str] = {}
        now = MySQLDriver.now_sql()
        self._set = (
            f"{qn('status')} = %s, {qn('attempts')} = {qn('attempts')} + 1, "
            f"{qn('locked_by')} = %s, "
            f"{qn('started_at')} = COALESCE({qn('started_at')}, {now}), "
            f"{qn('locked_at')} = {now}, {qn('lease_seconds')} = %s, "
            f"{qn('lease_expires_at')} = {MySQLDriver.now_sql(lease_seconds)}"
        )
        self._qn = qn

    def select(self, queues: int, exclude: int, batch: int) -> str:
        key = (queues, exclude, batch)
        sql = self._selects.get(key)
        if sql is None:
            qn = self._qn
            where = f"{qn('available_at')} <= {MySQLDriver.now_sql()} AND {qn('status')} = %s"
            if queues:
                where += f" AND {qn('queue')} IN ({', '.join(['%s'] * queues)})"
            if exclude:
                where += f" AND NOT ({qn('queue')} IN ({', '.join(['%s'] * exclude)}))"
            sql = (
                f"SELECT {self._columns} FROM {self.table} WHERE {where} "
                f"ORDER BY {qn('priority')} DESC, {qn('available_at')} ASC "
                f"LIMIT {int(batch)} FOR UPDATE SKIP LOCKED"
            )
            if len(self._selects) < _SHAPES_KEPT:
                self._selects[key] = sql
        return sql

    def update(self, rows: int) -> str:
        sql = self._updates.get(rows)
        if sql is None:
            qn = self._qn
            cases = " ".join([f"WHEN {qn('id')} = %s THEN %s"] * rows)
            sql = (
                f"UPDATE {self.table} SET {self._set}, "
                f"{qn('claim_token')} = CASE {cases} ELSE NULL END "
                f"WHERE {qn('id')} IN ({', '.join(['%s'] * rows)}) AND {qn('status')} = %s"
            )
            if len(self._updates) < _SHAPES_KEPT:
                self._updates[rows] = sql
        return sql

    def update_params(
        self, connection: Any, ids: Sequence[Any], tokens: Sequence[uuid.UUID], worker_id: str
    ) -> list[Any]:
        """The ids go back as the driver returned them (the column's own form)."""
        prep = self._token_field.get_db_prep_value
        params: list[Any] = ["running", worker_id, self.lease_seconds]
        for job_id, token in zip(ids, tokens, strict=True):
            params.extend((job_id, prep(token, connection)))
        params.extend(ids)
        params.append("pending")
        return params


#: Statement shapes kept per table and lease (batch sizes, queue lists, row counts).
_SHAPES_KEPT = 256
#: ``_ClaimStatements`` per (model, lease seconds): the SQL is the same on every
#: MySQL or MariaDB connection (quoting and the clock's SQL are the vendor's).
_claim_cache: dict[tuple[Any, int], _ClaimStatements] = {}


def _claim_statements(connection: Any, model: Any, lease_seconds: int) -> _ClaimStatements:
    key = (model, lease_seconds)
    found = _claim_cache.get(key)
    if found is None:
        found = _ClaimStatements(connection, model, lease_seconds)
        if len(_claim_cache) < _SHAPES_KEPT:
            _claim_cache[key] = found
    return found
