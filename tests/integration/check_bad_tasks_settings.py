"""Settings for a ``manage.py check`` subprocess: a new project's bare shape.

Only Django's own apps and ``django_arcature`` are installed, so nothing imports
``django.tasks`` before the checks run, and ``TASKS`` has an option the backend
refuses. Used by ``test_backend_checks.py``.
"""

from __future__ import annotations

from tests.settings import DATABASES, USE_TZ  # noqa: F401  (same databases as the suite)

SECRET_KEY = "check-only"
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django_arcature"]
TASKS = {
    "default": {
        "BACKEND": "django_arcature.backend.ArcatureBackend",
        "OPTIONS": {"MAX_ATTEMPTS": 0},
    }
}
