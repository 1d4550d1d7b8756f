"""``ArcatureBackend.check()``: misconfiguration reported by ``manage.py check``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_arcature.backend import ArcatureBackend
from django_arcature.tasks.backend import sqlite_mode_warnings
from tests.settings import INSTALLED_APPS

WITHOUT_ARCATURE = [app for app in INSTALLED_APPS if app != "django_arcature"]
DEFERRED_SQLITE = {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}


def backend(**options: Any) -> ArcatureBackend:
    return ArcatureBackend("default", {"OPTIONS": options})


def test_a_valid_configuration_has_nothing_to_report() -> None:
    assert backend(MAX_ATTEMPTS=5, TIMEOUT=30, RETRY={"base_seconds": 1}).check() == []


def test_app_not_installed_is_an_error() -> None:
    with override_settings(INSTALLED_APPS=WITHOUT_ARCATURE):
        messages = backend().check()
    assert [m.id for m in messages] == ["arcature.E101"]
    assert "'django_arcature' is not in INSTALLED_APPS" in messages[0].msg


def test_sqlite_in_deferred_mode_is_a_warning() -> None:
    [message] = sqlite_mode_warnings("default", DEFERRED_SQLITE)
    assert message.id == "arcature.W101"
    assert "IMMEDIATE" in (message.hint or "")
    immediate = {**DEFERRED_SQLITE, "OPTIONS": {"transaction_mode": "IMMEDIATE"}}
    assert sqlite_mode_warnings("default", immediate) == []
    assert sqlite_mode_warnings("default", {"ENGINE": "django.db.backends.postgresql"}) == []


def test_bad_options_are_errors_listing_every_problem() -> None:
    messages = backend(
        MAX_ATTEMPTS=0,
        TIMEOUT=0,
        RETRY={"factor": 0.5},
        TASK_OPTIONS={"app.tasks.f": {"max_attempts": "3", "retries": 2}},
        MODULES="myproject",
    ).check()
    assert {m.id for m in messages} == {"arcature.E102"}
    text = "\n".join(m.msg for m in messages)
    assert "MAX_ATTEMPTS" in text or "max_attempts" in text
    assert "['timeout'] must be None or a number of seconds above 0" in text
    assert "RetryPolicy.factor must be at least 1" in text
    assert "['retries']" in text
    assert "['MODULES'] must be a list" in text
    assert len(messages) == 6


@pytest.mark.django_db
def test_manage_py_check_runs_the_backend_check() -> None:
    config = {
        "default": {"BACKEND": "django_arcature.backend.ArcatureBackend", "OPTIONS": {"X": 1}}
    }
    with override_settings(TASKS=config), pytest.raises(SystemCheckError) as failure:
        call_command("check")
    assert "arcature.E102" in str(failure.value)
    assert "unknown keys ['X']" in str(failure.value)


def test_a_fresh_manage_py_check_runs_the_backend_check(tmp_path: Path) -> None:
    """In a fresh process nothing may have imported ``django.tasks``, whose import is
    what registers Django's check of the task backends: the app must make sure it
    runs, or a wrong ``OPTIONS`` key passes ``check`` and the worker unnoticed."""
    root = Path(__file__).resolve().parents[2]
    finished = subprocess.run(
        [sys.executable, "-m", "django", "check"],
        cwd=root,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.testapp.bad_tasks_settings",
            "PYTHONPATH": str(root),
            # The check reads settings only; a SQLite file spares MariaDB's own checks
            # a connection to a database that only the test run creates.
            "DATABASE_URL": f"sqlite:///{tmp_path / 'check.sqlite3'}",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 1, finished.stderr
    assert "(arcature.E102)" in finished.stderr
    assert "MAX_ATTEMPTZ" in finished.stderr
