"""A job notification wakes the worker without re-reading the pause flags; a pause does.

One NOTIFY per enqueue wakes every idle worker of the fleet. Each used to re-read
the queues' pause flags before claiming, one more query (and round trip) per
worker per wake-up; the fleet benchmark (benchmarks/scale.md, "Many worker hosts")
measured it. A pause or resume sends its own notification, so only that one, a
hint (which carries no payload) or a reconnect of the listener needs the re-read.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_arcature.models import Job
from django_arcature.queues.models import QueueState
from django_arcature.worker import Worker
from django_arcature.worker.loop import LISTENING
from django_arcature.worker.wakeup import CHANNEL, Listener

pytestmark = pytest.mark.django_db(transaction=True)

#: A poll interval (so the pause flags' refresh interval) no test here outlasts.
FLAGS_KEPT_SECONDS = 300.0


def _claim_queries(worker: Worker, event: str) -> list[str]:
    """The SQL of the claim that follows ``event`` on an idle worker."""
    worker._take(event)
    with CaptureQueriesContext(connection) as captured:
        worker._maybe_claim()
    return [query["sql"] for query in captured.captured_queries]


def test_a_job_notification_claims_without_reading_the_pause_flags() -> None:
    # The flags are re-read once per poll interval: the tests' 0.05 s would let a
    # loaded machine's pause between two claims read them again, so the test's
    # worker gets a long one (only a notification may re-read them here).
    worker = Worker(
        install_signal_handlers=False, duties=False, listen=False, poll_interval=FLAGS_KEPT_SECONDS
    )
    table = QueueState._meta.db_table
    first = _claim_queries(worker, "notify")
    assert any(table in sql for sql in first)  # the flags are read once
    enqueued = _claim_queries(worker, "enqueued")
    assert enqueued, "the wake-up still claims"
    assert not any(table in sql for sql in enqueued)
    again = _claim_queries(worker, "notify")  # a pause/resume notification, or a hint
    assert any(table in sql for sql in again)


@pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY exist there only")
@pytest.mark.pgbouncer(False, reason="the notifications travel on a direct connection")
def test_the_listener_tells_job_notifications_from_queue_changes() -> None:
    seen: list[str] = []
    changed = threading.Event()
    woken = threading.Event()

    def wake() -> None:
        seen.append("job")
        woken.set()

    def on_queues() -> None:
        seen.append("queues")
        changed.set()

    listener = Listener("default", wake, on_queues=on_queues)
    listener.start()
    try:
        assert changed.wait(10), "after connecting, the listener asks for a full look"
        deadline = time.monotonic() + 5
        while not listener.listening and time.monotonic() < deadline:
            time.sleep(0.02)
        changed.clear()
        seen.clear()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, "probe:someone-else"])
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, ""])
        assert woken.wait(5)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, "queues"])
        assert changed.wait(5)
        time.sleep(0.2)
        # Notifications arrive in the order sent: the probe first, and it woke nobody.
        assert seen == ["job", "queues"]
    finally:
        listener.close()


@pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY exist there only")
@pytest.mark.pgbouncer(False, reason="the notifications travel on a direct connection")
def test_a_worker_woken_by_an_enqueue_claims_without_reading_the_flags() -> None:
    worker = Worker(
        install_signal_handlers=False, duties=False, listen=True, poll_interval=FLAGS_KEPT_SECONDS
    )
    worker._start_threads()
    try:
        deadline = time.monotonic() + 10
        while not (worker._listener and worker._listener.listening):
            assert time.monotonic() < deadline, "the worker's listener did not start"
            time.sleep(0.02)
        time.sleep(0.2)
        worker._collect()
        worker._maybe_claim()  # the flags are read now, not again within POLL_INTERVAL
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, ""])  # what an INSERT sends
        item = worker._events.get(timeout=5)
        worker._take(item)
        with CaptureQueriesContext(connection) as captured:
            worker._maybe_claim()
        queries = [query["sql"] for query in captured.captured_queries]
        assert queries, "the wake-up claims"
        assert not any(QueueState._meta.db_table in sql for sql in queries)
    finally:
        worker._shutdown_threads()


def test_a_listen_that_starts_delivering_makes_a_worker_with_running_jobs_heartbeat_now() -> None:
    """A cancel sent before the LISTEN delivered (the worker's start, a reconnect) went
    unheard; the listener's word that it now listens brings the heartbeat forward, so
    the cancel is seen at once instead of a third of a lease later."""
    worker = Worker(install_signal_handlers=False, duties=False, listen=False)
    worker._next_heartbeat = float("inf")
    worker._take(LISTENING)
    assert worker._next_heartbeat == float("inf"), "nothing runs: nothing to check"
    job = Job.objects.enqueue("tests.noop")
    assert worker._maybe_claim() == 1
    assert job.pk in {key[0] for key in worker._inflight}
    worker._next_heartbeat = float("inf")
    worker._take(LISTENING)
    assert worker._next_heartbeat == 0.0


@pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY exist there only")
@pytest.mark.pgbouncer(False, reason="the notifications travel on a direct connection")
def test_the_listener_says_when_it_listens_after_its_probe() -> None:
    """``on_listening`` comes once the LISTEN delivers: a cancel sent right after it is
    heard (before it, the probe may have swallowed it, which the heartbeat covers)."""
    listening = threading.Event()
    cancelled: list[str] = []
    heard = threading.Event()

    def on_cancel(job_id: str) -> None:
        cancelled.append(job_id)
        heard.set()

    listener = Listener("default", lambda: None, on_cancel=on_cancel, on_listening=listening.set)
    listener.start()
    try:
        assert listening.wait(10), "the listener never said it listens"
        assert listener.listening
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, "cancel:some-job"])
        assert heard.wait(5)
        assert cancelled == ["some-job"]
    finally:
        listener.close()


@pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY exist there only")
@pytest.mark.pgbouncer(False, reason="the notifications travel on a direct connection")
def test_the_probe_hands_over_a_cancel_that_arrives_before_its_token() -> None:
    """The probe reads the channel until its own token comes back; a real notification
    read on the way (here a cancel sent after LISTEN, before the probe's NOTIFY) used
    to be dropped, and the cancelled job ran on until its next heartbeat."""
    cancelled: list[str] = []
    woken: list[str] = []
    listener = Listener("default", lambda: woken.append("job"), on_cancel=cancelled.append)
    conn = listener._connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, "cancel:early-job"])
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, "enqueued"])
        assert listener._probe(conn), "the probe's own token did not come back"
    finally:
        conn.close()
    assert cancelled == ["early-job"]
    assert woken == ["job"]
