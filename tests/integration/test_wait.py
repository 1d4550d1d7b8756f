"""``job.wait()`` and ``async_wait()``: outcomes, timeouts, races, many waiters, lost connections.

On PostgreSQL the tests that prove the notification path turn the waiters'
polling off (``LISTENING_POLL`` and the listener's ``SAFETY_SECONDS`` set to an
hour): a waiter then returns before its timeout only if it was notified, or if
it read the job at the right moment. A design that read the job before marking
it, or that hung on a dropped connection, would time out instead.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction

from django_arcature import JobWaitTimeout
from django_arcature.models import Job, JobStatus
from django_arcature.testing import run_job
from django_arcature.worker.wakeup import _autocommit_connection
from django_arcature.workflows import done_listener, waiting
from tests.testapp import workflow_jobs as wf

pytestmark = pytest.mark.django_db(transaction=True)

BEHIND_PGBOUNCER = os.environ.get("ARCATURE_PGBOUNCER") == "1"
only_postgresql = pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY exist there only")


def in_thread(action: Callable[[], object], delay: float = 0.0) -> threading.Thread:
    """Run ``action`` on another thread (its own connection), after ``delay``."""

    def run() -> None:
        time.sleep(delay)
        try:
            action()
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


#: A notified waiter's own timeout: it must return long before, or not at all.
FOREVER = 3600.0
#: How long a test lets such a waiter take before calling it hung. Not a speed
#: target (those are in benchmarks/): a woken waiter takes milliseconds.
HUNG_AFTER = 30.0


def waiting_thread(job: Job, outcome: list[object]) -> threading.Thread:
    """``job.wait(FOREVER)`` on another thread: its deadline's last read cannot rescue it."""
    return in_thread(lambda: outcome.append(Job.objects.get(pk=job.pk).wait(FOREVER).result))


def assert_returned(thread: threading.Thread) -> None:
    thread.join(HUNG_AFTER)
    assert not thread.is_alive(), "the waiter hung: neither notified nor reading its job"


def run(job: Job) -> Callable[[], object]:
    return lambda: run_job(Job.objects.get(pk=job.pk))


def cancel(job: Job) -> Callable[[], object]:
    return lambda: Job.objects.cancel(job.pk)


@pytest.fixture
def no_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiter that listens reads its job only when woken: no safety reads."""
    monkeypatch.setattr(waiting, "LISTENING_POLL", 3600.0)
    monkeypatch.setattr(done_listener, "SAFETY_SECONDS", 3600.0)


def _listener() -> done_listener.DoneListener:
    found = done_listener.listener_for("default")
    assert found is not None
    return found


def _until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting for the test's own condition"
        time.sleep(0.01)


def _close_all() -> None:
    for alias in connections:
        connections[alias].close()


def _marked(job: Job) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT arcature_waited FROM django_arcature_job WHERE id = %s", [job.pk])
        return bool(cursor.fetchone()[0])


@pytest.mark.parametrize(
    ("make", "finish", "status"),
    [
        (lambda: wf.step.enqueue("ok"), run, JobStatus.SUCCEEDED),
        (lambda: wf.boom.enqueue("no"), run, JobStatus.DEAD),
        (lambda: wf.step.enqueue("stop"), cancel, JobStatus.CANCELLED),
    ],
    ids=["succeeded", "dead", "cancelled"],
)
def test_wait_returns_on_every_finished_state(
    make: Callable[[], Job], finish: Callable[[Job], Callable[[], object]], status: str
) -> None:
    job = make()
    thread = in_thread(finish(job), delay=0.1)
    done = job.wait(timeout=20)
    thread.join()
    assert done is job
    assert done.status == status
    assert Job.objects.get(pk=job.pk).status == status


def test_wait_returns_at_once_for_a_finished_job() -> None:
    job = run_job(wf.step.enqueue("before"))
    assert job.wait(timeout=0).result == "before"


def test_timeout_raises_and_leaves_no_waiter_behind() -> None:
    job = wf.step.enqueue("never")
    with pytest.raises(JobWaitTimeout, match=r"still pending after 0\.3s"):
        job.wait(timeout=0.3)
    listener = done_listener.listener_for("default")
    if listener is not None:
        assert not listener._waiting()


@pytest.mark.parametrize("timeout", [-1, "5", None, True])
def test_a_bad_timeout_is_refused(timeout: object) -> None:
    job = wf.step.enqueue("x")
    with pytest.raises(ValueError, match="number of seconds"):
        job.wait(timeout=timeout)  # type: ignore[arg-type]


def test_wait_inside_a_transaction_is_refused_before_any_write() -> None:
    job = wf.step.enqueue("x")
    with transaction.atomic(), pytest.raises(RuntimeError, match="inside a transaction"):
        job.wait(timeout=1)
    if connection.vendor == "postgresql":
        assert not _marked(job)


def test_many_concurrent_waiters() -> None:
    """Three waiters on each of ten jobs, all on threads of one process."""
    jobs = [wf.step.enqueue(f"many-{n}") for n in range(10)]
    results: dict[tuple[int, int], object] = {}
    errors: list[BaseException] = []

    def waiter(index: int, copy: int) -> None:
        try:
            row = Job.objects.get(pk=jobs[index].pk)
            results[(index, copy)] = row.wait(timeout=30).result
        except BaseException as exc:  # reported by the assert below
            errors.append(exc)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=waiter, args=(i, c)) for i in range(len(jobs)) for c in range(3)
    ]
    for thread in threads:
        thread.start()
    if connection.vendor == "postgresql" and not BEHIND_PGBOUNCER:
        _until(lambda: _listener().listening)
        # One LISTEN connection for the whole process, however many wait.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND datname = current_database()",
                [done_listener.APPLICATION_NAME],
            )
            assert cursor.fetchone()[0] == 1
    for job in jobs:
        run_job(Job.objects.get(pk=job.pk))
    for thread in threads:
        thread.join(60)
    assert not errors
    assert results == {(i, c): f"many-{i}" for i in range(len(jobs)) for c in range(3)}


def test_many_async_waiters_on_one_event_loop() -> None:
    jobs = [wf.step.enqueue(f"async-{n}") for n in range(8)]
    finisher = in_thread(lambda: [run(job)() for job in jobs], delay=0.2)

    async def main() -> list[object]:
        try:
            rows = await asyncio.gather(*(job.async_wait(timeout=30) for job in jobs))
            return [row.result for row in rows]
        finally:
            await sync_to_async(_close_all)()

    outcome: list[list[object]] = []
    loop_thread = threading.Thread(target=lambda: outcome.append(asyncio.run(main())))
    loop_thread.start()
    loop_thread.join(60)
    finisher.join()
    assert outcome == [[f"async-{n}" for n in range(8)]]


# --- PostgreSQL: the notification path ---------------------------------------------------------


@only_postgresql
@pytest.mark.pgbouncer(False, reason="LISTEN delivers on a direct connection")
def test_a_waiter_is_woken_by_the_notification(no_polling: None) -> None:
    job = wf.step.enqueue("notified")
    outcome: list[object] = []
    waiter = waiting_thread(job, outcome)
    _until(lambda: _marked(job))
    run(job)()
    assert_returned(waiter)
    assert outcome == ["notified"]


@only_postgresql
@pytest.mark.pgbouncer(False, reason="LISTEN delivers on a direct connection")
def test_async_waiter_is_woken_by_the_notification(no_polling: None) -> None:
    job = wf.step.enqueue("async-notified")

    async def main() -> object:
        try:
            return (await job.async_wait(FOREVER)).result
        finally:
            await sync_to_async(_close_all)()

    outcome: list[object] = []
    loop_thread = threading.Thread(target=lambda: outcome.append(asyncio.run(main())), daemon=True)
    loop_thread.start()
    _until(lambda: _marked(job))
    run(job)()
    assert_returned(loop_thread)
    assert outcome == ["async-notified"]


@only_postgresql
@pytest.mark.pgbouncer(False, reason="LISTEN delivers on a direct connection")
@pytest.mark.parametrize("when", ["before the mark", "between the mark and the read"])
def test_no_lost_wakeup(no_polling: None, monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """The job finishes while the waiter listens but before it has read the job."""
    job = wf.step.enqueue("race")
    real_mark = done_listener.mark_waited

    def finish_now() -> None:
        in_thread(run(job)).join()

    def mark(job_id: uuid.UUID, using: str) -> None:
        if when == "before the mark":
            finish_now()  # no notification can be sent: nobody had marked it
        real_mark(job_id, using)
        if when == "between the mark and the read":
            finish_now()

    monkeypatch.setattr(waiting, "mark_waited", mark)
    outcome: list[object] = []
    assert_returned(waiting_thread(job, outcome))
    assert outcome == ["race"]


@only_postgresql
@pytest.mark.pgbouncer(False, reason="LISTEN delivers on a direct connection")
def test_a_killed_listen_connection_still_returns(no_polling: None) -> None:
    job = wf.step.enqueue("survivor")
    outcome: list[object] = []
    waiter = waiting_thread(job, outcome)
    _until(lambda: _marked(job) and _listener().listening)
    listener = _listener()
    killed = listener.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [killed])
    _until(lambda: listener.reconnects >= 1)
    run(job)()
    assert_returned(waiter)
    assert outcome == ["survivor"]
    _until(lambda: listener.listening)
    assert listener.backend_pid != killed


@only_postgresql
@pytest.mark.pgbouncer(False, reason="LISTEN delivers on a direct connection")
def test_a_lost_notification_is_made_up_by_the_listeners_reread(
    no_polling: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark is lost (so no NOTIFY is sent): the listener's own re-read wakes the waiter."""
    monkeypatch.setattr(done_listener, "SAFETY_SECONDS", 0.2)
    job = wf.step.enqueue("reread")
    outcome: list[object] = []
    waiter = waiting_thread(job, outcome)
    _until(lambda: _marked(job))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE django_arcature_job SET arcature_waited = false WHERE id = %s", [job.pk]
        )
    run(job)()
    assert_returned(waiter)
    assert outcome == ["reread"]


def _notifications_until_sentinel(conn: object) -> list[str]:
    sentinel = f"sentinel-{uuid.uuid4().hex}"
    with _autocommit_connection("default") as sender:
        sender.execute("SELECT pg_notify(%s, %s)", (done_listener.CHANNEL, sentinel))
    seen: list[str] = []
    for notify in conn.notifies(timeout=10):  # type: ignore[attr-defined]
        if notify.payload == sentinel:
            return seen
        seen.append(notify.payload)
    raise AssertionError("the sentinel notification never arrived")


@only_postgresql
@pytest.mark.pgbouncer(False, reason="LISTEN delivers on a direct connection")
def test_a_completion_nobody_waits_for_notifies_nobody() -> None:
    quiet = wf.step.enqueue("quiet")
    waited = wf.step.enqueue("waited")
    failed = wf.boom.enqueue("waited too")
    with _autocommit_connection("default") as conn:
        conn.execute(f"LISTEN {done_listener.CHANNEL}")
        run_job(quiet)
        assert _notifications_until_sentinel(conn) == []
        done_listener.mark_waited(waited.pk, "default")
        done_listener.mark_waited(failed.pk, "default")
        run_job(waited)
        run_job(failed)
        # Exactly one each, and none again when a finished job is written once more.
        Job.objects.filter(pk=waited.pk).update(status=JobStatus.SUCCEEDED)
        assert sorted(_notifications_until_sentinel(conn)) == sorted(
            [str(waited.pk), str(failed.pk)]
        )


@only_postgresql
@pytest.mark.pgbouncer(True, reason="transaction pooling loses the probe")
def test_behind_a_transaction_pooler_waiters_poll() -> None:
    done_listener.reset_for_tests()
    job = wf.step.enqueue("pooled")
    thread = in_thread(run(job), delay=0.2)
    assert job.wait(timeout=20).result == "pooled"
    thread.join()
    _until(lambda: done_listener._delivers.get("default") is False)
    assert done_listener.listener_for("default") is None
    second = wf.step.enqueue("pooled again")
    thread = in_thread(run(second), delay=0.2)
    assert second.wait(timeout=20).result == "pooled again"
    thread.join()
    assert not _marked(second)  # polling alone: nothing written to the job


@only_postgresql
@pytest.mark.pgbouncer(False, reason="LISTEN delivers on a direct connection")
def test_a_forked_process_gets_a_listener_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent's listener thread and connection do not survive a fork."""
    parent = _listener()
    monkeypatch.setattr(os, "getpid", lambda: parent.pid + 1)
    child = _listener()
    assert child is not parent
    assert child.pid == parent.pid + 1
