"""Wide fan-in under real worker processes: the sink is released exactly once.

1 → 200 → 1 on two ``arcature_worker`` processes finishing siblings at the same
time (batched completions on both), and again with one worker SIGKILLed mid
fan-out and its leases recovered by the sweep. The sink's handler appends a line
per run: exactly one line, one attempt, and every sibling succeeded.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from django_arcature import Workflow
from django_arcature.models import Job, JobStatus
from tests.concurrency.conftest import WorkerProcess, wait_until
from tests.testapp import workflow_jobs as wf

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

StartWorker = Callable[..., WorkerProcess]

WIDTH = 200


def fan(runs: Path, width: int = WIDTH, seconds: float = 0.0) -> tuple[Workflow, object, object]:
    flow = Workflow("fan")
    root = flow.add(wf.record, str(runs), "root")
    middle = [
        flow.add(wf.record, str(runs), f"mid {i}", seconds, after=[root]) for i in range(width)
    ]
    sink = flow.add(wf.record, str(runs), "sink", after=middle)
    flow.enqueue()
    return flow, root, sink


def sink_state(sink: object) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=sink.job_id)  # type: ignore[attr-defined]


def lines(runs: Path, label: str) -> int:
    return runs.read_text().splitlines().count(label) if runs.exists() else 0


def test_wide_fan_in_fires_once_with_two_workers(start_worker: StartWorker, tmp_path: Path) -> None:
    runs = tmp_path / "runs.txt"
    workers = [start_worker("--concurrency", "8", "--batch", "20") for _ in range(2)]
    for worker in workers:  # both ready before the fan-out, so both take part
        wait_until(lambda w=worker: "started" in w.log, what="the worker to start")  # type: ignore[misc]
    # 50 ms a sibling: one worker alone would need over a second for the 200 (8
    # threads), so the other, woken by the root's release, takes its share.
    _, _, sink = fan(runs, seconds=0.05)
    waits = _lock_waits_while(lambda: sink_state(sink) == JobStatus.SUCCEEDED, timeout=120)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0, worker.log
    assert lines(runs, "sink") == 1
    row = Job.objects.get(pk=sink.job_id)  # type: ignore[attr-defined]
    assert (row.attempts, len(row.attempt_log)) == (1, 1)
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == WIDTH + 2
    # Both processes did part of the fan-out (each attempt names its worker; the
    # stop summaries in the logs say "succeeded" whatever the count).
    takers = {
        entry["worker"]
        for log in Job.objects.values_list("attempt_log", flat=True)
        for entry in log
    }
    assert len(takers) == 2, takers
    print(f"lock waits sampled during the fan-in on {connection.vendor}: {waits}")


def test_wide_fan_in_fires_once_when_a_worker_is_killed(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    runs = tmp_path / "runs.txt"
    _, _, sink = fan(runs, width=60, seconds=0.05)
    doomed = start_worker("--concurrency", "4", "--lease", "2")
    survivor = start_worker("--concurrency", "4", "--lease", "2")
    wait_until(lambda: "started" in survivor.log, what="the survivor to start")
    wait_until(lambda: lines(runs, "root") and runs.read_text().count("mid") >= 10, what="fan-out")
    doomed.signal(signal.SIGKILL)
    doomed.wait(10)
    wait_until(lambda: sink_state(sink) == JobStatus.SUCCEEDED, timeout=120, what="the sink")
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(30) == 0, survivor.log
    assert lines(runs, "sink") == 1
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 62
    text = runs.read_text().splitlines()
    assert all(text.count(f"mid {i}") >= 1 for i in range(60))  # each ran at least once


#: Transactions waiting for a lock right now (SQLite has one writer and no such view).
LOCK_WAITERS = {
    "postgresql": "SELECT count(*) FROM pg_locks WHERE NOT granted",
    "mysql": "SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'",
}


def _lock_waits_while(done: Callable[[], bool], timeout: float) -> dict[str, float]:
    """Poll until ``done``; on PostgreSQL and MariaDB also sample transactions waiting for locks.

    Returns how many samples were taken, how many saw a waiting lock and the most
    waiters seen at once: the fan-in's lock waits, measured.
    """
    deadline = time.monotonic() + timeout
    samples = waiting = most = 0
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"the fan-in did not finish within {timeout}s")
        query = LOCK_WAITERS.get(connection.vendor)
        if query is not None:
            with connection.cursor() as cursor:
                cursor.execute(query)
                (now_waiting,) = cursor.fetchone()
            samples += 1
            waiting += 1 if now_waiting else 0
            most = max(most, now_waiting)
        time.sleep(0.01)
    return {"samples": samples, "with_waiters": waiting, "most_waiters": most}
