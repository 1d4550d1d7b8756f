"""Say "run migrate" when an enqueue fails because the job table is not there.

Enqueueing is usually the first thing a new project does with the package, often
before ``migrate`` has created the table. The database then answers in its own
words ("no such table: django_arcature_job", ``relation "django_arcature_job" does
not exist``, "Table 'db.django_arcature_job' doesn't exist"), none of which says
what to do. The error is re-raised unchanged, same type and message, so code that
catches ``DatabaseError`` behaves as before; only a note (PEP 678, printed under
the traceback) is added. Nothing is asked of the database: on PostgreSQL the
transaction is already aborted at this point.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError

#: How each supported database words "this table does not exist".
_MISSING_TABLE_WORDING = ("no such table", "does not exist", "doesn't exist")


def _names_missing_table(error: DatabaseError, table: str) -> bool:
    text = str(error)
    return table in text and any(words in text for words in _MISSING_TABLE_WORDING)


def migrate_command(using: str) -> str:
    """The command that migrates ``using``: plain ``migrate`` only reaches ``default``."""
    if using == "default":
        return "python manage.py migrate"
    return f"python manage.py migrate --database {using}"


def missing_table_message(table: str, using: str) -> str:
    """What to do about a job table missing from ``using`` (also the commands' line)."""
    return (
        f"django-arcature: the job table {table!r} does not exist in database {using!r}: "
        f"run `{migrate_command(using)}` first."
    )


def add_migrate_hint(error: DatabaseError, table: str, using: str) -> None:
    """Add the remedy to ``error`` when it says that ``table`` does not exist."""
    if _names_missing_table(error, table):
        error.add_note(missing_table_message(table, using))


@contextmanager
def migrate_hint(table: str, using: str) -> Iterator[None]:
    """:func:`add_migrate_hint` around a block (the bulk enqueues)."""
    try:
        yield
    except DatabaseError as exc:
        add_migrate_hint(exc, table, using)
        raise
