"""Settings for a ``manage.py check`` subprocess: a new project's bare shape.

Only Django's own apps and ``django_arcature`` are installed, so nothing imports
``django.tasks`` before the checks run, and ``TASKS`` has an option the backend
refuses. Used by ``test_backend_checks.py``. The database is an SQLite file that is
never opened: the checks under test need none, and a server's database of this
name need not exist outside the suite.
"""

from __future__ import annotations

import os
import tempfile

import django

USE_TZ = True
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(tempfile.gettempdir(), "arcature-check-only.sqlite3"),
        "OPTIONS": {"transaction_mode": "IMMEDIATE"},
    }
}

SECRET_KEY = "check-only"
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django_arcature"]
if django.VERSION < (6, 0):  # the backport is an app of its own, which runs the checks
    INSTALLED_APPS.append("django_tasks")
TASKS = {
    "default": {
        "BACKEND": "django_arcature.backend.ArcatureBackend",
        "OPTIONS": {"MAX_ATTEMPTS": 0},
    }
}
