"""A connection the server dropped is replaced before the next write, outside a transaction.

Django replaces a broken connection only at the start and end of a request
(``close_old_connections``). Code that enqueues from a thread of its own (a cron
scheduler such as django-crontask, which enqueues from APScheduler's threads; a
management command that loops; a consumer of another queue) never passes there:
once its database session was dropped (a server restart, an administrator's kill,
a proxy's idle timeout), every later ``enqueue()`` in that thread failed with
"the connection is lost" until the process was restarted. That is a schedule
that silently stops running.

So each write outside a transaction first looks at what is known without a round
trip, and asks the connection whether it still works (one ``SELECT 1``, the check
Django itself uses) only when that says something happened:

- On PostgreSQL (psycopg 3), a session the server ended while it sat idle has
  already said so: the server sends a FATAL message and closes the socket. So a
  socket with something to read while no statement is outstanding is checked (a
  ``select`` with no wait: the whole check of a healthy connection measured 1.4 µs):
  a dead session is replaced before anything of the write is sent, and the write
  succeeds. A live one that had a notification or a notice to read is kept, the
  message left for its reader.
- Everywhere, ``errors_occurred``: Django's cursor wrapper sets it when a statement
  failed with any error other than a data or integrity error. The write that met
  the dropped session has failed by then: in autocommit its outcome is unknown to
  the caller (the INSERT may have committed before the session went), so it is
  never retried here.

Inside ``atomic()`` or with autocommit switched off, nothing is done: closing the
connection there would let the next statement run on a new session, outside the
caller's transaction, and commit a job whose data was rolled back. The caller's
transaction fails as it should, and Django's own handling ends it.
"""

from __future__ import annotations

import logging
import select
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["discard_broken_connection"]


def discard_broken_connection(connection: Any) -> bool:
    """Close ``connection`` if its session is gone; whether it was.

    Outside a transaction only (see the module's docstring).
    """
    if connection.connection is None or connection.in_atomic_block or not connection.autocommit:
        return False
    if not (connection.errors_occurred or _idle_socket_has_news(connection)):
        return False
    if connection.is_usable():
        connection.errors_occurred = False
        return False
    logger.warning(
        "the %r database connection was lost; it is closed, and this write opens a new one",
        connection.alias,
    )
    connection.close()
    return True


def _idle_socket_has_news(connection: Any) -> bool:
    """PostgreSQL under psycopg 3: whether the idle session's socket has something to
    read (the server's goodbye, or a notification or notice), or libpq already knows
    the connection is bad. Nothing is read here: ``is_usable`` decides."""
    pgconn = getattr(connection.connection, "pgconn", None)
    if pgconn is None or connection.vendor != "postgresql":
        return False  # psycopg2, or another database: errors_occurred only
    try:
        if pgconn.status != _CONNECTION_OK:
            return True
        return _readable(pgconn.socket)
    except Exception:  # any doubt is news: is_usable() decides
        return True


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read (or hung up), without waiting.

    ``poll`` where it exists: ``select`` refuses a descriptor above 1023, which a
    busy web process may well hand a database connection, and every write would then
    pay a ``SELECT 1``.
    """
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


#: libpq's ``CONNECTION_OK`` (psycopg's ``pq.ConnStatus.OK``), without importing
#: psycopg on every write or where it is not installed.
_CONNECTION_OK = 0
