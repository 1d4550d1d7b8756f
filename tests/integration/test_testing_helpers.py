"""``django_arcature.testing``: the helpers users call from their own test suites.

They must run the real path (claim with a token, payload check, decide, fenced
write), so these tests look at the rows they leave behind, not at mocks.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from django_arcature import MalformedPayload
from django_arcature.models import Job, JobStatus
from django_arcature.testing import (
    JobNotPending,
    assert_enqueued,
    assert_not_enqueued,
    drain,
    enqueued_jobs,
    run_job,
)
from tests.integration.api_jobs import (
    add,
    chain,
    declined,
    fetch,
    flaky,
    greet,
    slow,
    unique_sync,
    when,
)

pytestmark = pytest.mark.django_db

EAGER = {"EAGER": True, "LEASE_SECONDS": 30}


# --- run_job --------------------------------------------------------------------------


def test_run_job_runs_one_attempt_through_the_fenced_path() -> None:
    job = run_job(add.enqueue(2, 3))
    assert job.status == JobStatus.SUCCEEDED
    assert job.result == 5
    assert job.attempts == 1
    assert job.claim_token is None
    assert job.started_at is not None
    assert job.finished_at is not None
    assert len(job.attempt_log) == 1
    assert job.attempt_log[0]["error"] is None
    assert job.attempt_log[0]["worker"].startswith("inline-")


def test_run_job_takes_a_job_id_too() -> None:
    job = add.enqueue(1)
    assert run_job(job.pk).result == 1
    again = add.enqueue(2)
    assert run_job(str(again.pk)).result == 2


def test_run_job_runs_a_delayed_job_now() -> None:
    job = add.using(delay=3600).enqueue(1)
    assert run_job(job).status == JobStatus.SUCCEEDED


def test_run_job_refuses_a_job_that_is_not_pending() -> None:
    job = run_job(add.enqueue(1))
    with pytest.raises(JobNotPending, match=f"job {job.pk} is succeeded; only a pending job"):
        run_job(job)
    Job.objects.cancel((cancelled := add.enqueue(2)).pk)
    with pytest.raises(JobNotPending, match="is cancelled"):
        run_job(cancelled)


def test_run_job_of_a_failing_job_leaves_it_pending_for_its_retry() -> None:
    job = run_job(flaky.enqueue(3))
    assert job.status == JobStatus.PENDING
    assert job.attempts == 1
    assert "ConnectionError: attempt 1: the service is unavailable" in job.last_error
    assert "Traceback" in job.last_traceback
    job = run_job(job)
    assert (job.status, job.attempts) == (JobStatus.PENDING, 2)
    job = run_job(job)
    assert (job.status, job.attempts, job.result) == (JobStatus.SUCCEEDED, 3, 3)
    assert [entry["error"] is None for entry in job.attempt_log] == [False, False, True]


def test_run_job_of_a_permanent_failure_is_dead_at_once() -> None:
    job = run_job(declined.enqueue(1999))
    assert (job.status, job.error_kind, job.attempts) == (JobStatus.DEAD, "permanent", 1)
    assert job.last_error == "Permanent: card declined for 1999 cents"
    assert job.failed_at is not None
    assert job.unique_key is None


def test_run_job_can_enforce_the_timeout_when_asked() -> None:
    job = run_job(slow.enqueue(5.0), timeout=0.2)
    assert (job.status, job.error_kind) == (JobStatus.DEAD, "timeout")
    assert "exceeded its timeout of 0.2s" in job.last_error


def test_run_job_runs_async_handlers() -> None:
    assert run_job(fetch.enqueue("https://example.com")).result == {
        "url": "https://example.com",
        "status": 200,
    }


# --- drain ------------------------------------------------------------------------------


def test_drain_runs_everything_until_nothing_is_left() -> None:
    add.enqueue(1, 1)
    greet.enqueue("Ada")
    flaky.enqueue(2)  # fails once, then succeeds
    declined.enqueue(5)  # dead at once
    add.using(delay=3600).enqueue(2)  # scheduled: drain runs it anyway
    summary = drain()
    assert summary.runs == 6
    assert (summary.succeeded, summary.dead, summary.retried, summary.pending) == (4, 1, 1, 0)
    assert list(summary.dead_reasons.values()) == [
        "permanent: Permanent: card declined for 5 cents"
    ]
    assert str(summary) == "6 run(s): 4 succeeded, 1 dead, 1 retried, 0 still pending"
    assert {job.task_name for job in summary.jobs} == {
        "api.add",
        "api.greet",
        "api.flaky",
        "api.declined",
    }
    assert not Job.objects.filter(status=JobStatus.PENDING).exists()


def test_drain_of_one_queue_leaves_the_others() -> None:
    greet.enqueue("Ada")  # queue "mail"
    add.enqueue(1)  # queue "default"
    summary = drain(queue="mail")
    assert (summary.runs, summary.succeeded) == (1, 1)
    assert Job.objects.get(task_name="api.add").status == JobStatus.PENDING


def test_drain_due_only_leaves_scheduled_jobs_and_backoffs() -> None:
    later = add.using(delay=3600).enqueue(1)
    now = add.enqueue(2)
    summary = drain(due_only=True)
    assert summary.runs == 1
    assert Job.objects.get(pk=now.pk).status == JobStatus.SUCCEEDED
    assert Job.objects.get(pk=later.pk).status == JobStatus.PENDING


def test_drain_runs_jobs_enqueued_by_the_jobs_it_runs() -> None:
    chain.enqueue(3)
    summary = drain()
    assert (summary.runs, summary.succeeded) == (4, 4)
    results: list[Any] = list(Job.objects.values_list("result", flat=True))
    assert sorted(results) == [0, 1, 2, 3]


def test_drain_stops_at_its_limit() -> None:
    chain.enqueue(10)
    with pytest.raises(RuntimeError, match="drain\\(\\) ran 3 attempts and jobs are still pending"):
        drain(limit=3)


def test_drain_runs_higher_priority_first() -> None:
    low = add.using(priority=0).enqueue(1)
    high = add.using(priority=10).enqueue(2)
    summary = drain()
    assert summary.job_ids == [high.pk, low.pk]


def test_drain_of_an_empty_queue() -> None:
    summary = drain()
    assert (summary.runs, summary.succeeded, summary.dead) == (0, 0, 0)


# --- assert_enqueued / assert_not_enqueued ---------------------------------------------------


def test_assert_enqueued_matches_the_call_however_it_is_spelled() -> None:
    job = add.enqueue(1, 2)
    assert assert_enqueued(add, 1, 2).pk == job.pk
    assert assert_enqueued(add, a=1, b=2).pk == job.pk
    assert assert_enqueued("api.add", 1, b=2).pk == job.pk
    assert assert_enqueued(add).pk == job.pk  # no arguments: any job of the task
    assert_not_enqueued(add, 1, 3)
    assert_not_enqueued(greet)


def test_assert_enqueued_fills_in_defaults() -> None:
    job = add.enqueue(1)
    assert assert_enqueued(add, 1, 0).pk == job.pk
    assert assert_enqueued(add, a=1).pk == job.pk


def test_assert_enqueued_failure_lists_what_was_enqueued() -> None:
    add.enqueue(1, 2)
    add.enqueue(a=5)
    with pytest.raises(AssertionError) as info:
        assert_enqueued(add, 9)
    message = str(info.value)
    assert message.startswith("api.add(9) was not enqueued; jobs of that task:")
    assert "api.add(1, 2) [pending]" in message
    assert "api.add(a=5) [pending]" in message


def test_assert_enqueued_when_nothing_was_enqueued() -> None:
    with pytest.raises(AssertionError, match="no job of that task was enqueued at all"):
        assert_enqueued(greet, "Ada")


def test_assert_not_enqueued_failure_names_the_jobs() -> None:
    job = greet.enqueue("Ada")
    with pytest.raises(AssertionError, match=f"expected no such job, found 1:\n.*{job.pk}"):
        assert_not_enqueued(greet, "Ada")
    with pytest.raises(AssertionError, match="found 1"):
        assert_not_enqueued(greet)


def test_enqueued_jobs_lists_matching_jobs_newest_first() -> None:
    first = add.enqueue(1)
    second = add.enqueue(a=1)
    add.enqueue(2)
    assert [j.pk for j in enqueued_jobs(add, 1)] == [second.pk, first.pk]


# --- eager mode --------------------------------------------------------------------------


@override_settings(ARCATURE=EAGER)
def test_eager_enqueue_runs_the_job_inline_and_records_it() -> None:
    job = add.enqueue(20, 22)
    assert job.status == JobStatus.SUCCEEDED
    assert job.result == 42
    stored = Job.objects.get(pk=job.pk)
    assert (stored.status, stored.result, stored.attempts) == (JobStatus.SUCCEEDED, 42, 1)
    assert assert_enqueued(add, 20, 22).pk == job.pk


@override_settings(ARCATURE=EAGER)
def test_eager_enqueue_still_validates_the_payload() -> None:
    with pytest.raises(MalformedPayload, match="argument 'moment' is a datetime"):
        when.enqueue(timezone.now())  # type: ignore[arg-type]
    assert Job.objects.count() == 0


@override_settings(ARCATURE=EAGER)
def test_eager_enqueue_of_a_failing_job_returns_it_in_its_state() -> None:
    job = declined.enqueue(100)
    assert (job.status, job.error_kind) == (JobStatus.DEAD, "permanent")
    job = flaky.enqueue(2)
    assert job.status == JobStatus.PENDING  # one attempt per enqueue; its retry waits
    assert drain().succeeded == 1


@override_settings(ARCATURE=EAGER)
def test_eager_enqueue_runs_delayed_jobs_at_once() -> None:
    job = add.using(delay=timedelta(hours=1)).enqueue(1)
    assert job.status == JobStatus.SUCCEEDED


@override_settings(ARCATURE=EAGER)
def test_eager_enqueue_many_runs_each_job() -> None:
    jobs = add.enqueue_many([(1,), (2,), (3,)])
    assert [j.result for j in jobs] == [1, 2, 3]
    assert all(j.status == JobStatus.SUCCEEDED for j in jobs)


@override_settings(ARCATURE=EAGER)
def test_eager_unique_jobs_run_once_per_key_while_live() -> None:
    first = unique_sync.enqueue(1)
    assert first.status == JobStatus.SUCCEEDED  # finished, so the key is free again
    second = unique_sync.enqueue(1)
    assert second.pk != first.pk
    assert Job.objects.filter(task_name="api.unique_sync").count() == 2


@override_settings(ARCATURE=EAGER)
def test_eager_jobs_that_enqueue_jobs_run_those_too() -> None:
    chain.enqueue(2)
    results: list[Any] = sorted(Job.objects.values_list("result", flat=True))
    assert results == [0, 1, 2]


def test_without_eager_enqueue_only_inserts() -> None:
    job = add.enqueue(1)
    assert job.status == JobStatus.PENDING
    assert job.result is None
