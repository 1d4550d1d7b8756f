"""Outside a transaction, a connection whose session the server dropped is replaced.

Django replaces a broken connection only around a request. A thread that enqueues
on its own (django-crontask's scheduler, a looping management command) kept the
dead connection: after a server restart or a killed session, every later
``enqueue()`` there failed with "the connection is lost". Now the write that meets
the dropped session fails, and the next one opens a new connection; ``job.wait()``
and django.tasks' ``get_result()`` likewise. Never inside a transaction: a new
session there would commit the job outside the caller's transaction, whatever
becomes of it.
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_arcature import Batch, Workflow
from django_arcature.db import broken_connection
from django_arcature.db.broken_connection import discard_broken_connection
from django_arcature.exceptions import JobWaitTimeout
from django_arcature.models import Job
from tests.testapp import jobs
from tests.testapp import workflow_jobs as wf
from tests.testapp.tasks import echo

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.only_on(
        "postgresql", "mysql", reason="SQLite has no server that could drop a session"
    ),
]


def _session_id() -> int:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_backend_pid()")
        else:
            cursor.execute("SELECT CONNECTION_ID()")
        return int(cursor.fetchone()[0])


def drop_session() -> None:
    """End the test connection's session from another one, as a server restart would,
    and wait until the server has let it go."""
    session = _session_id()
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            if other.vendor == "postgresql":
                cursor.execute("SELECT pg_terminate_backend(%s)", [session])
                listed = "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = %s"
            else:
                cursor.execute(f"KILL CONNECTION {session}")
                listed = "SELECT COUNT(*) FROM information_schema.processlist WHERE id = %s"
            deadline = time.monotonic() + 10
            while True:
                cursor.execute(listed, [session])
                if cursor.fetchone()[0] == 0:
                    break
                assert time.monotonic() < deadline, "the session was not dropped"
                time.sleep(0.02)
    finally:
        other.close()
    if connection.vendor == "postgresql":
        # The server's backend leaves pg_stat_activity a moment before its goodbye (a
        # FATAL message, then the socket's close) reaches this end: what the check of an
        # idle session reads, and what a session dropped a while ago has long shown.
        assert _readable_within(connection.connection.pgconn.socket, 10)


def _readable_within(fd: int, seconds: float) -> bool:
    poller = select.poll()  # not select(): a descriptor may be above 1023 here
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(seconds * 1000))


def _committed_jobs() -> int:
    """Jobs any other session sees: what was committed, not what this one holds."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {Job._meta.db_table}")
            return int(cursor.fetchone()[0])
    finally:
        other.close()


def _workflow() -> None:
    flow = Workflow("after a dropped session")
    first = flow.add(wf.step, "a")
    flow.add(wf.step, "b", after=[first])
    flow.enqueue()


def _batch() -> None:
    batch = Batch(on_success=wf.step.using(queue="elsewhere"))
    batch.add(wf.step, "member")
    batch.enqueue()


#: Each way a job gets in, and how many job rows one call writes.
WRITES: dict[str, tuple[Callable[[], Any], int]] = {
    "enqueue": (lambda: jobs.noop.enqueue(), 1),
    "enqueue_many": (lambda: jobs.noop.enqueue_many([[], [], []]), 3),
    "django.tasks enqueue": (lambda: echo.enqueue(1), 1),
    "Workflow.enqueue": (_workflow, 2),
    "Batch.enqueue": (_batch, 1),
}


def _first_write_after_the_drop(call: Callable[[], Any]) -> int:
    """The write right after an idle session was dropped: how many calls landed (0 or 1).

    PostgreSQL's server says it ended the session (a FATAL message, then the socket
    closes) before anything else is sent, and the write sees it without a round trip:
    it goes on a new connection. On MariaDB the first statement meets the dead session
    and fails; its outcome is the caller's to know.
    """
    if connection.vendor == "postgresql":
        call()
        return 1
    with pytest.raises(DatabaseError):
        call()
    return 0


@pytest.mark.parametrize("write", list(WRITES))
def test_the_write_after_a_dropped_session_opens_a_new_connection(write: str) -> None:
    call, rows = WRITES[write]
    call()
    drop_session()
    landed = 1 + _first_write_after_the_drop(call)
    assert _committed_jobs() == landed * rows
    call()
    call()
    assert _committed_jobs() == (landed + 2) * rows


def test_a_write_after_a_statement_failed_on_the_dropped_session_opens_a_new_one() -> None:
    """Here a statement met the dead session first (on PostgreSQL too, sent before the
    socket was looked at): Django's ``errors_occurred`` is what the write goes by."""
    jobs.noop.enqueue()
    drop_session()
    with pytest.raises(DatabaseError), connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert connection.errors_occurred
    jobs.noop.enqueue()
    assert _committed_jobs() == 2


def test_a_schedule_like_loop_keeps_enqueueing_through_two_drops() -> None:
    """What a cron thread does: enqueue, now and then, for as long as it lives."""
    landed = 0
    for round_ in range(6):
        if round_ in (2, 4):
            drop_session()
            landed += _first_write_after_the_drop(jobs.noop.enqueue)
        else:
            jobs.noop.enqueue()
            landed += 1
    assert _committed_jobs() == landed
    assert landed == (6 if connection.vendor == "postgresql" else 4)


@pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY")
def test_an_idle_session_with_a_notification_to_read_is_kept() -> None:
    """Something to read on an idle socket is not always the end: a notification for a
    channel the application listens on is read, left for it, and the session kept."""
    with connection.cursor() as cursor:
        cursor.execute("LISTEN arcature_test_channel")
    raw = connection.connection
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("NOTIFY arcature_test_channel, 'hello'")
    finally:
        other.close()
    deadline = time.monotonic() + 10
    while not _readable_within(raw.pgconn.socket, 0.05):
        assert time.monotonic() < deadline, "the notification did not arrive"
    jobs.noop.enqueue()
    assert connection.connection is raw
    assert [n.payload for n in raw.notifies(timeout=1, stop_after=1)] == ["hello"]
    assert _committed_jobs() == 1


def test_inside_a_transaction_the_connection_is_not_replaced() -> None:
    """A new session inside ``atomic()`` would commit the job on its own, outside the
    caller's transaction: the block fails instead, and nothing of it is committed."""

    def block_whose_session_drops() -> None:
        with transaction.atomic():
            jobs.noop.enqueue()
            raw = connection.connection
            drop_session()
            with contextlib.suppress(DatabaseError):
                jobs.noop.enqueue()
            assert connection.connection is raw  # still the dead one: not replaced
            jobs.noop.enqueue()  # refused: the block's transaction is broken

    with pytest.raises(DatabaseError):
        block_whose_session_drops()
    assert _committed_jobs() == 0
    jobs.noop.enqueue()  # after the block, outside a transaction: a new connection
    assert _committed_jobs() == 1


def test_with_autocommit_off_the_connection_is_not_replaced() -> None:
    """The caller manages that transaction (``set_autocommit(False)``; ``enqueue()``
    itself refuses to run there, its announcement needs ``on_commit``): it is theirs
    to end, so a write's check leaves the dead connection as it is."""
    transaction.set_autocommit(False)
    try:
        raw = connection.connection
        drop_session()
        with pytest.raises(DatabaseError), connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        assert connection.errors_occurred
        assert discard_broken_connection(connection) is False
        assert connection.connection is raw
    finally:
        connection.close()  # what the caller would do with a dead transaction
    jobs.noop.enqueue()
    assert _committed_jobs() == 1


def test_a_healthy_connection_sends_nothing_more() -> None:
    jobs.noop.enqueue()
    raw = connection.connection
    with CaptureQueriesContext(connection) as queries:
        jobs.noop.enqueue()
    assert len(queries) == 1, [query["sql"] for query in queries]
    assert connection.connection is raw


def test_a_failed_statement_on_a_live_connection_keeps_the_connection() -> None:
    """A statement that failed without losing the session (here a missing table) sets
    Django's ``errors_occurred``: the next write asks the connection once, finds it
    working and keeps it."""
    jobs.noop.enqueue()
    raw = connection.connection
    with pytest.raises(DatabaseError), connection.cursor() as cursor:
        cursor.execute("SELECT * FROM arcature_no_such_table")
    assert connection.errors_occurred
    jobs.noop.enqueue()
    assert connection.connection is raw
    assert not connection.errors_occurred
    assert _committed_jobs() == 2


def test_waiting_and_reading_results_go_on_after_a_dropped_session() -> None:
    """``job.wait()`` and django.tasks' ``get_result()``, polled from a thread of the
    caller's own: at most the call that meets the dropped session fails (on MariaDB),
    the next ones read."""
    job = jobs.noop.enqueue()
    result = echo.enqueue("x")

    def wait_once() -> None:
        with pytest.raises(JobWaitTimeout):  # read: still pending, no worker here
            job.wait(timeout=0)

    drop_session()
    if _first_write_after_the_drop(wait_once) == 0:
        wait_once()
    drop_session()
    if _first_write_after_the_drop(lambda: echo.get_result(result.id)) == 0:
        assert echo.get_result(result.id).id == result.id


@pytest.mark.only_on("postgresql", reason="psycopg's connection status")
def test_the_status_the_check_compares_with_is_libpqs_connection_ok() -> None:
    from psycopg.pq import ConnStatus

    from django_arcature.db import broken_connection

    assert broken_connection._CONNECTION_OK == ConnStatus.OK


@pytest.mark.only_on("postgresql", reason="the idle socket is looked at on PostgreSQL only")
def test_a_socket_numbered_above_select_s_limit_is_looked_at_without_a_query() -> None:
    """A busy process may hold more than 1,024 descriptors: ``select()`` refuses those
    above 1023, and each write would then have asked the server ``SELECT 1``."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.fail(f"this test needs 1,100 file descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    connection.close()  # its descriptor too, or the new socket would take it
    spare = [os.open(os.devnull, os.O_RDONLY) for _ in range(1030)]
    try:
        connection.ensure_connection()
        assert connection.connection.pgconn.socket > 1023
        jobs.noop.enqueue()
        asked: list[bool] = []
        usable = connection.is_usable

        def counted_is_usable() -> bool:
            asked.append(True)
            return bool(usable())

        connection.is_usable = counted_is_usable  # type: ignore[method-assign]
        try:
            assert discard_broken_connection(connection) is False
        finally:
            del connection.is_usable
        assert asked == []  # the server was not asked (is_usable's SELECT 1 is not logged)
        assert broken_connection._readable(connection.connection.pgconn.socket) is False
        drop_session()
        jobs.noop.enqueue()  # the dead session seen on that socket, and replaced
        assert _committed_jobs() == 2
    finally:
        connection.close()
        for fd in spare:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
