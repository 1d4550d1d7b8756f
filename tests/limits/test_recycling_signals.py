"""Recycling and signals in every order, on real worker processes (issue 19, B4).

A worker that stops itself (``--max-runtime``, ``--max-memory``, the
abandoned-thread limit) is already shutting down gracefully when its
supervisor, seeing it stop, sends SIGTERM. That first external signal must be
treated as a first signal: finish or release the running jobs within the
shutdown timeout, exit with the self-stop's status. Only a second external
signal forces the exit (128 + signal) and leaves the running jobs to their
lease. Each test checks the exit status and that no job is left ``running``.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from django_arcature.models import Job, JobStatus
from django_arcature.worker.handlers import EXIT_TOO_MANY_ABANDONED_THREADS
from tests.concurrency.conftest import WorkerProcess, read_events, wait_started, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

StartWorker = Callable[..., WorkerProcess]


def row(job_id: uuid.UUID) -> tuple[str, object]:
    found = Job.objects.get(pk=job_id)
    return found.status, found.result


def no_job_running() -> bool:
    return not Job.objects.filter(status=JobStatus.RUNNING).exists()


def wait_for_log(worker: WorkerProcess, text: str, timeout: float = 30) -> None:
    wait_until(lambda: text in worker.log, timeout=timeout, what=f"{text!r} in the worker's log")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_after_max_runtime_still_lets_the_running_job_finish(
    start_worker: StartWorker, events: Path, signum: int
) -> None:
    job = Job.objects.enqueue("tests.sleep", args=[4])
    worker = start_worker("--max-runtime", "1", "--shutdown-timeout", "30")
    wait_started(events, job.pk)
    wait_for_log(worker, "recycling: it ran for")
    # Still running when the signal comes (3 s to spare): otherwise the test would pass
    # without a job to let finish.
    assert row(job.pk)[0] == JobStatus.RUNNING
    worker.signal(signum)  # the supervisor's first signal, after the worker stopped itself
    assert worker.wait(30) == 0, worker.log
    assert row(job.pk) == (JobStatus.SUCCEEDED, "slept")
    assert "exiting now" not in worker.log
    assert no_job_running()


def test_first_sigterm_after_max_runtime_releases_a_job_past_the_shutdown_timeout(
    start_worker: StartWorker, events: Path
) -> None:
    job = Job.objects.enqueue("tests.wait_for_cancel", args=[60])
    worker = start_worker("--max-runtime", "1", "--shutdown-timeout", "2")
    wait_started(events, job.pk)
    wait_for_log(worker, "recycling: it ran for")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log
    found = Job.objects.get(pk=job.pk)
    assert (found.status, found.attempts, found.claim_token) == (JobStatus.PENDING, 0, None)
    assert ("job_released", str(job.pk)) in read_events(events)


def test_sigterm_then_the_runtime_limit_passing_is_one_graceful_stop(
    start_worker: StartWorker, events: Path
) -> None:
    job = Job.objects.enqueue("tests.sleep", args=[2.5])
    worker = start_worker("--max-runtime", "1.5", "--shutdown-timeout", "30")
    wait_started(events, job.pk)
    worker.signal(signal.SIGTERM)
    wait_for_log(worker, "stopping")
    time.sleep(1.5)  # the runtime limit passes while the worker is stopping
    assert worker.wait(30) == 0, worker.log
    assert row(job.pk) == (JobStatus.SUCCEEDED, "slept")
    assert no_job_running()


def test_sigterm_after_the_abandoned_thread_limit_keeps_its_status_and_finishes_the_rest(
    start_worker: StartWorker, events: Path
) -> None:
    hung = Job.objects.enqueue("tests.faults.sleep_process", args=[120], priority=10)
    other = Job.objects.enqueue("tests.sleep", args=[3])
    worker = start_worker(
        "--concurrency",
        "2",
        "--shutdown-timeout",
        "30",
        "--settings",
        "tests.limits.abandon_once_settings",
    )
    wait_started(events, other.pk)
    wait_for_log(worker, "MAX_ABANDONED_THREADS")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == EXIT_TOO_MANY_ABANDONED_THREADS, worker.log
    assert row(other.pk) == (JobStatus.SUCCEEDED, "slept")
    assert Job.objects.get(pk=hung.pk).status == JobStatus.DEAD  # its timeout, written
    assert no_job_running()


def test_a_second_signal_after_a_self_stop_forces_and_the_lease_brings_the_job_back(
    start_worker: StartWorker, events: Path
) -> None:
    job = Job.objects.enqueue("tests.sleep", args=[60])
    worker = start_worker("--max-runtime", "1", "--shutdown-timeout", "60", "--lease", "2")
    wait_started(events, job.pk)
    wait_for_log(worker, "recycling: it ran for")
    worker.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert worker.alive(), worker.log  # the first one did not force anything
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 128 + signal.SIGTERM
    assert "second SIGTERM: exiting now" in worker.log
    # Forced: nothing was released, the lease expires and a sweep takes the job back.
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    # Past the 2 s lease a sweep takes it back: polled, not a fixed wait past the lease.
    wait_until(
        lambda: Job.objects.sweep_expired_leases() == 1,
        what="the lease to expire and a sweep to take the job back",
    )
    assert no_job_running()


def test_two_sigterms_without_a_self_stop_still_force(
    start_worker: StartWorker, events: Path
) -> None:
    job = Job.objects.enqueue("tests.sleep", args=[60])
    worker = start_worker("--shutdown-timeout", "60", "--lease", "2")
    wait_started(events, job.pk)
    worker.signal(signal.SIGTERM)
    wait_for_log(worker, "stopping")
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 128 + signal.SIGTERM
    # Past the 2 s lease a sweep takes it back: polled, not a fixed wait past the lease.
    wait_until(
        lambda: Job.objects.sweep_expired_leases() == 1,
        what="the lease to expire and a sweep to take the job back",
    )
    assert no_job_running()
