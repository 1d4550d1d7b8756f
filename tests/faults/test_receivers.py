"""Defect 4 of issue 10: a raising signal receiver never breaks the worker.

Every observer event is sent after its write landed; a receiver that raises
(a broken metrics hook) is logged, the other receivers still run, the event is
sent exactly once, and the worker goes on with its next batch.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError
from django.dispatch import Signal

from django_arcature import signals
from django_arcature.models import Job
from tests.faults import jobs as fault_jobs
from tests.faults.conftest import run_worker
from tests.integration.conftest import Recorder

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_SIGNALS = ("job_succeeded", "job_retried", "job_dead", "job_claim_lost", "jobs_swept")


@pytest.fixture(params=[RuntimeError, OperationalError], ids=["RuntimeError", "DatabaseError"])
def raising(request: pytest.FixtureRequest) -> Iterator[type[Exception]]:
    """A receiver that raises, connected to every signal the worker sends, before the others."""
    error: type[Exception] = request.param

    def receiver(sender: Any, **kwargs: Any) -> None:
        raise error("a broken observer")

    connected: list[Signal] = []
    for name in WORKER_SIGNALS:
        signal: Signal = getattr(signals, name)
        signal.connect(receiver, weak=False)
        # First in line: with a plain send(), the receivers after it would never run.
        signal.receivers.insert(0, signal.receivers.pop())
        signal.sender_receivers_cache.clear()
        connected.append(signal)
    yield error
    for signal in connected:
        signal.disconnect(receiver)


def test_worker_survives_receivers_that_raise(
    raising: type[Exception], events: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    assert fault_jobs.HOSTILE
    ok = [Job.objects.enqueue("faults.ok", args=[n]).id for n in range(8)]
    dead = Job.objects.enqueue("faults.raise_hostile", args=["nul"], kwargs={"permanent": True}).id
    flaky = Job.objects.enqueue("faults.raise_hostile", args=["nul"]).id

    with caplog.at_level(logging.ERROR):
        run = run_worker(timeout=30, concurrency=2, batch=4)

    assert run.error is None, repr(run.error)
    assert run.finished
    assert run.status == 0
    statuses = dict(Job.objects.values_list("id", "status"))
    assert {statuses[job_id] for job_id in ok} == {"succeeded"}
    assert (statuses[dead], statuses[flaky]) == ("dead", "dead")
    # Each landed write: its event exactly once, to the receivers after the broken one too.
    sent = Counter((name, kwargs.get("job_id")) for name, kwargs in events.events)
    assert all(sent[("job_succeeded", job_id)] == 1 for job_id in ok)
    assert sent[("job_dead", dead)] == 1
    assert (sent[("job_retried", flaky)], sent[("job_dead", flaky)]) == (1, 1)
    assert not [key for key in sent if key[0] == "job_claim_lost"]
    assert run.worker.stats.lost == 0
    assert run.worker.stats.succeeded == len(ok)
    assert "a broken observer" in caplog.text
