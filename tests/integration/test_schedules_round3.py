"""Schedules, issue 19: task options, disabled time, admin saves, isolated duties, the DB clock.

Each test here failed before its fix (B2, B6, B7, B12, B14 and B16 of issue 19);
the module docstring of each section says how.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.sites import site
from django.contrib.auth.models import User
from django.contrib.messages.storage.fallback import FallbackStorage
from django.core.checks import run_checks
from django.db import DatabaseError, connection
from django.http import HttpRequest
from django.test import RequestFactory, override_settings
from django.utils import timezone

from django_arcature.db import DatabaseNow
from django_arcature.db.clock import database_now
from django_arcature.models import Job, JobStatus
from django_arcature.schedules.firing import ScheduleRunner
from django_arcature.schedules.models import Schedule
from django_arcature.schedules.periodic import forget, periodic
from django_arcature.schedules.sync import sync_code_schedules
from django_arcature.testing import run_job
from django_arcature.worker.duties import Duties
from tests.testapp import tasks as app_tasks

pytestmark = pytest.mark.django_db(transaction=True)


def make_schedule(name: str = "tick", minutes_ago: int = 10, **fields: object) -> Schedule:
    created = database_now("default") - timedelta(minutes=minutes_ago)
    options: dict[str, object] = {"cron": "* * * * *", "task_name": "tests.noop"}
    options.update(fields)
    return Schedule.objects.create(name=name, created_at=created, **options)


def admin_request(user: User) -> HttpRequest:
    request = RequestFactory().post("/admin/")
    request.user = user
    request.session = {}  # type: ignore[assignment]
    request._messages = FallbackStorage(request)  # type: ignore[attr-defined]
    return request


# --- B2: a scheduled django.tasks row takes the task's options ------------------------------


def test_periodic_task_row_takes_the_tasks_priority_and_attempts() -> None:
    """Before: priority 0 and the global MAX_ATTEMPTS (3), so the task ran three times."""
    task = app_tasks.must_not_retry
    periodic("* * * * *", name="tests.must-not-retry")(task)
    try:
        sync_code_schedules("default")
        Schedule.objects.filter(name="tests.must-not-retry").update(created_at=DatabaseNow(-120))
        (fired,) = ScheduleRunner("default").tick()
        row = Job.objects.get(pk=fired.job_id)
        assert (row.priority, row.max_attempts, row.queue) == (7, 1, "default")
        done = run_job(row)
        assert (done.status, done.attempts) == (JobStatus.DEAD, 1)
    finally:
        forget("tests.must-not-retry")


@override_settings(
    TASKS={
        "default": {
            "BACKEND": "django_arcature.backend.ArcatureBackend",
            "QUEUES": [],
            "OPTIONS": {
                "MODULES": ["tests.integration.backend_tasks"],
                "TASK_OPTIONS": {"tests.integration.backend_tasks.add": {"max_attempts": 2}},
            },
        }
    }
)
def test_schedule_row_takes_task_options_from_the_backend_table_and_its_own_override() -> None:
    """The backend's TASK_OPTIONS apply as for an enqueue; the schedule's priority wins."""
    from tests.integration import backend_tasks

    make_schedule(
        "add", task_name=backend_tasks.add.module_path, backend="default", args=[1, 2], priority=3
    )
    make_schedule(
        "mail", task_name=backend_tasks.send_email.module_path, backend="default", args=["a@b"]
    )
    fired = {item.schedule: item for item in ScheduleRunner("default").tick()}
    add = Job.objects.get(pk=fired["add"].job_id)
    mail = Job.objects.get(pk=fired["mail"].job_id)
    assert (add.priority, add.max_attempts) == (3, 2)
    assert (mail.priority, mail.queue) == (10, "email")


def test_admin_run_now_takes_the_tasks_options(admin_user: User) -> None:
    schedule = make_schedule(
        "now", task_name=app_tasks.must_not_retry.module_path, backend="default"
    )
    admin = site._registry[Schedule]
    admin.run_schedules_now(  # type: ignore[attr-defined]
        admin_request(admin_user), Schedule.objects.filter(pk=schedule.pk)
    )
    row = Job.objects.get()
    assert (row.priority, row.max_attempts, row.unique_key) == (7, 1, None)


def test_a_schedule_naming_something_that_is_not_a_task_is_refused_with_a_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    make_schedule("bad", task_name="os.system", backend="default", args=["true"])
    assert ScheduleRunner("default").tick() == []
    assert "schedule 'bad' cannot fire" in caplog.text
    assert Job.objects.count() == 0


# --- B6: disabled time is not missed time ----------------------------------------------------


@pytest.mark.slow
def test_reenabling_fires_no_slot_from_the_disabled_time(admin_user: User) -> None:
    """Before: every per-second slot of the disabled seconds fired at once (missed="all")."""
    schedule = make_schedule("sec", minutes_ago=0, cron="* * * * * *", missed="all", catch_up=50)
    runner = ScheduleRunner("default")
    runner.tick()
    admin = site._registry[Schedule]
    request = admin_request(admin_user)
    admin.disable_schedules(request, Schedule.objects.filter(pk=schedule.pk))  # type: ignore[attr-defined]
    time.sleep(3.2)
    before = Job.objects.count()
    admin.enable_schedules(request, Schedule.objects.filter(pk=schedule.pk))  # type: ignore[attr-defined]
    enabled_at = Schedule.objects.get(pk=schedule.pk).enabled_at
    assert enabled_at is not None
    fired = runner.tick()
    after = database_now("default")
    assert all(enabled_at < item.slot <= after for item in fired)
    # At most the second boundaries between the enable and the tick: one, unless a loaded
    # machine took longer than a second between the two (then two fired, and "<= 1" failed).
    assert len(fired) <= int((after - enabled_at).total_seconds()) + 1
    assert Job.objects.count() - before == len(fired)


def test_reenabling_by_saving_the_instance_starts_the_window_there() -> None:
    schedule = make_schedule("inst", minutes_ago=30, missed="all", catch_up=50, enabled=False)
    schedule = Schedule.objects.get(pk=schedule.pk)
    schedule.enabled = True
    schedule.save()
    assert schedule.enabled_at is not None
    assert schedule.enabled_at >= database_now("default") - timedelta(seconds=5)
    fired = ScheduleRunner("default").tick()
    assert len(fired) <= 1
    assert all(item.slot > schedule.enabled_at for item in fired)


# --- B7: an admin save writes only what the form changed --------------------------------------


def test_admin_save_does_not_put_back_a_stale_watermark(admin_user: User) -> None:
    """The admin reads the row, a worker fires a slot, the admin saves: before, the save
    wrote the old ``last_slot_at`` back and the same slot fired a second time."""
    schedule = make_schedule("race", minutes_ago=5)
    admin = site._registry[Schedule]
    request = admin_request(admin_user)
    stale = admin.get_object(request, str(schedule.pk))
    assert stale is not None
    (first,) = ScheduleRunner("default").tick()  # the worker, in between
    # The slot's job finishes and releases its unique key (the watermark alone guards now).
    Job.objects.filter(pk=first.job_id).update(status=JobStatus.SUCCEEDED, unique_key=None)
    form_class = admin.get_form(request, stale, change=True)
    initial = form_class(instance=stale).initial
    data = {
        key: ("" if value is None else value)
        for key, value in initial.items()
        if key in form_class.base_fields
    }
    data["args"] = "[]"
    data["kwargs"] = "{}"
    data["enabled"] = "on"
    data["priority"] = "4"
    form = form_class(data, instance=stale)
    assert form.is_valid(), form.errors
    admin.save_model(request, form.save(commit=False), form, change=True)
    row = Schedule.objects.get(pk=schedule.pk)
    assert row.priority == 4
    assert row.last_slot_at == first.slot
    assert ScheduleRunner("default").tick() == []
    assert Job.objects.filter(unique_key=None, status=JobStatus.SUCCEEDED).count() == 1
    assert Job.objects.count() == 1


# --- B12: one failing schedule or duty blocks nothing else ------------------------------------


@pytest.fixture
def without_cronsim(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host lacks the cron library, as without the ``[schedules]`` extra."""
    monkeypatch.setitem(sys.modules, "cronsim", None)


@override_settings(ARCATURE={"RETENTION": {"succeeded": "7d"}})
def test_retention_runs_when_a_stored_schedule_cannot_be_evaluated(
    without_cronsim: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the CronUnavailable of the admin's schedule escaped the tick every time, and
    prune (in the same ``try``) never ran."""
    make_schedule("admin-made")
    jobs = Job.objects.enqueue_many("tests.noop", [() for _ in range(3)])
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(
        status=JobStatus.SUCCEEDED, finished_at=DatabaseNow(-30 * 86400), unique_key=None
    )
    duties = Duties("default")
    duties._next_prune = time.monotonic()  # not the random start-up spread
    with caplog.at_level(logging.WARNING, logger="django_arcature"):
        duties.run_due()
        duties.run_due()
    assert Job.objects.count() == 0
    assert "schedule 'admin-made' cannot fire" in caplog.text


def test_a_failing_schedule_does_not_keep_the_others_from_firing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A database error on one schedule's insert (here injected) is that schedule's alone."""
    make_schedule("a-broken")
    make_schedule("b-fine")

    def refuse(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        if sql.lstrip().upper().startswith("INSERT") and "schedule:a-broken@" in repr(params):
            raise DatabaseError("injected: this row cannot be written")
        return execute(sql, params, many, ctx)

    with connection.execute_wrapper(refuse):
        fired = ScheduleRunner("default").tick()
    assert [item.schedule for item in fired] == ["b-fine"]
    assert "schedule 'a-broken' cannot fire" in caplog.text
    assert Schedule.objects.get(name="a-broken").last_slot_at is None  # rolled back


def test_system_check_names_stored_schedules_this_host_cannot_evaluate(
    without_cronsim: None,
) -> None:
    make_schedule("admin-made")
    errors = [m for m in run_checks() if m.id == "arcature.E031"]
    assert len(errors) == 1
    assert "admin-made" in errors[0].msg
    assert "cronsim" in (errors[0].hint or "")


def test_system_check_names_a_stored_unknown_zone() -> None:
    Schedule.objects.create(name="zoned", task_name="tests.noop", cron="* * * * *")
    Schedule.objects.filter(name="zoned").update(timezone="Mars/Olympus_Mons")
    errors = [m for m in run_checks() if m.id == "arcature.E031"]
    assert len(errors) == 1
    assert "zoned" in errors[0].msg
    assert "Mars/Olympus_Mons" in errors[0].msg


# --- B14: created_at on the database's clock --------------------------------------------------


def test_created_at_is_the_databases_clock_even_for_a_row_inserted_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the column had no default in the database (an INSERT that leaves it out
    failed), and the ORM filled it from the app server's clock."""
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(hours=3))
    table = connection.ops.quote_name(Schedule._meta.db_table)
    values: dict[str, str | int | bool] = {
        "name": "raw",
        "task_name": "tests.noop",
        "backend": "",
        "cron": "* * * * *",
        "timezone": "UTC",
        "args": "[]",
        "kwargs": "{}",
        "queue": "",
        "enabled": True,
        "missed": "latest",
        "catch_up": 1,
        "source": "admin",
    }
    columns = ", ".join(connection.ops.quote_name(name) for name in values)  # column = name
    marks = ", ".join(["%s"] * len(values))
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", list(values.values()))
    created = Schedule.objects.create(name="orm", task_name="tests.noop", cron="* * * * *")
    now = database_now("default")
    for row in (Schedule.objects.get(name="raw"), Schedule.objects.get(name="orm")):
        assert abs((row.created_at - now).total_seconds()) < 5
    assert abs((created.created_at - now).total_seconds()) < 5


# --- B16: a stopping worker fires no schedule -------------------------------------------------


def test_duties_fire_no_schedule_once_stop_is_requested() -> None:
    make_schedule("late")
    duties = Duties("default", retention=False)
    duties.request_stop()
    duties.run_due()
    assert Job.objects.count() == 0


@pytest.mark.slow
def test_a_stopping_worker_does_not_fire_schedules_while_it_waits_for_its_jobs() -> None:
    """The worker waits for a running job after a stop; slots due meanwhile are left to
    the next worker (before: the duties thread went on firing until the very end)."""
    from django_arcature.worker.loop import Worker

    make_schedule("every-second", minutes_ago=0, cron="* * * * * *")
    Job.objects.enqueue("tests.sleep", args=[3.0], queue="slow")
    worker = Worker(concurrency=1, shutdown_timeout=10, install_signal_handlers=False)

    def run() -> None:
        try:
            worker.run()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not Job.objects.filter(status=JobStatus.RUNNING, queue="slow").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        worker.stop()
        # The loop has begun its shutdown and told the duties to stop (polled: a loaded
        # machine may take longer than any fixed pause to turn the loop once), then a
        # tick already under way when it did has had time to end.
        deadline = time.monotonic() + 10
        while not (worker._duties is not None and worker._duties.stopping):
            assert time.monotonic() < deadline, "the worker never told its duties to stop"
            time.sleep(0.05)
        time.sleep(0.4)
        fired_before = Job.objects.filter(task_name="tests.noop").count()
        watermark = Schedule.objects.get(name="every-second").last_slot_at
        time.sleep(1.8)
        assert Job.objects.filter(task_name="tests.noop").count() == fired_before
        assert Schedule.objects.get(name="every-second").last_slot_at == watermark
    finally:
        thread.join(20)
    assert not thread.is_alive()


def test_enabling_in_the_change_form_records_enabled_at_and_writes_only_that(
    admin_user: User,
) -> None:
    from django.urls import reverse

    from .test_admin_support import client_for

    schedule = make_schedule("form", minutes_ago=30, missed="all", catch_up=50, enabled=False)
    Schedule.objects.filter(pk=schedule.pk).update(last_slot_at=DatabaseNow(-25 * 60))
    watermark = Schedule.objects.get(pk=schedule.pk).last_slot_at
    url = reverse("admin:django_arcature_schedule_change", args=[schedule.pk])
    data = {
        "name": "form",
        "task_name": "tests.noop",
        "backend": "",
        "cron": "* * * * *",
        "timezone": "UTC",
        "args": "[]",
        "kwargs": "{}",
        "queue": "",
        "priority": "",
        "enabled": "on",
        "missed": "all",
        "catch_up": "50",
    }
    response = client_for(admin_user).post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    row = Schedule.objects.get(pk=schedule.pk)
    assert row.enabled
    assert row.enabled_at is not None
    assert row.last_slot_at == watermark  # not in the form: not written
    fired = ScheduleRunner("default").tick()
    assert len(fired) <= 1
    assert all(item.slot > row.enabled_at for item in fired)
