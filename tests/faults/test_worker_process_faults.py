"""Hostile data and broken observers in a real ``arcature_worker`` process, on every database.

The worker process has receivers that raise on every signal it sends — ours and
django.tasks' ``task_started``/``task_finished`` — connected before the test's
event recorder, and runs handlers and django.tasks tasks whose results or errors
a database refuses. ``--burst`` must still exit 0 with every job terminal, each
event sent exactly once per landed write.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection

from django_arcature.models import Job
from tests.faults import jobs as fault_jobs
from tests.faults.processes import FaultWorker, event_counts, fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

__all__ = ["fleet"]  # the fixture, imported for this module's test

RAISING = "job_succeeded,job_retried,job_dead,job_claim_lost,jobs_swept,task_started,task_finished"


def test_burst_with_raising_receivers_and_refused_values_exits_clean(
    tmp_path: Path, fleet: list[FaultWorker]
) -> None:
    assert fault_jobs.HOSTILE
    ok = [str(Job.objects.enqueue("faults.ok", args=[n]).id) for n in range(10)]
    tasks_ok = [
        str(Job.objects.enqueue("tests.faults.tasks.add", args=[n, 1], backend="default").id)
        for n in range(5)
    ]
    nan = str(Job.objects.enqueue("tests.faults.tasks.return_nan", backend="default").id)
    nul = str(Job.objects.enqueue("faults.return_hostile", args=["nul"]).id)
    failing = str(Job.objects.enqueue("faults.raise_hostile", args=["surrogate"]).id)
    events = tmp_path / "events.txt"
    connection.close()

    worker = FaultWorker(["--burst", "--concurrency", "2", "--batch", "8"], events, raising=RAISING)
    fleet.append(worker)
    status = worker.wait(90)

    assert status == 0, worker.log[-5000:]
    rows = {
        str(pk): (status, kind, result)
        for pk, status, kind, result in Job.objects.values_list(
            "id", "status", "error_kind", "result"
        )
    }
    assert [rows[job_id] for job_id in ok] == [("succeeded", "", n) for n in range(10)]
    assert [rows[job_id] for job_id in tasks_ok] == [("succeeded", "", n + 1) for n in range(5)]
    assert rows[nan] == ("dead", "permanent", None)
    assert rows[nul] == ("dead", "permanent", None)  # refused as a @job return value
    assert rows[failing][:2] == ("dead", "exhausted")
    assert "could not be stored" in Job.objects.get(pk=nan).last_error
    counts = event_counts(events)
    for job_id in [*ok, *tasks_ok]:
        assert counts[("job_succeeded", job_id)] == 1, job_id
    assert counts[("job_dead", nul)] == 1
    assert counts[("job_dead", nan)] == 1
    assert (counts[("job_retried", failing)], counts[("job_dead", failing)]) == (1, 1)
    assert not [key for key in counts if key[0] == "job_claim_lost"]
    assert "a receiver that always fails" in worker.log
