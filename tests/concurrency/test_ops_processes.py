"""Schedules, queue limits and pause with several real worker processes.

The schedule test runs a per-second schedule (cron with a seconds field) for
16 s in CI (16 slots, about 8 on each side of the kill) across three workers,
one of them killed and restarted midway; with ``ARCATURE_SOAK=1`` (``make
soak``) it runs the real thing instead: a one-minute schedule for 3.5 minutes
across four workers.
Each slot's job returns the slot key it carried, so duplicates and gaps are
both visible. Numbers are printed for the closing note (run with ``-s``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from django_arcature.db.clock import database_now
from django_arcature.models import Job, JobStatus
from django_arcature.queues.control import pause, resume
from django_arcature.schedules.models import Schedule
from tests.concurrency.conftest import WorkerProcess, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

StartWorker = Callable[..., WorkerProcess]

SOAK = os.environ.get("ARCATURE_SOAK") == "1"


def _slot_of(key: str) -> datetime:
    return datetime.fromisoformat(key.rsplit("@", 1)[1].replace("Z", "+00:00"))


def _all_done() -> bool:
    return not Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists()


def _started(proc: WorkerProcess) -> None:
    """A worker SIGTERMed before its loop has installed the handler dies of it (-SIGTERM):
    the others may have done all the work while this one was still starting."""
    wait_until(lambda: " started: " in proc.log or not proc.alive(), what="the worker to start")


def test_schedule_fires_exactly_one_job_per_slot_across_workers(
    start_worker: StartWorker,
) -> None:
    if SOAK:
        cron, step, run_for, workers = "* * * * *", timedelta(minutes=1), 210.0, 4
    else:
        cron, step, run_for, workers = "* * * * * *", timedelta(seconds=1), 16.0, 3
    Schedule.objects.create(
        name="every-slot",
        task_name="tests.slot_key",
        cron=cron,
        missed="all",
        catch_up=1000,
        created_at=database_now("default"),
    )
    procs = [start_worker("--concurrency", "2") for _ in range(workers)]
    started = time.monotonic()
    time.sleep(run_for / 2)
    # A worker dies without warning and a new one takes its place.
    procs[0].signal(signal.SIGKILL)
    procs[0].wait(10)
    procs.append(start_worker("--concurrency", "2"))
    time.sleep(max(run_for - (time.monotonic() - started), 0))
    # Stop firing, let the workers finish what was fired, then stop them.
    Schedule.objects.filter(name="every-slot").update(enabled=False)
    wait_until(_all_done, timeout=60, what="every slot's job to finish")
    for proc in procs[1:]:
        _started(proc)
        proc.signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.log

    rows = list(Job.objects.filter(task_name="tests.slot_key"))
    keys = [str(row.result) for row in rows]
    assert all(isinstance(row.result, str) for row in rows), keys
    assert len(keys) == len(set(keys)), "a slot fired twice"
    slots = sorted(_slot_of(key) for key in keys)
    assert all(b - a == step for a, b in pairwise(slots)), "a slot was skipped"
    expected = run_for / step.total_seconds()
    assert len(slots) >= expected * 0.8, (len(slots), expected)
    assert {row.status for row in rows} == {JobStatus.SUCCEEDED}
    schedule = Schedule.objects.get(name="every-slot")
    assert schedule.last_slot_at == slots[-1]
    print(
        f"\nschedule {cron!r}: {workers} workers (+1 restart) x {len(slots)} slots "
        f"-> {len(keys)} jobs, {len(set(keys))} distinct slot keys"
    )


def _intervals(path: Path) -> list[tuple[float, float]]:
    return [
        (float(start), float(end))
        for start, end, _ in (line.split() for line in path.read_text().splitlines())
    ]


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def test_concurrency_limit_holds_across_worker_processes(
    start_worker: StartWorker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 3
    monkeypatch.setenv("ARCATURE_TEST_QUEUES", json.dumps({"limited": {"concurrency": limit}}))
    path = tmp_path / "intervals.txt"
    Job.objects.enqueue_many("tests.timed", [(str(path), 0.2)] * 45, queue="limited")
    # Not --burst: a burst worker stops at its first empty claim, and a claim
    # capped by the limit comes back empty while jobs are still pending.
    procs = [start_worker("--concurrency", "4") for _ in range(3)]
    wait_until(_all_done, timeout=120, what="the limited jobs to finish")
    for proc in procs:
        _started(proc)
        proc.signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.log
    intervals = _intervals(path)
    assert len(intervals) == 45
    peak = _max_overlap(intervals)
    assert peak <= limit
    assert peak == limit  # and the limit was reached: the test can see a violation
    print(f"\nconcurrency limit {limit}: 3 workers x 4 threads, max overlap seen {peak}")


def test_rate_limit_holds_across_worker_processes(
    start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    rate, per = 5, 1.0
    monkeypatch.setenv("ARCATURE_TEST_QUEUES", json.dumps({"rated": {"rate": f"{rate}/s"}}))
    ids = [j.pk for j in Job.objects.enqueue_many("tests.noop", [()] * 30, queue="rated")]
    procs = [start_worker("--concurrency", "4") for _ in range(3)]
    wait_until(_all_done, timeout=60, what="the rated jobs to finish")
    for proc in procs:
        proc.signal(signal.SIGTERM)
        proc.wait(30)
    starts = sorted(
        row.timestamp()
        for row in Job.objects.filter(pk__in=ids).values_list("started_at", flat=True)
        if row is not None
    )
    assert len(starts) == 30
    # The most starts within any window of one period (sliding, starting at each start).
    busiest = max(sum(1 for t in starts[i:] if t < s + per) for i, s in enumerate(starts))
    assert busiest <= rate
    overall = (len(starts) - 1) / (starts[-1] - starts[0])
    print(f"\nrate limit {rate}/s: 3 workers, busiest 1 s window {busiest}, {overall:.2f} starts/s")


def test_pause_stops_claims_within_a_poll_interval_and_resume_restarts_them(
    start_worker: StartWorker,
) -> None:
    running = Job.objects.enqueue("tests.sleep", args=[1.0], queue="p")
    worker = start_worker("--concurrency", "2")
    wait_until(
        lambda: Job.objects.get(pk=running.pk).status == JobStatus.RUNNING, what="the job to start"
    )
    assert pause("p")
    paused_at = time.monotonic()
    # The contract is "within one poll interval" (0.05 s here): a claim that read
    # the flags just before the pause may still take from the queue until then.
    time.sleep(0.5)
    waiting = [Job.objects.enqueue("tests.noop", queue="p").pk for _ in range(3)]
    other = Job.objects.enqueue("tests.noop", queue="default")
    wait_until(
        lambda: Job.objects.get(pk=other.pk).status == JobStatus.SUCCEEDED,
        what="the other queue to go on",
    )
    # The job that was running when the queue was paused finishes normally.
    wait_until(
        lambda: Job.objects.get(pk=running.pk).status == JobStatus.SUCCEEDED,
        what="the running job to finish",
    )
    time.sleep(max(0, 1.0 - (time.monotonic() - paused_at)))
    assert set(Job.objects.filter(pk__in=waiting).values_list("status", flat=True)) == {
        JobStatus.PENDING
    }
    assert resume("p")
    wait_until(
        lambda: Job.objects.filter(pk__in=waiting, status=JobStatus.SUCCEEDED).count() == 3,
        timeout=10,
        what="the resumed queue to drain",
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
