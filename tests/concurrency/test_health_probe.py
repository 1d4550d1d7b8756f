"""The liveness file of real worker processes, judged by the real probe command.

Each test starts ``manage.py arcature_worker --health-file PATH`` and runs
``manage.py arcature_health`` (or ``python -m django_arcature.worker.health``)
as a Kubernetes exec probe would: a separate process that reads only the file.
A worker frozen with SIGSTOP stands for a wedged main loop, SIGKILL for a
process that died without a word; a proxy that cuts every connection stands
for a database outage.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_arcature.core.attempt_log import dropped_count
from django_arcature.models import Job, JobStatus
from django_arcature.worker.health import HealthFile, check
from tests.concurrency.conftest import REPO, WorkerProcess, wait_started, wait_until
from tests.dburl import database_url
from tests.faults.processes import FaultWorker
from tests.faults.proxy import Action, FaultProxy, proxy_to_test_database

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

StartWorker = Callable[..., WorkerProcess]

#: A job still running while the test watches the stopping worker, for at most this
#: long: the test ends it itself once it has looked.
STOPPING_JOB_SECONDS = 60.0
STOPPING_WATCH_SECONDS = 2.0

#: A database no probe may need: nothing listens on port 1.
NO_DATABASE = "postgres://nobody:nothing@127.0.0.1:1/none"


def probe(
    path: Path, *args: str, module: bool = False, db_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the probe as a separate process and return its exit status and output."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": db_url or database_url(),
        "PYTHONPATH": str(REPO),
    }
    if module:
        # No project at all: no settings module, no database, warnings as errors.
        env.pop("DJANGO_SETTINGS_MODULE")
        env.pop("DATABASE_URL")
        command = [
            sys.executable,
            "-W",
            "error",
            "-m",
            "django_arcature.worker.health",
            str(path),
            *args,
        ]
    else:
        command = [sys.executable, "-m", "django", "arcature_health", "--file", str(path), *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=30)


def record(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def wait_for_state(path: Path, state: str, worker: WorkerProcess | FaultWorker) -> None:
    def reached() -> bool:
        assert worker.alive(), f"the worker exited early; its log:\n{worker.log}"
        return path.exists() and record(path)["state"] == state

    wait_until(reached, timeout=20, what=f"the health file to say {state!r}")


def test_file_stays_fresh_while_idle_and_running_jobs_and_says_stopped(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    path = tmp_path / "health.json"
    worker = start_worker("--health-file", str(path), "--concurrency", "2")
    wait_for_state(path, "ok", worker)
    first = record(path)
    assert first["pid"] == worker.proc.pid
    assert first["worker_id"].split(":")[1] == str(worker.proc.pid)

    # Idle: rewritten about once a second, never older than the loop's longest sleep.
    stamps = set()
    for _ in range(12):
        now = time.time()
        data = record(path)
        assert now - data["written_at"] < 2.5, data
        stamps.add(data["written_at"])
        time.sleep(0.25)
    assert len(stamps) >= 2, "the idle worker did not rewrite its health file"
    healthy = probe(path, "--max-age", "3")
    assert healthy.returncode == 0, healthy.stderr
    assert "ok, written" in healthy.stdout

    # Busy: six half-second jobs on two threads keep the loop waiting on handlers.
    Job.objects.enqueue_many("tests.sleep", [(0.5,)] * 6)
    connection.close()
    running_seen = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        data = record(path)
        assert time.time() - data["written_at"] < 2.5, data
        running_seen = max(running_seen, data["jobs_running"])
        if data["jobs_finished"] == 6:
            break
        time.sleep(0.1)
    assert data["jobs_finished"] == 6, data
    assert running_seen >= 1
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 6
    # The probe reads nothing but the file: it passes with no database to reach at all.
    for module in (False, True):
        cheap = probe(path, "--max-age", "3", module=module, db_url=NO_DATABASE)
        assert cheap.returncode == 0, cheap.stdout + cheap.stderr

    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log
    final = record(path)
    assert final["state"] == "stopped"
    assert final["exit_status"] == 0
    stopped = probe(path)
    assert stopped.returncode == 1
    assert "stopped at" in stopped.stderr
    assert "exit status 0" in stopped.stderr
    assert len(stopped.stderr.strip().splitlines()) == 1


def test_a_frozen_main_loop_fails_the_probe_and_recovers(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    path = tmp_path / "health.json"
    worker = start_worker("--health-file", str(path))
    wait_for_state(path, "ok", worker)
    assert probe(path, "--max-age", "2").returncode == 0

    worker.signal(signal.SIGSTOP)
    try:
        frozen_at = time.monotonic()
        wait_until(
            lambda: probe(path, "--max-age", "2").returncode == 1,
            timeout=15,
            what="the probe to fail on the frozen worker",
        )
        assert time.monotonic() - frozen_at >= 1.0  # not before the file could be stale
        stale = probe(path, "--max-age", "2", module=True)
        assert stale.returncode == 1
        assert stale.stderr.startswith("unhealthy: worker ")
        assert "main loop is stuck or the process is gone" in stale.stderr
        assert "max age 2s" in stale.stderr
    finally:
        worker.signal(signal.SIGCONT)
    wait_until(
        lambda: probe(path, "--max-age", "2").returncode == 0,
        timeout=15,
        what="the probe to pass again after SIGCONT",
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log


def test_a_stopping_worker_stays_alive_through_its_grace_period(
    tmp_path: Path, events: Path
) -> None:
    path = tmp_path / "health.json"
    # The fault suite's settings: a sweep every half second, overdue at once while stopping.
    worker = FaultWorker(["--health-file", str(path), "--shutdown-timeout", "30"], events)
    try:
        wait_for_state(path, "ok", worker)
        release = tmp_path / "release"
        job_id = Job.objects.enqueue_many(
            "tests.wait_for_file", [(str(release), STOPPING_JOB_SECONDS)]
        )[0].id
        connection.close()
        wait_started(events, job_id)
        worker.proc.send_signal(signal.SIGTERM)
        wait_for_state(path, "stopping", worker)
        # The loop waits for the running job without spinning on the sweep (which does
        # not run while stopping), and keeps the file fresh meanwhile.
        before = cpu_seconds(worker.proc.pid)
        time.sleep(STOPPING_WATCH_SECONDS)
        spent = cpu_seconds(worker.proc.pid) - before
        assert spent < STOPPING_WATCH_SECONDS * 0.1, f"{spent:.2f}s of CPU while stopping"
        stopping = probe(path, "--max-age", "2")
        assert stopping.returncode == 0, stopping.stderr
        assert "stopping, written" in stopping.stdout
        release.touch()  # only now may the job end, however slow the machine was
        assert worker.wait(30) == 0, worker.log
        assert record(path)["state"] == "stopped"
        row = Job.objects.get(id=job_id)
        assert (row.status, row.result) == (JobStatus.SUCCEEDED, "released")
    finally:
        worker.cleanup()


def test_a_killed_worker_goes_stale(start_worker: StartWorker, tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    worker = start_worker("--health-file", str(path))
    wait_for_state(path, "ok", worker)
    worker.signal(signal.SIGKILL)
    worker.wait(10)
    assert record(path)["state"] == "ok"  # it had no chance to say goodbye
    wait_until(
        lambda: probe(path, "--max-age", "1").returncode == 1,
        timeout=10,
        what="the probe to notice the dead worker",
    )
    # With no --max-age, the probe allows the default (at least 30 s): still fresh.
    assert probe(path).returncode == 0


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_an_unwritable_health_file_fails_at_startup(
    start_worker: StartWorker, tmp_path: Path, where: str
) -> None:
    path = tmp_path / "no-such-folder" / "health.json" if where == "missing folder" else tmp_path
    worker = start_worker("--health-file", str(path))
    assert worker.wait(30) == 1
    assert f"cannot write the health file {path}" in worker.log
    assert "started:" not in worker.log  # no job was ever claimed
    assert not list(tmp_path.glob(".*.tmp"))


def test_probe_without_a_file_fails(tmp_path: Path) -> None:
    missing = probe(tmp_path / "never-written.json")
    assert missing.returncode == 1
    assert "no health file at" in missing.stderr
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    assert probe(garbage).returncode == 1


#: How long the outage test watches the worker's CPU while the database is gone.
OUTAGE_SECONDS = 2.0


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_default_max_age_follows_the_workers_idle_pause(tmp_path: Path) -> None:
    """A worker that may sleep 20 s between passes is not called stuck after 30 s."""
    path = tmp_path / "health.json"
    writer = HealthFile(path, "host:1:abc", refresh_within=20.0)
    writer.beat("ok", database_failures=0)
    written = record(path)["written_at"]
    assert check(path, now=written + 59).healthy
    late = check(path, now=written + 61)
    assert not late.healthy
    assert "max age 60s" in late.reason
    # The floor: a worker refreshing every second still gets 30 s.
    quick = HealthFile(path, "host:1:abc", refresh_within=0.2)
    written = record(path)["written_at"]
    assert quick.refresh_within == 1.0
    assert check(path, now=written + 29).healthy
    assert not check(path, now=written + 31).healthy
    assert sorted(p.name for p in tmp_path.iterdir()) == ["health.json"]  # no temp files left


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with proxy_to_test_database() as relay:
        yield relay


@pytest.mark.only_on(
    "postgresql", "mysql", reason="SQLite has no connection to a server that could be cut"
)
def test_database_outage_is_reported_without_failing_liveness(
    proxy: FaultProxy, tmp_path: Path
) -> None:
    path = tmp_path / "health.json"
    worker = FaultWorker(
        ["--health-file", str(path), "--no-listen", "--poll-interval", "0.2"],
        tmp_path / "events.txt",
        proxy_port=proxy.port,
    )
    try:
        wait_for_state(path, "ok", worker)
        # Every connection, new or old, is cut at its first request from now on.
        outage = proxy.arm(Action.DROP_REQUEST, b"", times=10**9)
        proxy.drop_all()
        wait_for_state(path, "database unreachable", worker)
        assert record(path)["database_failures"] >= 1
        # While it backs off, the loop sleeps: it must not spin on an overdue sweep.
        before = cpu_seconds(worker.proc.pid)
        time.sleep(OUTAGE_SECONDS)
        spent = cpu_seconds(worker.proc.pid) - before
        assert spent < OUTAGE_SECONDS * 0.1, f"{spent:.2f}s of CPU in {OUTAGE_SECONDS}s"
        assert record(path)["state"] == "database unreachable"
        # Freshness is not what this test is about (other tests pin --max-age): a
        # backing-off worker on a loaded machine wrote its file 3.9 s before once.
        alive = probe(path, "--max-age", "10")
        assert alive.returncode == 0, alive.stderr
        assert "database unreachable" in alive.stdout
        ready = probe(path, "--max-age", "10", "--require-database")
        assert ready.returncode == 1
        assert "cannot reach its database" in ready.stderr

        with proxy.lock:
            proxy.rules.remove(outage)
        wait_for_state(path, "ok", worker)
        assert probe(path, "--max-age", "10", "--require-database").returncode == 0
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.log
        assert record(path)["state"] == "stopped"
    finally:
        worker.cleanup()


@pytest.fixture
def failing_completions() -> Iterator[None]:
    """Every write of a finished job fails as a dropped connection would (SQLSTATE 08006),
    from a trigger in the real database: the same write fails each time it is retried."""
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION arcature_test_fail_completion() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'the test drops this write' USING ERRCODE = '08006'; END $$ "
            "LANGUAGE plpgsql"
        )
        cursor.execute(
            f"CREATE TRIGGER arcature_test_fail_completion BEFORE UPDATE ON {table} "
            "FOR EACH ROW WHEN (NEW.status = 'succeeded') "
            "EXECUTE FUNCTION arcature_test_fail_completion()"
        )
    connection.close()
    yield
    drop_failing_completions()


def drop_failing_completions() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"DROP TRIGGER IF EXISTS arcature_test_fail_completion ON {Job._meta.db_table}"
        )
        cursor.execute("DROP FUNCTION IF EXISTS arcature_test_fail_completion()")
    connection.close()


@pytest.mark.only_on("postgresql", reason="the failing write is a PL/pgSQL trigger")
def test_a_write_that_keeps_failing_fails_the_probe_with_its_reason(
    start_worker: StartWorker, tmp_path: Path, failing_completions: None
) -> None:
    """Issue 19 B1: the worker retried the same failed flush for ever and said ``ok``."""
    path = tmp_path / "health.json"
    job_id = Job.objects.enqueue("tests.noop").id
    worker = start_worker("--health-file", str(path))
    wait_for_state(path, "write failing", worker)
    data = record(path)
    assert "the test drops this write" in data["failing_write"]
    assert data["failing_writes"] >= 5
    verdict = probe(path, "--max-age", "5")
    assert verdict.returncode == 1
    assert "cannot write" in verdict.stderr
    assert "the test drops this write" in verdict.stderr

    drop_failing_completions()  # the write lands at its next try; the worker is ok again
    wait_for_state(path, "ok", worker)
    assert Job.objects.get(id=job_id).status == JobStatus.SUCCEEDED


def refuse_long_logs() -> None:
    """A write whose attempt log is over 6,000 bytes fails as a dropped connection would
    (as MariaDB answers a statement over max_allowed_packet), every time it is retried."""
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION arcature_test_fail_completion() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'the test drops this long write' USING ERRCODE = '08006'; END $$ "
            "LANGUAGE plpgsql"
        )
        cursor.execute(
            f"CREATE TRIGGER arcature_test_fail_completion BEFORE UPDATE ON {table} "
            "FOR EACH ROW WHEN (NEW.status <> 'running' "
            "AND octet_length(NEW.attempt_log::text) > 6000) "
            "EXECUTE FUNCTION arcature_test_fail_completion()"
        )
    connection.close()


@pytest.mark.only_on("postgresql", reason="the refusing server is a PL/pgSQL trigger")
def test_a_poison_write_is_shrunk_and_lands_after_bounded_retries(
    start_worker: StartWorker,
) -> None:
    """Issue 19 B1: the worker no longer retries the exact same poison write for ever."""
    poison = Job.objects.enqueue("tests.noop")
    plain = Job.objects.enqueue("tests.noop")
    history = [
        {"worker": f"old{n}", "error": {"exception_class_path": "x.Y", "traceback": "t" * 2000}}
        for n in range(10)
    ]
    Job.objects.filter(id=poison.id).update(attempt_log=history)  # an earlier life, set up
    refuse_long_logs()
    try:
        worker = start_worker("--burst")
        assert worker.wait(60) == 0, worker.log
    finally:
        drop_failing_completions()
    row = Job.objects.get(id=poison.id)
    assert row.status == JobStatus.SUCCEEDED
    assert row.attempt_log[0]["worker"] == "old0"
    assert row.attempt_log[-1]["error"] is None
    assert dropped_count(row.attempt_log) > 0
    assert Job.objects.get(id=plain.id).status == JobStatus.SUCCEEDED
