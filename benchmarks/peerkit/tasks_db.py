"""django-tasks-db, as its README shows it: Django's ``django.tasks`` with its
``DatabaseBackend``, ``task.enqueue()``, and ``manage.py db_worker`` at its
defaults (one task at a time, a 1 s poll interval). ``django.tasks`` has no bulk
call: bulk is ``enqueue()`` in a loop inside one ``transaction.atomic()``.

Its settings are Django's defaults, as ours are (``benchmarks/settings.py``), so
``CONN_MAX_AGE`` is 0: ``db_worker`` calls ``close_old_connections()`` around
every task, which then closes the connection, so each task opens a new
PostgreSQL connection (a backend fork and a SCRAM exchange here). That, not its
poll interval, is what makes its drain the slowest figure of the whole run. Drains
of 1,000 jobs, interleaved, 2026-12-02 on the shared 2-core machine (load 8.5-10):
at CONN_MAX_AGE=0, 1,012-1,020 new sessions in ``pg_stat_database``, 5.1-6.2 ms of
worker CPU per job, 37-59 jobs/s; with ``none``, 2 sessions, 2.1 ms, 105-123 jobs/s.
``PEERS_TASKS_DB_CONN_MAX_AGE`` (seconds, or ``none`` for persistent connections)
measures it so, and the caveats then say which was used.
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
    poll_interval = 1.0

    def __init__(self) -> None:
        self.db = database_name(self.name)
        os.environ["PEERS_DSN"] = pg_dsn(self.db)
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.peerkit.tasks_db_settings"
        age = os.environ.get("PEERS_TASKS_DB_CONN_MAX_AGE", "")
        self.caveats = {
            **self.caveats,
            "connections": (
                f"CONN_MAX_AGE={age} (PEERS_TASKS_DB_CONN_MAX_AGE, not Django's default)"
                if age
                else "Django's default CONN_MAX_AGE=0, as ours: db_worker closes its "
                "connection after every task, so each task opens a new one"
            ),
        }

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
            "PEERS_TASKS_DB_CONN_MAX_AGE": os.environ.get("PEERS_TASKS_DB_CONN_MAX_AGE", ""),
            "DJANGO_SETTINGS_MODULE": "benchmarks.peerkit.tasks_db_settings",
        }

    def idle_counter(self) -> float | None:
        return float(pg_transactions(self.db))


ADAPTER = TasksDbPeer
