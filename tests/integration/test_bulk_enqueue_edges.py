"""``enqueue_many`` at its edges, on every database: sizes, conflicts, a failure mid-batch.

PostgreSQL writes the batch as COPY text built by ``db.copy_text``, MariaDB as
multi-row INSERTs, SQLite as one prepared INSERT per row; whichever it is, a
batch is all or nothing, validated before the first row goes out, and its unique
keys resolve as one-by-one enqueues would.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_arcature import MalformedPayload, job
from django_arcature.models import Job, JobStatus

pytestmark = pytest.mark.django_db


@job(name="bulk_edges.echo")
def echo(*args: Any, **kwargs: Any) -> None:
    """Takes any JSON."""


@job(name="bulk_edges.once", unique=True)
def once(key: int) -> None:
    """One live job per key."""


def test_a_one_row_batch() -> None:
    [made] = echo.enqueue_many([(1, "a")])
    stored = Job.objects.get()
    assert stored.pk == made.pk
    assert stored.payload == {"args": [1, "a"], "kwargs": {}}
    assert made.created_at == stored.created_at
    assert made.available_at == stored.available_at


#: 100,000 rows under ARCATURE_SOAK=1 (about 15 s on MariaDB or SQLite on a busy 2-core
#: machine); the quick profile stores 20,000, past every chunk and batch boundary.
BIG_BATCH = 100_000 if os.environ.get("ARCATURE_SOAK") == "1" else 20_000


def test_a_big_batch_is_stored_whole_and_in_order() -> None:
    count = BIG_BATCH
    jobs = echo.enqueue_many([(i,) for i in range(count)])
    assert len(jobs) == count
    assert len({j.pk for j in jobs}) == count
    assert Job.objects.filter(status=JobStatus.PENDING).count() == count
    # The rows become available in the order given, so they are claimed in that order.
    first = list(Job.objects.order_by("available_at", "id")[:3].values_list("payload", flat=True))
    assert [p["args"][0] for p in first] == [0, 1, 2]
    last = Job.objects.order_by("-available_at", "-id").values_list("payload", flat=True)[0]
    assert last["args"] == [count - 1]
    for index in (0, count // 3, count - 1):
        stored = Job.objects.get(pk=jobs[index].pk)
        assert stored.payload == {"args": [index], "kwargs": {}}
        assert stored.available_at == jobs[index].available_at


def test_a_malformed_item_at_the_end_of_a_big_batch_writes_nothing(
    announced: list[Job],
) -> None:
    items: list[Any] = [(i,) for i in range(99_999)] + [(object(),)]
    with CaptureQueriesContext(connection) as queries, pytest.raises(MalformedPayload):
        echo.enqueue_many(items)
    assert not [q for q in queries.captured_queries if "INSERT" in q["sql"].upper()]
    assert Job.objects.count() == 0
    assert announced == []


def test_text_that_copy_would_read_as_markup_is_stored_as_given() -> None:
    values = ["\\N", "\r\n", "a\\tb", "\t", "\\", "\\\\N", "end\\"]
    jobs = echo.enqueue_many([(value,) for value in values])
    stored = {j.pk: j.payload["args"][0] for j in Job.objects.all()}
    assert [stored[j.pk] for j in jobs] == values


@pytest.mark.django_db(transaction=True)
def test_a_bulk_enqueue_that_partly_conflicts_on_unique_keys(announced: list[Job]) -> None:
    holders = {key: once.enqueue(key) for key in range(0, 200, 4)}
    announced.clear()
    keys = [*range(200), 7, 8]  # two more conflicts within the batch
    jobs = once.enqueue_many([(key,) for key in keys])
    assert len(jobs) == len(keys)
    for key, found in zip(keys, jobs, strict=True):
        if key in holders:
            assert found.pk == holders[key].pk
    assert jobs[200].pk == jobs[7].pk
    assert jobs[201].pk == jobs[8].pk
    assert Job.objects.count() == 200
    new = {j.pk for key, j in zip(keys, jobs, strict=True) if key not in holders}
    assert {j.pk for j in announced} == new
    assert len(announced) == len(new)


@pytest.mark.django_db(transaction=True)
def test_a_row_the_database_refuses_mid_batch_leaves_nothing_written(
    boom_trigger: None, announced: list[Job]
) -> None:
    items: list[Any] = [(i,) for i in range(5000)]
    items[4000] = ("boom",)  # far into the batch: rows before it have already gone out
    with pytest.raises(DatabaseError, match="boom row"):
        echo.enqueue_many(items)
    assert Job.objects.count() == 0
    with transaction.atomic():
        kept = echo.enqueue("kept")
        with pytest.raises(DatabaseError, match="boom row"):
            echo.enqueue_many(items)
        assert Job.objects.count() == 1  # the caller's transaction is still usable
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]
    assert [j.pk for j in announced] == [kept.pk]
    items[4000] = (4000,)
    assert len(echo.enqueue_many(items)) == 5000  # and the connection too


def test_payloads_of_every_kind_read_back_as_given_in_any_chunk() -> None:
    """Large floats (written in full, so PostgreSQL's jsonb keeps them floats), text
    COPY would read as markup, non-ASCII and nesting: a chunk of each alone, then all
    of them mixed, each read back as the value given and of the same type."""
    kinds: list[Any] = [
        1e16,
        [2.5e300, -1e22],
        "a\\tb\t\n\r\\N é 😀",
        {"k\\": {"ü": [None, True, 2**62]}},
        0.1 + 0.2,
    ]
    items: list[Any] = []
    for kind in kinds:
        items += [(kind, index) for index in range(300)]  # whole chunks of one kind
    items += [(kinds[index % len(kinds)], index) for index in range(300)]
    jobs = echo.enqueue_many(items)
    stored = dict(Job.objects.values_list("pk", "payload"))
    for row, (value, index) in zip(jobs, items, strict=True):
        back, back_index = stored[row.pk]["args"]
        assert (back, back_index) == (value, index)
        assert repr(back) == repr(value)  # 1e16 stays a float, not 10000000000000000
