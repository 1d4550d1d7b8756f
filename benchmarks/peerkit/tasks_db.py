"""django-tasks-db, as its README shows it: Django's ``django.tasks`` with its
``DatabaseBackend``, ``task.enqueue()``, and ``manage.py db_worker`` at its
defaults (one task at a time, a 1 s poll interval). ``django.tasks`` has no bulk
call: bulk is ``enqueue()`` in a loop inside one ``transaction.atomic()``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .harness import (
    Peer,
    database_name,
    ensure_pg_database,
    package_version,
    pg_dsn,
    pg_server_version,
    pg_transactions,
)


class TasksDbPeer(Peer):
    name = "django-tasks-db"
    label = "django-tasks-db"
    caveats = {
        "concurrency": "1 task at a time per db_worker process",
        "finished jobs": "kept (result rows)",
        "wake-up": "polls every 1 s (--interval default); no LISTEN/NOTIFY",
        "bulk call": "none in django.tasks: enqueue() in a loop in one transaction",
    }

    def __init__(self) -> None:
        self.db = database_name(self.name)
        os.environ["PEERS_DSN"] = pg_dsn(self.db)
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.peerkit.tasks_db_settings"

    def versions(self) -> dict[str, str]:
        return {
            "django-tasks-db": package_version("django-tasks-db"),
            "Django": package_version("Django"),
            "psycopg": package_version("psycopg"),
            "PostgreSQL": pg_server_version(),
        }

    def setup(self) -> None:
        ensure_pg_database(self.db)
        import django

        django.setup()
        from django.core.management import call_command
        from django_tasks_db.models import DBTaskResult

        from .tasks_db_tasks import noop

        call_command("migrate", verbosity=0)
        self.task: Any = noop
        self.table = DBTaskResult._meta.db_table

    def clear(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE TABLE {connection.ops.quote_name(self.table)}")

    def enqueue_one(self, key: int) -> None:
        self.task.enqueue(key)

    def enqueue_batch(self, keys: list[int]) -> None:
        from django.db import transaction

        with transaction.atomic():
            for key in keys:
                self.task.enqueue(key)

    def worker_argv(self) -> list[str]:
        return [sys.executable, "-m", "django", "db_worker"]

    def worker_env(self) -> dict[str, str]:
        return {
            "PEERS_DSN": os.environ["PEERS_DSN"],
            "DJANGO_SETTINGS_MODULE": "benchmarks.peerkit.tasks_db_settings",
        }

    def idle_counter(self) -> float | None:
        return float(pg_transactions(self.db))


ADAPTER = TasksDbPeer
