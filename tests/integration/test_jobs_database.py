"""The job table on a database of its own, tried the way a user sets it up.

Two fresh databases on the server under test (two files on SQLite): the app's
and the jobs'. ``migrate`` puts the job table only on the jobs database,
enqueue and the worker use it without being told, and leaving the router out
is refused by the system check before anything runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.db import connection

from tests.dburl import DEFAULT_URLS

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.heavy]


def _server_url(kind: str, name: str) -> str:
    return DEFAULT_URLS[kind].rsplit("/", 1)[0] + "/" + name


def _server_statements(url: str, *statements: str) -> None:
    """Run ``statements`` on the server of ``url`` (``{name}`` is its database name)."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if parts.scheme.startswith("postgres"):
        import psycopg

        with psycopg.connect(
            host=parts.hostname,
            port=parts.port,
            user=parts.username,
            password=parts.password,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            for statement in statements:
                conn.execute(statement.format(name=f'"{name}"', force=" WITH (FORCE)", utf8=""))
        return
    import MySQLdb

    conn = MySQLdb.connect(
        host=parts.hostname, port=parts.port, user=parts.username, password=parts.password
    )
    cursor = conn.cursor()
    for statement in statements:
        cursor.execute(statement.format(name=f"`{name}`", force="", utf8=" CHARACTER SET utf8mb4"))
    conn.close()


def _create(url: str) -> None:
    _server_statements(url, "DROP DATABASE IF EXISTS {name}{force}", "CREATE DATABASE {name}{utf8}")


def _drop(url: str) -> None:
    _server_statements(url, "DROP DATABASE IF EXISTS {name}{force}")


@pytest.fixture
def urls(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Two empty databases of the vendor under test."""
    vendor = connection.vendor
    if vendor == "sqlite":
        yield {
            "ARCATURE_APP_DB_URL": f"sqlite:///{tmp_path}/app.sqlite3",
            "ARCATURE_JOBS_DB_URL": f"sqlite:///{tmp_path}/jobs.sqlite3",
        }
        return
    kind = "postgres" if vendor == "postgresql" else "mysql"
    suffix = uuid.uuid4().hex[:8]
    made = {
        "ARCATURE_APP_DB_URL": _server_url(kind, f"arcature_sep_app_{suffix}"),
        "ARCATURE_JOBS_DB_URL": _server_url(kind, f"arcature_sep_jobs_{suffix}"),
    }
    for url in made.values():
        _create(url)
    try:
        yield made
    finally:
        for url in made.values():
            _drop(url)


def manage(urls: dict[str, str], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=REPO,
        env={
            **os.environ,
            **urls,
            **env,
            "DJANGO_SETTINGS_MODULE": "tests.settings_jobs_db",
            "PYTHONPATH": str(REPO),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def migrate_both(urls: dict[str, str]) -> None:
    """``migrate`` on default, then the job table onto ``jobs``, as the guide says."""
    for args in (["migrate"], ["migrate", "--database", "jobs", "django_arcature"]):
        done = manage(urls, *args)
        assert done.returncode == 0, done.stderr


def shell(urls: dict[str, str], code: str) -> str:
    done = manage(urls, "shell", "-c", code)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]  # Django 5.2+ may print an imports banner first


TABLES = (
    "from django.db import connections; "
    "print(sorted(t for t in connections[{alias!r}].introspection.table_names() "
    "if t.startswith('django_arcature')))"
)


def test_jobs_live_on_their_own_database(urls: dict[str, str]) -> None:
    migrate_both(urls)
    assert shell(urls, TABLES.format(alias="default")) == "[]"
    assert "django_arcature_job" in shell(urls, TABLES.format(alias="jobs"))

    job_id = shell(
        urls,
        "from django_arcature.models import Job; "
        "print(Job.objects.enqueue('tests.add', args=[2, 3]).pk)",
    )
    worker = manage(urls, "arcature_worker", "--burst")
    assert worker.returncode == 0, worker.stderr
    assert "1 succeeded" in worker.stderr, worker.stderr
    row = shell(
        urls,
        "from django.db import connections; c = connections['jobs'].cursor(); "
        "c.execute('SELECT status FROM django_arcature_job'); print(c.fetchall())",
    )
    assert "succeeded" in row
    status = shell(
        urls,
        f"from django_arcature.models import Job; print(Job.objects.get(pk='{job_id}').status)",
    )
    assert status == "succeeded"


def test_every_job_table_command_finds_the_jobs_database_by_itself(
    urls: dict[str, str],
) -> None:
    """No command that reads or writes the job table needs ``--database``: each one
    takes ``ARCATURE["DATABASE"]``, as the worker does (the job table is not on
    ``default`` here, so a command that looked there would fail)."""
    migrate_both(urls)
    shell(
        urls,
        "from django_arcature.models import Job; "
        "print(Job.objects.enqueue('tests.add', args=[2, 3], queue='mail').pk)",
    )
    status = manage(urls, "arcature_status", "--json")
    assert status.returncode == 0, status.stderr
    queues = {row["queue"]: row for row in json.loads(status.stdout)["queues"]}
    assert queues["mail"]["ready"] == 1
    paused = manage(urls, "arcature_queue", "pause", "mail")
    assert paused.returncode == 0, paused.stderr
    listed = manage(urls, "arcature_queue", "list")
    assert listed.returncode == 0, listed.stderr
    assert "mail" in listed.stdout
    pruned = manage(urls, "arcature_prune", "--dry-run", "--older-than", "1d")
    assert pruned.returncode == 0, pruned.stderr
    schedules = manage(urls, "arcature_schedules")
    assert schedules.returncode == 0, schedules.stderr


def test_a_jobs_database_without_the_router_is_refused(urls: dict[str, str]) -> None:
    done = manage(urls, "check", ARCATURE_NO_ROUTER="1")
    assert done.returncode != 0
    assert "arcature.E004" in done.stderr
    assert "django_arcature.routers.JobsRouter" in done.stderr


@pytest.mark.parametrize("command", [["check"], ["arcature_worker", "--burst"]])
def test_a_wrong_setting_next_to_the_router_is_reported_not_a_traceback(
    urls: dict[str, str], command: list[str]
) -> None:
    """The router reads the settings on every routing question, Django's model checks
    included: a wrong ``ARCATURE`` value must reach ``arcature.E001`` (what to change)
    rather than end the check run in a traceback from inside the router."""
    done = manage(urls, *command, ARCATURE_EXTRA='{"LEASE_SECONDS": 0}')
    assert done.returncode != 0
    assert "arcature.E001" in done.stderr, done.stderr
    assert "ARCATURE['LEASE_SECONDS'] = 0 is invalid" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_forgetting_to_migrate_the_jobs_database_names_the_command_that_does_it(
    urls: dict[str, str],
) -> None:
    """Plain ``migrate`` works on ``default`` only (and has nothing left to do there):
    a worker that finds no job table on the jobs database must say
    ``migrate --database jobs``, or the user runs a command that does nothing."""
    done = manage(urls, "migrate")
    assert done.returncode == 0, done.stderr
    for command in (["arcature_worker", "--burst"], ["arcature_status"]):
        stopped = manage(urls, *command)
        assert stopped.returncode == 1
        assert "does not exist in database 'jobs'" in stopped.stderr
        assert "run `python manage.py migrate --database jobs` first" in stopped.stderr
    enqueue = manage(
        urls,
        "shell",
        "-c",
        "from django_arcature.models import Job; Job.objects.enqueue('tests.add', args=[1, 2])",
    )
    assert enqueue.returncode == 1
    assert "run `python manage.py migrate --database jobs` first" in enqueue.stderr


def test_admin_counts_on_a_jobs_database_of_another_vendor(
    urls: dict[str, str], tmp_path: Path
) -> None:
    """The app on SQLite, the jobs on the server under test: the admin's bounded
    counts compiled their SQL for ``default`` (double-quoted names) and sent it to
    the jobs database, which MariaDB refused as a syntax error."""
    mixed = {**urls, "ARCATURE_APP_DB_URL": f"sqlite:///{tmp_path}/app-mixed.sqlite3"}
    migrate_both(mixed)
    counted = shell(
        mixed,
        "from django_arcature.models import Job; "
        "from django_arcature.db.counts import bounded_count, planner_estimate; "
        "Job.objects.enqueue('tests.add', args=[2, 3]); "
        "planner_estimate(Job.objects.all()); "
        "print(bounded_count(Job.objects.filter(status='pending'), 10))",
    )
    assert counted == "(1, False)"


def test_the_metrics_view_reads_the_jobs_database(urls: dict[str, str]) -> None:
    """``path("metrics", metrics)`` as docs/observability.md wires it: the queue
    gauges come from ``ARCATURE["DATABASE"]``, not from ``default``."""
    migrate_both(urls)
    line = shell(
        urls,
        "from django_arcature.models import Job; "
        "from django.test import RequestFactory; "
        "from django_arcature.contrib.prometheus.views import metrics; "
        "Job.objects.enqueue('tests.add', args=[2, 3], queue='mail'); "
        "body = metrics(RequestFactory().get('/metrics')).content.decode(); "
        "print([l for l in body.splitlines() if l.startswith('arcature_queue_ready_jobs{')])",
    )
    assert 'arcature_queue_ready_jobs{queue="mail"} 1.0' in line, line
