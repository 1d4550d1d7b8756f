"""A PostgreSQL enqueue wakes a same-host worker once, not twice, and no wake-up is lost.

The INSERT trigger's NOTIFY and the hint sent after the commit both reach a worker on
the enqueuer's host; the hint names the committing backend's PID, as the notification
does, and ``worker.wakeup.WakePairs`` lets only the first of the two through. The
twin used to make a second claim, which found nothing, on the pickup's way.

No test here is timed. The pairing window is made long, so that whether a twin was
dropped is a fact of the run; the poll interval is an hour, so that a wake-up lost to
a wrong pairing leaves its job unclaimed and fails the wait instead of passing slowly.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test import override_settings

from django_arcature.hints import hint_directory, hint_pid
from django_arcature.models import Job, JobStatus
from django_arcature.worker import Worker, wakeup

pytestmark = pytest.mark.django_db(transaction=True)

#: Longer than any wait here: only a wake-up can make the worker claim.
HOUR = 3600.0
#: How long a job may take to be picked up and run before the test fails.
DONE_WITHIN = 60.0
#: Settings under which the idle worker's loop turns only for a wake-up.
QUIET = {"SWEEP_INTERVAL": HOUR, "POLL_INTERVAL": HOUR}


@pytest.fixture
def hint_dir() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="arc-p-", dir="/tmp")
    # No sweep or heartbeat within a test's run either: each is a loop turn, so a claim.
    with override_settings(ARCATURE={**QUIET, "WAKE_HINT_DIR": folder}):
        yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_an_enqueues_hint_names_the_committing_backend_only_on_postgresql(
    hint_dir: str,
) -> None:
    directory = hint_directory("default")
    directory.mkdir(mode=0o700)
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(directory / "1-test.sock"))
    receiver.settimeout(10)
    try:
        Job.objects.enqueue("tests.noop")
        alone = receiver.recv(64)
        with transaction.atomic():
            Job.objects.enqueue("tests.noop")
            Job.objects.enqueue("tests.noop")  # the same transaction: one NOTIFY for both
        first, second = receiver.recv(64), receiver.recv(64)
    finally:
        receiver.close()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        assert hint_pid(alone) == pid
        assert [hint_pid(first), hint_pid(second)] == [pid, None]
    else:  # no NOTIFY to pair with: the hint is the bare mark older versions send
        assert [alone, first, second] == [b"!", b"!", b"!"]


class CountingWorker(Worker):
    """Counts the wake-ups that reached the main loop, by channel."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.woken: list[str] = []

    def _woken(self, source: str) -> None:
        self.woken.append(source)
        super()._woken(source)


@pytest.fixture
def worker(hint_dir: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingWorker]:
    """An idle worker listening and receiving hints, that claims only when woken."""
    monkeypatch.setattr(wakeup, "PAIR_SECONDS", HOUR)
    monkeypatch.setattr(wakeup.WakePairs.__init__, "__defaults__", (HOUR, wakeup.PAIR_LIMIT))
    running = CountingWorker(
        install_signal_handlers=False,
        duties=False,
        listen=True,
        poll_interval=HOUR,
        lease=int(HOUR),
        concurrency=2,
        shutdown_timeout=5.0,
    )
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["status"] = running.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, name="test-worker")
    thread.start()
    deadline = time.monotonic() + 20
    while not (
        running._listener is not None
        and running._listener.listening
        and running._hints is not None
        and running._wake_pairs is not None
    ):
        assert time.monotonic() < deadline, "the worker's listener and hints did not start"
        time.sleep(0.02)
    time.sleep(0.3)  # the reconnect's own look (on_queues) is over
    try:
        yield running
    finally:
        running.stop()
        thread.join(30)
    assert box.get("status") == 0


def _wait_done(ids: list[Any]) -> None:
    deadline = time.monotonic() + DONE_WITHIN
    while Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() < len(ids):
        assert time.monotonic() < deadline, "a job was never claimed: a wake-up was lost"
        time.sleep(0.05)


def _quiet(settle: float = 0.5) -> None:
    """Let the twins of the last enqueues arrive (and be dropped, or wake the worker)."""
    time.sleep(settle)


@pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY exist there only")
@pytest.mark.pgbouncer(False, reason="the notifications travel on a direct connection")
def test_an_enqueue_wakes_the_worker_once(worker: CountingWorker) -> None:
    pairs = worker._wake_pairs
    assert pairs is not None
    for round_ in range(3):
        before = len(worker.woken)
        job = Job.objects.enqueue("tests.noop")
        _wait_done([job.pk])
        _quiet()
        assert len(worker.woken) - before == 1, worker.woken[before:]
        assert pairs.dropped == round_ + 1


@pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY exist there only")
@pytest.mark.pgbouncer(False, reason="the notifications travel on a direct connection")
def test_racing_enqueues_of_one_connection_lose_no_wake_up(worker: CountingWorker) -> None:
    """Enqueues back to back on one connection, so twins and the next enqueue's halves
    interleave; a transaction of several enqueues (one NOTIFY, one PID hint, the other
    hints bare); another connection's NOTIFY-only insert. Every job runs, with no poll."""
    ids = [Job.objects.enqueue("tests.noop").pk for _ in range(20)]
    with transaction.atomic():
        ids += [Job.objects.enqueue("tests.noop").pk for _ in range(3)]
    ids.append(Job.objects.enqueue("tests.noop").pk)
    _wait_done(ids)
    other: list[Any] = []

    def elsewhere() -> None:  # another backend, which sends no hint here
        try:
            with override_settings(ARCATURE={**QUIET, "WAKE_HINTS": False}):
                other.append(Job.objects.enqueue("tests.noop").pk)
        finally:
            connections.close_all()

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(30)
    ids += other
    ids.append(Job.objects.enqueue("tests.noop").pk)
    _wait_done(ids)
    with override_settings(ARCATURE={**QUIET, "WAKE_HINTS": False}):
        for _ in range(2):  # two NOTIFYs of one backend, no hint: neither is the other's twin
            ids.append(Job.objects.enqueue("tests.noop").pk)
            _wait_done(ids)
    assert worker._wake_pairs is not None
    assert worker._wake_pairs.dropped >= 1
