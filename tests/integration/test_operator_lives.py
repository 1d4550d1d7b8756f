"""Requeue, run-now and cancel restore or release everything a live job holds.

A job's *life* runs from its enqueue (or an operator's requeue) to the moment it
finishes. What a live job holds: its unique key, its attempts, and its history
(the attempt log the worker appends to, the start time). The rules:

* **cancel** releases: the unique key (a new enqueue of the same key makes a new
  job), the claim token (a running attempt's completion is fenced out). The
  cancelled row keeps its attempts and history as the record of what happened.
* **requeue** (dead → pending) starts a new life: attempts 0, an empty attempt
  log, no start time, no error; the unique key comes back when it can be
  derived (a ``unique=True`` task; an explicit key given at enqueue was released
  when the job died and is not stored anywhere). If another live job took that
  key meanwhile, the requeue is refused and the dead job stays dead: the live
  one already does this work, and two live holders of one key cannot exist.
* **run-now** changes only when a pending job becomes available.

A django.tasks result of a requeued job reports only its current life.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_arcature.backend import task_overrides
from django_arcature.models import ErrorKind, Job, JobStatus
from django_arcature.testing import run_job
from django_arcature.worker.dispatch import process
from tests.integration import backend_tasks as tasks
from tests.integration.api_jobs import unique_sync

pytestmark = pytest.mark.django_db


def kill(job_id: uuid.UUID, worker: str = "w-old") -> None:
    """Claim the job and let it die under that claim, logging the attempt as a worker does."""
    claimed = Job.objects.claim_job(job_id, worker, lease=60)
    assert claimed is not None
    log = [*claimed.attempt_log, {"worker": worker, "error": None}]
    Job.objects.mark_dead(job_id, claimed.claim_token, ErrorKind.PERMANENT, "no", attempt_log=log)


def test_requeue_starts_a_new_life() -> None:
    job = Job.objects.enqueue("tests.noop")
    kill(job.pk)
    assert Job.objects.requeue_dead(job.pk) == 1
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.PENDING
    assert (row.attempts, row.attempt_log) == (0, [])
    assert (row.error_kind, row.last_error, row.last_traceback) == ("", "", "")
    assert (row.failed_at, row.finished_at, row.started_at) == (None, None, None)
    assert (row.locked_by, row.locked_at, row.claim_token) == ("", None, None)


def test_requeue_gives_a_unique_task_its_key_back() -> None:
    job = unique_sync.enqueue(41)
    key = job.unique_key
    assert key is not None
    kill(job.pk)
    assert Job.objects.get(pk=job.pk).unique_key is None
    assert Job.objects.requeue_dead(job.pk) == 1
    assert Job.objects.get(pk=job.pk).unique_key == key
    # The key is held again: the same call finds the requeued job.
    assert unique_sync.enqueue(41).pk == job.pk
    assert Job.objects.filter(task_name="api.unique_sync").count() == 1


def test_requeue_is_refused_when_a_live_job_took_the_key_meanwhile() -> None:
    old = unique_sync.enqueue(42)
    kill(old.pk)
    new = unique_sync.enqueue(42)
    assert new.pk != old.pk
    assert Job.objects.requeue_dead(old.pk) == 0
    assert Job.objects.get(pk=old.pk).status == JobStatus.DEAD
    assert new.unique_key == old.unique_key
    # Once the holder has finished, the key is free and the requeue goes through.
    Job.objects.cancel(new.pk)
    assert Job.objects.requeue_dead(old.pk) == 1
    assert Job.objects.get(pk=old.pk).unique_key == new.unique_key


def test_an_explicit_key_is_released_at_death_and_not_restored() -> None:
    job = Job.objects.enqueue("tests.noop", unique_key="nightly")
    kill(job.pk)
    assert Job.objects.requeue_dead(job.pk) == 1
    assert Job.objects.get(pk=job.pk).unique_key is None


def test_cancel_releases_the_key_and_fences_out_the_running_attempt() -> None:
    job = unique_sync.enqueue(43)
    claimed = Job.objects.claim_job(job.pk, "w1", lease=60)
    assert claimed is not None
    assert Job.objects.cancel(job.pk) == 1
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.unique_key, row.claim_token) == (JobStatus.CANCELLED, None, None)
    assert row.attempts == 1, "the cancelled row keeps the record of its attempt"
    assert Job.objects.mark_succeeded(job.pk, claimed.claim_token, 1).value == "lost"
    assert unique_sync.enqueue(43).pk != job.pk


def test_run_now_changes_only_availability() -> None:
    job = Job.objects.enqueue("tests.noop", delay=3600, unique_key="later")
    before = Job.objects.values("attempts", "unique_key", "attempt_log", "status").get(pk=job.pk)
    assert Job.objects.run_now(job.pk) == 1
    after = Job.objects.values("attempts", "unique_key", "attempt_log", "status").get(pk=job.pk)
    assert before == after
    assert run_job(Job.objects.get(pk=job.pk)).status == JobStatus.SUCCEEDED


def run_task_attempt(worker: str) -> str:
    """One attempt of the next django.tasks job, as the worker runs it; its completion kind."""
    claimed = Job.objects.claim(worker, lease=60, batch=1)
    assert len(claimed) == 1
    overrides = task_overrides(claimed[0])
    completion = process(
        claimed[0],
        worker_id=worker,
        policy=overrides.retry,
        timeout=overrides.timeout,
        cancel_event=threading.Event(),
    )
    Job.objects.complete_many([completion])
    if completion.kind == "retry":
        Job.objects.run_now(claimed[0].id)
    return completion.kind


def test_a_requeued_tasks_result_reports_only_its_current_life() -> None:
    result = tasks.always_fails.enqueue("disk full")
    assert [run_task_attempt("old") for _ in range(3)] == ["retry", "retry", "dead"]
    assert tasks.always_fails.get_result(result.id).worker_ids == ["old", "old", "old"]

    assert Job.objects.requeue_dead(uuid.UUID(result.id)) == 1
    fresh = tasks.always_fails.get_result(result.id)
    assert (fresh.attempts, fresh.worker_ids, fresh.errors) == (0, [], [])

    assert run_task_attempt("new") == "retry"
    fresh = tasks.always_fails.get_result(result.id)
    assert fresh.attempts == 1
    assert fresh.worker_ids == ["new"]
    assert len(fresh.errors) == 1


# --- the admin's side: the refusal says why ------------------------------------------------


def test_the_admin_says_why_a_requeue_was_refused() -> None:
    old = unique_sync.enqueue(44)
    kill(old.pk)
    unique_sync.enqueue(44)
    root = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(root)
    response = client.post(
        "/admin/django_arcature/job/",
        {"action": "requeue_jobs", "_selected_action": [str(old.pk)], "index": "0"},
        follow=True,
    )
    texts = [str(m) for m in response.context["messages"]]
    assert texts == [
        "Skipped 1 job: 1 whose unique key a live job now holds (only dead jobs can be requeued)."
    ]
    assert Job.objects.get(pk=old.pk).status == JobStatus.DEAD
