"""Lock conflicts are retried within bounds: a short lock is waited out, a long one reported.

Made with a real lock: a second connection holds SQLite's write lock while this
one, with its busy timeout at 1 ms, tries to claim. PostgreSQL and MariaDB claim
with SKIP LOCKED, so a held row lock never makes a claim fail there; the
deadlock codes they can raise are covered by the claim race on those servers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
from django.db import OperationalError, connection, connections, transaction

from django_arcature.db.conflicts import LOCK_RETRY_ATTEMPTS
from django_arcature.models import Job, JobStatus

from .conftest import MakeJobs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.only_on(
        "sqlite", reason="elsewhere a claim SKIPs LOCKED rows, never fails on them"
    ),
]


@pytest.fixture
def impatient() -> Iterator[None]:
    """This connection gives up on a busy database after 1 ms instead of 30 s."""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 1")
    yield
    connection.close()  # the next test gets a connection with the configured timeout


def hold_write_lock(
    seconds: float, release: threading.Event | None = None
) -> tuple[threading.Thread, threading.Event]:
    """Hold SQLite's write lock from another connection for ``seconds``, or until
    ``release`` is set (``seconds`` then only bounds the wait)."""
    locked = threading.Event()

    def run() -> None:
        try:
            with transaction.atomic():  # BEGIN IMMEDIATE: takes the write lock now
                Job.objects.filter(task_name="no such task").update(priority=0)
                locked.set()
                if release is None:
                    time.sleep(seconds)
                else:
                    release.wait(seconds)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    assert locked.wait(timeout=30), "the lock holder never got the lock"
    return thread, locked


def count_retries(caplog: pytest.LogCaptureFixture) -> int:
    return sum("lock conflict" in r.getMessage() for r in caplog.records)


@pytest.mark.usefixtures("impatient")
def test_a_short_lock_is_waited_out(make_jobs: MakeJobs, caplog: pytest.LogCaptureFixture) -> None:
    make_jobs(3)
    caplog.set_level(logging.DEBUG, logger="django_arcature.db.conflicts")
    # The lock is let go once the claim has met it and said it retries: held for a fixed
    # 0.15 s instead, a claim that started later than that on a loaded machine never met
    # it (no retry), and one whose retries outlasted a holder not scheduled in time failed.
    conflict = threading.Event()
    seen = _SetOnConflict(conflict)
    logging.getLogger("django_arcature.db.conflicts").addHandler(seen)
    try:
        holder, _ = hold_write_lock(30, release=conflict)
        claimed = Job.objects.claim("patient", lease=30, batch=3)
    finally:
        logging.getLogger("django_arcature.db.conflicts").removeHandler(seen)
        conflict.set()
    holder.join(timeout=30)
    assert len(claimed) == 3
    assert count_retries(caplog) >= 1


class _SetOnConflict(logging.Handler):
    """Sets ``event`` at the first lock conflict the retry logs."""

    def __init__(self, event: threading.Event) -> None:
        super().__init__()
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if "lock conflict" in record.getMessage():
            self.event.set()


@pytest.mark.usefixtures("impatient")
def test_a_lock_held_too_long_is_reported_not_waited_forever(
    make_jobs: MakeJobs, caplog: pytest.LogCaptureFixture
) -> None:
    make_jobs(1)
    caplog.set_level(logging.DEBUG, logger="django_arcature.db.conflicts")
    holder, _ = hold_write_lock(8.0)
    try:
        with pytest.raises(OperationalError, match="database is locked"):
            Job.objects.claim("impatient", lease=30, batch=1)
        assert count_retries(caplog) == LOCK_RETRY_ATTEMPTS - 1
    finally:
        holder.join(timeout=30)
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 1, "the failed claim took a job"
    assert len(Job.objects.claim("later", lease=30, batch=1)) == 1
