"""``manage.py arcature_bench`` end to end, with small sizes, on the test database.

The command starts its own worker processes, so it runs as a subprocess against
the committed test database, like a user's ``manage.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from django_arcature.bench.jobs import TASK
from django_arcature.bench.measure import PICKUP_STEPS
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
    for key in (
        "enqueue_single_per_s",
        "enqueue_bulk_per_s",
        "enqueue_in_transaction_p50_us",
        "enqueue_in_transaction_p99_us",
        "pickup_p50_ms",
        "pickup_p95_ms",
    ):
        assert results[key] > 0, key
    assert results["pickup_p95_ms"] >= results["pickup_p50_ms"]
    assert results["enqueue_in_transaction_p99_us"] >= results["enqueue_in_transaction_p50_us"]
    # With its commit: the difference against the same transaction without the enqueue.
    assert isinstance(results["enqueue_in_transaction_with_commit_p50_us"], float)
    assert results["transaction_alone_p50_us"] > 0
    assert set(results["drain_per_s"]) == {"1", "2"}
    assert all(rate > 0 for rate in results["drain_per_s"].values())
    # CPU per job, the workers' (Linux) and PostgreSQL's backends' (server on this host).
    assert set(results["drain_worker_cpu_us_per_job"]) == {"1", "2"}
    assert all(us > 0 for us in results["drain_worker_cpu_us_per_job"].values())
    if connection.vendor == "postgresql":
        assert set(results["drain_server_cpu_us_per_job"]) == {"1", "2"}
        assert all(us > 0 for us in results["drain_server_cpu_us_per_job"].values())
    else:
        assert results["drain_server_cpu_us_per_job"] == {}
    assert len(results["load_average"].split()) == 3
    # The pickup's break-down: every sample traced by the worker, its steps in order.
    breakdown = results["pickup_breakdown"]
    assert sum(breakdown["woken"].values()) == 3
    assert list(breakdown["steps_p50_ms"]) == [
        "enqueue_python",
        "enqueue_commit",
        "delivery",
        "wake_up",
        "to_claim",
        "claim_round_trip",
        "hand_off",
    ] or breakdown["woken"] == {"poll": 3}
    assert results["pickup_handler_p50_ms"] > 0
    assert results["pickup_handler_p95_ms"] >= results["pickup_handler_p50_ms"]
    # Its rows are gone; the user's job is untouched.
    assert not Job.objects.filter(task_name=TASK).exists()
    assert Job.objects.get(pk=mine.pk).status == JobStatus.PENDING


# The table's layout is the command's, not the database's; the bench itself runs on
# every database in test_json_results_and_only_its_own_rows_are_touched.
@pytest.mark.only_on("sqlite", reason="the table's layout does not depend on the database")
def test_table_output() -> None:
    done = bench(*SMALL)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"django-arcature on {connection.vendor}")
    assert lines[1].startswith("load average: ")
    labels = [re.split(r"\s{2,}", line.strip())[0] for line in lines[2:]]
    assert labels[:9] == [
        "enqueue, one by one",
        "enqueue in a transaction p50 / p99",
        "enqueue, bulk",
        "drain, 1 worker process",
        "drain, 2 worker processes",
        "CPU per job, 1 worker process",
        "CPU per job, 2 worker processes",
        "idle pickup p50 / p95",
        "to the handler thread",
    ]
    # The break-down's steps, one line each, in order. When every sample was woken by
    # the worker's poll (a missed hint on a loaded machine, as the JSON test above
    # allows) there are no steps to show, and no step line at all.
    steps = [f"{name} p50" for name, _, _ in PICKUP_STEPS]
    assert labels[9:] in (steps, []), labels
    assert "measuring: drain with 2" in done.stderr  # progress goes to stderr


def test_refuses_a_queue_holding_jobs_it_did_not_create() -> None:
    foreign = Job.objects.enqueue("tests.noop", queue="arcature-bench")
    done = bench(*SMALL)
    assert done.returncode == 1
    assert "holds 1 job(s) the benchmark did not create" in done.stderr
    assert Job.objects.get(pk=foreign.pk).status == JobStatus.PENDING
    assert not Job.objects.filter(task_name=TASK).exists()


def routed_bench(
    settings: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    connection.close()
    return subprocess.Popen(
        [sys.executable, "-m", "django", "arcature_bench", *args],
        cwd=REPO,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": settings,
            "ARCATURE_USE_TEST_DATABASE": "1",
            "DATABASE_URL": database_url(),
            "PYTHONPATH": str(REPO),
            **(env or {}),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


ROUTED = "tests.testapp.routed_logging_settings"
TINY = ("--jobs", "50", "--single", "5", "--samples", "2", "--workers", "1", "--json")


# Where the worker's log goes is the project's LOGGING, not the database; the health
# file that tells the bench its workers are up is read on every database by the
# other runs here.
@pytest.mark.only_on("sqlite", reason="log routing does not depend on the database")
@pytest.mark.parametrize("route", ["file", "null"])
def test_a_project_logging_that_routes_the_worker_log_elsewhere(route: str, tmp_path: Path) -> None:
    """The bench knew a worker was up from " started" in its output: with the project's
    LOGGING sending django_arcature to a file or nowhere it waited, then failed with
    "a benchmark worker did not start". Readiness is now the worker's health file."""
    log = tmp_path / "arcature.log"
    env = {"ARCATURE_TEST_ROUTED_LOG": str(log)} if route == "file" else {}
    proc = routed_bench(ROUTED, *TINY, env=env)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["drain_per_s"]["1"] > 0
    assert "did not start" not in stderr
    if route == "file":
        assert " started" in log.read_text()  # the log went where the project sent it
    assert not Job.objects.filter(task_name=TASK).exists()


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.update(int(child) for child in text)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_mid_run_stops_its_workers_and_deletes_its_rows() -> None:
    """A supervisor's or a CI timeout's SIGTERM killed the bench outright: its rows
    stayed in the scratch queue (the next run then refused it) and its worker
    processes kept running."""
    proc = routed_bench("tests.settings", "--jobs", "20000", "--single", "5", "--workers", "1")
    children: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        # Its worker runs and the drain's jobs are in: both would be left behind.
        while not (children and Job.objects.filter(task_name=TASK).exists()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no benchmark worker started"
            children = _children(proc.pid)
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode != 0
        assert "Traceback" not in stderr, stderr
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in children), "a benchmark worker kept running"
        assert not Job.objects.filter(task_name=TASK).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        Job.objects.filter(task_name=TASK).delete()
