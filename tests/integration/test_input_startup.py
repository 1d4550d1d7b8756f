"""Starting the worker or ``arcature_status`` before ``migrate`` (issue 10, defect 8).

Before: the worker retried "no such table" every 5 s forever, even with
``--burst``, and never said what to do; ``arcature_status`` printed a raw
traceback. Now both stop at once with one line naming ``python manage.py
migrate`` and a non-zero exit. Run as real processes against a database that
is really empty (a fresh SQLite file, or a fresh database on the server).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from tests.dburl import database_url

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def _server_admin(url: str) -> tuple[str, dict[str, object]]:
    parts = urlsplit(url)
    return parts.scheme, {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port,
        "user": parts.username or "",
        "password": parts.password or "",
    }


def _create_database(url: str, name: str) -> None:
    """A new, empty database ``name`` on the server of ``url`` (dropped first if left over)."""
    scheme, login = _server_admin(url)
    if scheme.startswith("postgres"):
        import psycopg

        with psycopg.connect(
            host=str(login["host"]),
            port=int(login["port"] or 5432),  # type: ignore[call-overload]
            user=str(login["user"]),
            password=str(login["password"]),
            dbname="postgres",
            autocommit=True,
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return
    import MySQLdb

    conn = MySQLdb.connect(
        host=str(login["host"]),
        port=int(login["port"] or 3306),  # type: ignore[call-overload]
        user=str(login["user"]),
        password=str(login["password"]),
    )
    try:
        cursor = conn.cursor()
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    finally:
        conn.close()


def _drop_database(url: str, name: str) -> None:
    scheme, login = _server_admin(url)
    if scheme.startswith("postgres"):
        import psycopg

        with psycopg.connect(
            host=str(login["host"]),
            port=int(login["port"] or 5432),  # type: ignore[call-overload]
            user=str(login["user"]),
            password=str(login["password"]),
            dbname="postgres",
            autocommit=True,
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return
    import MySQLdb

    conn = MySQLdb.connect(
        host=str(login["host"]),
        port=int(login["port"] or 3306),  # type: ignore[call-overload]
        user=str(login["user"]),
        password=str(login["password"]),
    )
    try:
        conn.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()


@pytest.fixture
def empty_database(tmp_path: Path) -> Iterator[str]:
    """The URL of a database nobody has migrated, on the vendor under test."""
    if connection.vendor == "sqlite":
        yield f"sqlite:///{tmp_path / 'never-migrated.sqlite3'}"
        return
    url = database_url()
    parts = urlsplit(url)
    name = parts.path.rsplit("/", 1)[-1] + "_fresh"
    _create_database(url, name)
    try:
        yield urlunsplit(parts._replace(path="/" + name))
    finally:
        _drop_database(url, name)


def run(url: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": url,
    }
    env.pop("ARCATURE_USE_TEST_DATABASE", None)
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_stopped_with_one_line_naming(
    finished: subprocess.CompletedProcess[str], remedy: str
) -> None:
    """A non-zero exit, no traceback, and one line of output that names ``remedy``."""
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert remedy in lines[0], output


def assert_one_line_naming_migrate(finished: subprocess.CompletedProcess[str]) -> None:
    assert_stopped_with_one_line_naming(finished, "python manage.py migrate")


def test_the_worker_refuses_to_start_on_a_database_never_migrated(empty_database: str) -> None:
    finished = run(empty_database, "arcature_worker", "--burst")

    assert_one_line_naming_migrate(finished)
    assert "django_arcature" in finished.stderr


def test_the_worker_without_burst_also_stops_at_once(empty_database: str) -> None:
    finished = run(empty_database, "arcature_worker", timeout=60)

    assert_one_line_naming_migrate(finished)


def test_status_refuses_with_one_line_instead_of_a_traceback(empty_database: str) -> None:
    finished = run(empty_database, "arcature_status")

    assert_one_line_naming_migrate(finished)


@pytest.mark.parametrize(
    "command",
    [
        ["arcature_queue", "list"],
        ["arcature_queue", "pause", "email"],
        ["arcature_prune", "--older-than", "1d"],
        ["arcature_schedules"],
        ["arcature_bench", "--jobs", "5"],
    ],
)
def test_every_job_table_command_refuses_a_database_never_migrated(
    empty_database: str, command: list[str]
) -> None:
    """The other commands that read or write the job tables stopped in a
    "no such table" traceback; they say what to run, as the worker does."""
    assert_one_line_naming_migrate(run(empty_database, *command))


def test_a_partly_migrated_database_is_refused_too(empty_database: str) -> None:
    migrated = run(empty_database, "migrate", "django_arcature", "0001", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr

    worker = run(empty_database, "arcature_worker", "--burst")
    status = run(empty_database, "arcature_status")

    assert_one_line_naming_migrate(worker)
    assert "unapplied" in worker.stderr
    assert_one_line_naming_migrate(status)


def test_a_migrated_database_starts_normally(empty_database: str) -> None:
    migrated = run(empty_database, "migrate", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr

    worker = run(empty_database, "arcature_worker", "--burst")
    status = run(empty_database, "arcature_status")

    assert worker.returncode == 0, worker.stderr
    assert status.returncode == 0, status.stderr
    assert "No pending or running jobs." in status.stdout


def _with_database_name(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def _with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    login = f"{parts.username}:{password}@{parts.hostname}"
    return urlunsplit(parts._replace(netloc=f"{login}:{parts.port}" if parts.port else login))


def assert_one_line_naming_databases(finished: subprocess.CompletedProcess[str]) -> None:
    assert_stopped_with_one_line_naming(finished, "DATABASES['default']")


SERVERS_ONLY = pytest.mark.only_on(
    "postgresql", "mysql", reason="SQLite creates a missing database file; no login to refuse"
)


@SERVERS_ONLY
def test_a_database_that_does_not_exist_stops_the_worker_with_what_to_change() -> None:
    """Before: the worker logged "database error … retrying" every few seconds, forever."""
    url = _with_database_name(database_url(), "arcature_no_such_database")

    worker = run(url, "arcature_worker", timeout=60)
    status = run(url, "arcature_status", timeout=60)

    assert_one_line_naming_databases(worker)
    assert "arcature_no_such_database" in worker.stderr
    assert_one_line_naming_databases(status)


@SERVERS_ONLY
def test_a_wrong_password_stops_the_worker_with_what_to_change() -> None:
    worker = run(_with_password(database_url(), "not-the-password"), "arcature_worker", timeout=60)

    assert_one_line_naming_databases(worker)
    assert "refused the connection" in worker.stderr


# Enqueueing before ``migrate`` (found trying the tutorial as a new user): the
# database's own error ("no such table: django_arcature_job", "relation ... does not
# exist", "Table ... doesn't exist") did not say what to do. The error is kept, with
# its type, so code that catches DatabaseError still does; a note names the remedy.
_ENQUEUE_ONE = "from tests.testapp.jobs import add; add.enqueue(1, 2)"
_ENQUEUE_MANY = "from tests.testapp.jobs import add; add.enqueue_many([(1, 2), (3, 4)])"


@pytest.mark.parametrize("code", [_ENQUEUE_ONE, _ENQUEUE_MANY], ids=["enqueue", "enqueue_many"])
def test_enqueue_before_migrate_says_to_run_migrate(empty_database: str, code: str) -> None:
    finished = run(empty_database, "shell", "-c", code)

    assert finished.returncode != 0, finished.stdout
    lines = finished.stderr.strip().splitlines()
    # The driver's error as Django raises it (PostgreSQL adds the statement's lines) ...
    errors = [line for line in lines if line.startswith("django.db.utils.")]
    assert len(errors) == 1, finished.stderr
    assert "django_arcature_job" in errors[0], finished.stderr
    # ... and, last, the note saying what to do.
    assert lines[-1] == (
        "django-arcature: the job table 'django_arcature_job' does not exist in database "
        "'default': run `python manage.py migrate` first."
    ), finished.stderr
