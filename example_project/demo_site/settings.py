"""Settings of the example project.

The database is a SQLite file under ``var/`` unless ``DATABASE_URL`` names
another (``postgres://user:pass@host:5432/name``, ``mysql://…``). SQLite is set
up the way several worker processes need it: WAL, IMMEDIATE transactions and a
generous lock timeout.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import django

PROJECT_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = PROJECT_DIR.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]
USE_TZ = True
TIME_ZONE = "UTC"


#: The one SQLite file of the example project: ``make demo`` (demo.py) resets and
#: fills it, and the docs' manual steps, ``runserver`` and the admin read it.
DEFAULT_SQLITE_PATH = REPO_DIR / "var" / "example-project.sqlite3"


def database_from_url(url: str | None) -> dict[str, Any]:
    """A DATABASES entry from ``DATABASE_URL``, or the SQLite file default."""
    if not url:
        url = f"sqlite:///{DEFAULT_SQLITE_PATH}"
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    if scheme == "sqlite":
        path = Path(unquote(parts.path))
        path.parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(path),
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    engines = {
        "postgres": "django.db.backends.postgresql",
        "postgresql": "django.db.backends.postgresql",
        "mysql": "django.db.backends.mysql",
        "mariadb": "django.db.backends.mysql",
    }
    if scheme not in engines:
        raise ValueError(f"DATABASE_URL: unsupported scheme {scheme!r} (sqlite, postgres, mysql)")
    config: dict[str, Any] = {
        "ENGINE": engines[scheme],
        "NAME": unquote(parts.path.removeprefix("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }
    if engines[scheme].endswith("mysql"):
        config["OPTIONS"] = {"charset": "utf8mb4"}
    return config


DATABASES = {"default": database_from_url(os.environ.get("DATABASE_URL"))}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_arcature",
    "newsletter",
    "tasks_demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "demo_site.urls"
WSGI_APPLICATION = "demo_site.wsgi.application"
STATIC_URL = "static/"
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

# The jobs "send" mail; write it to files under var/mail instead of needing a mail
# server. Django 6.1 configures mail with MAILERS and deprecates EMAIL_BACKEND;
# older versions need it.
_FILE_MAIL = "django.core.mail.backends.filebased.EmailBackend"
_MAIL_DIR = str(REPO_DIR / "var" / "mail")
if django.VERSION >= (6, 1):
    MAILERS = {"default": {"BACKEND": _FILE_MAIL, "OPTIONS": {"file_path": _MAIL_DIR}}}
else:
    EMAIL_BACKEND = _FILE_MAIL
    EMAIL_FILE_PATH = _MAIL_DIR
DEFAULT_FROM_EMAIL = "newsletter@example.com"

ARCATURE = {
    "LEASE_SECONDS": 30,
    "POLL_INTERVAL": 0.2,
    "CONCURRENCY": 4,
    "MAX_ATTEMPTS": 3,
}

# Django's own tasks framework (django.tasks; the django-tasks backport on 5.2)
# runs on the same job table and workers: see tasks_demo/ and docs/howto/django-tasks.md.
TASKS = {
    "default": {
        "BACKEND": "django_arcature.backend.ArcatureBackend",
        "OPTIONS": {"MAX_ATTEMPTS": 3, "RETRY": {"base_seconds": 1, "jitter": 0}},
    }
}
if __import__("django").VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django_arcature": {"handlers": ["console"], "level": "INFO"},
        "newsletter": {"handlers": ["console"], "level": "INFO"},
    },
}
