"""The schedules and queues pages of the admin, through Django's test client."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.test import Client, override_settings
from django.urls import reverse

from django_arcature.db.clock import database_now
from django_arcature.models import Job
from django_arcature.queues.models import QueueState
from django_arcature.schedules import checks as schedule_checks
from django_arcature.schedules.firing import ScheduleRunner
from django_arcature.schedules.models import Schedule, ScheduleSource
from django_arcature.schedules.periodic import PeriodicSpec

from .test_admin_support import client_for, messages_of, staff

pytestmark = pytest.mark.django_db(transaction=True)

SCHEDULES = reverse("admin:django_arcature_schedule_changelist")
QUEUES = reverse("admin:django_arcature_queuestate_changelist")


@pytest.fixture
def root(admin_user: User) -> Client:
    return client_for(admin_user)


def act(client: Client, url: str, action: str, ids: list[object]) -> list[str]:
    data = {"action": action, "_selected_action": [str(i) for i in ids], "index": "0"}
    response = client.post(url, data, follow=True)
    assert response.status_code == 200
    return messages_of(response)


def test_schedules_page_shows_next_fire_times_and_the_last_job(root: Client) -> None:
    schedule = Schedule.objects.create(
        name="nightly",
        task_name="tests.noop",
        cron="* * * * *",
        timezone="Europe/Paris",
        created_at=database_now("default") - timedelta(minutes=5),
    )
    fired = ScheduleRunner("default").tick()
    page = root.get(SCHEDULES).content.decode()
    assert "nightly" in page
    assert page.count("CET") + page.count("CEST") >= 3  # three next fire times, local
    assert reverse("admin:django_arcature_job_change", args=[fired[0].job_id]) in page
    assert str(schedule.pk) in page


def test_enable_disable_and_run_now(root: Client) -> None:
    schedule = Schedule.objects.create(name="s", task_name="tests.noop", cron="0 0 1 1 *")
    assert act(root, SCHEDULES, "disable_schedules", [schedule.pk]) == ["1 schedule disabled."]
    assert not Schedule.objects.get(pk=schedule.pk).enabled
    act(root, SCHEDULES, "enable_schedules", [schedule.pk])
    assert Schedule.objects.get(pk=schedule.pk).enabled
    (message,) = act(root, SCHEDULES, "run_schedules_now", [schedule.pk])
    job = Job.objects.get()
    assert message.startswith("Schedule s enqueued job <a href=")
    assert str(job.pk) in message
    assert job.unique_key is None  # outside the slots
    assert Schedule.objects.get(pk=schedule.pk).last_slot_at is None


def test_code_schedule_fields_are_read_only_but_enabled_is_not(root: Client) -> None:
    schedule = Schedule.objects.create(
        name="code", task_name="tests.noop", cron="0 * * * *", source=ScheduleSource.CODE
    )
    page = root.get(reverse("admin:django_arcature_schedule_change", args=[schedule.pk]))
    html = page.content.decode()
    assert 'name="enabled"' in html
    assert 'name="cron"' not in html


def test_operator_can_add_a_schedule_and_a_bad_expression_is_refused(root: Client) -> None:
    url = reverse("admin:django_arcature_schedule_add")
    data = {
        "name": "added",
        "task_name": "tests.noop",
        "backend": "",
        "cron": "61 * * * *",
        "timezone": "Europe/Paris",
        "args": "[]",
        "kwargs": "{}",
        "queue": "",
        "priority": "",
        "enabled": "on",
        "missed": "latest",
        "catch_up": "10",
        "created_at_0": "2026-01-01",
        "created_at_1": "00:00:00",
    }
    response = root.post(url, data)
    assert response.status_code == 200
    assert "invalid cron expression" in response.content.decode()
    data["cron"] = "*/5 * * * *"
    response = root.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Schedule.objects.get(name="added").source == ScheduleSource.ADMIN


def test_staff_without_change_permission_gets_no_actions() -> None:
    viewer = client_for(staff("viewer", "view_schedule"))
    Schedule.objects.create(name="s", task_name="tests.noop", cron="0 0 1 1 *")
    page = viewer.get(SCHEDULES).content.decode()
    assert "run_schedules_now" not in page


@override_settings(ARCATURE={"QUEUES": {"email": {"concurrency": 5, "rate": "100/m"}}})
def test_queues_page_lists_live_and_limited_queues_and_pauses_them(root: Client) -> None:
    Job.objects.enqueue("tests.noop", queue="reports")
    page = root.get(QUEUES).content.decode()
    assert "reports" in page
    assert "at most 5 running, at most 100 starts per 60s" in page
    assert not QueueState.objects.exists()  # viewing creates no row
    pause_named = reverse("admin:django_arcature_queuestate_pause_named")
    response = root.post(pause_named, {"name": "reports"}, follow=True)
    assert messages_of(response) == ["Queue reports paused."]
    assert QueueState.objects.get(name="reports").paused
    assert act(root, QUEUES, "resume_queues", ["reports"]) == ["1 queue resumed."]
    assert act(root, QUEUES, "pause_queues", ["reports"]) == ["1 queue paused."]
    assert act(root, QUEUES, "resume_queues", ["reports"]) == ["1 queue resumed."]
    assert not QueueState.objects.get(name="reports").paused


def test_system_check_reports_periodic_without_cron_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schedule_checks, "cron_available", lambda: False)
    monkeypatch.setattr(
        schedule_checks,
        "declared",
        lambda: {"nightly": PeriodicSpec(name="nightly", task_name="t", cron="* * * * *")},
    )
    errors = [m for m in run_checks() if m.id == "arcature.E030"]
    assert len(errors) == 1
    assert "django-arcature[schedules]" in (errors[0].hint or "")
    monkeypatch.setattr(schedule_checks, "cron_available", lambda: True)
    assert not [m for m in run_checks() if m.id == "arcature.E030"]
