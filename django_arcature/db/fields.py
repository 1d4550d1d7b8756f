"""Model fields whose values every database compares the same way.

MySQL and MariaDB compare text with the column's collation, by default
case-insensitive and accent-insensitive (and, on MariaDB, blind to trailing
spaces): there ``queue = 'email'`` also matches ``'Email'`` and ``'émail'``,
and the unique keys ``Order-1`` and ``order-1`` collide. PostgreSQL and SQLite
compare exactly. :class:`ExactCharField` gives its column a binary collation
on MySQL and MariaDB only, so the same names match on every database.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

#: Per database (alias and name): the collation chosen for its character set.
_collations: dict[tuple[str, str], str] = {}


def exact_collation(connection: BaseDatabaseWrapper) -> str | None:
    """A binary, no-pad collation for the database's character set; None off MySQL."""
    if connection.vendor != "mysql":
        return None
    key = (connection.alias, str(connection.settings_dict.get("NAME", "")))
    found = _collations.get(key)
    if found is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@character_set_database")
            charset = str(cursor.fetchone()[0])
        mariadb = bool(getattr(connection, "mysql_is_mariadb", False))
        if mariadb:
            found = f"{charset}_nopad_bin"  # MariaDB's _bin collations pad with spaces
        elif charset == "utf8mb4":
            found = "utf8mb4_0900_bin"  # MySQL 8: binary and NO PAD
        else:
            found = f"{charset}_bin"
        _collations[key] = found
    return found


class ExactCharField(models.CharField):  # type: ignore[type-arg]
    """A ``CharField`` compared byte for byte on every database (see the module's note)."""

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        params = super().db_parameters(connection)
        if self.db_collation is None:
            collation = exact_collation(connection)
            if collation:
                params["collation"] = collation
        return params
