"""``enqueue_many`` called outside any transaction.

On PostgreSQL the rows of a call go in one streamed ``COPY``; in autocommit that
statement is a transaction by itself (no ``BEGIN`` and ``COMMIT`` around it, two round
trips fewer per call). Whatever a database does, a call is all or nothing and its rows
are seen by another connection only once all of them are stored.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from django_arcature import job
from django_arcature.manager import bulk_rows
from django_arcature.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


@job(name="bulk_autocommit.echo")
def echo(*args: Any, **kwargs: Any) -> None:
    """Takes any JSON."""


def _count_elsewhere() -> int:
    """The job rows another connection sees (committed ones only)."""
    from django.db import connections

    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {Job._meta.db_table}")
            (count,) = cursor.fetchone()
    finally:
        other.close()
    return int(count)


def test_rows_are_seen_elsewhere_all_at_once_when_the_call_returns(
    monkeypatch: pytest.MonkeyPatch, announced: list[Job]
) -> None:
    """While the instances are made (on PostgreSQL: every row sent, the COPY not yet
    ended) another connection sees none of the rows; when the call returns, all."""
    made = bulk_rows.Chunk.make
    seen_meanwhile: list[int] = []

    def watch(self: bulk_rows.Chunk) -> None:
        if not seen_meanwhile:
            seen_meanwhile.append(_count_elsewhere())
        made(self)

    monkeypatch.setattr(bulk_rows.Chunk, "make", watch)
    jobs = echo.enqueue_many([(i,) for i in range(3000)])
    assert seen_meanwhile == [0]
    assert _count_elsewhere() == 3000
    assert [j.payload["args"] for j in jobs] == [[i] for i in range(3000)]
    assert [j.pk for j in announced] == [j.pk for j in jobs]
    assert all(not j._state.adding and j._state.db == "default" for j in jobs)


@pytest.mark.only_on("postgresql", reason="the streamed COPY is PostgreSQL's")
def test_outside_a_transaction_the_copy_is_its_own_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No transaction block is opened around the COPY: the driver connection stays in
    autocommit while the rows stream, and is idle (nothing left to commit) after."""
    import psycopg

    made = bulk_rows.Chunk.make
    modes: list[tuple[bool, bool]] = []

    def watch(self: bulk_rows.Chunk) -> None:
        modes.append((connection.connection.autocommit, connection.in_atomic_block))
        made(self)

    monkeypatch.setattr(bulk_rows.Chunk, "make", watch)
    assert len(echo.enqueue_many([(i,) for i in range(1000)])) == 1000
    assert modes
    assert set(modes) == {(True, False)}
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert _count_elsewhere() == 1000
    modes.clear()
    with transaction.atomic():  # in the caller's transaction: a savepoint, as before
        echo.enqueue_many([(i,) for i in range(1000)])
    assert modes
    assert set(modes) == {(False, True)}
    assert _count_elsewhere() == 2000


@pytest.mark.only_on("postgresql", reason="the streamed COPY is PostgreSQL's")
def test_a_copy_refused_outside_a_transaction_leaves_nothing_and_the_connection_idle(
    boom_trigger: None, announced: list[Job]
) -> None:
    """The server refuses a row far into the stream: its own transaction (the COPY's)
    is rolled back, nothing is seen anywhere, and the connection is idle and usable,
    not left in a failed transaction block."""
    import psycopg

    items: list[Any] = [(i,) for i in range(3000)]
    items[2500] = ("boom",)
    with pytest.raises(DatabaseError, match="boom row"):
        echo.enqueue_many(items)
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert _count_elsewhere() == 0
    assert announced == []
    items[2500] = (2500,)
    assert len(echo.enqueue_many(items)) == 3000
    assert _count_elsewhere() == 3000
