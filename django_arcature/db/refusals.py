"""Which connection errors no amount of waiting will fix.

The worker rides out outages: a server that is down, restarting or unreachable
gets retried with backoff. But a server that answers "no such database" or
"authentication failed" will answer the same until someone edits ``DATABASES``;
retrying that hides a typo behind a log line every few seconds. This module
tells the two apart from the driver's own error, for a start-up check.

PostgreSQL reports connection refusals without a SQLSTATE on the client side
(libpq builds the message), so they are recognised by the server's English
message; a server set to another ``lc_messages`` language falls back to the
retrying behaviour, which is safe, only slower to notice.
"""

from __future__ import annotations

from django.db import DatabaseError, connections

#: MariaDB/MySQL error numbers: unknown database, access denied (user/password),
#: access denied to the database.
_MYSQL_REFUSALS = frozenset({1049, 1045, 1044})

#: Fragments of the FATAL messages PostgreSQL sends when it refuses a login.
_POSTGRES_REFUSALS = (
    "does not exist",  # database "x" / role "x"
    "authentication failed",  # password, SASL (PgBouncer), ident
    "no pg_hba.conf entry",
)


def settings_refusal(exc: BaseException) -> str | None:
    """The refusal's one-line reason if only a settings change can lift it; else None."""
    cause = exc.__cause__ or exc
    args = getattr(cause, "args", ())
    if args and isinstance(args[0], int) and args[0] in _MYSQL_REFUSALS:
        return str(args[1]) if len(args) > 1 else str(args[0])
    if type(cause).__module__.startswith("psycopg"):
        message = str(cause)
        if "FATAL:" in message and any(part in message for part in _POSTGRES_REFUSALS):
            return message.split("FATAL:", 1)[1].strip().splitlines()[0]
    return None


def login_refusal(using: str) -> str | None:
    """One line saying which ``DATABASES`` entry to fix if the server refuses ``using`` for good.

    None when the connection works, and also when it fails for a reason that
    time may mend (the server is down, restarting, out of connections).
    """
    connection = connections[using]
    try:
        connection.ensure_connection()
    except DatabaseError as exc:
        reason = settings_refusal(exc)
        if reason is None:
            return None
        return (
            f"django-arcature: database {using!r} refused the connection ({reason}): "
            f"fix NAME, USER or PASSWORD in DATABASES[{using!r}], or create the database."
        )
    return None
