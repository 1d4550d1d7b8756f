"""The database's clock, as an ORM expression every vendor renders its own way."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, Func
from django.db.models.sql.compiler import SQLCompiler

from .base import driver_class


class DatabaseNow(Func):
    """The database server's current time in UTC, plus ``seconds`` if given.

    Leases are stamped and compared with this, never with a worker's clock, so
    a worker host whose clock runs ahead cannot declare a live lease expired.
    Django's own ``Now()`` is not used: on MySQL it reads the session time zone.
    """

    output_field = DateTimeField()
    arity = 0

    def __init__(self, seconds: float = 0) -> None:
        super().__init__()
        self.seconds = float(seconds)

    def as_sql(  # type: ignore[override]
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, list[Any]]:
        return now_sql(connection.vendor, self.seconds), []


def now_sql(vendor: str, seconds: float = 0) -> str:
    """SQL for "now + seconds" on the database's clock, in UTC."""
    return driver_class(vendor).now_sql(seconds)


def database_now(using: str) -> datetime:
    """The database server's current time (UTC, aware), read in one round trip.

    For values that cannot be an SQL expression (rows streamed by ``COPY``, or
    many rows offset from one reading): still the database's clock, never the
    app server's.
    """
    connection = connections[using]
    with connection.cursor() as cursor:
        # Parameters (none) make every driver treat "%%" the same way.
        cursor.execute(f"SELECT {now_sql(connection.vendor)}", [])
        row = cursor.fetchone()
    value = row[0]
    if isinstance(value, str):  # SQLite: ISO text in UTC, read as the end of its millisecond
        value = datetime.fromisoformat(value)
        # ... so go back to its start: times offset from this reading must not land
        # in the next millisecond, where a claim in this one would not see them.
        value = value.replace(microsecond=value.microsecond // 1000 * 1000)
    if not isinstance(value, datetime):
        raise TypeError(f"the database's clock read as {value!r}")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
