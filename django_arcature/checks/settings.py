"""System checks: a bad ``ARCATURE`` setting or database option stops startup with a fix."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.utils.translation import gettext as _

from django_arcature.conf import validate


@checks.register(checks.Tags.compatibility)
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """E001: every ``ARCATURE`` key known and every value in range."""
    return [
        checks.Error(
            problem,
            hint=_("See the “Settings” page of the django-arcature documentation (Reference)."),
            id="arcature.E001",
        )
        for problem in validate(getattr(settings, "ARCATURE", None))
    ]


@checks.register(checks.Tags.compatibility)
def check_time_zone_support(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """E003: ``USE_TZ = False`` cannot work.

    Every time a job is compared with (when it becomes available, when its
    lease expires) is stamped by the database's clock in UTC. With
    ``USE_TZ = False``, Django stores naive local times on MariaDB and SQLite,
    which would meet that UTC clock hours apart, and refuses the aware times
    the package writes.
    """
    if getattr(settings, "USE_TZ", True):
        return []
    return [
        checks.Error(
            _(
                "django-arcature needs time-zone support: USE_TZ is False, so job times "
                "(naive local time) could not be compared with the database's UTC clock."
            ),
            hint=_("Set USE_TZ = True in your settings (Django's default)."),
            id="arcature.E003",
        )
    ]


ROUTER = "django_arcature.routers.JobsRouter"


@checks.register(checks.Tags.compatibility)
def check_jobs_database(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """E004: ``ARCATURE["DATABASE"]`` names an alias, but nothing routes the job table there."""
    raw = getattr(settings, "ARCATURE", None)
    alias = raw.get("DATABASE") if isinstance(raw, dict) else None
    if not alias or alias == "default":
        return []
    routers = [
        r if isinstance(r, str) else f"{type(r).__module__}.{type(r).__name__}"
        for r in getattr(settings, "DATABASE_ROUTERS", [])
    ]
    if ROUTER in routers:
        return []
    return [
        checks.Error(
            _(
                "ARCATURE['DATABASE'] = %(alias)r, but %(router)r is not in DATABASE_ROUTERS, "
                "so the job table would still be read and written on 'default'."
            )
            % {"alias": alias, "router": ROUTER},
            hint=_(
                "Add %(router)r to DATABASE_ROUTERS, then run "
                "`python manage.py migrate --database %(alias)s`."
            )
            % {"alias": alias, "router": ROUTER},
            id="arcature.E004",
        )
    ]


# Registered without the ``database`` tag on purpose: these read settings only, and
# database-tagged checks are skipped by plain ``manage.py check`` and ``runserver``,
# which is exactly where a developer should first hear about them.
@checks.register(checks.Tags.compatibility)
def check_databases(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The job table's database must be one workers can use at all (W001, E002).

    Whether SQLite's transaction mode suits several writers (W002) is a deployment
    question, asked by ``checks.writers`` where it matters.
    """
    from django_arcature.conf import job_database

    try:
        job_alias: str | None = job_database()
    except Exception:  # invalid ARCATURE settings: E001 reports them; check every alias
        job_alias = None
    return database_messages(settings.DATABASES, sqlite3.sqlite_version_info, job_alias)


#: The name Django's SQLite test creation gives an in-memory test database.
_TEST_MEMORY_DB = "file:memorydb_%(alias)s?mode=memory&cache=shared"


def database_messages(
    databases: Mapping[str, Mapping[str, Any]],
    sqlite_version: tuple[int, ...],
    job_alias: str | None = None,
) -> list[checks.CheckMessage]:
    """The check itself, on explicit arguments so tests need not swap out DATABASES.

    With ``job_alias`` (the job table's, ``ARCATURE["DATABASE"]``), W001 is about that
    alias only: an in-memory SQLite ``default`` beside jobs on a server of their own
    hides no job from the workers.
    """
    messages: list[checks.CheckMessage] = []
    for alias, config in databases.items():
        engine = str(config.get("ENGINE", ""))
        if not engine.endswith("sqlite3"):
            continue
        name = str(config.get("NAME", ""))
        if name == _TEST_MEMORY_DB % {"alias": alias} or job_alias not in (None, alias):
            # Django's test runner put its in-memory test database there (it does for
            # any SQLite alias without TEST["NAME"]) and runs the checks afterwards:
            # every `manage.py test` of a correct project would warn, and no worker
            # process runs against a test database anyway. An alias without the job
            # table has no jobs for workers to miss.
            pass
        elif name in (":memory:", "") or "mode=memory" in name:
            messages.append(
                checks.Warning(
                    _(
                        "DATABASES[%(alias)r] is an in-memory SQLite database: worker "
                        "processes cannot see its jobs."
                    )
                    % {"alias": alias},
                    hint=_("Use a file, e.g. NAME = BASE_DIR / 'db.sqlite3'."),
                    id="arcature.W001",
                )
            )
        if sqlite_version < (3, 35, 0):
            messages.append(
                checks.Error(
                    _(
                        "SQLite %(version)s is too old: claiming jobs needs UPDATE … RETURNING "
                        "(SQLite 3.35 or newer)."
                    )
                    % {"version": ".".join(map(str, sqlite_version))},
                    hint=_("Use a Python built against a newer SQLite."),
                    id="arcature.E002",
                )
            )
    return messages
