"""Settings for benchmarks/enqueue_peers.py: the benchmark settings plus django-tasks-db.

django-tasks-db is a benchmark-only dependency (``pip install django-tasks-db``); its
table lives next to ours in the same database, so both contenders pay the same
connection, server and disk.
"""

from __future__ import annotations

from benchmarks.settings import *  # noqa: F403
from benchmarks.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
