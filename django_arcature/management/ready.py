"""Commands that stop at once, with what to change, when the server refuses their database.

The probe runs in ``execute()``, ahead of Django's system checks: on
MariaDB/MySQL those checks open a connection themselves, so a database that does
not exist or a wrong password would otherwise end in a traceback from the check
framework instead of one line naming the ``DATABASES`` entry to fix.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_arcature.checks.migrations import migration_problem
from django_arcature.conf import job_database
from django_arcature.db.refusals import login_refusal


class RefusedDatabaseStopsCommand(BaseCommand):
    """A management command that needs its database and should not wait for a bad login."""

    def database_alias(self, options: dict[str, Any]) -> str:
        """The alias holding the job table (``conf.job_database``)."""
        return job_database(options.get("database"))

    def migrated_database(self, options: dict[str, Any]) -> str:
        """The job table's alias, or stop with one line if it is not migrated yet.

        Before ``migrate`` every query would end in a "no such table" traceback
        that does not say which command to run.
        """
        using = self.database_alias(options)
        problem = migration_problem(using)
        if problem:
            raise CommandError(problem)
        return using

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            using = self.database_alias(options)
        except Exception:  # a bad setting: the system checks that follow say what it is
            return super().execute(*args, **options)
        refusal = login_refusal(using)
        if refusal:
            raise CommandError(refusal)
        return super().execute(*args, **options)
