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


def test_a_fresh_manage_py_check_process_runs_the_backend_check() -> None:
    # In a new project nothing imports django.tasks before `manage.py check`, and
    # Django registers its task-backend checks only when django.tasks is imported:
    # the app must make sure it is, or a wrong OPTIONS passes the check unnoticed.
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONWARNINGS"] = "error"
    done = subprocess.run(
        [sys.executable, "-m", "django", "check"],
        env={**env, "DJANGO_SETTINGS_MODULE": "tests.integration.check_bad_tasks_settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "arcature.E102" in done.stderr
    assert "['max_attempts'] must be a whole number, at least 1" in done.stderr
