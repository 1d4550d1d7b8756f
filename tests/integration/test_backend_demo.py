"""The example project's ``tasks_demo`` command: plain django.tasks code, end to end.

Real ``manage.py`` processes on a fresh database of the vendor under test:
migrate, then ``tasks_demo`` enqueues three tasks, runs ``arcature_worker
--burst`` until they finish and prints their ``TaskResult``s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2] / "example_project"


def manage(url: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(DATABASE_URL=url, PYTHONWARNINGS="error")
    done = subprocess.run(
        [sys.executable, str(PROJECT / "manage.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"manage.py {args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def demo_url(tmp_path: Path, django_db_blocker: Any) -> Iterator[str]:
    """An empty database for the example project, on the vendor under test."""
    if connection.vendor == "sqlite":
        yield f"sqlite:///{tmp_path / 'tasks-demo.sqlite3'}"
        return
    settings = connection.settings_dict
    name = settings["NAME"].removeprefix("test_") + "_tasks_demo"
    quoted = connection.ops.quote_name(name)
    scheme = "postgres" if connection.vendor == "postgresql" else "mysql"
    port = settings["PORT"] or ("5432" if scheme == "postgres" else "3306")
    with django_db_blocker.unblock():
        with connection._nodb_cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {quoted}")
            charset = " CHARACTER SET utf8mb4" if connection.vendor == "mysql" else ""
            cursor.execute(f"CREATE DATABASE {quoted}{charset}")
        yield (
            f"{scheme}://{settings['USER']}:{settings['PASSWORD']}"
            f"@{settings['HOST'] or '127.0.0.1'}:{port}/{name}"
        )
        with connection._nodb_cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {quoted}")


def test_tasks_demo_runs_django_tasks_end_to_end(demo_url: str) -> None:
    manage(demo_url, "migrate", "--verbosity", "0")
    out = manage(demo_url, "tasks_demo")
    assert out.count("READY") == 3  # as enqueued
    assert "word_count: SUCCESSFUL" in out
    assert "returned:   {'words': 9, 'characters': 43}" in out
    assert "greet: SUCCESSFUL" in out
    assert "returned:   'Hello, Ada!'" in out
    # Failed once, retried by the backend, and the context saw attempt 2.
    assert "flaky_fetch: SUCCESSFUL" in out
    assert "attempts:   2" in out
    assert "'fetched_on_attempt': 2" in out
    assert "did not answer (attempt 1) (builtins.ConnectionError)" in out
