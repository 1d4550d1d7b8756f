"""SQLite (file databases in WAL mode): one writer at a time, compare-and-set claims.

There is no SKIP LOCKED: SQLite serializes writers, so the claim is the same
one-statement ``UPDATE … RETURNING`` as PostgreSQL's without the lock clause,
and its ``status = 'pending'`` re-check makes a stale pick claim nothing.
``database is locked`` is a lock conflict, retried with bounded backoff.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Collection, Sequence
from itertools import batched
from typing import Any

from django.db import DatabaseError

from .base import ClaimedFields, CompletionRow, Driver
from .batch import update_from_values
from .claimed import ClaimedJob
from .rows import prepare_rows
from .single_statement import claim_with_cte

#: Rows of parameters per ``executemany`` call of a bulk insert.
_ROWS_PER_EXECUTEMANY = 1000


class SQLiteDriver(Driver):
    vendor = "sqlite"

    @classmethod
    def now_sql(cls, seconds: float = 0) -> str:
        # SQLite's clock has millisecond resolution, Django stores microseconds, and
        # the values compare as text: '…57.123456' sorts after '…57.123'. Reading
        # "now" as the end of its millisecond ('…57.123999') keeps a job enqueued
        # earlier in that same millisecond claimable at once.
        seconds = float(seconds)
        shift = f", '{seconds:+.3f} seconds'" if seconds else ""
        return f"(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'now'{shift}) || '999')"

    @classmethod
    def now_plus_sql(cls, seconds_sql: str) -> str:
        shift = f"PRINTF('%%+.3f seconds', {seconds_sql})"
        return f"(STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'now', {shift}) || '999')"

    @classmethod
    def is_lock_conflict(cls, exc: BaseException) -> bool:
        if not isinstance(exc, DatabaseError):
            return False
        text = str(exc).lower()
        return "database is locked" in text or "database table is locked" in text

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
        return claim_with_cte(
            self.connection,
            model._meta.db_table,
            worker_id,
            lease_seconds,
            batch,
            queues,
            exclude=exclude,
            token_sql="LOWER(HEX(RANDOMBLOB(16)))",  # Django stores UUIDs as 32 hex chars here
            lock="",
            materialized="",
            now=self.now_sql(),
            expires=self.now_sql(lease_seconds),
            recheck=True,
        )

    def supports_batch_completion(self) -> bool:
        """``UPDATE … FROM`` with ``RETURNING`` needs SQLite 3.35."""
        return sqlite3.sqlite_version_info >= (3, 35, 0)

    def fences_by_join(self) -> bool:
        """One statement for every fenced write, as on PostgreSQL (where it matters)."""
        return self.supports_batch_completion()

    def complete_batch(self, model: Any, rows: Sequence[CompletionRow]) -> set[uuid.UUID]:
        return update_from_values(self.connection, model, rows, typed=False)

    def insert_rows(
        self, model: Any, objs: Sequence[Any], varying: Collection[str], batch_size: int
    ) -> None:
        """One prepared INSERT run for every row (SQLite has no faster path in Python)."""
        if not objs:
            return
        connection = self.connection
        prepared = prepare_rows(connection, model, objs, varying)
        qn = connection.ops.quote_name
        table = qn(model._meta.db_table)
        columns = ", ".join(qn(field.column) for field in prepared.fields)
        placeholders = ", ".join(["%s"] * len(prepared.fields))
        sql = f"INSERT INTO {table} ({columns}) VALUES ({placeholders})"
        with connection.cursor() as cursor:
            # A slice of rows per executemany, so a huge batch's parameters are never
            # all held at once (Django's SQLite executemany tee()s its argument: an
            # iterator of every row would be buffered whole, as a list would be).
            for rows in batched(prepared, _ROWS_PER_EXECUTEMANY):
                cursor.executemany(sql, rows)
