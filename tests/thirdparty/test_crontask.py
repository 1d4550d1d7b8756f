"""django-crontask's scheduler enqueues through ArcatureBackend, and a real worker runs the jobs.

``manage.py crontask`` (the package's own command, unchanged) imports the site's
``tasks`` modules and calls ``task.enqueue`` on each schedule from APScheduler's
pool threads: connections Django's request cycle never sees. The site's task runs
every second; crontask's own heartbeat (``* * * * *``) too when a minute turns, and
with sentry-sdk installed crontask rebuilds that one through ``type(task)(...)``, our
task class. Every job must succeed at its first attempt.

When the server drops the scheduler's sessions (a restart, an administrator's kill,
a proxy's idle timeout), the enqueue that meets a dropped session fails, and
crontask logs it; the next ones must go through. Before, each of those threads kept
its dead connection and the schedule stopped for good.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
from django.db import connection

from django_arcature.models import Job
from tests.dburl import database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TICK = "tests.thirdparty.django6_site.tasks.tick"
HEARTBEAT = "crontask.tasks.heartbeat"
DEADLINE = 60  # seconds for a few one-second ticks, on a loaded machine


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[str]
    log: IO[str]

    def text(self) -> str:
        self.log.seek(0)
        return self.log.read()


def _start(name: str, *arguments: str, tmp_path: Path) -> Process:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.thirdparty.settings",
        "ARCATURE_USE_TEST_DATABASE": "1",
        "DATABASE_URL": database_url(),
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
    }
    log = (tmp_path / f"{name}.log").open("w+")
    popen = subprocess.Popen(
        [sys.executable, "-m", "django", *arguments],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return Process(name, popen, log)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[dict[str, Process]]:
    """A worker and crontask's scheduler, both as a site would run them; stopped by SIGTERM."""
    connection.close()
    processes = {
        "worker": _start("worker", "arcature_worker", "-v", "2", tmp_path=tmp_path),
        "crontask": _start("crontask", "crontask", tmp_path=tmp_path),
    }
    try:
        yield processes
    finally:
        for process in processes.values():
            if process.popen.poll() is None:
                process.popen.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait()
            process.log.close()


def _logs(site: dict[str, Process]) -> str:
    return "\n".join(f"--- {name}\n{process.text()}" for name, process in site.items())


def _succeeded_ticks() -> int:
    return Job.objects.filter(task_name=TICK, status="succeeded").count()


def _wait_for_ticks(count: int, site: dict[str, Process]) -> None:
    deadline = time.monotonic() + DEADLINE
    while _succeeded_ticks() < count:
        for name, process in site.items():
            assert process.popen.poll() is None, f"{name} exited early:\n{_logs(site)}"
        assert time.monotonic() < deadline, f"fewer than {count} ticks ran:\n{_logs(site)}"
        time.sleep(0.1)


def _stop_and_check(site: dict[str, Process], *, sessions_killed: bool = False) -> None:
    """Stop both; every job the worker finished ran once and succeeded.

    With ``sessions_killed``, a job may still be ``running``: a claim whose reply the
    kill cut off stays with its lease until the sweep takes it back (the lease is
    30 s here), which is the recovery the worker suites test, not this one.
    """
    for process in site.values():
        process.popen.send_signal(signal.SIGTERM)
    for name, process in site.items():
        assert process.popen.wait(timeout=30) == 0, f"{name} did not stop cleanly:\n{_logs(site)}"
    connection.close()
    # The scheduler may have enqueued one more tick as it stopped: the worker was
    # stopping too.
    rows: list[Any] = list(Job.objects.values_list("task_name", "status", "attempts"))
    assert {name for name, _, _ in rows} <= {TICK, HEARTBEAT}, rows
    unfinished = {"pending", "running"} if sessions_killed else {"pending"}
    taken = [row for row in rows if row[1] not in unfinished]
    assert all(status == "succeeded" and attempts == 1 for _, status, attempts in taken), rows


def test_a_cron_schedule_enqueues_through_the_backend_and_its_jobs_run(
    site: dict[str, Process],
) -> None:
    _wait_for_ticks(3, site)
    assert "Starting scheduler" in site["crontask"].text()
    _stop_and_check(site)


@pytest.mark.only_on(
    "postgresql", "mysql", reason="SQLite has no server that could drop the scheduler's sessions"
)
def test_the_schedule_goes_on_after_the_server_dropped_its_sessions(
    site: dict[str, Process],
) -> None:
    from tests.faults.sessions import kill_worker_sessions

    _wait_for_ticks(2, site)
    for _ in range(2):
        before = _succeeded_ticks()
        assert kill_worker_sessions() >= 1  # the scheduler's and the worker's
        _wait_for_ticks(before + 3, site)
    _stop_and_check(site, sessions_killed=True)
