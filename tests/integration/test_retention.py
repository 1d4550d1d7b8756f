"""Retention on a real database: what prune deletes, what it never touches, and concurrency."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.test import override_settings

from django_arcature.db import DatabaseNow
from django_arcature.models import Job, JobStatus
from django_arcature.retention.prune import _queryset, count_prunable, prune, prune_batch
from django_arcature.retention.rules import PruneRule
from django_arcature.worker.duties import Duties

pytestmark = pytest.mark.django_db(transaction=True)

OLD = timedelta(days=10)


def make(status: str, n: int, *, age: timedelta = OLD, queue: str = "default") -> list[uuid.UUID]:
    """``n`` jobs in ``status`` finished ``age`` ago (pending/running ones get the stamp too)."""
    jobs = Job.objects.enqueue_many("tests.noop", [() for _ in range(n)], queue=queue)
    ids = [job.pk for job in jobs]
    fields: dict[str, object] = {
        "status": status,
        "finished_at": DatabaseNow(-age.total_seconds()),
        "unique_key": None,
    }
    if status == JobStatus.RUNNING:
        fields["claim_token"] = uuid.uuid4()
    Job.objects.filter(pk__in=ids).update(**fields)
    return ids


def test_prune_deletes_old_finished_rows_only() -> None:
    old = make(JobStatus.SUCCEEDED, 30)
    recent = make(JobStatus.SUCCEEDED, 5, age=timedelta(hours=1))
    dead = make(JobStatus.DEAD, 4)
    # Pending and running rows carrying an old finished_at (they never should, but
    # the status guard must not depend on it).
    live = make(JobStatus.PENDING, 3) + make(JobStatus.RUNNING, 2)
    results = prune([PruneRule("succeeded", timedelta(days=7))], "default", batch=7)
    assert (results[0].deleted, results[0].batches) == (30, 5)
    remaining = set(Job.objects.values_list("id", flat=True))
    assert remaining == set(recent) | set(dead) | set(live)
    assert not set(old) & remaining


def test_prune_refuses_pending_and_running() -> None:
    for status in ("pending", "running"):
        with pytest.raises(ValueError, match="finished jobs only"):
            prune_batch(PruneRule(status, timedelta(0)), "default", 10)


def test_queue_scoped_rules() -> None:
    email = make(JobStatus.SUCCEEDED, 3, queue="email")
    other = make(JobStatus.SUCCEEDED, 3, queue="other")
    rule = PruneRule("succeeded", timedelta(days=1), except_queues=("email",))
    assert count_prunable(rule, "default") == 3
    prune([rule], "default")
    assert set(Job.objects.values_list("id", flat=True)) == set(email)
    assert not set(other) & set(Job.objects.values_list("id", flat=True))


@pytest.mark.only_on(
    "postgresql", "mysql", reason="row locks and SKIP LOCKED (SQLite has one writer)"
)
def test_a_pruner_skips_rows_another_one_holds_without_waiting() -> None:
    make(JobStatus.SUCCEEDED, 25)
    rule = PruneRule("succeeded", timedelta(days=1))
    held: list[uuid.UUID] = []
    locked = threading.Event()
    release = threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                # What another pruner does: take a batch of 5 and hold it.
                held.extend(
                    _queryset(rule, "default")
                    .order_by()
                    .select_for_update(skip_locked=True)
                    .values_list("id", flat=True)[:5]
                )
                locked.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        deleted = prune_batch(rule, "default", 1000)
        elapsed = time.monotonic() - started
    finally:
        release.set()
        holder.join(30)
    assert len(held) == 5
    assert deleted == 20
    assert elapsed < 5  # skipped, not waited for
    assert set(Job.objects.values_list("id", flat=True)) == set(held)


@pytest.mark.only_on("postgresql", "mysql", reason="concurrent server transactions")
def test_concurrent_pruners_delete_every_row_once() -> None:
    make(JobStatus.SUCCEEDED, 400)
    counts: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        try:
            barrier.wait()
            result = prune([PruneRule("succeeded", timedelta(days=1))], "default", batch=25)
            counts.append(result[0].deleted)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert sum(counts) == 400
    assert Job.objects.count() == 0


@override_settings(ARCATURE={"RETENTION": {"succeeded": "7d", "dead": "30d", "batch_size": 10}})
def test_worker_duty_prunes_per_settings_in_batches() -> None:
    make(JobStatus.SUCCEEDED, 25)
    kept_dead = make(JobStatus.DEAD, 3)  # 10 days < 30 days
    duties = Duties("default", schedules=False)
    assert duties._prune_once() < 1  # a full batch: come back soon
    assert Job.objects.count() == 15 + 3
    duties._prune_once()
    duties._prune_once()
    assert set(Job.objects.values_list("id", flat=True)) == set(kept_dead)


def test_prune_command_dry_run_and_real_run() -> None:
    make(JobStatus.SUCCEEDED, 4)
    make(JobStatus.CANCELLED, 2)
    make(JobStatus.PENDING, 2)
    out = StringIO()
    call_command("arcature_prune", "--dry-run", "--older-than", "7d", stdout=out)
    assert "would delete 4 jobs: succeeded older than 7 days" in out.getvalue()
    assert "would delete 6 jobs in all (dry run)" in out.getvalue()
    assert Job.objects.count() == 8
    out = StringIO()
    call_command(
        "arcature_prune",
        "--older-than",
        "7d",
        "--status",
        "succeeded",
        "--queue",
        "default",
        stdout=out,
    )
    assert "deleted 4 jobs in all" in out.getvalue()
    assert Job.objects.filter(status="succeeded").count() == 0
    assert Job.objects.filter(status="cancelled").count() == 2
    assert Job.objects.filter(status="pending").count() == 2


def test_prune_command_without_an_age_says_what_to_do() -> None:
    with pytest.raises(CommandError, match="--older-than"):
        call_command("arcature_prune")
    with pytest.raises(CommandError, match="duration"):
        call_command("arcature_prune", "--older-than", "soon")
