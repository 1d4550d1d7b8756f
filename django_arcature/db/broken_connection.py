"""A connection the server dropped is replaced before the next write, outside a transaction.

Django replaces a broken connection only at the start and end of a request
(``close_old_connections``). Code that enqueues from a thread of its own (a cron
scheduler such as django-crontask, which enqueues from APScheduler's threads; a
management command that loops; a consumer of another queue) never passes there:
once its database session was dropped (a server restart, an administrator's kill,
a proxy's idle timeout), every later ``enqueue()`` in that thread failed with
"the connection is lost" until the process was restarted. That is a schedule
that silently stops running.

So each write outside a transaction first looks at what Django already records:
``errors_occurred`` is set by the cursor wrapper when a statement failed with any
error other than a data or integrity error. Only then is the connection asked
whether it still works (one ``SELECT 1``, the check Django itself uses), and closed
if it does not, so that the write opens a new one. A healthy connection costs
two attribute reads. The write that met the dropped session still fails: in
autocommit its outcome is unknown to the caller (the INSERT may have committed
before the session went), so it is never retried here.

Inside ``atomic()`` or with autocommit switched off, nothing is done: closing the
connection there would let the next statement run on a new session, outside the
caller's transaction, and commit a job whose data was rolled back. The caller's
transaction fails as it should, and Django's own handling ends it.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["discard_broken_connection"]


def discard_broken_connection(connection: Any) -> bool:
    """Close ``connection`` if a statement failed on it and it no longer works; whether it was.

    Outside a transaction only (see the module's docstring).
    """
    if connection.connection is None or not connection.errors_occurred:
        return False
    if connection.in_atomic_block or not connection.autocommit:
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
