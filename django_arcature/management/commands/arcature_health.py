"""``manage.py arcature_health``: the worker's liveness probe, from inside the project.

Only ``--help``'s description follows the project's ``LANGUAGE_CODE``. The
verdict line, the options' help and ``unhealthy: ...`` stay English: they come
from ``worker.health``, which must not import Django (``python -m
django_arcature.worker.health`` probes without a project), and both probes print
the same line, which is what an orchestrator records in its events and what
alerts and runbooks match on.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils.translation import gettext_lazy

from django_arcature.management.wording import Translated
from django_arcature.worker.health import add_probe_arguments, check


class Command(BaseCommand):
    help = Translated(
        gettext_lazy(
            "Liveness probe for a worker started with --health-file: exit 0 if the file is fresh "
            "and the worker running, 1 with a one-line reason if it is stale (main loop stuck, "
            "process gone), missing, or says the worker stopped. Reads only the file, never "
            "the database, so a slow database cannot fail it."
        )
    )
    # An exec probe runs every few seconds: no system checks (some query the database).
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        add_probe_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        verdict = check(
            options["file"],
            max_age=options["max_age"],
            require_database=options["require_database"],
        )
        if verdict.healthy:
            self.stdout.write(verdict.reason)
            return
        self.stderr.write(f"unhealthy: {verdict.reason}")
        raise SystemExit(1)
