"""Settings for benchmarks/enqueue_peers.py: the benchmark settings plus django-tasks-db.

django-tasks-db is a benchmark-only dependency (``pip install django-tasks-db``); its
table lives next to ours in the same database, so both contenders pay the same
connection, server and disk.

``ARCATURE_BENCH_SERVER_BINDING=1`` (``enqueue_peers.py --server-binding``) gives the
one connection both contenders share psycopg's server-side binding with prepared
statements (Django's ``OPTIONS``: ``server_side_binding`` and ``prepare_threshold``),
as a project that does not pool in transaction mode may configure it.
``ARCATURE_BENCH_PREPARE_THRESHOLD=N`` (``enqueue_latency.py --prepare``) sets only
``prepare_threshold``: client-side binding stays, and our INSERT alone is prepared.
"""

from __future__ import annotations

import os

from benchmarks.settings import *  # noqa: F403
from benchmarks.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

if os.environ.get("ARCATURE_BENCH_SERVER_BINDING") == "1":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        server_side_binding=True, prepare_threshold=5
    )
elif os.environ.get("ARCATURE_BENCH_PREPARE_THRESHOLD"):
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        prepare_threshold=int(os.environ["ARCATURE_BENCH_PREPARE_THRESHOLD"])
    )
