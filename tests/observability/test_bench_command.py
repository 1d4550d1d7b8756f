"""``manage.py arcature_bench`` end to end, with small sizes, on the test database.

The command starts its own worker processes, so it runs as a subprocess against
the committed test database, like a user's ``manage.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from django_arcature.bench.jobs import TASK
from django_arcature.models import Job, JobStatus
from tests.dburl import database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

REPO = Path(__file__).resolve().parents[2]


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    connection.close()  # commit what the test wrote before the command looks
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "ARCATURE_USE_TEST_DATABASE": "1",
        "DATABASE_URL": database_url(),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-m", "django", "arcature_bench", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


SMALL = ("--jobs", "200", "--single", "20", "--samples", "3", "--workers", "2")


def test_json_results_and_only_its_own_rows_are_touched() -> None:
    mine = Job.objects.enqueue("tests.noop")  # another queue: must survive
    other_in_scratch_before = Job.objects.filter(queue="arcature-bench").count()
    assert other_in_scratch_before == 0
    done = bench(*SMALL, "--json")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["database"] == connection.vendor
    for key in ("enqueue_single_per_s", "enqueue_bulk_per_s", "pickup_p50_ms", "pickup_p95_ms"):
        assert results[key] > 0, key
    assert results["pickup_p95_ms"] >= results["pickup_p50_ms"]
    assert set(results["drain_per_s"]) == {"1", "2"}
    assert all(rate > 0 for rate in results["drain_per_s"].values())
    # Its rows are gone; the user's job is untouched.
    assert not Job.objects.filter(task_name=TASK).exists()
    assert Job.objects.get(pk=mine.pk).status == JobStatus.PENDING


def test_table_output() -> None:
    done = bench(*SMALL)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"django-arcature on {connection.vendor}")
    labels = [line.split("  ")[1] for line in lines[1:]]
    assert labels == [
        "enqueue, one by one",
        "enqueue, bulk",
        "drain, 1 worker process",
        "drain, 2 worker processes",
        "idle pickup p50 / p95",
    ]
    assert "measuring: drain with 2" in done.stderr  # progress goes to stderr


def test_refuses_a_queue_holding_jobs_it_did_not_create() -> None:
    foreign = Job.objects.enqueue("tests.noop", queue="arcature-bench")
    done = bench(*SMALL)
    assert done.returncode == 1
    assert "holds 1 job(s) the benchmark did not create" in done.stderr
    assert Job.objects.get(pk=foreign.pk).status == JobStatus.PENDING
    assert not Job.objects.filter(task_name=TASK).exists()
