"""The example project, run as a user would: real ``manage.py`` processes, a real worker.

A fresh database of its own (a SQLite file, or ``<test database>_example`` on
the server the suite runs against) is migrated, seeded with ``seed_demo`` and
drained by ``arcature_worker --burst``; the tests then read where each job
ended through the project's own ``demo_report --json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2] / "example_project"
PASSWORD = "demo-password-1234"


def manage(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(DATABASE_URL=url, DJANGO_SUPERUSER_PASSWORD=PASSWORD, PYTHONWARNINGS="error")
    result = subprocess.run(
        [sys.executable, str(PROJECT / "manage.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, (
        f"manage.py {' '.join(args)} exited {result.returncode}\n"
        f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
    )
    return result


def _server_url(database: str) -> str:
    settings = connection.settings_dict
    scheme = "postgres" if connection.vendor == "postgresql" else "mysql"
    return (
        f"{scheme}://{settings['USER']}:{settings['PASSWORD']}@{settings['HOST'] or '127.0.0.1'}"
        f":{settings['PORT'] or ('5432' if scheme == 'postgres' else '3306')}/{database}"
    )


@pytest.fixture(scope="module")
def example_url(tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any) -> Iterator[str]:
    """A database URL for the example project, on the vendor under test, empty."""
    if connection.vendor == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('example') / 'example.sqlite3'}"
        return
    name = connection.settings_dict["NAME"].removeprefix("test_") + "_example"
    quoted = connection.ops.quote_name(name)
    with django_db_blocker.unblock():
        with connection._nodb_cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {quoted}")
            charset = " CHARACTER SET utf8mb4" if connection.vendor == "mysql" else ""
            cursor.execute(f"CREATE DATABASE {quoted}{charset}")
        yield _server_url(name)
        with connection._nodb_cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {quoted}")


@pytest.fixture(scope="module")
def demo(example_url: str) -> dict[str, Any]:
    """Migrate, seed, drain with a real worker; return what each command printed and the jobs."""
    check = manage(example_url, "check")
    manage(example_url, "migrate", "--verbosity", "0")
    seed = manage(example_url, "seed_demo", "--slow-seconds", "0.5", "--superuser", "admin")
    worker = manage(example_url, "arcature_worker", "--burst", "--concurrency", "4")
    report = json.loads(manage(example_url, "demo_report", "--json").stdout)
    table = manage(example_url, "demo_report").stdout
    return {"check": check, "seed": seed, "worker": worker, "jobs": report, "table": table}


def _jobs(demo: dict[str, Any], task: str) -> list[dict[str, Any]]:
    return [job for job in demo["jobs"] if job["task"] == f"newsletter.{task}"]


def test_the_system_checks_pass_and_discover_the_jobs(demo: dict[str, Any]) -> None:
    assert "System check identified no issues" in demo["check"].stdout


def test_seed_demo_says_what_it_enqueued(demo: dict[str, Any]) -> None:
    out = demo["seed"].stdout
    assert "created superuser 'admin'" in out
    assert PASSWORD not in out  # given through the environment, so not printed
    assert "enqueued 3 welcome mail(s)" in out
    assert "unique: the same job" in out
    assert "11 job(s) pending. Now run: manage.py arcature_worker" in out


def test_plain_jobs_succeed_and_store_their_result(demo: dict[str, Any]) -> None:
    welcomes = [j for j in _jobs(demo, "send_welcome") if j["status"] == "succeeded"]
    assert len(welcomes) == 3
    for job in welcomes:
        assert job["attempts"] == 1
        assert job["result"]["first_time"] is True
        assert job["result"]["sent_to"].endswith("@example.com")


def test_async_jobs_run(demo: dict[str, Any]) -> None:
    feeds = _jobs(demo, "fetch_feed")
    assert [j["status"] for j in feeds] == ["succeeded", "succeeded"]
    assert {j["result"]["url"] for j in feeds} == {
        "https://example.com/feed.xml",
        "https://example.org/news.rss",
    }


def test_a_unique_job_enqueued_twice_is_one_job(demo: dict[str, Any]) -> None:
    digests = _jobs(demo, "rebuild_digest")
    assert len(digests) == 1
    assert digests[0]["status"] == "succeeded"
    assert digests[0]["result"]["subscribers"] == 3


def test_a_delayed_job_waits(demo: dict[str, Any]) -> None:
    [reminder] = _jobs(demo, "send_reminder")
    assert (reminder["status"], reminder["attempts"]) == ("pending", 0)


def test_a_job_that_fails_once_succeeds_on_its_retry(demo: dict[str, Any]) -> None:
    [sync] = _jobs(demo, "sync_to_crm")
    assert (sync["status"], sync["attempts"], sync["result"]) == ("succeeded", 2, 2)
    assert "ConnectionError: the CRM did not answer (attempt 1)" in sync["last_error"]


def test_a_permanent_failure_is_dead_at_once(demo: dict[str, Any]) -> None:
    [charge] = _jobs(demo, "charge_card")
    assert (charge["status"], charge["error_kind"], charge["attempts"]) == ("dead", "permanent", 1)
    assert charge["last_error"] == ("Permanent: card declined: 25000 cents is over the 10000 limit")


def test_the_slow_job_finishes(demo: dict[str, Any]) -> None:
    [export] = _jobs(demo, "export_archive")
    assert (export["status"], export["result"]) == ("succeeded", "exported after 0.5s")


def test_the_poison_row_ends_dead_malformed_with_a_readable_reason(demo: dict[str, Any]) -> None:
    [poison] = [j for j in _jobs(demo, "send_welcome") if j["status"] == "dead"]
    assert poison["payload"] == {"args": ["abc"], "kwargs": {}}
    assert (poison["error_kind"], poison["attempts"]) == ("malformed", 1)
    assert poison["last_error"] == (
        "payload does not fit the handler: argument 'subscriber_id' of send_welcome "
        "must be int, got str 'abc'"
    )


def test_nothing_is_left_running(demo: dict[str, Any]) -> None:
    statuses = [job["status"] for job in demo["jobs"]]
    assert "running" not in statuses
    assert len(statuses) == 11
    assert "stopped: 11 processed" in demo["worker"].stderr


def test_the_superuser_can_use_the_admin(demo: dict[str, Any], example_url: str) -> None:
    script = (
        "from django.test import Client\n"
        "from django.test.utils import setup_test_environment\n"
        "setup_test_environment()  # lets the test client's host in\n"
        "client = Client()\n"
        f"assert client.login(username='admin', password={PASSWORD!r})\n"
        "for url in ['/admin/', '/admin/django_arcature/job/', '/admin/newsletter/subscriber/']:\n"
        "    response = client.get(url)\n"
        "    print(url, response.status_code)\n"
    )
    out = manage(example_url, "shell", "--no-imports", "-c", script).stdout
    assert "/admin/ 200" in out
    assert "/admin/django_arcature/job/ 200" in out
    assert "/admin/newsletter/subscriber/ 200" in out


def test_the_example_has_no_missing_migrations(example_url: str) -> None:
    manage(example_url, "makemigrations", "--check", "--dry-run", "newsletter")


def test_the_reminder_was_scheduled_an_hour_ahead(demo: dict[str, Any]) -> None:
    line = next(x for x in demo["seed"].stdout.splitlines() if "enqueued reminder" in x)
    text = line.split("delayed until ")[1].removesuffix(" UTC")
    scheduled = datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    assert scheduled > datetime.now(UTC) + timedelta(minutes=50)


def test_the_text_report_shortens_between_words(demo: dict[str, Any]) -> None:
    """A long error is cut at a space and marked, never in the middle of a word."""
    rows = [line for line in demo["table"].splitlines() if line.startswith("newsletter.")]
    assert len(rows) == len(demo["jobs"])
    [malformed] = [row for row in rows if "malformed:" in row]
    assert malformed.endswith(" …")
    full = next(j["last_error"] for j in demo["jobs"] if j["error_kind"] == "malformed")
    shown = malformed.split("malformed: ", 1)[1].removesuffix(" …")
    assert full.startswith(shown)
    # The message goes on with a space or punctuation: the cut is not inside a word.
    assert not full[len(shown)].isalnum(), (shown, full)
