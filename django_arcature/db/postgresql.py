"""PostgreSQL (psycopg 3, or psycopg2): one-statement claims with SKIP LOCKED, COPY, RETURNING."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from typing import Any, ClassVar

from django.db import DatabaseError

from .base import ClaimedFields, CompletionRow, Driver
from .batch import update_from_json
from .claimed import ClaimedJob
from .copy_text import copy_text
from .rows import prepare_rows
from .single_statement import claim_with_cte

#: SQLSTATEs that mean "try again": serialization failure, deadlock, lock not available.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})


class PostgreSQLDriver(Driver):
    vendor = "postgresql"
    BATCH_COMPLETION_ROWS: ClassVar[int] = 500

    @classmethod
    def now_sql(cls, seconds: float = 0) -> str:
        # STATEMENT_TIMESTAMP, not NOW(): a long transaction must not stamp old times.
        seconds = float(seconds)
        base = "STATEMENT_TIMESTAMP()"
        return f"({base} + make_interval(secs => {seconds!r}))" if seconds else base

    @classmethod
    def now_plus_sql(cls, seconds_sql: str) -> str:
        return f"(STATEMENT_TIMESTAMP() + make_interval(secs => {seconds_sql}))"

    @classmethod
    def is_lock_conflict(cls, exc: BaseException) -> bool:
        if not isinstance(exc, DatabaseError):
            return False
        return getattr(exc.__cause__, "sqlstate", None) in RETRYABLE_SQLSTATES

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
        """Pick, lock and stamp a batch in a single ``UPDATE … RETURNING``.

        The picking SELECT skips rows other claimers hold (SKIP LOCKED), so
        concurrent workers divide the queue without waiting on each other. It is
        a MATERIALIZED CTE, run exactly once: written as ``id IN (SELECT … LIMIT n
        FOR UPDATE SKIP LOCKED)`` the planner may re-run the subquery for every
        row it updates, each run skipping the rows this statement just changed
        and picking new ones, so a claim of 1 took several jobs.
        """
        return claim_with_cte(
            self.connection,
            model._meta.db_table,
            worker_id,
            lease_seconds,
            batch,
            queues,
            exclude=exclude,
            token_sql="gen_random_uuid()",
            lock="FOR UPDATE SKIP LOCKED",
            materialized="MATERIALIZED",
            now=self.now_sql(),
            expires=self.now_sql(lease_seconds),
            recheck=False,
        )

    def supports_batch_completion(self) -> bool:
        return True

    def fences_by_join(self) -> bool:
        return True

    def complete_batch(self, model: Any, rows: Sequence[CompletionRow]) -> set[uuid.UUID]:
        return update_from_json(self.connection, model, rows)

    def insert_rows(
        self, model: Any, objs: Sequence[Any], varying: Collection[str], batch_size: int
    ) -> None:
        """One ``COPY`` (whose INSERT trigger sends its single NOTIFY at commit).

        The rows go as COPY text built by :mod:`.copy_text` (the shared columns
        rendered once). Under psycopg2, which cannot stream rows into COPY, one
        prepared INSERT run for every row.
        """
        if not objs:
            return
        connection = self.connection
        qn = connection.ops.quote_name
        table = qn(model._meta.db_table)
        with connection.cursor() as cursor:
            if _has_copy_from_python():
                # The driver's own cursor: Django's wrapper has no COPY. Same
                # connection, so the same transaction as everything else here.
                # Its errors are turned into Django's (IntegrityError,
                # ProgrammingError ...) as Django's cursor would, so callers catch
                # the same exceptions whichever database they run on.
                text = copy_text(connection, cursor.cursor, model, objs, varying, _json_text)
                columns = ", ".join(text.columns)
                with (
                    connection.wrap_database_errors,
                    cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as stream,
                ):
                    for chunk in text.chunks():
                        stream.write(chunk)
            else:
                prepared = prepare_rows(connection, model, objs, varying)
                columns = ", ".join(qn(field.column) for field in prepared.fields)
                placeholders = ", ".join(["%s"] * len(prepared.fields))
                cursor.executemany(
                    f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", list(prepared)
                )

    def estimate_rows(self, sql: str, params: Sequence[Any]) -> int | None:
        """The plan's row count."""
        with self.connection.cursor() as cursor:
            cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
        if isinstance(plan, str):
            plan = json.loads(plan)
        return int(plan[0]["Plan"]["Plan Rows"])


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
