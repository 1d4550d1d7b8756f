"""``arcature.W002`` (SQLite in DEFERRED mode) is said where it matters, not by every command.

A single process never meets the "database is locked" failure that DEFERRED
transactions cause; it takes a second writer, which a running worker is. So
plain commands (``check``, ``migrate``, ``runserver``) stay quiet, while the
worker says it when it starts and ``check --deploy`` lists it with the other
things to settle before production.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    # Its commands run a project on a SQLite file of their own (the warning is
    # about SQLite): on PostgreSQL or MariaDB it would repeat the same runs.
    pytest.mark.only_on(
        "sqlite",
        reason="it runs its own project on a SQLite file, whatever the database under test",
    ),
]


def django(database: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.testapp.deferred_settings",
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": f"sqlite:///{database}",
    }
    finished = subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    return finished


def test_plain_commands_do_not_warn(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    for command in (["check"], ["migrate", "--verbosity", "0"]):
        finished = django(database, *command)
        assert "arcature.W002" not in finished.stdout + finished.stderr, command


def test_check_deploy_says_when_it_matters(tmp_path: Path) -> None:
    finished = django(tmp_path / "db.sqlite3", "check", "--deploy")
    output = finished.stdout + finished.stderr
    assert "(arcature.W002)" in output
    assert "two processes write at the same time" in output
    assert "transaction_mode" in output


def test_the_worker_says_it_when_it_starts(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    django(database, "migrate", "--verbosity", "0")
    finished = django(database, "arcature_worker", "--burst")
    assert finished.stderr.count("arcature.W002") == 1, finished.stderr
    assert "two processes write at the same time" in finished.stderr
    assert "stopped: 0 processed" in finished.stderr
