"""The database's clock, as an ORM expression every vendor renders its own way."""

from __future__ import annotations

from typing import Any

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
