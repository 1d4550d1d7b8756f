"""Killing the workers' database sessions on the server, as a network or an operator would.

The chaos suites and the worker-process suite drop the worker processes'
connections mid-run to show that a worker reconnects and that nothing it held
is lost. They must drop *only* the workers' sessions: the worker processes
connect as the test's own role, so the kill is limited to other sessions of
that role on the test database. A superuser's session there (a monitor, a DBA
looking at a stuck run, a second test tool) is not the workers' and stays up.
"""

from __future__ import annotations

from typing import Any

from django.db import OperationalError, connection

__all__ = ["kill_mysql_sessions", "kill_worker_sessions"]

#: MariaDB/MySQL's answer to a KILL of a connection that is no longer there.
ER_NO_SUCH_THREAD = 1094


def kill_worker_sessions() -> int:
    """Kill every other session of this role on the test database; how many were killed.

    PostgreSQL: ``pg_terminate_backend``; MariaDB/MySQL: ``KILL CONNECTION``. SQLite
    has no server and no sessions to kill: the callers inject other faults there.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND usename = current_user"
            )
            return int(cursor.fetchone()[0])
        if connection.vendor != "mysql":
            raise NotImplementedError(f"no server sessions to kill on {connection.vendor}")
        # USER() is the client's user@host; the process list names the user alone.
        cursor.execute(
            "SELECT id FROM information_schema.processlist "
            "WHERE db = DATABASE() AND id <> CONNECTION_ID() "
            "AND user = SUBSTRING_INDEX(USER(), '@', 1)"
        )
        return kill_mysql_sessions(cursor, [row[0] for row in cursor.fetchall()])


def kill_mysql_sessions(cursor: Any, ids: list[int]) -> int:
    """``KILL CONNECTION`` each of ``ids``; how many were still there to kill.

    A session may end between the process list and its KILL (a worker closing a
    thread's connection, one SIGKILLed a moment before): the server then answers
    "Unknown thread id", and that session is gone, as wanted.
    """
    killed = 0
    for thread_id in ids:
        try:
            cursor.execute(f"KILL CONNECTION {int(thread_id)}")
        except OperationalError as exc:
            if exc.args[0] != ER_NO_SUCH_THREAD:
                raise
            continue
        killed += 1
    return killed
