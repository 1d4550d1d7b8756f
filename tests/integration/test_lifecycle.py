"""Every row of the transition table (DESIGN §2), and the transitions that must not happen.

Run unchanged on SQLite, PostgreSQL and MariaDB. Each test drives the manager the
way the worker and the admin do, then reads the row back from the database.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_arcature.models import ErrorKind, Job, JobStatus
from django_arcature.transitions import ClaimTransition, Completion

from .conftest import MakeJobs, Recorder, claim_one, fresh

pytestmark = pytest.mark.django_db

SUCCEEDED, LOST = ClaimTransition.UPDATED, ClaimTransition.LOST
CLOSE = timedelta(seconds=5)  # database and test run on one host: "now" agrees this well


def assert_near_now(value: object) -> None:
    assert value is not None
    assert abs(value - timezone.now()) < CLOSE  # type: ignore[operator]


def assert_token_iff_running() -> None:
    """The invariant, over the whole table."""
    for status, token in Job.objects.values_list("status", "claim_token"):
        assert (token is not None) == (status == JobStatus.RUNNING), (status, token)


# --- — → pending (enqueue) -----------------------------------------------------------------


def test_enqueue_makes_a_pending_job_with_no_attempts() -> None:
    job = Job.objects.enqueue("tests.add", args=(1, 2), queue="math", priority=4)
    row = fresh(job.id)
    assert row.status == JobStatus.PENDING
    assert row.attempts == 0
    assert row.claim_token is None
    assert row.locked_by == ""
    assert row.locked_at is None
    assert row.task_name == "tests.add"
    assert row.queue == "math"
    assert row.priority == 4
    assert row.args == [1, 2]
    assert row.kwargs == {}
    assert_near_now(row.available_at)


def test_enqueue_with_a_delay_sets_available_at_in_the_future() -> None:
    before = timezone.now()
    job = Job.objects.enqueue("tests.noop", delay=90)
    after = timezone.now()
    row = fresh(job.id)
    # On the database's clock; SQLite's reads as the end of its millisecond.
    slack = timedelta(milliseconds=1)
    assert before + timedelta(seconds=90) - slack <= row.available_at
    assert row.available_at <= after + timedelta(seconds=90) + slack


def test_job_arguments_never_collide_with_options() -> None:
    job = Job.objects.enqueue("tests.add", kwargs={"a": 1, "b": 2}, queue="q", priority=1)
    assert fresh(job.id).kwargs == {"a": 1, "b": 2}


def test_enqueue_many_inserts_pending_jobs(make_jobs: MakeJobs) -> None:
    ids = make_jobs(25, "tests.add", queue="bulk", priority=2)
    assert len(set(ids)) == 25
    rows = Job.objects.filter(id__in=ids)
    assert rows.count() == 25
    assert set(rows.values_list("status", "attempts", "queue", "priority")) == {
        ("pending", 0, "bulk", 2)
    }


# --- pending → running (claim) -------------------------------------------------------------


def test_claim_stamps_attempt_token_worker_and_lease(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1, "tests.add")
    claimed = claim_one("worker-a", lease=45)
    assert claimed.id == job_id
    assert claimed.attempts == 1
    assert claimed.max_attempts == 3
    assert claimed.lease_seconds == 45
    assert claimed.task_name == "tests.add"
    assert claimed.payload == {"args": [0, 1], "kwargs": {}}
    row = fresh(job_id)
    assert row.status == JobStatus.RUNNING
    assert row.attempts == 1
    assert row.claim_token == claimed.claim_token
    assert row.locked_by == "worker-a"
    assert row.lease_seconds == 45
    assert_near_now(row.locked_at)
    assert_near_now(row.started_at)
    assert row.lease_expires_at is not None
    assert row.locked_at is not None
    expected = row.locked_at + timedelta(seconds=45)
    assert abs(row.lease_expires_at - expected) < timedelta(milliseconds=5)


def test_every_claim_mints_a_new_token(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1, max_attempts=5)
    tokens = []
    for attempt in range(1, 5):
        claimed = claim_one()
        assert claimed.attempts == attempt
        tokens.append(claimed.claim_token)
        assert Job.objects.mark_retry(job_id, claimed.claim_token, timezone.now(), "again") is (
            SUCCEEDED
        )
    assert len(set(tokens)) == 4


def test_claim_takes_only_pending_available_jobs(make_jobs: MakeJobs) -> None:
    make_jobs(5)
    running, succeeded, dead, cancelled = Job.objects.claim("setup", lease=60, batch=4)
    (pending,) = Job.objects.filter(status=JobStatus.PENDING).values_list("id", flat=True)
    Job.objects.mark_succeeded(succeeded.id, succeeded.claim_token)
    Job.objects.mark_dead(dead.id, dead.claim_token, ErrorKind.PANIC, "gone")
    assert Job.objects.cancel(cancelled.id) == 1
    Job.objects.filter(id=pending).update(available_at=timezone.now() + timedelta(hours=1))

    assert Job.objects.claim("w2", lease=60, batch=100) == []
    assert fresh(running.id).claim_token == running.claim_token
    assert Job.objects.run_now(pending) == 1
    assert [c.id for c in Job.objects.claim("w2", lease=60, batch=100)] == [pending]


def test_claim_order_is_priority_then_oldest_available(make_jobs: MakeJobs) -> None:
    now = timezone.now()
    low_old = Job.objects.enqueue("tests.noop", priority=0, run_at=now - timedelta(minutes=9))
    high_new = Job.objects.enqueue("tests.noop", priority=10, run_at=now - timedelta(minutes=1))
    high_old = Job.objects.enqueue("tests.noop", priority=10, run_at=now - timedelta(minutes=5))
    mid = Job.objects.enqueue("tests.noop", priority=5, run_at=now - timedelta(minutes=2))
    low_new = Job.objects.enqueue("tests.noop", priority=0, run_at=now - timedelta(minutes=3))
    negative = Job.objects.enqueue("tests.noop", priority=-3, run_at=now - timedelta(hours=1))

    order = [claim_one().id for _ in range(6)]
    assert order == [j.id for j in (high_old, high_new, mid, low_old, low_new, negative)]


def test_a_batch_takes_the_best_jobs(make_jobs: MakeJobs) -> None:
    now = timezone.now()
    best = [
        Job.objects.enqueue("tests.noop", priority=p, run_at=now - timedelta(seconds=s))
        for p, s in [(9, 1), (9, 2), (7, 50)]
    ]
    make_jobs(10, priority=1)
    claimed = Job.objects.claim("w", lease=60, batch=3)
    # In claim order too: priority first, then the older available_at.
    assert [c.id for c in claimed] == [best[1].id, best[0].id, best[2].id]


@pytest.mark.parametrize("batch", [1, 2, 7])
def test_a_claim_never_takes_more_than_its_batch(make_jobs: MakeJobs, batch: int) -> None:
    make_jobs(20)
    assert len(Job.objects.claim("w", lease=60, batch=batch)) == batch
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == batch


def test_delayed_job_is_not_claimable_until_due() -> None:
    later = Job.objects.enqueue("tests.noop", run_at=timezone.now() + timedelta(minutes=5))
    assert Job.objects.claim("w", lease=60, batch=10) == []
    earlier = Job.objects.enqueue("tests.noop", run_at=timezone.now() - timedelta(seconds=1))
    assert [c.id for c in Job.objects.claim("w", lease=60, batch=10)] == [earlier.id]
    assert fresh(later.id).status == JobStatus.PENDING


@pytest.mark.slow
def test_delayed_job_becomes_claimable_when_its_time_comes() -> None:
    # Due in 3 s: the claim just after the enqueue must still find nothing on a loaded
    # machine (with 1 s, a second between the two statements let the claim take it).
    job = Job.objects.enqueue("tests.noop", delay=3)
    assert Job.objects.claim("w", lease=60, batch=10) == []
    time.sleep(3.3)
    assert [c.id for c in Job.objects.claim("w", lease=60, batch=10)] == [job.id]


def test_queue_filter(make_jobs: MakeJobs) -> None:
    email = set(make_jobs(3, queue="email"))
    sms = set(make_jobs(2, queue="sms"))
    default = set(make_jobs(2))
    assert {c.id for c in Job.objects.claim("w", 60, 100, queues=["email"])} == email
    assert Job.objects.claim("w", 60, 100, queues=["email"]) == []
    assert Job.objects.claim("w", 60, 100, queues=["nothing-here"]) == []
    got = {c.id for c in Job.objects.claim("w", 60, 100, queues=["sms", "default"])}
    assert got == sms | default


def test_claim_with_a_zero_batch_takes_nothing(make_jobs: MakeJobs) -> None:
    make_jobs(2)
    assert Job.objects.claim("w", lease=60, batch=0) == []
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 2


@pytest.mark.parametrize("lease", [0, 0.4, -1, float("nan"), 10**9])
def test_claim_refuses_a_lease_out_of_range(make_jobs: MakeJobs, lease: float) -> None:
    make_jobs(1)
    with pytest.raises(ValueError, match="a lease must be from 1 to"):
        Job.objects.claim("w", lease=lease, batch=1)


# --- running → running (heartbeat) ---------------------------------------------------------


def test_heartbeat_extends_the_lease_from_database_now(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    claimed = claim_one(lease=5)
    before = fresh(job_id)
    time.sleep(0.05)
    assert Job.objects.heartbeat(job_id, claimed.claim_token, lease=120) is True
    after = fresh(job_id)
    assert after.status == JobStatus.RUNNING
    assert after.lease_seconds == 120
    assert before.locked_at is not None
    assert after.locked_at is not None
    assert after.locked_at > before.locked_at
    assert after.lease_expires_at is not None
    assert abs(after.lease_expires_at - (after.locked_at + timedelta(seconds=120))) < timedelta(
        milliseconds=5
    )
    assert after.attempts == 1
    assert after.claim_token == claimed.claim_token


def test_heartbeat_many_reports_the_lost_claims(make_jobs: MakeJobs) -> None:
    make_jobs(3)
    a, b, c = Job.objects.claim("w", lease=10, batch=3)
    Job.objects.cancel(b.id)
    wrong_token = uuid.uuid4()
    lost = Job.objects.heartbeat_many(
        [(a.id, a.claim_token), (b.id, b.claim_token), (c.id, wrong_token)], lease=30
    )
    assert lost == {(b.id, b.claim_token), (c.id, wrong_token)}
    assert fresh(a.id).lease_seconds == 30
    assert fresh(c.id).lease_seconds == 10
    assert Job.objects.heartbeat_many([], lease=30) == set()


# --- running → succeeded / pending / dead (fenced completions) -----------------------------


def test_mark_succeeded_finishes_and_drops_the_token(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    claimed = claim_one()
    assert Job.objects.mark_succeeded(job_id, claimed.claim_token, {"sum": 3}) is SUCCEEDED
    row = fresh(job_id)
    assert row.status == JobStatus.SUCCEEDED
    assert row.claim_token is None
    assert row.result == {"sum": 3}
    assert_near_now(row.finished_at)
    assert row.failed_at is None
    assert row.error_kind == ""


def test_mark_retry_returns_to_pending_at_the_retry_time(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    claimed = claim_one()
    retry_at = timezone.now() + timedelta(minutes=10)
    outcome = Job.objects.mark_retry(
        job_id, claimed.claim_token, retry_at, "ValueError: flaky", traceback="Traceback ..."
    )
    assert outcome is SUCCEEDED
    row = fresh(job_id)
    assert row.status == JobStatus.PENDING
    assert row.claim_token is None
    assert row.available_at == retry_at
    assert row.last_error == "ValueError: flaky"
    assert row.last_traceback == "Traceback ..."
    assert row.attempts == 1
    assert row.error_kind == ""
    assert row.failed_at is None
    # Not claimable before its time, and the old token no longer works.
    assert Job.objects.claim("w", lease=60, batch=10) == []
    assert Job.objects.mark_succeeded(job_id, claimed.claim_token) is LOST


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_mark_dead_keeps_kind_message_and_time(make_jobs: MakeJobs, kind: ErrorKind) -> None:
    (job_id,) = make_jobs(1)
    claimed = claim_one()
    assert Job.objects.mark_dead(job_id, claimed.claim_token, kind, "why", traceback="tb") is (
        SUCCEEDED
    )
    row = fresh(job_id)
    assert row.status == JobStatus.DEAD
    assert row.claim_token is None
    assert row.error_kind == kind
    assert row.last_error == "why"
    assert row.last_traceback == "tb"
    assert_near_now(row.failed_at)


def test_mark_dead_refuses_an_unknown_error_kind(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    claimed = claim_one()
    with pytest.raises(ValueError, match="unknown error kind 'oops'"):
        Job.objects.mark_dead(job_id, claimed.claim_token, "oops", "x")
    assert fresh(job_id).status == JobStatus.RUNNING


def test_release_hands_the_job_back_without_using_an_attempt(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    claimed = claim_one()
    assert Job.objects.release(job_id, claimed.claim_token) is SUCCEEDED
    row = fresh(job_id)
    assert (row.status, row.attempts, row.claim_token) == (JobStatus.PENDING, 0, None)
    assert Job.objects.release(job_id, claimed.claim_token) is LOST
    assert claim_one().attempts == 1


# --- pending, running → cancelled ----------------------------------------------------------


def test_cancel_pending(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    assert Job.objects.cancel(job_id) == 1
    row = fresh(job_id)
    assert row.status == JobStatus.CANCELLED
    assert row.claim_token is None
    assert_near_now(row.finished_at)
    assert Job.objects.claim("w", lease=60, batch=10) == []


def test_cancel_running_fences_out_its_later_completion(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    claimed = claim_one()
    assert Job.objects.cancel(job_id) == 1
    assert fresh(job_id).claim_token is None
    assert Job.objects.mark_succeeded(job_id, claimed.claim_token) is LOST
    assert Job.objects.mark_retry(job_id, claimed.claim_token, timezone.now(), "x") is LOST
    assert Job.objects.mark_dead(job_id, claimed.claim_token, ErrorKind.PANIC, "x") is LOST
    assert Job.objects.heartbeat(job_id, claimed.claim_token, lease=30) is False
    assert Job.objects.release(job_id, claimed.claim_token) is LOST
    assert fresh(job_id).status == JobStatus.CANCELLED


# --- dead → pending (requeue) --------------------------------------------------------------


def test_requeue_dead_resets_attempts_and_clears_the_error(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1, max_attempts=1)
    claimed = claim_one()
    Job.objects.mark_dead(
        job_id, claimed.claim_token, ErrorKind.EXHAUSTED, "no luck", traceback="t"
    )
    assert Job.objects.requeue_dead(job_id) == 1
    row = fresh(job_id)
    assert row.status == JobStatus.PENDING
    assert row.attempts == 0
    assert row.error_kind == ""
    assert row.last_error == ""
    assert row.last_traceback == ""
    assert row.failed_at is None
    assert row.finished_at is None
    assert row.claim_token is None
    again = claim_one()
    assert again.attempts == 1
    assert again.claim_token != claimed.claim_token


# --- What must not happen ------------------------------------------------------------------


def _in_state(make_jobs: MakeJobs, status: str) -> tuple[uuid.UUID, uuid.UUID | None]:
    """A job in ``status`` and the token its last claim had (None if never claimed)."""
    queue = f"state-{uuid.uuid4().hex[:12]}"  # so the claim takes this job and no other
    (job_id,) = make_jobs(1, queue=queue)
    if status == JobStatus.PENDING:
        return job_id, None
    token = claim_one(queues=[queue]).claim_token
    if status == JobStatus.SUCCEEDED:
        Job.objects.mark_succeeded(job_id, token)
    elif status == JobStatus.DEAD:
        Job.objects.mark_dead(job_id, token, ErrorKind.PERMANENT, "no")
    elif status == JobStatus.CANCELLED:
        Job.objects.cancel(job_id)
    assert fresh(job_id).status == status
    return job_id, token


FINISHED = [JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED]


@pytest.mark.parametrize("status", [JobStatus.PENDING, *FINISHED])
def test_no_fenced_write_lands_on_a_job_that_is_not_running(
    make_jobs: MakeJobs, status: str
) -> None:
    job_id, token = _in_state(make_jobs, status)
    before = fresh(job_id)
    for candidate in {token, uuid.uuid4()} - {None}:
        assert candidate is not None
        assert Job.objects.mark_succeeded(job_id, candidate, "late") is LOST
        assert Job.objects.mark_retry(job_id, candidate, timezone.now(), "late") is LOST
        assert Job.objects.mark_dead(job_id, candidate, ErrorKind.PANIC, "late") is LOST
        assert Job.objects.heartbeat(job_id, candidate, lease=600) is False
        assert Job.objects.release(job_id, candidate) is LOST
    after = fresh(job_id)
    for name in ("status", "attempts", "claim_token", "result", "last_error", "error_kind"):
        assert getattr(after, name) == getattr(before, name), name
    assert after.available_at == before.available_at
    assert after.lease_seconds == before.lease_seconds


def test_heartbeat_of_a_pending_job_is_refused(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    assert Job.objects.heartbeat(job_id, uuid.uuid4(), lease=30) is False
    assert fresh(job_id).locked_at is None


def test_a_running_job_is_fenced_against_a_wrong_token(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    claimed = claim_one()
    assert Job.objects.mark_succeeded(job_id, uuid.uuid4()) is LOST
    assert Job.objects.mark_succeeded(uuid.uuid4(), claimed.claim_token) is LOST
    row = fresh(job_id)
    assert (row.status, row.claim_token) == (JobStatus.RUNNING, claimed.claim_token)


def test_a_completion_lands_once(make_jobs: MakeJobs) -> None:
    (job_id,) = make_jobs(1)
    claimed = claim_one()
    assert Job.objects.mark_succeeded(job_id, claimed.claim_token, 1) is SUCCEEDED
    assert Job.objects.mark_succeeded(job_id, claimed.claim_token, 2) is LOST
    assert Job.objects.mark_dead(job_id, claimed.claim_token, ErrorKind.PANIC, "x") is LOST
    assert fresh(job_id).result == 1


@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.RUNNING, *FINISHED[:1]])
def test_requeue_of_a_job_that_is_not_dead_affects_nothing(
    make_jobs: MakeJobs, status: str
) -> None:
    job_id, _ = _in_state(make_jobs, status)
    before = fresh(job_id)
    assert Job.objects.requeue_dead(job_id) == 0
    after = fresh(job_id)
    assert (after.status, after.attempts, after.claim_token) == (
        before.status,
        before.attempts,
        before.claim_token,
    )


def test_requeue_of_a_cancelled_job_affects_nothing(make_jobs: MakeJobs) -> None:
    job_id, _ = _in_state(make_jobs, JobStatus.CANCELLED)
    assert Job.objects.requeue_dead(job_id) == 0
    assert fresh(job_id).status == JobStatus.CANCELLED


@pytest.mark.parametrize("status", FINISHED)
def test_cancel_of_a_finished_job_affects_nothing(make_jobs: MakeJobs, status: str) -> None:
    job_id, _ = _in_state(make_jobs, status)
    before = fresh(job_id)
    assert Job.objects.cancel(job_id) == 0
    after = fresh(job_id)
    assert after.status == status
    assert after.finished_at == before.finished_at


def test_unknown_ids_affect_nothing() -> None:
    missing = uuid.uuid4()
    assert Job.objects.cancel(missing) == 0
    assert Job.objects.requeue_dead(missing) == 0
    assert Job.objects.run_now(missing) == 0


def test_sweep_leaves_live_leases_alone(make_jobs: MakeJobs) -> None:
    make_jobs(3)
    claimed = Job.objects.claim("w", lease=60, batch=2)
    assert Job.objects.sweep_expired_leases() == 0
    for c in claimed:
        assert fresh(c.id).claim_token == c.claim_token


def test_finished_jobs_never_hold_a_token(make_jobs: MakeJobs) -> None:
    for status in [JobStatus.PENDING, JobStatus.RUNNING, *FINISHED]:
        _in_state(make_jobs, status)
    job_id, token = _in_state(make_jobs, JobStatus.RUNNING)
    assert token is not None
    Job.objects.mark_retry(job_id, token, timezone.now(), "again")
    assert_token_iff_running()


def test_unique_key_is_freed_when_the_job_finishes(make_jobs: MakeJobs) -> None:
    first = Job.objects.enqueue("tests.noop", unique_key="report-1")
    assert Job.objects.enqueue("tests.noop", unique_key="report-1").id == first.id
    token = claim_one().claim_token
    assert Job.objects.enqueue("tests.noop", unique_key="report-1").id == first.id
    Job.objects.mark_succeeded(first.id, token)
    assert fresh(first.id).unique_key is None
    second = Job.objects.enqueue("tests.noop", unique_key="report-1")
    assert second.id != first.id


def test_prune_deletes_only_old_finished_jobs(make_jobs: MakeJobs) -> None:
    done, _ = _in_state(make_jobs, JobStatus.SUCCEEDED)
    dead, _ = _in_state(make_jobs, JobStatus.DEAD)
    pending, _ = _in_state(make_jobs, JobStatus.PENDING)
    assert Job.objects.prune(timedelta(hours=1)) == 0
    Job.objects.filter(id__in=[done, dead]).update(finished_at=timezone.now() - timedelta(days=2))
    assert Job.objects.prune(timedelta(hours=1)) == 1
    assert set(Job.objects.values_list("id", flat=True)) == {dead, pending}
    with pytest.raises(ValueError, match="finished jobs only"):
        Job.objects.prune(timedelta(0), statuses=[JobStatus.RUNNING])


# --- Stored messages -----------------------------------------------------------------------


@override_settings(ARCATURE={"MESSAGE_MAX_BYTES": 100, "TRACEBACK_MAX_BYTES": 300})
def test_messages_are_truncated_for_storage(make_jobs: MakeJobs) -> None:
    make_jobs(2)
    a = claim_one()
    b = claim_one()
    message = "é€😀 oversized " * 1000
    traceback = "Traceback line\n" * 1000
    Job.objects.mark_retry(a.id, a.claim_token, timezone.now(), message, traceback=traceback)
    Job.objects.mark_dead(b.id, b.claim_token, ErrorKind.PANIC, "nul\x00inside" + message)
    retried, died = fresh(a.id), fresh(b.id)
    for row in (retried, died):
        assert len(row.last_error.encode("utf-8")) <= 100
        assert row.last_error.endswith("… [truncated]")
    assert retried.last_error.startswith("é€😀 oversized")
    assert died.last_error.startswith("nul\ufffdinside")
    assert len(retried.last_traceback.encode()) <= 300
    assert retried.last_traceback.startswith("Traceback line\n")


# --- complete_many -------------------------------------------------------------------------


def test_complete_many_fences_each_row_on_its_own(make_jobs: MakeJobs, events: Recorder) -> None:
    make_jobs(4)
    a, b, c, d = Job.objects.claim("w", lease=60, batch=4)
    Job.objects.cancel(d.id)
    events.clear()
    later = timezone.now() + timedelta(minutes=1)
    outcomes = Job.objects.complete_many(
        [
            Completion(a.id, a.claim_token, "succeeded", result=[1]),
            Completion(b.id, uuid.uuid4(), "succeeded", result=[2]),  # wrong token
            Completion(c.id, c.claim_token, "dead", error_kind="panic", message="boom"),
            Completion(d.id, d.claim_token, "retry", available_at=later, message="late"),
        ]
    )
    assert outcomes == [SUCCEEDED, LOST, SUCCEEDED, LOST]
    assert fresh(a.id).status == JobStatus.SUCCEEDED
    assert fresh(a.id).result == [1]
    assert (fresh(b.id).status, fresh(b.id).claim_token) == (JobStatus.RUNNING, b.claim_token)
    assert (fresh(c.id).status, fresh(c.id).error_kind) == (JobStatus.DEAD, "panic")
    assert fresh(d.id).status == JobStatus.CANCELLED
    assert events.names() == ["job_succeeded", "job_claim_lost", "job_dead", "job_claim_lost"]
    assert [kw["job_id"] for _, kw in events.events] == [a.id, b.id, c.id, d.id]
    assert Job.objects.complete_many([]) == []


def test_complete_many_checks_every_completion_before_writing(make_jobs: MakeJobs) -> None:
    make_jobs(2)
    a, b = Job.objects.claim("w", lease=60, batch=2)
    with pytest.raises(ValueError, match="a retry needs retry_delay or available_at"):
        Job.objects.complete_many(
            [
                Completion(a.id, a.claim_token, "succeeded"),
                Completion(b.id, b.claim_token, "retry"),
            ]
        )
    assert fresh(a.id).status == JobStatus.RUNNING


# --- Observer events -----------------------------------------------------------------------


def test_events_are_sent_for_writes_that_landed(make_jobs: MakeJobs, events: Recorder) -> None:
    make_jobs(3)
    a, b, c = Job.objects.claim("w", lease=60, batch=3)
    events.clear()
    Job.objects.mark_succeeded(a.id, a.claim_token, "ok")
    Job.objects.mark_retry(b.id, b.claim_token, timezone.now(), "flaky")
    Job.objects.mark_dead(c.id, c.claim_token, ErrorKind.PERMANENT, "bad")
    assert events.names() == ["job_succeeded", "job_retried", "job_dead"]
    succeeded, retried, dead = (kw for _, kw in events.events)
    assert succeeded["job_id"] == a.id
    assert succeeded["completion"].result == "ok"
    assert retried["completion"].message == "flaky"
    assert dead["completion"].error_kind == "permanent"


def test_fenced_out_writes_send_claim_lost_only(make_jobs: MakeJobs, events: Recorder) -> None:
    (job_id,) = make_jobs(1)
    stale = claim_one().claim_token
    Job.objects.cancel(job_id)
    events.clear()
    Job.objects.mark_succeeded(job_id, stale)
    Job.objects.mark_retry(job_id, stale, timezone.now(), "x")
    Job.objects.mark_dead(job_id, stale, ErrorKind.PANIC, "x")
    Job.objects.heartbeat(job_id, stale, lease=30)
    Job.objects.release(job_id, stale)
    assert events.names() == ["job_claim_lost"] * 5
    assert [kw["attempted"] for _, kw in events.events] == [
        "succeeded",
        "retry",
        "dead",
        "heartbeat",
        "release",
    ]
    assert {kw["claim_token"] for _, kw in events.events} == {stale}


def test_operator_events_only_when_rows_changed(make_jobs: MakeJobs, events: Recorder) -> None:
    job_id, _ = _in_state(make_jobs, JobStatus.DEAD)
    events.clear()
    assert Job.objects.cancel(job_id) == 0
    assert Job.objects.requeue_dead(job_id) == 1
    assert Job.objects.requeue_dead(job_id) == 0
    assert Job.objects.cancel(job_id) == 1
    assert events.names() == ["job_requeued", "job_cancelled"]


def test_heartbeat_sends_nothing_when_it_lands(make_jobs: MakeJobs, events: Recorder) -> None:
    make_jobs(1)
    claimed = claim_one()
    events.clear()
    assert Job.objects.heartbeat(claimed.id, claimed.claim_token, lease=30)
    assert events.names() == []


def test_enqueue_sends_job_enqueued_on_commit(
    make_jobs: MakeJobs, events: Recorder, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        job = Job.objects.enqueue("tests.noop")
        make_jobs(2)
        assert events.names() == []
    assert events.names() == ["job_enqueued"] * 3
    assert events.events[0][1]["job"].id == job.id


# --- Enqueue is part of the caller's transaction -------------------------------------------


def _in_another_thread(work: Callable[[], list[uuid.UUID]]) -> list[uuid.UUID]:
    """Run ``work`` on a second connection, as another process would."""
    found: list[uuid.UUID] = []

    def run() -> None:
        try:
            found.extend(work())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    return found


def _claim_in_another_thread() -> list[uuid.UUID]:
    return _in_another_thread(lambda: [c.id for c in Job.objects.claim("other", 60, 10)])


def _ids_seen_by_another_thread() -> list[uuid.UUID]:
    # A plain read: on SQLite a claim would wait for the write lock the caller holds.
    return _in_another_thread(lambda: list(Job.objects.values_list("id", flat=True)))


@pytest.mark.django_db(transaction=True)
def test_enqueue_rolled_back_with_the_caller_leaves_no_job() -> None:
    class Abort(Exception):
        pass

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            Job.objects.enqueue("tests.noop")
            Job.objects.enqueue_many("tests.noop", [(), ()])
            assert Job.objects.count() == 3
            raise Abort

    with pytest.raises(Abort):
        enqueue_then_fail()
    assert Job.objects.count() == 0
    assert _claim_in_another_thread() == []


@pytest.mark.django_db(transaction=True)
def test_enqueue_committed_with_the_caller_is_claimable_elsewhere() -> None:
    with transaction.atomic():
        job = Job.objects.enqueue("tests.noop")
        # Not visible to another connection before the commit.
        assert _ids_seen_by_another_thread() == []
    assert _claim_in_another_thread() == [job.id]
    assert fresh(job.id).locked_by == "other"
