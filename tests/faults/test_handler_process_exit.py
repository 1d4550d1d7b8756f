"""A handler that calls ``os._exit`` takes its worker process down with it.

Nothing in the process survives to write anything: the job it was running and
the rest of the batch that worker had claimed stay ``running`` under a lease
nobody renews. Another worker's sweep brings them back once the lease has
expired on the database's clock, and each then completes exactly once: one
``job_succeeded`` event and one landed write per job, whatever ran twice.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from django_arcature.models import Job, JobStatus
from tests.concurrency import conftest as process_fixtures
from tests.concurrency.conftest import WorkerProcess, read_events, wait_until
from tests.faults.handler_support import outcome, rows

# The worker-process fixtures of tests/concurrency, used here too.
events = process_fixtures.events
start_worker = process_fixtures.start_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]


def test_os_exit_in_a_handler_loses_nothing_and_completes_each_job_once(
    start_worker: Callable[..., WorkerProcess], events: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "attempts.txt"
    killer = Job.objects.enqueue(
        "tests.faults.exit_on_first_attempt", args=[str(marker)], priority=9
    )
    others = [Job.objects.enqueue("tests.sleep", args=[1.5]).pk for _ in range(5)]
    # Six threads claim all six jobs at once; the five others are still asleep
    # when the killer ends the process, so they are orphaned mid-attempt.
    first = start_worker("--concurrency", "6", "--batch", "10", "--lease", "2")
    assert first.wait(60) == 9, first.log
    assert marker.read_text().count("attempt 1 ") == 1
    assert Job.objects.get(pk=killer.pk).status == JobStatus.RUNNING

    second = start_worker("--concurrency", "2", "--lease", "2")
    wait_until(
        lambda: not Job.objects.exclude(status=JobStatus.SUCCEEDED).exists(),
        timeout=60,
        what="every job to succeed after the lease expired",
    )
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0, second.log

    found = rows([killer.pk, *others])
    assert outcome(found[killer.pk]) == (JobStatus.SUCCEEDED, "", 2)
    assert found[killer.pk].result == "attempt 2"
    # Each of the others: attempt 1 died with the process, attempt 2 landed.
    assert [outcome(found[pk]) for pk in others] == [(JobStatus.SUCCEEDED, "", 2)] * 5
    assert [found[pk].result for pk in others] == ["slept"] * 5
    succeeded = Counter(job_id for name, job_id in read_events(events) if name == "job_succeeded")
    assert succeeded == Counter({str(pk): 1 for pk in [killer.pk, *others]})
    assert "recovered" in second.log
