"""``kill_worker_sessions`` drops the workers' sessions and nobody else's.

The chaos suites and the worker-process suite use it to cut the workers'
connections mid-run. Killing every session on the test database (what the plain
chaos soak once did) also cut an operator's or a monitor's session that happened
to be there; the kill is limited to the test's own role, which the worker
processes connect as. That other sessions are left alone is not shown here: it
takes a second account on the test database, and neither test account may make
one (the PostgreSQL role has no CREATEROLE; the MariaDB one cannot grant).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections

from tests.concurrency.conftest import wait_until
from tests.faults.sessions import kill_mysql_sessions, kill_worker_sessions

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.only_on(
        "postgresql", "mysql", reason="SQLite has no server whose sessions could be killed"
    ),
]


@pytest.fixture
def second_session() -> Iterator[Any]:
    """Another session of the test's role on the test database: what a worker holds."""
    other = connections.create_connection("default")
    other.ensure_connection()
    yield other
    other.close()


def test_a_session_of_the_workers_role_is_killed(second_session: Any) -> None:
    assert kill_worker_sessions() >= 1
    with pytest.raises(DatabaseError), second_session.cursor() as cursor:
        cursor.execute("SELECT 1")
    with connection.cursor() as cursor:  # its own session is kept
        cursor.execute("SELECT 1")


@pytest.mark.only_on("mysql", reason="PostgreSQL's pg_terminate_backend of a gone pid is no error")
def test_a_session_gone_before_its_kill_is_not_an_error(second_session: Any) -> None:
    """A session that ends between the process list and its KILL (a worker closing a
    thread's connection, or just SIGKILLed) made the kill raise "Unknown thread id"."""
    with second_session.cursor() as cursor:
        cursor.execute("SELECT CONNECTION_ID()")
        gone = cursor.fetchone()[0]
    second_session.close()

    def listed() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.processlist WHERE id = %s", [gone]
            )
            return bool(cursor.fetchone()[0])

    wait_until(lambda: not listed(), timeout=10, what="the closed session to leave the list")
    with connection.cursor() as cursor:
        assert kill_mysql_sessions(cursor, [gone]) == 0
        cursor.execute("SELECT 1")  # its own session is kept
