"""Limits under lost acknowledgements (issue 19, C): the connection is cut right after a
commit, before the worker hears of it, through the fault proxy (tests/faults/proxy.py).

A completion that landed unacknowledged is told apart by the manager; a slot
hold written or deleted unacknowledged is written again (idempotent) or
deleted again. Neither may let a handler run beyond ``concurrency`` nor leave
a slot taken once the handlers are gone.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_arcature.models import Job, JobStatus
from django_arcature.queues.models import SlotHold
from tests.concurrency.conftest import wait_until
from tests.faults.processes import FaultWorker
from tests.faults.proxy import Action, FaultProxy, proxy_to_test_database
from tests.limits.occupancy import max_overlap, runs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.heavy,
    pytest.mark.only_on(
        "postgresql", "mysql", reason="SQLite has no connection to a server that could be cut"
    ),
]

QUEUES = {"one": {"concurrency": 1}}


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with proxy_to_test_database() as relay:
        yield relay


@pytest.fixture
def start_worker(
    tmp_path: Path, proxy: FaultProxy, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., FaultWorker]]:
    settings.ARCATURE = {**settings.ARCATURE, "QUEUES": QUEUES}
    monkeypatch.setenv("ARCATURE_TEST_QUEUES", json.dumps(QUEUES))
    started: list[FaultWorker] = []

    def start(*args: str, proxied: bool = True) -> FaultWorker:
        connection.close()
        worker = FaultWorker(
            list(args), tmp_path / "events.txt", proxy_port=proxy.port if proxied else None
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.cleanup()


def test_lost_acknowledgements_neither_exceed_the_limit_nor_leak_a_slot(
    start_worker: Callable[..., FaultWorker], proxy: FaultProxy, tmp_path: Path
) -> None:
    log = tmp_path / "runs.txt"
    stuck = Job.objects.enqueue(
        "tests.limits.occupy", args=[str(log), 1.5], queue="one", priority=9
    )
    rest = [
        Job.objects.enqueue("tests.limits.occupy", args=[str(log), 0.2], queue="one").pk
        for _ in range(4)
    ]
    completions = proxy.arm(Action.DROP_AFTER_COMMIT, b"succeeded", times=2)
    holds = proxy.arm(Action.DROP_RESPONSE, b"arcature_slothold", times=2)
    proxied = start_worker("--concurrency", "2", "--lease", "3")
    wait_until(
        lambda: any(run.job_id == str(stuck.pk) for run in runs(log)),
        what="the first handler to start",
    )
    assert Job.objects.cancel(stuck.pk) == 1
    # The second worker starts only once the proxied one has lost a completion's
    # acknowledgement: started at once, it could take every remaining job while the
    # proxied one is still reconnecting, and the fault under test would never happen.
    wait_until(
        completions.fired.is_set, timeout=60, what="a completion's acknowledgement to be lost"
    )
    direct = start_worker("--concurrency", "2", "--lease", "3", proxied=False)
    wait_until(
        lambda: Job.objects.filter(pk__in=rest, status=JobStatus.SUCCEEDED).count() == 4,
        timeout=90,
        what="the queue to drain",
    )
    wait_until(lambda: not SlotHold.objects.exists(), timeout=30, what="the holds to go")
    ended: dict[int, float] = {}
    for worker in (proxied, direct):
        # The direct worker starts late (after the fault) and the proxied one may drain
        # the queue alone meanwhile: a worker still starting has no SIGTERM handler yet,
        # and the signal would end it with -SIGTERM (seen on MariaDB under load).
        wait_until(
            lambda worker=worker: " started: " in worker.log or not worker.alive(),  # type: ignore[misc]
            timeout=30,
            what="the worker to start",
        )
        worker.proc.send_signal(signal.SIGTERM)
    for worker in (proxied, direct):
        assert worker.wait(60) == 0, worker.log[-4000:]
        ended[worker.proc.pid] = time.monotonic()
    assert completions.fired.is_set(), proxied.log[-3000:]
    assert holds.fired.is_set(), proxied.log[-3000:]
    assert "database error" in proxied.log
    found = runs(log, ended)
    assert max_overlap(found) == 1, found
    assert len([run for run in found if run.job_id != str(stuck.pk)]) >= 4
