"""Settings of the third-party site: Wagtail, django-modelsearch, ArcatureBackend.

``TASKS`` names the backend and nothing else, as a new user would write it:
no ``OPTIONS["MODULES"]``, so the packages' tasks must be found with zero
configuration. The database comes from ARCATURE_TEST_DB / DATABASE_URL as in
the main suite; worker subprocesses set ARCATURE_USE_TEST_DATABASE=1.
"""

from __future__ import annotations

import os
from pathlib import Path

import django

from tests.dburl import database_url, parse

BASE_DIR = Path(__file__).resolve().parents[2]
SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

DATABASES = {"default": parse(database_url(), BASE_DIR)}
if DATABASES["default"]["ENGINE"].endswith("mysql"):
    # Wagtail's migrations compare a column with ``CAST(id AS char)``, which takes the
    # connection's collation: MariaDB's default for utf8mb4 (general_ci) against the
    # test database's unicode_ci is error 1267, "Illegal mix of collations". A site on
    # MariaDB sets its connection's collation to its database's the same way.
    DATABASES["default"]["OPTIONS"]["collation"] = DATABASES["default"]["TEST"]["COLLATION"]
# One media folder per database name, shared by the test process and its workers
# (named before a worker switches to the test database): a deleted image's file
# must disappear from here when its job runs.
MEDIA_ROOT = BASE_DIR / "var" / f"thirdparty-media-{Path(str(DATABASES['default']['NAME'])).stem}"
if os.environ.get("ARCATURE_USE_TEST_DATABASE") == "1":
    DATABASES["default"]["NAME"] = (
        DATABASES["default"].get("TEST", {}).get("NAME") or "test_" + DATABASES["default"]["NAME"]
    )

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_arcature",
    "wagtail",
    "wagtail.admin",
    "wagtail.search",
    "wagtail.users",
    "wagtail.images",
    "wagtail.documents",
    "taggit",
    "modelcluster",
    "tests.thirdparty.site",
]
# On PostgreSQL, Wagtail's search index uses django.contrib.postgres' search fields.
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    INSTALLED_APPS.append("django.contrib.postgres")
# On Django 5.2 the tasks framework is the django-tasks backport, an app of its own.
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")
# Packages that need django.tasks itself (Django 6): django-crontask schedules a task
# of the site's (its command comes with its app); django-tasks-monitor records tasks.
if django.VERSION >= (6, 0):
    INSTALLED_APPS += ["crontask", "tasks_monitor", "tests.thirdparty.django6_site"]

MIDDLEWARE: list[str] = []
ROOT_URLCONF = "tests.thirdparty.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": []},
    }
]

MEDIA_URL = "/media/"
STATIC_URL = "/static/"

WAGTAIL_SITE_NAME = "arcature third-party site"
WAGTAILADMIN_BASE_URL = "http://localhost"

TASKS = {"default": {"BACKEND": "django_arcature.backend.ArcatureBackend"}}
ARCATURE: dict[str, object] = {"LEASE_SECONDS": 30, "POLL_INTERVAL": 0.05}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_arcature": {"handlers": ["console"], "level": "WARNING"}},
}
