"""Settings of django-tasks-db's contender: Django, its app and its backend, nothing else.

``CONN_MAX_AGE`` is Django's default (0) unless ``PEERS_TASKS_DB_CONN_MAX_AGE``
says otherwise (seconds, or ``none`` for connections kept open): see ``tasks_db``.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_url = urlsplit(os.environ["PEERS_DSN"])
SECRET_KEY = "benchmarks-only"
USE_TZ = True
INSTALLED_APPS = ["django_tasks_db"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES: dict[str, dict[str, object]] = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": _url.username,
        "PASSWORD": _url.password,
        "HOST": _url.hostname,
        "PORT": str(_url.port or 5432),
    }
}
_age = os.environ.get("PEERS_TASKS_DB_CONN_MAX_AGE", "")
if _age:
    DATABASES["default"]["CONN_MAX_AGE"] = None if _age.lower() == "none" else int(_age)
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
