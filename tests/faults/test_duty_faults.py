"""The periodic duties under a fault at every database statement (issue 19, C).

Each duty (firing schedules, sweeping expired leases, pruning) is run once
clean to count its statements, then once per statement with that statement
raising, an ordinary exception or a lost connection (``connection.execute_wrapper``
raising before the statement reaches the server). After every faulty run:

* nothing is half-written: a schedule's watermark moved exactly when all of
  its slots' jobs exist; a swept job is pending (or dead) with its claim
  cleared, or still running untouched; a prune never deletes a live job;
* the next run, without the fault, recovers: every slot is one job, never two;
  every expired lease is swept once; every old finished row is pruned;
* with an ordinary exception, the other schedules of the same tick still fire,
  and the duties around a failing one (``Duties.run_due``) still run.

The CI profile injects at every statement of one small program per duty; the
long profile (``ARCATURE_SOAK=1``) uses bigger programs, so more statements.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test import override_settings

from django_arcature.db import DatabaseNow
from django_arcature.db.clock import database_now
from django_arcature.models import Job, JobStatus
from django_arcature.retention.prune import prune_batch
from django_arcature.retention.rules import PruneRule
from django_arcature.schedules.firing import ScheduleRunner
from django_arcature.schedules.keys import PREFIX, slot_key
from django_arcature.schedules.models import Schedule
from django_arcature.schedules.policy import due_slots
from django_arcature.worker.duties import Duties

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]

SOAK = os.environ.get("ARCATURE_SOAK") == "1"
#: Schedules per program, missed slots each, jobs per sweep and prune program.
SCHEDULES = 4 if SOAK else 2
CATCH_UP = 4 if SOAK else 2
JOBS = 12 if SOAK else 4


class Injected(RuntimeError):
    """The ordinary exception a fault raises."""


Fault = Callable[[], BaseException]
FAULTS: dict[str, Fault] = {
    "exception": lambda: Injected("injected fault"),
    "connection": lambda: OperationalError("injected: server closed the connection"),
}


@contextmanager
def statements(fail_at: int | None = None, fault: Fault | None = None) -> Iterator[list[str]]:
    """Count this connection's statements; raise ``fault()`` instead of statement ``fail_at``."""
    seen: list[str] = []

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        seen.append(sql)
        if fail_at is not None and fault is not None and len(seen) == fail_at:
            raise fault()
        return execute(sql, params, many, ctx)

    with connection.execute_wrapper(wrapper):
        yield seen


# --- schedules ------------------------------------------------------------------------------


def declare(now: datetime) -> None:
    Job.objects.all().delete()
    Schedule.objects.all().delete()
    for index in range(SCHEDULES):
        Schedule.objects.create(
            name=f"f{index}",
            task_name="tests.noop",
            cron="* * * * *",
            missed="all",
            catch_up=CATCH_UP,
            created_at=now - timedelta(minutes=CATCH_UP + 2),
        )


def expected_slots(now: datetime) -> dict[str, list[datetime]]:
    return {
        row.name: list(
            due_slots(
                row.cron,
                row.timezone,
                watermark=row.window_start(),
                now=now,
                policy=row.missed,
                catch_up=row.catch_up,
            ).fire
        )
        for row in Schedule.objects.all()
    }


def assert_whole(expected: dict[str, list[datetime]]) -> set[str]:
    """Each schedule fired all its slots or none; returns the names that fired."""
    keys = set(
        Job.objects.filter(unique_key__startswith=PREFIX).values_list("unique_key", flat=True)
    )
    fired = set()
    for row in Schedule.objects.all():
        wanted = {slot_key(row.name, slot) for slot in expected[row.name]}
        if row.last_slot_at is None:
            assert not wanted & keys, f"{row.name}: jobs without the watermark"
            assert row.last_job_id is None
        else:
            assert row.last_slot_at == expected[row.name][-1]
            assert wanted <= keys, f"{row.name}: the watermark moved without its jobs"
            fired.add(row.name)
    assert Job.objects.count() == len(keys)
    return fired


def fire_once(now: datetime) -> list[Any]:
    runner = ScheduleRunner("default")
    return runner.fire(runner.plan(now), now)


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_a_fault_at_any_statement_of_a_schedule_tick(kind: str) -> None:
    now = database_now("default")
    declare(now)
    expected = expected_slots(now)
    with statements() as clean:
        fire_once(now)
    total = len(clean)
    assert total >= 3 * SCHEDULES
    for fail_at in range(1, total + 1):
        declare(now)
        raised: BaseException | None = None
        with statements(fail_at, FAULTS[kind]):
            try:
                fire_once(now)
            except BaseException as exc:
                raised = exc
        fired = assert_whole(expected)
        if kind == "exception" and fail_at > 1:  # statement 1 reads the schedules: no tick
            assert raised is None, f"statement {fail_at}: {raised!r} escaped the tick"
            # Only the schedule being fired when the fault hit is left out.
            assert len(fired) >= SCHEDULES - 1, (fail_at, fired)
        elif kind == "exception":
            assert isinstance(raised, Injected)
            assert fired == set()
        else:
            assert raised is None or isinstance(raised, OperationalError)
        # The next tick, without the fault, fires what is missing, and nothing twice.
        fire_once(now)
        assert assert_whole(expected) == set(expected)
        keys = list(
            Job.objects.filter(unique_key__startswith=PREFIX).values_list("unique_key", flat=True)
        )
        assert len(keys) == len(set(keys)) == SCHEDULES * CATCH_UP
        assert fire_once(now) == []


# --- sweep ----------------------------------------------------------------------------------


def expired_jobs() -> dict[uuid.UUID, uuid.UUID]:
    """``JOBS`` running jobs whose lease ran out on the database's clock: id -> claim token."""
    Job.objects.all().delete()
    Job.objects.enqueue_many("tests.noop", [() for _ in range(JOBS)], max_attempts=2)
    claimed = Job.objects.claim("fault-worker", lease=30, batch=JOBS)
    assert len(claimed) == JOBS
    Job.objects.filter(status=JobStatus.RUNNING).update(lease_expires_at=DatabaseNow(-60))
    return {job.id: job.claim_token for job in claimed}


def assert_swept_or_untouched(tokens: dict[uuid.UUID, uuid.UUID]) -> int:
    """Every job is either still running under its claim or swept whole; returns the swept."""
    swept = 0
    for job in Job.objects.all():
        if job.status == JobStatus.RUNNING:
            assert job.claim_token == tokens[job.id]
        else:
            assert job.status in (JobStatus.PENDING, JobStatus.DEAD), job.status
            assert job.claim_token is None
            assert job.attempts == 1
            swept += 1
    return swept


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_a_fault_at_any_statement_of_a_sweep(kind: str) -> None:
    expired_jobs()
    with statements() as clean:
        assert Job.objects.sweep_expired_leases() == JOBS
    for fail_at in range(1, len(clean) + 1):
        tokens = expired_jobs()
        with statements(fail_at, FAULTS[kind]), suppress(Injected, OperationalError):
            Job.objects.sweep_expired_leases()
        before = assert_swept_or_untouched(tokens)
        assert Job.objects.sweep_expired_leases() == JOBS - before
        assert assert_swept_or_untouched(tokens) == JOBS
        assert Job.objects.sweep_expired_leases() == 0


# --- prune ----------------------------------------------------------------------------------


def finished_and_live() -> set[uuid.UUID]:
    """``JOBS`` old succeeded jobs to prune and two live ones; returns the live ids."""
    Job.objects.all().delete()
    old = Job.objects.enqueue_many("tests.noop", [() for _ in range(JOBS)])
    Job.objects.filter(pk__in=[job.pk for job in old]).update(
        status=JobStatus.SUCCEEDED, finished_at=DatabaseNow(-30 * 86400), unique_key=None
    )
    live = Job.objects.enqueue_many("tests.noop", [(), ()])
    return {job.pk for job in live}


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_a_fault_at_any_statement_of_a_prune(kind: str) -> None:
    rule = PruneRule("succeeded", timedelta(days=7))
    batch = max(JOBS // 2, 1)
    finished_and_live()
    with statements() as clean:
        while prune_batch(rule, "default", batch):
            pass
    for fail_at in range(1, len(clean) + 1):
        live = finished_and_live()
        with statements(fail_at, FAULTS[kind]), suppress(Injected, OperationalError):
            while prune_batch(rule, "default", batch):
                pass
        left = Job.objects.filter(status=JobStatus.SUCCEEDED).count()
        assert (JOBS - left) % batch == 0 or left == 0  # whole batches, or the tail
        assert live <= set(Job.objects.values_list("id", flat=True))
        while prune_batch(rule, "default", batch):
            pass
        assert set(Job.objects.values_list("id", flat=True)) == live


# --- the duties around a failing one --------------------------------------------------------


@override_settings(ARCATURE={"RETENTION": {"succeeded": "7d"}})
@pytest.mark.parametrize("failing", ["schedules", "prune"])
def test_each_duty_runs_while_another_fails_on_every_statement(failing: str) -> None:
    now = database_now("default")
    declare(now)
    live = finished_and_live()
    table = Schedule._meta.db_table if failing == "schedules" else Job._meta.db_table
    verb = "UPDATE" if failing == "schedules" else "DELETE"

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        if verb in sql.upper() and table in sql:  # PostgreSQL's prune is WITH … DELETE
            raise OperationalError(f"injected: every {verb} of {table} fails")
        return execute(sql, params, many, ctx)

    duties = Duties("default")
    duties._next_prune = 0.0  # due now, not after the start-up spread
    with connection.execute_wrapper(wrapper):
        duties.run_due()
    if failing == "schedules":
        assert set(Job.objects.values_list("id", flat=True)) == live  # pruned nonetheless
        assert not Schedule.objects.exclude(last_slot_at=None).exists()
    else:
        assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == JOBS  # kept
        assert Job.objects.filter(unique_key__startswith=PREFIX).count() == SCHEDULES * CATCH_UP
