"""Settings of django-tasks-db's contender: Django, its app and its backend, nothing else."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_url = urlsplit(os.environ["PEERS_DSN"])
SECRET_KEY = "benchmarks-only"
USE_TZ = True
INSTALLED_APPS = ["django_tasks_db"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": _url.username,
        "PASSWORD": _url.password,
        "HOST": _url.hostname,
        "PORT": str(_url.port or 5432),
    }
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
