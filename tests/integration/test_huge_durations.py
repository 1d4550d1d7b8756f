"""Durations past the bound: one clear error at every entry point, the same on every database.

A duration is at most ``MAX_DURATION`` (100 years). Beyond it, Python's
``timedelta`` overflows (a traceback out of ``manage.py check``), or the
database's own clock arithmetic does: PostgreSQL said "timestamp out of range"
for an age of thousands of years while SQLite silently matched nothing.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.test import override_settings

from django_arcature.core.durations import MAX_DURATION, parse_duration
from django_arcature.db import DatabaseNow
from django_arcature.models import Job, JobStatus
from tests.dburl import database_url

REPO = Path(__file__).resolve().parents[2]

#: Past the bound in every way a value can be: a string whose seconds overflow
#: ``timedelta``, an int too large for a float, a timedelta of millions of years, and
#: thousands of years that ``timedelta`` still holds but a database cutoff does not.
HUGE = ["99999999999999999w", 10**400, timedelta(days=999_999_999), "260000w", "36526d"]


@pytest.mark.parametrize("raw", HUGE, ids=["string", "int", "timedelta", "millennia", "edge"])
def test_parse_duration_refuses_past_the_bound_with_value_error(raw: object) -> None:
    with pytest.raises(ValueError, match="at most 100 years"):
        parse_duration(raw)


def test_the_bound_itself_is_accepted() -> None:
    assert timedelta(days=36525) == MAX_DURATION
    assert parse_duration("36525d") == MAX_DURATION
    assert parse_duration(MAX_DURATION) == MAX_DURATION


@pytest.mark.parametrize(
    "arcature",
    [
        {"RETENTION": {"dead": "99999999999999999w"}},
        {"RETENTION": {"succeeded": "260000w"}},
        {"RETENTION": {"queues": {"email": {"dead": 10**400}}}},
        {"RETENTION": {"interval": "99999999999999999d"}},
        {"QUEUES": {"email": {"rate": "1/99999999999999999w"}}},
        {"QUEUES": {"email": {"rate": "5/260000w"}}},
    ],
    ids=["retention", "retention-millennia", "retention-queue", "interval", "rate", "rate-2"],
)
@pytest.mark.django_db
def test_manage_py_check_reports_a_huge_setting_as_e001(arcature: dict[str, object]) -> None:
    with (
        override_settings(ARCATURE=arcature),
        pytest.raises(SystemCheckError, match=r"arcature\.E001") as failed,
    ):
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    assert "at most 100 years" in str(failed.value)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("age", ["99999999999999999w", "260000w", "36526d"])
def test_prune_older_than_past_the_bound_is_a_command_error(age: str) -> None:
    with pytest.raises(CommandError, match=r"--older-than: .*at most 100 years"):
        call_command("arcature_prune", "--dry-run", "--older-than", age, stdout=io.StringIO())
    with pytest.raises(CommandError, match=r"--older-than: .*at most 100 years"):
        call_command("arcature_prune", "--older-than", age, stdout=io.StringIO())


@pytest.mark.django_db(transaction=True)
def test_prune_older_than_the_bound_runs_on_every_database() -> None:
    """The largest accepted age is a valid cutoff for the database's clock arithmetic."""
    (job,) = Job.objects.enqueue_many("tests.noop", [()])
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.DEAD, finished_at=DatabaseNow(-86400.0), unique_key=None
    )
    out = io.StringIO()
    call_command("arcature_prune", "--dry-run", "--older-than", "36525d", stdout=out)
    assert "would delete 0 jobs in all" in out.getvalue()
    out = io.StringIO()
    call_command("arcature_prune", "--older-than", "36525d", stdout=out)
    assert "deleted 0 jobs in all" in out.getvalue()
    assert Job.objects.filter(pk=job.pk).exists()
    with override_settings(ARCATURE={"RETENTION": {"dead": "36525d"}}):
        out = io.StringIO()
        call_command("arcature_prune", stdout=out)
    assert "deleted 0 jobs in all" in out.getvalue()


@pytest.mark.parametrize("option", ["--max-runtime", "--drain-timeout"])
@pytest.mark.parametrize("value", ["99999999999999999w", "260000w"])
def test_worker_duration_option_past_the_bound_is_a_usage_error(option: str, value: str) -> None:
    with pytest.raises(CommandError, match=rf"argument {option}: .*at most 100 years"):
        call_command("arcature_worker", option, value, stdout=io.StringIO())


@pytest.mark.django_db(transaction=True)
def test_the_real_command_line_exits_with_usage_not_a_traceback() -> None:
    """As an operator types it: exit status 2 and one line, no ``OverflowError``."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "ARCATURE_USE_TEST_DATABASE": "1",
        "DATABASE_URL": database_url(),
        "PYTHONPATH": str(REPO),
    }
    base = [sys.executable, "-m", "django"]
    for args, status in [
        (["arcature_worker", "--max-runtime", "99999999999999999w"], 2),
        (["arcature_prune", "--older-than", "99999999999999999w"], 1),
    ]:
        done = subprocess.run(
            base + args, cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == status, done.stderr
        assert "Traceback" not in done.stderr
        assert "OverflowError" not in done.stderr
        assert "at most 100 years" in done.stderr
