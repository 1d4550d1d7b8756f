"""Successive ``enqueue_many`` calls on one connection, as a busy producer makes them.

On PostgreSQL the COPY text builder of a call (its column list and the shared values'
text) is kept on the connection for the next call with the same row maker; these say
that a call never stores another call's shared values, that a reconnect starts afresh,
and that ``job_enqueued`` is still sent for every row to whoever listens at commit.
Every database runs the ones that do not look at the PostgreSQL builder itself.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
from django.db import connection, transaction

from django_arcature import job, signals
from django_arcature.db import copy_text
from django_arcature.manager import bulk_rows, enqueue
from django_arcature.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


@job(name="bulk_kept.echo")
def echo(*args: Any, **kwargs: Any) -> None:
    """Takes any JSON."""


@job(name="bulk_kept.other", queue="elsewhere", priority=7)
def other(*args: Any, **kwargs: Any) -> None:
    """Another task with its own default queue and priority."""


def _same_as_stored(made: list[Job]) -> None:
    stored = {row.pk: row for row in Job.objects.filter(pk__in=[row.pk for row in made])}
    assert len(stored) == len(made)
    for row in made:
        for field in Job._meta.concrete_fields:
            assert getattr(stored[row.pk], field.attname) == getattr(row, field.attname), (
                field.attname
            )


def test_each_call_stores_its_own_shared_values() -> None:
    calls: list[Callable[[], list[Job]]] = [
        lambda: echo.enqueue_many([[1], [2]]),
        lambda: echo.using(queue="second", priority=3).enqueue_many([[3]]),
        lambda: other.enqueue_many([{"x": "y"}, [4]]),
        lambda: echo.using(max_attempts=9, delay=60).enqueue_many([[5], [6], [7]]),
        lambda: echo.enqueue_many([[8]]),  # the first call's shape again
    ]
    made = [call() for call in calls]
    for rows in made:
        _same_as_stored(rows)
    shared = [
        {(row.task_name, row.queue, row.priority, row.max_attempts) for row in rows}
        for rows in made
    ]
    assert shared == [
        {("bulk_kept.echo", "default", 0, 3)},
        {("bulk_kept.echo", "second", 3, 3)},
        {("bulk_kept.other", "elsewhere", 7, 3)},
        {("bulk_kept.echo", "default", 0, 9)},
        {("bulk_kept.echo", "default", 0, 3)},
    ]
    assert Job.objects.filter(queue="second").count() == 1
    assert Job.objects.filter(max_attempts=9).count() == 3


def test_a_closed_connection_is_reopened_and_the_rows_are_right() -> None:
    _same_as_stored(echo.enqueue_many([[1], [2]]))
    connection.close()
    again = echo.enqueue_many([[3], [4]])
    _same_as_stored(again)
    assert Job.objects.count() == 4


def test_a_receiver_connected_before_the_commit_hears_every_row() -> None:
    heard: list[Job] = []

    def receive(sender: Any, job: Job, **kwargs: Any) -> None:
        heard.append(job)

    with transaction.atomic():
        made = echo.enqueue_many([[i] for i in range(5)])
        signals.job_enqueued.connect(receive, sender=Job, weak=False)
    try:
        assert [row.pk for row in heard] == [row.pk for row in made]
    finally:
        signals.job_enqueued.disconnect(receive, sender=Job)


def test_a_receiver_for_another_sender_hears_nothing() -> None:
    heard: list[Job] = []

    def receive(sender: Any, job: Job, **kwargs: Any) -> None:
        heard.append(job)

    signals.job_enqueued.connect(receive, sender=object, weak=False)
    try:
        echo.enqueue_many([[1], [2]])
    finally:
        signals.job_enqueued.disconnect(receive, sender=object)
    assert heard == []
    assert Job.objects.count() == 2


@pytest.mark.only_on("postgresql", reason="the kept builder is PostgreSQL's COPY text")
def test_the_text_builder_is_built_once_per_shape_and_per_driver_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[tuple[str, ...]] = []
    original = copy_text.ChunkText.__init__

    def counting(self: copy_text.ChunkText, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        built.append(tuple(self.columns))

    monkeypatch.setattr(copy_text.ChunkText, "__init__", counting)
    echo.enqueue_many([[1]])
    echo.enqueue_many([[2], [3]])
    assert len(built) == 1
    echo.using(queue="second").enqueue_many([[4]])
    assert len(built) == 2
    connection.close()
    echo.enqueue_many([[5]])
    assert len(built) == 3  # a new driver connection: its own adapters, built afresh
    assert set(Job.objects.values_list("queue", flat=True)) == {"default", "second"}


@pytest.mark.parametrize("step", [0.0, -5.0])
def test_rows_keep_the_given_order_across_chunks_when_the_host_clock_stands_or_steps_back(
    monkeypatch: pytest.MonkeyPatch, step: float
) -> None:
    """Each chunk reads the host clock once: when that reading is no later than the
    previous chunk's last row (a clock standing still, or stepped back by NTP), the
    chunk starts a microsecond after it, so the order of availability is the order
    given across every chunk boundary."""
    readings = [datetime.now(UTC)]

    class Clock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            readings.append(readings[-1] + timedelta(seconds=step))
            return readings[-1]

    monkeypatch.setattr(bulk_rows, "datetime", Clock)
    made = echo.enqueue_many([[i] for i in range(2600)])  # several chunks on every database
    times = [row.available_at for row in made]
    assert times == [row.created_at for row in made]
    assert all(later - earlier == timedelta(microseconds=1) for earlier, later in pairwise(times))
    stored = Job.objects.order_by("available_at").values_list("payload", flat=True)
    assert [payload["args"] for payload in stored] == [[i] for i in range(2600)]
    assert len(readings) > 3  # the clock was read per chunk, not once


@pytest.mark.parametrize("microsecond", [0, 999_950, 999_999])
@pytest.mark.parametrize("delay", [None, 0.5])
def test_times_near_a_second_boundary_are_stored_as_made(
    monkeypatch: pytest.MonkeyPatch, microsecond: int, delay: float | None
) -> None:
    """A chunk's times are written from its first one's text where they stay within one
    second; a chunk that runs into the next second, or starts on it, is stored exactly
    as its instances hold it too."""
    start = datetime.now(UTC).replace(microsecond=microsecond)

    class Clock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return start  # standing still: every chunk starts after the one before

    monkeypatch.setattr(bulk_rows, "datetime", Clock)
    monkeypatch.setattr(enqueue, "database_now", lambda using: start)
    made = echo.using(delay=delay).enqueue_many([[i] for i in range(300)])
    _same_as_stored(made)
    assert len({row.created_at.second for row in made}) == (1 if microsecond == 0 else 2)
