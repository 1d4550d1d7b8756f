"""Set up a fresh database for the installed package and give the tests a worker.

Plain pytest, no pytest-django: the worker runs as a separate process and must see
the same database, so the suite migrates a real database of its own instead of
Django's per-test one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smoke_site.settings")


def _recreate_database() -> None:
    if os.environ.get("SMOKE_DATABASE") == "postgres":
        import psycopg

        name = os.environ.get("SMOKE_DB_NAME", "arcature_smoke")
        with psycopg.connect(
            "postgresql://arcature:arcature@127.0.0.1:5432/postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    else:
        for leftover in HERE.glob("smoke.sqlite3*"):
            leftover.unlink()


def pytest_configure(config: pytest.Config) -> None:
    """Before collection: the test modules import models, which needs the app registry."""
    import django
    from django.core.management import call_command

    _recreate_database()
    django.setup()
    call_command("migrate", verbosity=0)


@pytest.fixture
def run_worker() -> Callable[[], subprocess.CompletedProcess[str]]:
    """``manage.py arcature_worker --burst`` in a child process, as an operator runs it."""

    def run() -> subprocess.CompletedProcess[str]:
        from django.db import connections

        connections.close_all()
        return subprocess.run(
            [sys.executable, str(HERE / "manage.py"), "arcature_worker", "--burst"],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )

    return run
