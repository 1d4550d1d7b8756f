"""Adversarial reads of the opt-in prepared INSERT (``prepare_threshold`` alone).

With ``OPTIONS["prepare_threshold"]`` and client-side binding, a single enqueue's
INSERT goes through a server-binding cursor that psycopg prepares on the server
(``manager/row_insert.py``, ``preparing_cursor_class``). A prepared statement outlives
the schema it was planned for and the connection it lives on; these tests change both
under it, then enqueue again on the same connection, and check the rows written.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from django_arcature.models import Job
from tests.integration.api_jobs import add

pytestmark = [
    pytest.mark.only_on("postgresql", reason="psycopg prepares statements on PostgreSQL only"),
    pytest.mark.pgbouncer(False, reason="prepared statements live in one server session"),
    pytest.mark.django_db(transaction=True),
]

TABLE = Job._meta.db_table


@pytest.fixture
def preparing() -> Iterator[None]:
    """The connection reopened with ``prepare_threshold=1``; restored afterwards."""
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    connection.close()
    options.update(prepare_threshold=1)
    try:
        yield
    finally:
        connection.close()
        options.clear()
        options.update(saved)


def prepared_inserts() -> list[str]:
    """The INSERTs this session holds prepared."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
        return [s for (s,) in cursor.fetchall() if s.startswith(f'INSERT INTO "{TABLE}"')]


def warm() -> list[Job]:
    """Enqueues until the INSERT is prepared on this session."""
    jobs = [add.using(queue="q1").enqueue(2, b=3) for _ in range(3)]
    assert prepared_inserts(), "the INSERT was not prepared"
    return jobs


def stored(job: Job) -> dict[str, Any]:
    return dict(Job.objects.filter(pk=job.pk).values("status", "payload", "queue").get())


def test_an_added_and_dropped_column_under_a_prepared_insert(preparing: None) -> None:
    """A migration adds a nullable column (then one drops it) while the session holds
    the prepared INSERT: the next enqueues on the same session still write their rows."""
    before = warm()
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{TABLE}" ADD COLUMN arcature_test_extra integer NULL')
    try:
        after_add = [add.using(queue="q1").enqueue(2, b=3) for _ in range(2)]
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{TABLE}" DROP COLUMN arcature_test_extra')
    after_drop = [add.using(queue="q1").enqueue(2, b=3) for _ in range(2)]
    expected = stored(before[0])
    assert [stored(job) for job in [*before, *after_add, *after_drop]] == [expected] * 7


def test_a_returned_column_changing_type_under_a_prepared_insert(preparing: None) -> None:
    """A column the INSERT returns (the database's clock stamps) changes type: PostgreSQL
    refuses to run a prepared statement whose result type changed ("cached plan must not
    change result type"). The enqueue after it must still write its row."""
    before = warm()
    column = Job._meta.get_field("created_at").column
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{TABLE}" ALTER COLUMN "{column}" TYPE timestamptz(3)')
    try:
        after = [add.using(queue="q1").enqueue(2, b=3) for _ in range(2)]
        still_prepared = prepared_inserts()
    finally:
        connection.close()  # the session's prepared statements go with it
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{TABLE}" ALTER COLUMN "{column}" TYPE timestamptz')
    assert still_prepared  # the session kept (or re-made) its prepared INSERT
    expected = stored(before[0])
    assert [stored(job) for job in [*before, *after]] == [expected] * 5


def test_a_reconnect_under_a_prepared_insert(preparing: None) -> None:
    """The server ends the session (a restart, an idle timeout): the next enqueue opens a
    new one, whose INSERT is prepared afresh, not assumed prepared."""
    before = warm()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    from django.db import connections

    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()
    connection.close()  # what Django does on the request's end after a broken session
    after = [add.using(queue="q1").enqueue(2, b=3) for _ in range(3)]
    assert prepared_inserts()
    expected = stored(before[0])
    assert [stored(job) for job in [*before, *after]] == [expected] * 6
