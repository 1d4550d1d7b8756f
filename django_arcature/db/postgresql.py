"""PostgreSQL (psycopg 3, or psycopg2): one-statement claims with SKIP LOCKED, COPY, RETURNING."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from django.conf import settings
from django.db import DatabaseError

from .base import ClaimedFields, CompletionRow, Driver, MemberRow, MemberTable
from .batch import update_from_json, update_from_json_members, update_plain_from_json
from .claimed import ClaimedJob
from .copy_text import ChunkText, copy_text
from .relaxed_claim import relax_claim_commit
from .rows import prepare_rows
from .single_statement import claim_with_cte

if TYPE_CHECKING:
    from django_arcature.manager.bulk_rows import BulkRows

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

        In autocommit its commit does not wait for the WAL flush unless
        ``ARCATURE["DURABLE_CLAIMS"]`` says so (:mod:`.relaxed_claim` says why a
        lost claim is safe).
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
            also_from=relax_claim_commit(self.connection),
        )

    def supports_batch_completion(self) -> bool:
        return True

    def fences_by_join(self) -> bool:
        return True

    def complete_batch(self, model: Any, rows: Sequence[CompletionRow]) -> set[uuid.UUID]:
        return update_from_json(self.connection, model, rows)

    def complete_batch_members(
        self, model: Any, rows: Sequence[CompletionRow], members: MemberTable
    ) -> tuple[set[uuid.UUID], dict[uuid.UUID, MemberRow] | None]:
        """One statement: the batch's ``RETURNING`` reads each row's node (``members``)."""
        return update_from_json_members(self.connection, model, rows, members)

    def completes_plain_alone(self) -> bool:
        return True

    def complete_plain(
        self, model: Any, rows: Sequence[CompletionRow], members: MemberTable
    ) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
        """One statement: the batch's plain jobs written, its members named."""
        return update_plain_from_json(self.connection, model, rows, members)

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

    def streams_in_one_statement(self, bulk: BulkRows) -> bool:
        """The streamed ``COPY`` (psycopg 3, rows no ``post_init`` receiver may change):
        in autocommit the server runs it as its own transaction and commits it when the
        COPY ends, so an aborted or refused COPY leaves nothing."""
        return _has_copy_from_python() and bulk.streamable

    def stream_rows(self, model: Any, bulk: BulkRows, batch_size: int) -> list[Any]:
        """One ``COPY``, sent a chunk at a time while the rows are still being made.

        Each chunk's text is rendered from its values (:class:`.copy_text.ChunkText`)
        and written to the stream; the server parses and indexes it while this
        process renders the next chunk. Only once every chunk has been sent are the
        ``Job`` instances made, while the server is still storing the rows (its work
        per row is about the client's): making each chunk's right after its text
        held the next chunk back, and the server was left with a backlog when the
        last instance was made. The COPY is ended (and the server's last rows
        awaited) only after every instance is made. Any error on the way, ours or
        the server's, aborts the COPY (psycopg sends ``CopyFail``) inside the
        caller's atomic block: nothing is written. Rows a ``post_init`` receiver may
        change, and psycopg2, go the long way.
        """
        if not (_has_copy_from_python() and bulk.streamable):
            return super().stream_rows(model, bulk, batch_size)
        connection = self.connection
        table = connection.ops.quote_name(model._meta.db_table)
        with connection.cursor() as cursor:
            raw = cursor.cursor
            text = _chunk_text(connection, raw, model, bulk)
            columns = ", ".join(text.columns)
            with (
                connection.wrap_database_errors,
                raw.copy(f"COPY {table} ({columns}) FROM STDIN") as stream,
            ):
                sent = []
                for chunk in bulk.chunks(_rows_per_write(len(bulk)), saved_on=self.using):
                    stream.write(text.text(chunk))
                    sent.append(chunk)
                for chunk in sent:
                    chunk.make()  # while the server stores what was sent
        return bulk.rows

    def estimate_rows(self, sql: str, params: Sequence[Any]) -> int | None:
        """The plan's row count."""
        with self.connection.cursor() as cursor:
            cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
        if isinstance(plan, str):
            plan = json.loads(plan)
        return int(plan[0]["Plan"]["Plan Rows"])


#: How many COPY text builders a connection keeps (one per task, queue, priority … in use).
CHUNK_TEXTS_KEPT = 256


def _chunk_text(connection: Any, raw_cursor: Any, model: Any, bulk: BulkRows) -> ChunkText:
    """The COPY text builder for rows like ``bulk``'s, kept on the connection.

    Building one reads the model's fields, renders every shared value and picks each
    varying column's text function: 0.25-0.38 ms of client CPU per call, as much as
    the Python work of 250 rows. It depends only on what the key holds: the row maker
    (whose shared values are fixed: a kept one serves every call with the same task,
    queue, priority …), the call's one unique key, the varying fields, ``USE_TZ``
    (ISO times) and the driver connection whose adapters render the values. Django's
    connection object is per thread, so no two threads share the dictionary; a new
    driver connection (after a reconnect) starts it afresh.
    """
    raw_connection = raw_cursor.connection
    kept: tuple[Any, dict[tuple[Any, ...], ChunkText]] | None = getattr(
        connection, "_arcature_chunk_texts", None
    )
    if kept is None or kept[0] is not raw_connection:
        kept = (raw_connection, {})
        connection._arcature_chunk_texts = kept
    texts = kept[1]
    key = (model, bulk.maker, bulk.unique_key, bulk.varying, bool(settings.USE_TZ))
    text = texts.get(key)
    if text is None:
        if len(texts) >= CHUNK_TEXTS_KEPT:
            texts.clear()
        text = texts[key] = ChunkText(
            connection, raw_cursor, model, bulk.sample(), bulk.varying, _json_text
        )
    return text


#: Rows per write of a streamed COPY: small enough that the server starts on a batch
#: of 1,000 early, large enough that a write's own cost stays small per row.
STREAM_ROWS_PER_WRITE = (100, 500)


def _rows_per_write(count: int) -> int:
    """About a tenth of the rows, within :data:`STREAM_ROWS_PER_WRITE`."""
    low, high = STREAM_ROWS_PER_WRITE
    return max(low, min(high, count // 10))


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
