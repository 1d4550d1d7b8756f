"""System checks: a bad ``ARCATURE`` setting or database option stops startup with a fix."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks

from .conf import validate


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E001: every ``ARCATURE`` key known and every value in range."""
    return [
        checks.Error(problem, hint="See the Settings section of django-arcature's README.", id="arcature.E001")
        for problem in validate(getattr(settings, "ARCATURE", None))
    ]


@checks.register(checks.Tags.database)
def check_databases(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The job table's database must be one we support, in a mode that is safe for workers."""
    messages: list[checks.CheckMessage] = []
    for alias, config in settings.DATABASES.items():
        engine = config.get("ENGINE", "")
        if engine.endswith("sqlite3"):
            if config.get("NAME") in (":memory:", "") or "mode=memory" in str(config.get("NAME")):
                messages.append(
                    checks.Warning(
                        f"DATABASES[{alias!r}] is an in-memory SQLite database: worker "
                        "processes cannot see its jobs.",
                        hint="Use a file, e.g. NAME = BASE_DIR / 'db.sqlite3'.",
                        id="arcature.W001",
                    )
                )
            if sqlite3.sqlite_version_info < (3, 35, 0):
                messages.append(
                    checks.Error(
                        f"SQLite {sqlite3.sqlite_version} is too old: claiming jobs needs "
                        "UPDATE … RETURNING (SQLite 3.35 or newer).",
                        hint="Use a Python built against a newer SQLite.",
                        id="arcature.E002",
                    )
                )
            options = config.get("OPTIONS", {})
            if options.get("transaction_mode") != "IMMEDIATE":
                messages.append(
                    checks.Warning(
                        f"DATABASES[{alias!r}] uses SQLite's default DEFERRED transactions: "
                        "with several worker processes, writes inside transaction.atomic() "
                        "can fail with 'database is locked'.",
                        hint=f"Set DATABASES[{alias!r}]['OPTIONS']['transaction_mode'] = "
                        "'IMMEDIATE' (and a 'timeout' of 20 or more).",
                        id="arcature.W002",
                    )
                )
    return messages
