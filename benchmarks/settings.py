"""Benchmark settings: Django's defaults (CONN_MAX_AGE=0) plus the job app; DB from DATABASE_URL."""

from __future__ import annotations

import os
from pathlib import Path

from tests.dburl import parse

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "benchmarks-only"
USE_TZ = True
TIME_ZONE = "UTC"
DATABASES = {
    "default": parse(os.environ.get("DATABASE_URL", "sqlite:///var/bench.sqlite3"), BASE_DIR)
}
if os.environ.get("ARCATURE_PGBOUNCER") == "1":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# Django's server-side binding, every statement prepared once sent this often
# (benchmarks/pickup.py --server-binding N): the worker's claim is prepared too.
SERVER_BINDING = os.environ.get("ARCATURE_BENCH_SERVER_BINDING")
if SERVER_BINDING:
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        server_side_binding=True, prepare_threshold=int(SERVER_BINDING)
    )
LISTEN_URL = os.environ.get("ARCATURE_BENCH_LISTEN_URL")
if LISTEN_URL:
    DATABASES["listen"] = parse(LISTEN_URL, BASE_DIR)
INSTALLED_APPS = ["django.contrib.contenttypes", "django_arcature", "benchmarks.benchapp"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ARCATURE: dict[str, object] = {"LISTEN_DATABASE": "listen"} if LISTEN_URL else {}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_arcature": {"handlers": ["console"], "level": "WARNING"}},
}
