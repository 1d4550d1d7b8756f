"""Settings for the test suite; the database comes from ARCATURE_TEST_DB or DATABASE_URL."""

from __future__ import annotations

import os
from pathlib import Path

import django

from tests.dburl import database_url, parse

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

DATABASES = {"default": parse(database_url(), BASE_DIR)}
# Behind PgBouncer in transaction pooling (ARCATURE_PGBOUNCER=1): no server-side
# cursors, which live across transactions, as Django's documentation requires.
# "direct" reaches the same database past the pooler, for the LISTEN connection.
if os.environ.get("ARCATURE_PGBOUNCER") == "1":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["direct"] = {
        **DATABASES["default"],
        "PORT": os.environ.get("ARCATURE_PGBOUNCER_DIRECT_PORT", "5432"),
        "TEST": {"MIRROR": "default"},
    }
# Worker subprocesses started by the tests talk to the test database directly.
if os.environ.get("ARCATURE_USE_TEST_DATABASE") == "1":
    DATABASES["default"]["NAME"] = (
        DATABASES["default"].get("TEST", {}).get("NAME") or "test_" + DATABASES["default"]["NAME"]
    )

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_arcature",
    "tests.testapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The admin in the browser's language (tests/browser/test_admin_languages.py).
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

ARCATURE: dict[str, object] = {"LEASE_SECONDS": 30, "POLL_INTERVAL": 0.05}
# A worker subprocess that must be woken by LISTEN alone (tests/concurrency/test_pickup_race.py).
if os.environ.get("ARCATURE_TEST_WAKE_HINTS") == "0":
    ARCATURE["WAKE_HINTS"] = False
# ... and whose loop wakes for nothing else: no sweep for minutes.
if os.environ.get("ARCATURE_TEST_SWEEP_INTERVAL"):
    ARCATURE["SWEEP_INTERVAL"] = float(os.environ["ARCATURE_TEST_SWEEP_INTERVAL"])
# Worker subprocesses of the queue-limit tests get their ARCATURE["QUEUES"] from here.
if os.environ.get("ARCATURE_TEST_QUEUES"):
    import json

    ARCATURE["QUEUES"] = json.loads(os.environ["ARCATURE_TEST_QUEUES"])

# django.tasks runs on django-arcature (tests/integration/test_backend*.py); on
# Django 5.2 the framework is the django-tasks backport, an app of its own.
TASKS = {
    "default": {
        "BACKEND": "django_arcature.backend.ArcatureBackend",
        "QUEUES": [],  # any queue name
        "OPTIONS": {
            "MODULES": [
                "tests.integration.backend_tasks",
                "tests.testapp.handler_fault_tasks",  # tests/faults/test_handler_tasks_backend.py
            ],
            "RETRY": {"base_seconds": 0, "jitter": 0},
        },
    }
}
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_arcature": {"handlers": ["console"], "level": "WARNING"}},
}

# Worker processes of tests/observability/test_logs.py log JSON lines to this file,
# configured as docs/observability.md tells users to.
if os.environ.get("ARCATURE_TEST_JSON_LOG"):
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"job": {"()": "django_arcature.contrib.logs.JobContextFilter"}},
        "formatters": {"json": {"()": "django_arcature.contrib.logs.JSONFormatter"}},
        "handlers": {
            "json": {
                "class": "logging.FileHandler",
                "filename": os.environ["ARCATURE_TEST_JSON_LOG"],
                "formatter": "json",
                "filters": ["job"],
            }
        },
        "loggers": {
            "django_arcature": {"handlers": ["json"], "level": "DEBUG"},
            "tests": {"handlers": ["json"], "level": "INFO"},
        },
    }
