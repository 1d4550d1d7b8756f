"""Real ``manage.py arcature_worker`` processes: draining, signals, crashes, leases, faults.

Each test starts worker subprocesses on the pytest test database and checks the
rows they leave behind. They run unchanged on SQLite, PostgreSQL and MariaDB;
the only vendor-specific tests are the connection-kill ones (SQLite has no server),
collected only where they apply.
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from django_arcature.models import Job, JobStatus
from tests.concurrency.conftest import WorkerProcess, read_events, wait_started, wait_until
from tests.faults.sessions import kill_worker_sessions
from tests.pgcluster import connected_cluster

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

StartWorker = Callable[..., WorkerProcess]


def status_of(job_id: uuid.UUID) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job_id)


def test_burst_drains_every_job_to_its_end_state(start_worker: StartWorker) -> None:
    adds = [Job.objects.enqueue("tests.add", args=[i, 1]) for i in range(20)]
    doubled = Job.objects.enqueue("tests.async_double", args=[21])
    permanent = Job.objects.enqueue("tests.fail_permanently", args=["no such user"])
    flaky = Job.objects.enqueue("tests.flaky_once")
    exhausted = Job.objects.enqueue("tests.fails_fast")
    poison = Job.objects.enqueue("tests.add", args=[1, 2])
    Job.objects.filter(pk=poison.pk).update(payload={"args": ["one"], "kwargs": {}})
    unknown = Job.objects.enqueue("tests.noop")
    Job.objects.filter(pk=unknown.pk).update(task_name="tests.removed_long_ago")

    worker = start_worker("--burst", "--concurrency", "4", "--batch", "7")
    assert worker.wait(60) == 0, worker.log

    rows = {row.pk: row for row in Job.objects.all()}
    assert [rows[job.pk].status for job in adds] == [JobStatus.SUCCEEDED] * 20
    assert [rows[job.pk].result for job in adds] == [i + 1 for i in range(20)]
    assert (rows[doubled.pk].status, rows[doubled.pk].result) == ("succeeded", 42)
    assert (rows[permanent.pk].status, rows[permanent.pk].error_kind) == ("dead", "permanent")
    assert "no such user" in rows[permanent.pk].last_error
    assert (rows[flaky.pk].status, rows[flaky.pk].attempts) == ("succeeded", 2)
    assert rows[flaky.pk].result == "second attempt"
    assert len(rows[flaky.pk].attempt_log) == 2
    assert (rows[exhausted.pk].status, rows[exhausted.pk].error_kind) == ("dead", "exhausted")
    assert rows[exhausted.pk].attempts == 2
    assert (rows[poison.pk].status, rows[poison.pk].error_kind) == ("dead", "malformed")
    assert (rows[unknown.pk].status, rows[unknown.pk].error_kind) == ("dead", "unknown")
    assert not any(row.claim_token for row in rows.values())
    # 26 jobs, two of them run twice; each landed write counted once by outcome.
    assert "28 processed: 22 succeeded, 2 to retry, 4 dead, 0 lost claims" in worker.log


def test_sigterm_lets_the_running_job_finish(start_worker: StartWorker, events: Path) -> None:
    job = Job.objects.enqueue("tests.sleep", args=[1.5])
    worker = start_worker("--shutdown-timeout", "30")
    wait_started(events, job.pk)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result, row.attempts) == ("succeeded", "slept", 1)
    assert "stopping" in worker.log


def test_sigterm_past_the_shutdown_timeout_releases_the_job(
    start_worker: StartWorker, events: Path
) -> None:
    job = Job.objects.enqueue("tests.wait_for_cancel", args=[60])
    worker = start_worker("--shutdown-timeout", "0.5")
    wait_started(events, job.pk)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log
    row = Job.objects.get(pk=job.pk)
    # Back in the queue with the interrupted attempt given back.
    assert (row.status, row.attempts, row.claim_token) == ("pending", 0, None)
    assert ("job_released", str(job.pk)) in read_events(events)


def test_second_signal_exits_at_once(start_worker: StartWorker, events: Path) -> None:
    job = Job.objects.enqueue("tests.sleep", args=[60])
    worker = start_worker("--shutdown-timeout", "60")
    wait_started(events, job.pk)
    worker.signal(signal.SIGINT)
    wait_until(lambda: "stopping" in worker.log, what="the worker to start stopping")
    worker.signal(signal.SIGINT)
    assert worker.wait(10) == 128 + signal.SIGINT
    # Nothing was released: the lease will bring the job back.
    assert status_of(job.pk) == JobStatus.RUNNING


def test_sigkill_mid_job_is_recovered_after_the_lease(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    runs = tmp_path / "runs.txt"
    job = Job.objects.enqueue("tests.hang_first_run", args=[str(runs)])
    first = start_worker("--lease", "2")
    wait_until(lambda: runs.exists() and runs.read_text(), what="the first run to start")
    first.signal(signal.SIGKILL)
    first.wait(10)
    assert status_of(job.pk) == JobStatus.RUNNING  # the dead worker still "holds" it

    second = start_worker("--lease", "2")
    wait_until(lambda: status_of(job.pk) == JobStatus.SUCCEEDED, timeout=60, what="recovery")
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0, second.log

    row = Job.objects.get(pk=job.pk)
    assert len(runs.read_text().splitlines()) == 2  # ran twice (at least once)…
    assert row.result == "run 2"  # …completed once, by the second run
    assert row.attempts == 2
    assert len(row.attempt_log) == 1  # the killed attempt wrote nothing
    assert "recovered 1 job" in second.log


def test_heartbeats_keep_a_job_longer_than_its_lease(start_worker: StartWorker) -> None:
    # A job that outlives its lease more than twice over, under a lease long enough for
    # a loaded machine: heartbeats come every lease / 3, so the worker may go unscheduled
    # for up to two thirds of the lease before the sweep below may take the job. With a
    # 1 s lease that was 0.67 s (a worker stopped for 1.5 s lost its job to the sweep).
    job = Job.objects.enqueue("tests.sleep", args=[7])
    worker = start_worker("--lease", "3")
    wait_until(lambda: status_of(job.pk) == JobStatus.RUNNING, what="the job to start")
    swept = 0
    while status_of(job.pk) == JobStatus.RUNNING:  # a rescuer sweeping as often as it can
        swept += Job.objects.sweep_expired_leases()
        assert worker.alive(), worker.log
    assert swept == 0
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.result) == ("succeeded", 1, "slept")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_timeout_gives_up_on_the_attempt(start_worker: StartWorker) -> None:
    job = Job.objects.enqueue("tests.stubborn_timeout")
    after = Job.objects.enqueue("tests.add", args=[2, 2])
    worker = start_worker("--burst", "--concurrency", "1")
    assert worker.wait(60) == 0, worker.log
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.error_kind) == ("dead", "timeout")
    assert "timeout of 0.5s" in row.last_error
    assert row.result is None
    # The single thread was not held hostage by the abandoned handler.
    assert status_of(after.pk) == JobStatus.SUCCEEDED


def test_cancelled_running_job_completion_is_fenced_out(
    start_worker: StartWorker, events: Path
) -> None:
    job = Job.objects.enqueue("tests.wait_for_cancel", args=[20])
    worker = start_worker("--lease", "3")
    wait_started(events, job.pk)
    assert Job.objects.cancel(job.pk) == 1
    wait_until(lambda: "result was discarded" in worker.log, what="the lost claim to be noticed")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result, row.claim_token) == ("cancelled", None, None)
    recorded = [name for name, job_id in read_events(events) if job_id == str(job.pk)]
    assert "job_succeeded" not in recorded
    assert "job_claim_lost" in recorded
    assert "0 succeeded" in worker.log


# --- database faults -------------------------------------------------------------------


def drain_across_a_fault(start_worker: StartWorker, fault: Callable[[], object]) -> None:
    jobs = [Job.objects.enqueue("tests.sleep", args=[0.05]) for _ in range(40)]
    worker = start_worker("--concurrency", "2", "--batch", "2")

    def succeeded() -> int:
        return Job.objects.filter(status=JobStatus.SUCCEEDED).count()

    wait_until(lambda: succeeded() >= 5, what="some jobs to finish")
    fault()
    wait_until(lambda: succeeded() == len(jobs), timeout=90, what="the rest to drain")
    assert worker.alive(), worker.log
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log
    # The fault reached the worker: a statement met it, or a write found the session
    # gone first (the server's goodbye on an idle socket) and replaced the connection.
    assert "database error" in worker.log or "database connection was lost" in worker.log
    assert not Job.objects.exclude(status=JobStatus.SUCCEEDED).exists()


@pytest.mark.only_on(
    "postgresql", "mysql", reason="SQLite has no server whose connections could be dropped"
)
@pytest.mark.pgbouncer(False, reason="PgBouncer absorbs killed server connections between queries")
def test_worker_survives_its_connections_being_killed(start_worker: StartWorker) -> None:
    drain_across_a_fault(start_worker, kill_worker_sessions)


@pytest.mark.restarts_server
@pytest.mark.only_on("postgresql", reason="restarts the local PostgreSQL cluster")
def test_worker_survives_a_postgresql_restart(start_worker: StartWorker) -> None:

    version, cluster = connected_cluster(connection)  # whichever is installed, not always 15

    def restart() -> None:
        connection.close()
        subprocess.run(["pg_ctlcluster", version, cluster, "restart"], check=True, timeout=60)

    drain_across_a_fault(start_worker, restart)
