"""Every attempt's timeout holds, for sync and async handlers alike, and costs a bounded leak.

An async handler that blocks its event loop (a sync wait inside ``async def``) is
timed out like any other and cannot hold up the other async jobs; a sync handler
that ignores its timeout leaves its thread behind, and a worker that has left
more than ``ARCATURE["MAX_ABANDONED_THREADS"]`` of them stops claiming, finishes
what it can and exits non-zero so that its supervisor starts a clean process.
Absurd timeouts are refused where they are declared.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_arcature import job
from django_arcature.conf import validate
from django_arcature.core.limits import MAX_TIMEOUT_SECONDS
from django_arcature.db import ClaimedJob
from django_arcature.models import Job, JobStatus
from django_arcature.tasks.options import parse_overrides
from django_arcature.worker.dispatch import process, run_handler
from django_arcature.worker.loop import EXIT_TOO_MANY_ABANDONED_THREADS
from tests.concurrency import conftest as process_fixtures
from tests.concurrency.conftest import WorkerProcess
from tests.faults.handler_support import outcome, rows, run_worker
from tests.testapp import handler_fault_jobs

# The worker-process fixtures of tests/concurrency, used here too.
events = process_fixtures.events
start_worker = process_fixtures.start_worker

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture(autouse=True)
def release_blocked_handlers() -> Iterator[None]:
    """Blocked in-process handlers end with the test (the worker has long moved on)."""
    handler_fault_jobs.RELEASE.clear()
    yield
    handler_fault_jobs.RELEASE.set()


# --- timeouts are enforced ------------------------------------------------------------------


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_an_async_handler_blocking_its_loop_is_timed_out_on_every_attempt() -> None:
    blocked = Job.objects.enqueue("tests.faults.block_loop", args=[60]).pk
    after = Job.objects.enqueue("tests.faults.async_value", args=[7]).pk
    worker, status = run_worker(concurrency=1)
    assert status == 0
    found = rows([blocked, after])
    assert outcome(found[blocked]) == (JobStatus.DEAD, "timeout", 2)
    assert [entry["error"]["exception_class_path"] for entry in found[blocked].attempt_log] == [
        "builtins.TimeoutError",
        "builtins.TimeoutError",
    ]
    # One handler thread: the async job after it ran on a loop that was not blocked.
    assert outcome(found[after]) == (JobStatus.SUCCEEDED, "", 1)
    assert found[after].result == 7
    assert (worker.stats.retried, worker.stats.dead, worker.stats.succeeded) == (1, 1, 1)


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_a_blocked_loop_does_not_hold_up_the_other_async_jobs() -> None:
    blocked = Job.objects.enqueue("tests.faults.block_loop_long", args=[60], priority=10).pk
    quick = [Job.objects.enqueue("tests.faults.async_value", args=[i]).pk for i in range(6)]
    _, status = run_worker(concurrency=2)
    assert status == 0
    found = rows([blocked, *quick])
    assert outcome(found[blocked]) == (JobStatus.DEAD, "timeout", 1)
    assert [outcome(found[pk]) for pk in quick] == [(JobStatus.SUCCEEDED, "", 1)] * 6
    started = found[blocked].started_at
    assert started is not None
    # All of them finished while the blocked loop was still inside its 5 s attempt.
    assert all((found[pk].finished_at - started).total_seconds() < 5 for pk in quick)  # type: ignore[operator]


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_a_sync_handler_ignoring_its_timeout_is_abandoned_and_the_next_jobs_run() -> None:
    hung = [Job.objects.enqueue("tests.faults.hang", args=[60], priority=10).pk for _ in range(2)]
    adds = [Job.objects.enqueue("tests.add", args=[i, 1]).pk for i in range(4)]
    worker, status = run_worker(concurrency=1)
    assert status == 0
    found = rows(hung + adds)
    assert [outcome(found[pk]) for pk in hung] == [(JobStatus.DEAD, "timeout", 1)] * 2
    assert [found[pk].result for pk in adds] == [1, 2, 3, 4]
    assert worker.stats.lost == 0


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_the_longest_allowed_timeout_runs_normally() -> None:
    """Just under the bound, waiting for the attempt must not overflow (it did past 9.2e9 s)."""
    pk = Job.objects.enqueue("tests.faults.longest_timeout").pk
    _, status = run_worker(concurrency=1)
    assert status == 0
    row = Job.objects.get(pk=pk)
    assert (outcome(row), row.result) == ((JobStatus.SUCCEEDED, "", 1), "ok")


# --- abandoned threads are bounded ------------------------------------------------------------


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_past_the_abandoned_thread_limit_the_worker_stops_and_exits_non_zero() -> None:
    hung = [Job.objects.enqueue("tests.faults.hang", args=[60], priority=10).pk for _ in range(3)]
    adds = [Job.objects.enqueue("tests.add", args=[i, 1]).pk for i in range(5)]
    with override_settings(ARCATURE={"POLL_INTERVAL": 0.05, "MAX_ABANDONED_THREADS": 1}):
        worker, status = run_worker(concurrency=1, burst=False)
    assert status == EXIT_TOO_MANY_ABANDONED_THREADS
    found = rows(hung + adds)
    hung_outcomes = sorted(outcome(found[pk]) for pk in hung)
    assert hung_outcomes == [(JobStatus.DEAD, "timeout", 1)] * 2 + [(JobStatus.PENDING, "", 0)]
    assert [outcome(found[pk]) for pk in adds] == [(JobStatus.PENDING, "", 0)] * 5
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()
    assert worker.stats.dead == 2


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_worker_process_past_the_abandoned_thread_limit_exits_non_zero(
    start_worker: StartWorker,
) -> None:
    hung = [
        Job.objects.enqueue("tests.faults.sleep_process", args=[120], priority=10).pk
        for _ in range(3)
    ]
    adds = [Job.objects.enqueue("tests.add", args=[i, 1]).pk for i in range(5)]
    worker = start_worker("--concurrency", "1", "--settings", "tests.faults.abandoned_settings")
    # Promptly, although two handler threads are still asleep for two minutes.
    assert worker.wait(60) == EXIT_TOO_MANY_ABANDONED_THREADS, worker.log
    assert "MAX_ABANDONED_THREADS" in worker.log
    found = rows(hung + adds)
    hung_outcomes = sorted(outcome(found[pk]) for pk in hung)
    assert hung_outcomes == [(JobStatus.DEAD, "timeout", 1)] * 2 + [(JobStatus.PENDING, "", 0)]
    assert [outcome(found[pk]) for pk in adds] == [(JobStatus.PENDING, "", 0)] * 5
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()


@pytest.mark.parametrize("value", [-1, 0.5, True, "3", 1_000_001])
def test_max_abandoned_threads_setting_is_checked(value: Any) -> None:
    problems = validate({"MAX_ABANDONED_THREADS": value})
    assert len(problems) == 1
    assert "MAX_ABANDONED_THREADS" in problems[0]


def test_max_abandoned_threads_setting_accepts_whole_numbers() -> None:
    assert validate({"MAX_ABANDONED_THREADS": 0}) == []
    assert validate({"MAX_ABANDONED_THREADS": 50}) == []


# --- absurd timeouts are refused where they are declared ---------------------------------------

ABSURD = [MAX_TIMEOUT_SECONDS + 1, 1e10, 9.3e9, math.inf, math.nan, -1, 0]


def test_the_bound_is_a_week() -> None:
    assert MAX_TIMEOUT_SECONDS == 7 * 24 * 3600


@pytest.mark.parametrize("value", ABSURD)
def test_job_decorator_refuses_absurd_timeouts(value: float) -> None:
    with pytest.raises(ImproperlyConfigured, match="timeout"):
        job(name=f"tests.faults.absurd_{uuid.uuid4().hex}", timeout=value)


@pytest.mark.parametrize("value", ABSURD)
def test_the_setting_refuses_absurd_timeouts(value: float) -> None:
    problems = validate({"TIMEOUT": value})
    assert len(problems) == 1
    assert "TIMEOUT" in problems[0]
    assert "604800" in problems[0]


@pytest.mark.parametrize("value", ABSURD)
def test_django_tasks_options_refuse_absurd_timeouts(value: float) -> None:
    problems: list[str] = []
    parse_overrides({"timeout": value}, "TASKS['default']['OPTIONS']", problems)
    assert len(problems) == 1
    assert "timeout" in problems[0]


def _claimed() -> ClaimedJob:
    return ClaimedJob(
        id=uuid.uuid4(),
        task_name="tests.add",
        queue="default",
        priority=0,
        payload={"args": [1, 2], "kwargs": {}},
        attempts=1,
        max_attempts=3,
        claim_token=uuid.uuid4(),
        lease_seconds=30,
    )


@pytest.mark.parametrize("value", [1e10, math.inf, math.nan, -1])
def test_dispatch_refuses_absurd_timeouts_before_running(value: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        run_handler(_claimed(), timeout=value)
    with pytest.raises(ValueError, match="timeout"):
        process(_claimed(), worker_id="w", timeout=value)


def test_dispatch_accepts_the_bound() -> None:
    assert run_handler(_claimed(), timeout=MAX_TIMEOUT_SECONDS).result == 3  # type: ignore[union-attr]
