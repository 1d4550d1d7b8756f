"""A job enqueued while an idle worker's claim is in flight is still picked up.

Each round wakes the worker as an enqueue would, but with no job behind the
wake-up (a decoy: a bare hint, or a bare NOTIFY), so that it makes a claim that
finds nothing, and enqueues the job right after: the job commits during that
claim, or just before or after it. No job of the worker's ends afterwards to
make it claim again: when the claim missed the job, only the job's own wake-up,
received while the worker was busy with that claim, can. The worker's pickup
trace (``ARCATURE_PICKUP_TRACE``) tells when each claim was sent and when the
loop waited again: the test checks that the race was actually run (the job's
wake-up arrived in that window; required where that window is wide or a lost
wake-up would show, see ``_run_rounds``) and that every job ran.

With LISTEN alone (PostgreSQL, hints off) a listening worker with nothing
running waits its whole ``--poll-interval`` (120 s here; its heartbeat and sweep
timers are minutes away too) after an empty claim, so a wake-up lost during the
claim would leave the job pending far past the test's bound. With hints
alone (every database) the worker's adaptive poll looks again within
milliseconds after work, which would hide a lost hint: there the test shows that
the race runs and loses no job, not that the hint, rather than a poll, found it.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_arcature.hints import send_hints
from django_arcature.models import Job, JobStatus
from django_arcature.worker.pickup_trace import ENV
from django_arcature.worker.wakeup import CHANNEL, _autocommit_connection
from tests.concurrency.conftest import WorkerProcess, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

StartWorker = Callable[..., WorkerProcess]

#: Rounds at most, and how many races (an enqueue during a claim that missed it) are enough.
ROUNDS = 300
RACES = 3


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class _Decoy:
    """Wakes the worker as an enqueue does, with no job behind it: a bare hint, or a
    bare NOTIFY sent over a connection of its own (committed at once)."""

    def __init__(self, wake: str) -> None:
        self.wake = wake
        self._conn = _autocommit_connection("default") if wake == "listen" else None

    def send(self) -> None:
        if self._conn is None:
            send_hints("default")
        else:
            self._conn.execute("SELECT pg_notify(%s, '')", [CHANNEL])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def _run_rounds(worker: WorkerProcess, trace_file: Path, decoy: _Decoy) -> int:
    races = 0
    enqueued: list[Any] = []
    for _ in range(ROUNDS):
        # The decoy wakes the worker for a claim that finds nothing; the job's
        # enqueue follows at once, its commit landing during that claim, or
        # just before or after it.
        decoy.send()
        pause = random.choice((0.0, 0.0, random.uniform(0, 0.001), random.uniform(0, 0.003)))
        if pause:
            time.sleep(pause)
        job = Job.objects.enqueue("tests.add", args=[1, 2])
        enqueued.append(job.pk)
        wait_until(
            lambda pk=job.pk: Job.objects.filter(pk=pk, status=JobStatus.SUCCEEDED).exists(),  # type: ignore[misc]
            timeout=60,
            what=f"the job to run (worker log:\n{worker.log})",
        )
        records = _records(trace_file)
        mine = [record for record in records if record.get("job") == str(job.pk)]
        assert mine, "every claimed job is traced"
        # The job's wake-up reached the worker after it sent a claim that came back
        # empty and before its loop waited again: that claim missed the job, and
        # only the wake-up, which arrived while nobody waited for it, was left.
        woke = mine[0]["woke_ns"]
        if any(
            record["batch"] == 0 and record["claim_sent_ns"] < woke < record["busy_until_ns"]
            for record in records
        ):
            races += 1
            if races >= RACES:
                break
        trace_file.write_text("")  # the next round reads its own claims only
    if decoy.wake == "listen" or connection.vendor == "mysql":
        # Where a lost wake-up would show (LISTEN: the next poll is minutes away) or
        # the claim's round trips leave a wide window (MariaDB), the race must have
        # run. With hints on PostgreSQL and SQLite the window after the claim is a
        # fraction of a millisecond, hit in some runs only (SQLite's writes take
        # turns: a claim cannot miss a job committing while it runs), and a lost
        # hint would be hidden by the poll anyway: there the rounds show that no
        # job is lost.
        assert races >= 1, "no job's wake-up arrived during an empty claim: race not run"
    assert not Job.objects.filter(pk__in=enqueued).exclude(status=JobStatus.SUCCEEDED).exists()
    return races


@pytest.mark.parametrize(
    "wake",
    [
        "hints",
        pytest.param(
            "listen",
            marks=pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY is PostgreSQL's"),
        ),
    ],
)
def test_a_job_enqueued_during_the_claim_is_picked_up(
    start_worker: StartWorker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wake: str
) -> None:
    if wake == "listen":
        monkeypatch.setenv("ARCATURE_TEST_WAKE_HINTS", "0")
    trace_file = tmp_path / "trace.jsonl"
    monkeypatch.setenv(ENV, str(trace_file))
    monkeypatch.setenv("ARCATURE_TEST_SWEEP_INTERVAL", "600")
    args = ["--poll-interval", "120", "--lease", "900", "--queue", "default"]
    if wake == "hints":
        args.append("--no-listen")
    worker = start_worker(*args)
    wait_until(lambda: "started" in worker.log, what="the worker to start")
    time.sleep(1)  # its hint socket is bound and its first (empty) claim is done
    decoy = _Decoy(wake)
    try:
        _run_rounds(worker, trace_file, decoy)
    finally:
        decoy.close()
    worker.signal(15)
    assert worker.wait(30) == 0, worker.log
