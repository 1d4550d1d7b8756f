"""Is the job table there, with every migration applied? Asked by commands before they start.

Not a system check: those run without a database in many places (``check``,
``makemigrations``), and a fresh project has not migrated yet when it first
runs ``migrate`` itself. The worker and ``arcature_status`` ask instead, once,
so that starting them before ``migrate`` prints one line that says what to do
rather than retrying "no such table" forever or printing a traceback.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, connections
from django.db.migrations.loader import MigrationLoader

from django_arcature.manager.missing_table import migrate_command, missing_table_message

logger = logging.getLogger(__name__)

APP_LABEL = "django_arcature"


def migration_problem(using: str) -> str | None:
    """One line saying why the job table in ``using`` is not ready, or None if it is.

    A database that cannot be reached is not this function's business (the
    worker waits for it like for any outage): None.
    """
    from django_arcature.models import Job

    connection = connections[using]
    try:
        with connection.cursor() as cursor:
            tables = set(connection.introspection.table_names(cursor))
        loader = MigrationLoader(connection, ignore_no_migrations=True)
    except DatabaseError:
        logger.debug("could not inspect database %r for migrations", using, exc_info=True)
        return None
    ours = sorted(name for app, name in loader.graph.nodes if app == APP_LABEL)
    missing = [name for name in ours if (APP_LABEL, name) not in loader.applied_migrations]
    table = Job._meta.db_table
    if table not in tables:
        return missing_table_message(table, using)
    if missing:
        return (
            f"django-arcature: database {using!r} has {len(missing)} unapplied "
            f"{APP_LABEL} migration(s) ({', '.join(missing)}): "
            f"run `{migrate_command(using)}` first."
        )
    return None
