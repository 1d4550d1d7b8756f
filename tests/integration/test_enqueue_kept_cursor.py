"""One-by-one enqueues on PostgreSQL reuse one psycopg cursor per connection.

Opening and closing a cursor per enqueue was a measurable part of its Python time, so
``manager/row_insert.py`` keeps the psycopg cursor of its single-row INSERT on the
connection wrapper (and wraps it in Django's cursor wrapper per call). These tests pin
what the reuse must not change: execute wrappers and query logging see every INSERT, a
reconnected connection (or a changed cursor class) gets a fresh cursor, a failed INSERT
leaves the cursor usable, another thread never shares it, and an enqueue called from
async code is still refused as ``connection.cursor()`` refuses it. The last one runs on
every database (elsewhere nothing is kept).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from django.core.exceptions import SynchronousOnlyOperation
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from django_arcature.manager import row_insert
from django_arcature.models import Job
from tests.testapp.jobs import noop

pytestmark = pytest.mark.django_db

_TABLE = f'INSERT INTO "{Job._meta.db_table}"'


def _kept() -> Any:
    entry = connections["default"].__dict__.get(row_insert._KEPT_CURSOR)
    return None if entry is None else entry[3]


@pytest.mark.only_on("postgresql")
def test_consecutive_enqueues_share_one_cursor_and_wrappers_see_each_insert() -> None:
    seen: list[tuple[str, Any]] = []

    def spy(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        first = noop.enqueue()
        cursor = _kept()
        second = noop.enqueue()
    assert cursor is not None
    assert _kept() is cursor
    inserts = [(sql, params) for sql, params in seen if sql.startswith(_TABLE)]
    assert [str(params[0]) for _, params in inserts] == [str(first.pk), str(second.pk)]
    assert Job.objects.filter(pk__in=[first.pk, second.pk]).count() == 2
    assert second.available_at >= first.available_at


@pytest.mark.only_on("postgresql")
def test_logged_queries_still_show_the_insert() -> None:
    """Django's debug wrapper goes around the kept cursor while queries are logged."""
    noop.enqueue()
    cursor = _kept()
    with CaptureQueriesContext(connection) as queries:
        job = noop.enqueue()
    assert _kept() is cursor
    logged = [q["sql"] for q in queries if q["sql"].startswith(_TABLE)]
    assert len(logged) == 1, queries
    assert job.pk.hex in logged[0]


@pytest.mark.only_on("postgresql")
@pytest.mark.django_db(transaction=True)
def test_a_reconnected_connection_gets_a_fresh_cursor() -> None:
    noop.enqueue()
    before = _kept()
    connection.close()
    job = noop.enqueue()
    after = _kept()
    assert after is not None
    assert after is not before
    assert after.connection is connections["default"].connection
    assert Job.objects.filter(pk=job.pk).exists()


@pytest.mark.only_on("postgresql")
@pytest.mark.django_db(transaction=True)
def test_a_changed_cursor_class_gets_a_fresh_cursor() -> None:
    """``prepare_threshold`` set on a reopened connection: the INSERT moves to the
    server-binding cursor (:func:`row_insert.preparing_cursor_class`), not the kept one."""
    noop.enqueue()
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    connection.close()
    options.update(prepare_threshold=1)
    try:
        noop.enqueue()
        kept = connections["default"].__dict__[row_insert._KEPT_CURSOR]
        assert kept[1] is not None
        assert isinstance(kept[3], kept[1])
    finally:
        connection.close()
        options.clear()
        options.update(saved)
    noop.enqueue()
    assert connections["default"].__dict__[row_insert._KEPT_CURSOR][1] is None


@pytest.mark.only_on("postgresql")
def test_a_failed_insert_leaves_the_kept_cursor_usable() -> None:
    """A unique key already held: the INSERT fails on the kept cursor under its savepoint;
    the holder is returned and the same cursor inserts the next job."""
    holder = noop.using(unique_key="kept-cursor-key").enqueue()
    cursor = _kept()
    assert noop.using(unique_key="kept-cursor-key").enqueue().pk == holder.pk
    fresh = noop.enqueue()
    assert _kept() is cursor
    assert Job.objects.filter(pk=fresh.pk).exists()


@pytest.mark.only_on("postgresql")
@pytest.mark.django_db(transaction=True)
def test_another_thread_uses_its_own_connection_and_cursor() -> None:
    noop.enqueue()
    mine = _kept()
    theirs: list[Any] = []
    errors: list[BaseException] = []

    def enqueue_there() -> None:
        try:
            noop.enqueue()
            theirs.append(_kept())
        except BaseException as exc:  # reported below, in this thread
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=enqueue_there)
    thread.start()
    thread.join()
    assert not errors
    assert theirs[0] is not None
    assert theirs[0] is not mine
    assert Job.objects.count() == 2


def test_an_enqueue_called_from_async_code_is_refused_as_before() -> None:
    """Every database: ``enqueue()`` (sync) awaited nowhere, called in a running loop."""

    async def call() -> None:
        noop.enqueue()

    noop.enqueue()  # a cursor may be kept now: it must not let the call through
    with pytest.raises(SynchronousOnlyOperation):
        asyncio.run(call())
