"""Limits under faults: real worker processes, handlers that record when they run (issue 19, C).

Cancels, timeouts whose threads are abandoned, SIGKILLed workers and lost
acknowledgements, against fleet-wide limits. The handlers
(tests/testapp/limits_jobs.py) write their own start and end instants, and the
checks read those, not the rows: the most handlers running at once never
exceeds ``concurrency``, starts in any window of the period never exceed
``rate``, and after the faults the queue drains within a bounded time (no slot
is held forever). ``ARCATURE_SOAK=1`` (``make soak-limits``) runs the mixed
scenario with more jobs and rounds of faults.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from django_arcature.models import Job, JobStatus
from django_arcature.queues.models import SlotHold
from tests.concurrency.conftest import WorkerProcess, wait_until
from tests.limits.occupancy import Run, busiest_window, max_overlap, runs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

StartWorker = Callable[..., WorkerProcess]
SOAK = os.environ.get("ARCATURE_SOAK") == "1"


@pytest.fixture
def limits(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, Any]], None]:
    """Give the test process and the worker processes the same ARCATURE["QUEUES"]."""

    def use(queues: dict[str, Any]) -> None:
        settings.ARCATURE = {**settings.ARCATURE, "QUEUES": queues}
        monkeypatch.setenv("ARCATURE_TEST_QUEUES", json.dumps(queues))

    return use


def started(path: Path, job_id: object) -> bool:
    return any(run.job_id == str(job_id) for run in runs(path))


def finished(ids: list[Any]) -> bool:
    return not Job.objects.filter(pk__in=ids, status__in=["pending", "running"]).exists()


def stop_all(workers: list[WorkerProcess]) -> dict[int, float]:
    """SIGTERM every worker and wait for it to exit: a clean exit, or the SIGKILL it got.

    A replacement started just before may not have installed its SIGTERM handler
    yet (Django is still starting): it is given up to 30 s to log that it started
    first, or the signal would end it with -SIGTERM (seen on a loaded machine).
    """
    ended: dict[int, float] = {}
    for worker in workers:

        def up(worker: WorkerProcess = worker) -> bool:
            return not worker.alive() or " started: " in worker.log

        wait_until(up, timeout=30, what="a replacement worker to start")
        if worker.alive():
            worker.signal(signal.SIGTERM)
    for worker in workers:
        status = worker.wait(60)
        assert status in (0, -signal.SIGKILL), worker.log
        ended.setdefault(worker.proc.pid, time.monotonic())
    return ended


def test_a_cancelled_handler_keeps_its_slot_until_it_ends(
    start_worker: StartWorker, limits: Callable[[dict[str, Any]], None], tmp_path: Path
) -> None:
    limits({"one": {"concurrency": 1}})
    log = tmp_path / "runs.txt"
    stuck = Job.objects.enqueue(
        "tests.limits.occupy", args=[str(log), 2.0], queue="one", priority=9
    )
    rest = [
        Job.objects.enqueue("tests.limits.occupy", args=[str(log), 0.2], queue="one").pk
        for _ in range(3)
    ]
    workers = [start_worker("--concurrency", "2", "--lease", "3") for _ in range(2)]
    wait_until(lambda: started(log, stuck.pk), what="the first handler to start")
    assert Job.objects.cancel(stuck.pk) == 1
    wait_until(lambda: finished(rest), timeout=60, what="the other jobs to finish")
    ended = stop_all(workers)
    found = runs(log, ended)
    first = next(run for run in found if run.job_id == str(stuck.pk))
    assert max_overlap(found) == 1, found
    # The next handler started only after the cancelled one had really ended.
    assert all(run.start >= (first.end or 0) for run in found if run is not first)
    assert Job.objects.filter(pk__in=rest, status=JobStatus.SUCCEEDED).count() == 3
    assert not SlotHold.objects.exists()  # released when the handler ended


def test_an_abandoned_thread_keeps_its_slot_until_it_ends(
    start_worker: StartWorker, limits: Callable[[dict[str, Any]], None], tmp_path: Path
) -> None:
    limits({"one": {"concurrency": 1}})
    log = tmp_path / "runs.txt"
    overrun = Job.objects.enqueue(
        "tests.limits.overrun", args=[str(log), 2.0], queue="one", priority=9
    )
    rest = [
        Job.objects.enqueue("tests.limits.occupy", args=[str(log), 0.2], queue="one").pk
        for _ in range(2)
    ]
    workers = [start_worker("--concurrency", "2") for _ in range(2)]
    wait_until(lambda: finished([overrun.pk, *rest]), timeout=60, what="the queue to drain")
    ended = stop_all(workers)
    found = runs(log, ended)
    assert max_overlap(found) == 1, found
    row = Job.objects.get(pk=overrun.pk)
    assert (row.status, row.error_kind, row.attempts) == (JobStatus.DEAD, "timeout", 2)
    assert Job.objects.filter(pk__in=rest, status=JobStatus.SUCCEEDED).count() == 2


def test_a_sigkilled_worker_never_holds_a_slot_forever(
    start_worker: StartWorker, limits: Callable[[dict[str, Any]], None], tmp_path: Path
) -> None:
    limits({"one": {"concurrency": 1}})
    log = tmp_path / "runs.txt"
    first = Job.objects.enqueue("tests.limits.occupy", args=[str(log), 30], queue="one", priority=9)
    rest = [
        Job.objects.enqueue("tests.limits.occupy", args=[str(log), 0.2], queue="one").pk
        for _ in range(2)
    ]
    doomed = start_worker("--concurrency", "2", "--lease", "2")
    wait_until(lambda: started(log, first.pk), what="the first handler to start")
    # Cancelled on a worker that then dies: its hold must expire, not stay forever.
    assert Job.objects.cancel(first.pk) == 1
    doomed.signal(signal.SIGKILL)
    doomed.wait(10)
    killed_at = time.monotonic()
    survivor = start_worker("--concurrency", "2", "--lease", "2")
    wait_until(lambda: finished(rest), timeout=30, what="the queue to drain after the kill")
    ended = stop_all([survivor])
    ended[doomed.proc.pid] = killed_at
    found = runs(log, ended)
    assert max_overlap(found) == 1, found
    assert Job.objects.filter(pk__in=rest, status=JobStatus.SUCCEEDED).count() == 2


def _mixed_round(
    start_worker: StartWorker, log: Path, rng: random.Random, jobs: int
) -> tuple[list[Run], list[Any]]:
    """Two workers and a stream of jobs, while the test cancels, times out and kills."""
    ids = []
    for i in range(jobs):
        if i % 5 == 0:
            ids.append(
                Job.objects.enqueue("tests.limits.overrun", args=[str(log), 1.6], queue="two").pk
            )
        else:
            seconds = rng.choice([0.05, 0.2, 0.6])
            ids.append(
                Job.objects.enqueue("tests.limits.occupy", args=[str(log), seconds], queue="two").pk
            )
    args = ("--concurrency", "3", "--lease", "2")
    workers = [start_worker(*args), start_worker(*args)]
    ended: dict[int, float] = {}
    deadline = time.monotonic() + 30
    killed = False
    while not finished(ids) and time.monotonic() < deadline:
        time.sleep(0.3)
        running = list(
            Job.objects.filter(pk__in=ids, status=JobStatus.RUNNING).values_list("pk", flat=True)
        )
        if running and rng.random() < 0.3:
            Job.objects.cancel(rng.choice(running))
        if not killed and len(runs(log)) > jobs // 3:
            killed = True
            victim = workers[0]
            victim.signal(signal.SIGKILL)
            victim.wait(10)
            ended[victim.proc.pid] = time.monotonic()
            workers.append(start_worker(*args))
    wait_until(lambda: finished(ids), timeout=60, what="the queue to drain after the faults")
    ended.update({pid: at for pid, at in stop_all(workers).items() if pid not in ended})
    return runs(log, ended), ids


def test_mixed_faults_never_exceed_concurrency_or_rate_and_the_queue_drains(
    start_worker: StartWorker, limits: Callable[[dict[str, Any]], None], tmp_path: Path
) -> None:
    concurrency, rate, per = 2, 6, 1.0
    limits({"two": {"concurrency": concurrency, "rate": f"{rate}/s"}})
    rng = random.Random(19)
    rounds, jobs = (4, 40) if SOAK else (1, 15)
    for round_number in range(rounds):
        log = tmp_path / f"runs-{round_number}.txt"
        found, ids = _mixed_round(start_worker, log, rng, jobs)
        peak = max_overlap(found)
        # A rate is enforced at the claim; a free thread starts a claimed handler
        # within milliseconds, so a window a little under the period holds the rate.
        busiest = busiest_window(found, per - 0.1)
        print(f"\nround {round_number}: {len(found)} runs, max overlap {peak}, busiest {busiest}")
        assert peak <= concurrency, found
        assert busiest <= rate, found
        assert finished(ids)
        assert Job.objects.filter(pk__in=ids, status=JobStatus.RUNNING).count() == 0
