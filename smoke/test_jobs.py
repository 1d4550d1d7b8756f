"""Enqueue in a transaction, run a real worker process, see the effect."""

from __future__ import annotations

from typing import Any

from django.db import transaction


def test_a_job_enqueued_with_its_data_runs_in_a_worker(run_worker: Any) -> None:
    from smoke_app.jobs import greet, refuse
    from smoke_app.models import Greeting

    from django_arcature.models import Job

    with transaction.atomic():
        ok = greet.enqueue("wheel")
        dead = refuse.enqueue("no such user")
    run_worker()
    ok.refresh_from_db()
    dead.refresh_from_db()
    assert ok.status == "succeeded"
    assert ok.result == "WHEEL"
    assert Greeting.objects.filter(text="hello wheel").exists()
    assert dead.status == "dead"
    assert dead.error_kind == "permanent"
    assert "no such user" in dead.last_error
    assert Job.objects.filter(status__in=["pending", "running"]).count() == 0


def test_a_django_task_runs_through_the_backend(run_worker: Any) -> None:
    from smoke_app.models import Greeting
    from smoke_app.tasks import shout

    result = shout.enqueue(("from", "the", "wheel"))
    run_worker()
    result.refresh()
    assert result.status.name == "SUCCESSFUL"
    assert result.return_value == "FROM THE WHEEL"
    assert Greeting.objects.filter(text="FROM THE WHEEL").exists()
