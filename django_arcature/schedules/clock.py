"""Reading the database server's clock once, as an aware UTC datetime."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connections
from django.utils.dateparse import parse_datetime

from django_arcature.db import now_sql

__all__ = ["database_now"]


def database_now(using: str) -> datetime:
    """The database's "now" in UTC: slots are due by this clock, never a worker's."""
    connection = connections[using]
    with connection.cursor() as cursor:
        # Empty params so each driver un-doubles the %% in SQLite's STRFTIME format.
        cursor.execute(f"SELECT {now_sql(connection.vendor)}", [])
        row = cursor.fetchone()
    value = row[0]
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:  # pragma: no cover - every vendor returns a timestamp
            raise ValueError(f"the database returned {value!r} for now")
        value = parsed
    if not isinstance(value, datetime):  # pragma: no cover
        raise TypeError(f"the database returned {value!r} for now")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)
