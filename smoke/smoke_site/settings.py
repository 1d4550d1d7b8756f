"""A project that knows django_arcature only as an installed package.

The database is a SQLite file beside this folder, or PostgreSQL when
``SMOKE_DATABASE=postgres`` (a database of its own, recreated by the suite).
"""

from __future__ import annotations

import os
from pathlib import Path

import django

HERE = Path(__file__).resolve().parent.parent
SECRET_KEY = "smoke-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["testserver", "localhost"]
ROOT_URLCONF = "smoke_site.urls"
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if os.environ.get("SMOKE_DATABASE") == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("SMOKE_DB_NAME", "arcature_smoke"),
            "USER": "arcature",
            "PASSWORD": "arcature",
            "HOST": "127.0.0.1",
            "PORT": "5432",
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(HERE / "smoke.sqlite3"),
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL;",
            },
        }
    }

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_arcature",
    "smoke_app",
]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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
TASKS = {"default": {"BACKEND": "django_arcature.backend.ArcatureBackend"}}
ARCATURE = {"POLL_INTERVAL": 0.05}
