"""``enqueue_many`` while its rows stream: PostgreSQL sends the COPY text a chunk at a
time and makes the ``Job`` instances while the server works on the rows, so a failure
can come after some rows have gone out. Every database runs these: whichever path it
takes, a batch is all or nothing, reports the error one-by-one enqueue would, and
keeps no more than the rows it returns in memory.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from django_arcature import MalformedPayload, job
from django_arcature.manager import bulk_rows
from django_arcature.models import Job
from tests.integration.api_jobs import add

pytestmark = pytest.mark.django_db(transaction=True)


@job(name="bulk_stream.echo")
def echo(*args: Any, **kwargs: Any) -> None:
    """Takes any JSON."""


def test_a_bad_item_in_the_middle_of_5000_raises_what_enqueue_raises(
    announced: list[Job],
) -> None:
    with pytest.raises(MalformedPayload) as alone:
        add.enqueue(3, "four")  # type: ignore[arg-type]
    items: list[Any] = [(i, i) for i in range(5000)]
    items[2500] = (3, "four")
    with transaction.atomic():
        kept = add.enqueue(1)
        with pytest.raises(MalformedPayload) as bulk:
            add.enqueue_many(items)
        assert str(bulk.value) == str(alone.value)
        assert Job.objects.count() == 1  # the caller's transaction goes on
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]
    assert [j.pk for j in announced] == [kept.pk]


def test_a_failure_between_two_chunks_leaves_nothing_and_the_transaction_usable(
    monkeypatch: pytest.MonkeyPatch, announced: list[Job]
) -> None:
    """Our own code failing after some chunks went out (on PostgreSQL: mid-COPY)."""
    made = bulk_rows.Chunk.make
    calls = []

    def make_then_fail(self: bulk_rows.Chunk) -> None:
        calls.append(len(self.ids))
        if len(calls) == 3:
            raise RuntimeError("lost mid-stream")
        made(self)

    monkeypatch.setattr(bulk_rows.Chunk, "make", make_then_fail)
    items = [(i,) for i in range(5000)]
    with pytest.raises(RuntimeError, match="lost mid-stream"):
        echo.enqueue_many(items)
    assert Job.objects.count() == 0
    with transaction.atomic():
        kept = echo.enqueue("kept")
        calls.clear()
        with pytest.raises(RuntimeError, match="lost mid-stream"):
            echo.enqueue_many(items)
        assert Job.objects.count() == 1
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]
    monkeypatch.setattr(bulk_rows.Chunk, "make", made)
    assert len(echo.enqueue_many(items)) == 5000  # the connection too
    assert Job.objects.count() == 5001
    assert len(announced) == 5001


@pytest.mark.parametrize("where", [0, 499, 2500, 4999])
def test_a_row_the_server_refuses_in_any_chunk_leaves_nothing(
    boom_trigger: None, announced: list[Job], where: int
) -> None:
    """First row, the end of the first chunk, mid-stream, the very last row."""
    items: list[Any] = [(i,) for i in range(5000)]
    items[where] = ("boom",)
    with transaction.atomic():
        kept = echo.enqueue("kept")
        with pytest.raises(DatabaseError, match="boom row"):
            echo.enqueue_many(items)
        assert Job.objects.count() == 1
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]
    assert [j.pk for j in announced] == [kept.pk]


def test_a_huge_batch_keeps_no_copies_of_its_rows_beside_the_result() -> None:
    """What the call holds at its peak beyond what it returns (the rows themselves)
    stays a small part of the rows: a chunk of text, not the whole batch again."""
    count = 20_000
    items = [(f"{i:08d}" + "x" * 200,) for i in range(count)]
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        jobs = echo.enqueue_many(items)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    kept = after - before  # the returned jobs (and whatever the connection caches)
    assert len(jobs) == count
    assert kept > 0
    transient = peak - after
    # A second copy of every payload as text alone would be count * ~230 bytes.
    assert transient < count * 230, (transient, kept)
    assert transient < kept / 8, (transient, kept)


@pytest.mark.only_on("postgresql", reason="the streamed COPY is PostgreSQL's")
def test_every_row_reaches_the_server_before_the_instances_are_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server stores the rows while the instances are made: when the first one is
    made, every row has been sent, none left in the client's buffers (the server's
    ``pg_stat_progress_copy`` counts them all before the COPY is ended)."""
    import psycopg

    count = 3000
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    made = bulk_rows.Chunk.make
    seen: list[int | None] = []

    def watch(self: bulk_rows.Chunk) -> None:
        if not seen:
            with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
                deadline = time.monotonic() + 10  # a wait for the rows, not a speed limit
                while True:
                    row = other.execute(
                        "SELECT tuples_processed FROM pg_stat_progress_copy WHERE pid = %s",
                        [pid],
                    ).fetchone()
                    processed = None if row is None else int(row[0])
                    if processed == count or time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
            seen.append(processed)
        made(self)

    monkeypatch.setattr(bulk_rows.Chunk, "make", watch)
    jobs = echo.enqueue_many([(i,) for i in range(count)])
    assert seen == [count]
    assert [job.payload["args"] for job in jobs] == [[i] for i in range(count)]
    assert Job.objects.count() == count
