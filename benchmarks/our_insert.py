"""The very INSERT one ``enqueue()`` sends, as SQL text, for the benchmarks' floors.

A floor is that statement sent with none of our Python or Django's around it: what
any one-by-one enqueue into this table costs on this machine. The parameters are
merged in (psycopg's client-side binding, as Django's default), and each use gets a
fresh id, so rows never collide.
"""

from __future__ import annotations

import uuid
from typing import Any


def our_insert_sql(
    handle: Any, args: tuple[Any, ...] = (), alias: str = "default"
) -> tuple[str, str]:
    """The SQL of one ``handle.enqueue(*args)`` with its parameters merged, and the id
    in it (``with_fresh_id`` replaces it). PostgreSQL only: psycopg's ``ClientCursor``
    merges them as Django's default client-side binding does."""
    import psycopg
    from django.db import connections

    from django_arcature.manager.row_insert import prepare_insert
    from django_arcature.models import Job

    row, statements = Job.objects._build(
        handle.name, args=args, kwargs=None, queue=None, priority=None, delay=None,
        run_at=None, max_attempts=None, unique_key=None, backend="",
    )  # fmt: skip
    prepared = prepare_insert(row, alias, statements)
    assert prepared is not None
    connection = connections[alias]
    connection.ensure_connection()
    raw = connection.connection
    assert isinstance(raw, psycopg.Connection)
    sql = psycopg.ClientCursor(raw).mogrify(prepared.sql, prepared.params)
    ident = row.pk.hex if row.pk.hex in sql else str(row.pk)
    assert ident in sql
    return sql, ident


def with_fresh_id(sql: str, ident: str) -> str:
    """``sql`` for a new row: the id replaced by a fresh one of the same spelling."""
    fresh = uuid.uuid4()
    return sql.replace(ident, str(fresh) if "-" in ident else fresh.hex)
