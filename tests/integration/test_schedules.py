"""Schedules on a real database: firing once per slot, missed-slot policies, code sync."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from itertools import pairwise

import pytest
from django.core.management import call_command
from django.db import connection

from django_arcature import job
from django_arcature.db.clock import database_now
from django_arcature.models import Job, JobStatus
from django_arcature.registry import unregister
from django_arcature.schedules.firing import ScheduleRunner, fire_schedule
from django_arcature.schedules.keys import slot_key
from django_arcature.schedules.models import Schedule, ScheduleSource
from django_arcature.schedules.periodic import declared, forget, periodic
from django_arcature.schedules.policy import due_slots
from django_arcature.schedules.sync import sync_code_schedules

pytestmark = pytest.mark.django_db(transaction=True)


def make_schedule(name: str = "tick", minutes_ago: int = 10, **fields: object) -> Schedule:
    created = database_now("default") - timedelta(minutes=minutes_ago)
    options: dict[str, object] = {"cron": "* * * * *", "task_name": "tests.noop"}
    options.update(fields)
    return Schedule.objects.create(name=name, created_at=created, **options)


def jobs_of(task: str = "tests.noop") -> list[Job]:
    return list(Job.objects.filter(task_name=task).order_by("created_at"))


def test_due_slot_becomes_one_job_with_the_slot_key() -> None:
    schedule = make_schedule(args=[], queue="reports", priority=7)
    fired = ScheduleRunner("default").tick()
    assert len(fired) == 1
    row = Job.objects.get(pk=fired[0].job_id)
    assert (row.status, row.queue, row.priority) == (JobStatus.PENDING, "reports", 7)
    assert row.unique_key == slot_key("tick", fired[0].slot)
    schedule.refresh_from_db()
    assert schedule.last_slot_at == fired[0].slot
    assert schedule.last_job_id == row.pk
    assert fired[0].slot <= database_now("default") < fired[0].slot + timedelta(minutes=1)
    # Evaluated again within the same minute: nothing new.
    assert ScheduleRunner("default").tick() == []
    assert len(jobs_of()) == 1


def test_a_stale_evaluation_fires_nothing_even_after_the_job_finished() -> None:
    """Two workers read the same watermark; the second one loses, whenever it writes."""
    make_schedule()
    first = Schedule.objects.get(name="tick")
    second = Schedule.objects.get(name="tick")  # the same state, read by another worker
    now = database_now("default")
    due = due_slots(first.cron, first.timezone, watermark=first.created_at, now=now)
    won = fire_schedule(first, due, "default")
    assert len(won) == 1
    # The slot's job runs and finishes: its unique key is released ...
    Job.objects.filter(pk=won[0].job_id).update(
        status=JobStatus.SUCCEEDED, unique_key=None, finished_at=now
    )
    # ... and yet the late worker's insert for the same slot does not happen.
    assert fire_schedule(second, due, "default") == []
    assert len(jobs_of()) == 1


@pytest.mark.only_on("postgresql", "mysql", reason="threads racing on a server database")
def test_racing_evaluations_in_threads_fire_each_slot_once() -> None:
    make_schedule(missed="all", catch_up=5)
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def evaluate() -> None:
        try:
            barrier.wait()
            ScheduleRunner("default").tick()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=evaluate) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    keys = [row.unique_key for row in jobs_of()]
    assert len(keys) == 5
    assert len(set(keys)) == 5


def test_missed_policy_latest_fires_once_after_downtime() -> None:
    make_schedule(minutes_ago=30)
    assert len(ScheduleRunner("default").tick()) == 1
    assert len(jobs_of()) == 1


def test_missed_policy_all_fires_each_missed_slot_up_to_the_bound() -> None:
    make_schedule(minutes_ago=30, missed="all", catch_up=4)
    fired = ScheduleRunner("default").tick()
    assert [b.slot - a.slot for a, b in pairwise(fired)] == [timedelta(minutes=1)] * 3
    assert len({row.unique_key for row in jobs_of()}) == 4


def test_missed_policy_skip_fires_only_the_on_time_slot() -> None:
    # Every minute: the newest slot is always less than a minute old.
    make_schedule(minutes_ago=30, missed="skip")
    assert len(ScheduleRunner("default").tick()) == 1
    # Daily at a time that passed well over a minute ago: nothing fires, the slot is skipped.
    now = database_now("default")
    passed = now - timedelta(minutes=5)
    make_schedule(
        "daily",
        minutes_ago=60 * 24 * 3,
        cron=f"{passed.minute} {passed.hour} * * *",
        missed="skip",
    )
    assert [f.schedule for f in ScheduleRunner("default").tick()] == []
    daily = Schedule.objects.get(name="daily")
    assert daily.last_slot_at is not None
    assert daily.last_slot_at <= passed
    assert daily.last_job_id is None


def test_new_schedule_does_not_fire_slots_from_before_it_existed() -> None:
    make_schedule(minutes_ago=0, cron="0 0 1 1 *")  # next slot: next new year
    assert ScheduleRunner("default").tick() == []


def test_disabled_schedule_does_not_fire() -> None:
    make_schedule(enabled=False)
    assert ScheduleRunner("default").tick() == []


def test_schedule_for_an_unknown_task_is_reported_and_left_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    schedule = make_schedule(task_name="tests.no_such_task")
    runner = ScheduleRunner("default")
    assert runner.tick() == []
    assert "cannot fire" in caplog.text
    schedule.refresh_from_db()
    assert schedule.last_slot_at is None  # rolled back with the failed insert
    assert Job.objects.count() == 0


def test_runner_waits_until_the_next_slot() -> None:
    make_schedule(minutes_ago=0, cron="0 0 1 1 *")
    runner = ScheduleRunner("default", refresh_seconds=15)
    runner.tick()
    assert not runner.due()


# --- code-declared schedules ----------------------------------------------------------------


@pytest.fixture
def code_schedule() -> Iterator[str]:
    @periodic("*/5 * * * *", timezone="Europe/Paris", kwargs={}, name="tests.every5")
    @job(name="tests.sched_target")
    def target() -> None:
        return None

    yield "tests.every5"
    forget("tests.every5")
    unregister("tests.sched_target")


def test_code_schedule_is_synced_and_keeps_the_operators_enabled_flag(code_schedule: str) -> None:
    assert code_schedule in declared()
    assert sync_code_schedules("default") == (1, 0)
    row = Schedule.objects.get(name=code_schedule)
    assert (row.source, row.cron, row.timezone, row.task_name) == (
        ScheduleSource.CODE,
        "*/5 * * * *",
        "Europe/Paris",
        "tests.sched_target",
    )
    Schedule.objects.filter(pk=row.pk).update(enabled=False, cron="0 * * * *")
    assert sync_code_schedules("default") == (0, 1)
    row.refresh_from_db()
    assert (row.cron, row.enabled) == ("*/5 * * * *", False)
    assert sync_code_schedules("default") == (0, 0)


def test_code_schedule_not_declared_here_is_not_fired_here() -> None:
    make_schedule("declared.elsewhere", source=ScheduleSource.CODE)
    assert ScheduleRunner("default").tick() == []


def test_periodic_refuses_a_bare_function_and_a_bad_expression() -> None:
    with pytest.raises(TypeError, match="above @job"):
        periodic("* * * * *")(lambda: None)
    with pytest.raises(ValueError, match="cron"):
        periodic("not cron")
    with pytest.raises(ValueError, match="time zone"):
        periodic("* * * * *", timezone="Nowhere/Special")


def test_arcature_schedules_lists_next_fire_times() -> None:
    make_schedule("nightly", cron="30 2 * * *", timezone="Europe/Paris")
    out = StringIO()
    call_command("arcature_schedules", "--next", "2", stdout=out)
    text = out.getvalue()
    assert "nightly  [admin, enabled]  '30 2 * * *' Europe/Paris -> tests.noop" in text
    assert text.count("    next ") == 2
    assert "T02:30:00+0" in text or "T03:00:00+02:00" in text


def test_arcature_schedules_names_code_schedules_not_synced_yet(code_schedule: str) -> None:
    """Before any worker started (or ``--sync``), the table holds no code schedule:
    the listing must not say "no schedules" while the code declares some."""
    out = StringIO()
    call_command("arcature_schedules", stdout=out)
    text = out.getvalue()
    assert "no schedules" not in text
    assert f"declared in code, not synced yet: {code_schedule}" in text
    assert "--sync" in text
    call_command("arcature_schedules", "--sync", stdout=(out := StringIO()))
    assert "not synced yet" not in out.getvalue()
    assert f"{code_schedule}  [code, enabled]" in out.getvalue()


def test_periodic_on_a_django_tasks_task_fires_through_the_backend() -> None:
    """``@periodic`` above a django.tasks ``@task``: the slot's row belongs to the backend."""
    from django_arcature.testing import run_job
    from tests.integration import backend_tasks

    periodic("* * * * *", args=[2, 3], name="tests.tasks-add")(backend_tasks.add)
    try:
        assert sync_code_schedules("default") == (1, 0)
        row = Schedule.objects.get(name="tests.tasks-add")
        assert (row.task_name, row.backend) == (backend_tasks.add.module_path, "default")
        Schedule.objects.filter(pk=row.pk).update(
            created_at=database_now("default") - timedelta(minutes=2)
        )
        (fired,) = ScheduleRunner("default").tick()
        job = Job.objects.get(pk=fired.job_id)
        assert (job.backend, job.task_name) == ("default", backend_tasks.add.module_path)
        done = run_job(job)
        assert (done.status, done.result) == (JobStatus.SUCCEEDED, 5)
    finally:
        forget("tests.tasks-add")
