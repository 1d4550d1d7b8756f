"""One clock: everything compared with the database's now is computed on it (issue 10, defect 10).

Before: an enqueue's ``available_at`` (and a delay), a retry's next time and
prune's cutoff were computed on the app server's clock and then compared, in
SQL, with the database's. An app server whose clock ran an hour ahead made
every new job wait an hour; one running behind made delayed jobs and retries
run early, and prune deleted rows that had only just finished.

The app server's clock is moved here by replacing ``django.utils.timezone.now``
(the only clock the package reads in Python); the database's clock is the
server's own.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_arcature.db import now_sql
from django_arcature.models import Job
from django_arcature.testing import run_job
from tests.testapp.jobs import noop

pytestmark = pytest.mark.django_db

HOUR = 3600.0
#: Slack for the time the test itself takes between two clock readings.
SLACK = 5.0

Skew = Callable[[float], None]


@pytest.fixture
def app_clock(monkeypatch: pytest.MonkeyPatch) -> Skew:
    """``app_clock(seconds)`` moves the app server's clock by ``seconds`` from the real time."""
    real_now = timezone.now

    def skew(seconds: float) -> None:
        monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(seconds=seconds))

    return skew


def database_now() -> datetime:
    """The database server's clock, read with the package's own SQL for it."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {now_sql(connection.vendor)}", [])
        raw = cursor.fetchone()[0]
    # SQLite gives text in UTC, MariaDB a naive UTC datetime, PostgreSQL an aware one.
    value: datetime = datetime.fromisoformat(raw) if isinstance(raw, str) else raw
    return value if timezone.is_aware(value) else value.replace(tzinfo=UTC)


def seconds_until_available(job: Job) -> float:
    available_at = Job.objects.values_list("available_at", flat=True).get(pk=job.pk)
    return (available_at - database_now()).total_seconds()


def claimable() -> list[Any]:
    return [claimed.id for claimed in Job.objects.claim("w1", lease=60, batch=100)]


@pytest.mark.parametrize("skew", [HOUR, -HOUR])
def test_a_job_without_delay_is_available_at_once_whatever_the_app_clock(
    app_clock: Skew, skew: float
) -> None:
    app_clock(skew)
    job = noop.enqueue()
    many = noop.enqueue_many([[], []])

    assert abs(seconds_until_available(job)) < SLACK
    assert set(claimable()) == {job.id, *(j.id for j in many)}


@pytest.mark.parametrize("skew", [HOUR, -HOUR])
def test_a_delay_counts_from_the_database_clock(app_clock: Skew, skew: float) -> None:
    app_clock(skew)
    job = noop.using(delay=600).enqueue()
    many = noop.using(delay=600).enqueue_many([[], []])

    assert 600 - SLACK < seconds_until_available(job) <= 600 + SLACK
    assert 600 - SLACK < seconds_until_available(many[1]) <= 600 + SLACK
    assert claimable() == []


@override_settings(ARCATURE={"RETRY_BASE_SECONDS": 600, "RETRY_JITTER": 0, "POLL_INTERVAL": 0.05})
@pytest.mark.parametrize("skew", [HOUR, -HOUR])
def test_a_retry_waits_its_backoff_on_the_database_clock(app_clock: Skew, skew: float) -> None:
    app_clock(skew)
    job = Job.objects.enqueue("tests.always_fails")

    ran = run_job(job)

    assert ran.status == "pending"
    assert 600 - SLACK < seconds_until_available(ran) <= 600 + SLACK
    assert claimable() == []


def test_prune_measures_age_on_the_database_clock(app_clock: Skew) -> None:
    job = noop.enqueue()
    run_job(job)
    assert Job.objects.get(pk=job.pk).status == "succeeded"

    app_clock(2 * HOUR)
    deleted = Job.objects.prune(older_than=timedelta(hours=1))

    assert deleted == 0
    assert Job.objects.filter(pk=job.pk).exists()


def test_status_tells_ready_from_scheduled_on_the_database_clock(
    app_clock: Skew, capsys: pytest.CaptureFixture[str]
) -> None:
    noop.using(delay=600).enqueue()
    noop.enqueue()
    app_clock(HOUR)

    call_command("arcature_status", "--json")

    out = capsys.readouterr().out
    assert '"ready": 1' in out
    assert '"scheduled": 1' in out


@override_settings(USE_TZ=False)
def test_use_tz_false_is_refused_by_a_system_check() -> None:
    """Naive local times in the job table would meet the database's UTC clock."""
    errors = [m for m in checks.run_checks() if m.id == "arcature.E003"]

    assert len(errors) == 1
    assert "USE_TZ = True" in errors[0].msg + (errors[0].hint or "")


def test_use_tz_true_passes_the_check() -> None:
    assert not [m for m in checks.run_checks() if m.id == "arcature.E003"]
