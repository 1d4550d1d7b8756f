"""One-by-one enqueue writes its row with one statement of its own, on every database.

The single-row INSERT bypasses the ORM's general INSERT compiler (most of an
enqueue's Python time), so these tests pin what it must keep: one round trip
that stamps the database's clock and returns it, the same row the ORM would
write, the ORM's own path (and its ``pre_save``/``post_save`` signals) while
anyone listens to them, and settings that are read afresh when they change.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models.signals import post_save, pre_save
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_arcature import signals
from django_arcature.conf import get_settings
from django_arcature.hints import hint_directory
from django_arcature.models import Job
from tests.integration.api_jobs import add
from tests.testapp.jobs import noop

pytestmark = pytest.mark.django_db

#: Columns whose value differs between any two enqueues.
_PER_JOB = {"id", "available_at", "created_at"}


def _stored(job: Job) -> dict[str, Any]:
    return dict(Job.objects.filter(pk=job.pk).values().get())


def test_one_enqueue_is_one_statement_that_returns_the_database_clock() -> None:
    with CaptureQueriesContext(connection) as queries:
        job = noop.enqueue()
    assert len(queries) == 1, [q["sql"] for q in queries]
    assert "RETURNING" in queries[0]["sql"].upper()
    stored = _stored(job)
    assert isinstance(job.available_at, datetime)
    assert job.available_at.tzinfo is not None
    assert job.available_at == stored["available_at"]
    assert job.created_at == stored["created_at"]
    assert not job._state.adding
    assert job._state.db == "default"


def test_a_delay_is_added_on_the_database_clock() -> None:
    job = noop.using(delay=90).enqueue()
    stored = _stored(job)
    assert job.available_at == stored["available_at"]
    assert 89 <= (job.available_at - job.created_at).total_seconds() <= 91


def test_the_row_is_the_one_the_orm_writes_and_listeners_get_the_orms_path() -> None:
    fast = add.using(queue="q1", priority=3, max_attempts=5).enqueue(2, b=3)
    seen: list[tuple[str, Job]] = []

    def on_pre_save(sender: type[Job], instance: Job, **kwargs: Any) -> None:
        seen.append(("pre", instance))

    def on_post_save(sender: type[Job], instance: Job, created: bool, **kwargs: Any) -> None:
        seen.append(("post" if created else "post-update", instance))

    pre_save.connect(on_pre_save, sender=Job)
    post_save.connect(on_post_save, sender=Job)
    try:
        through_orm = add.using(queue="q1", priority=3, max_attempts=5).enqueue(2, b=3)
    finally:
        pre_save.disconnect(on_pre_save, sender=Job)
        post_save.disconnect(on_post_save, sender=Job)
    assert [kind for kind, _ in seen] == ["pre", "post"]
    assert all(instance is through_orm for _, instance in seen)
    fast_row, orm_row = _stored(fast), _stored(through_orm)
    assert {k: v for k, v in fast_row.items() if k not in _PER_JOB} == {
        k: v for k, v in orm_row.items() if k not in _PER_JOB
    }
    for job, row in ((fast, fast_row), (through_orm, orm_row)):
        assert {name: getattr(job, name) for name in row} == row


def test_a_unique_enqueue_through_the_fast_path_returns_the_holder() -> None:
    first = noop.using(unique_key="fast-path-key").enqueue()
    second = noop.using(unique_key="fast-path-key").enqueue()
    assert second.pk == first.pk
    assert Job.objects.filter(unique_key="fast-path-key").count() == 1
    assert first.available_at == _stored(first)["available_at"]


@pytest.mark.django_db(transaction=True)
def test_job_enqueued_is_sent_once_per_committed_enqueue() -> None:
    received: list[Job] = []

    def on_enqueued(sender: type[Job], job: Job, **kwargs: Any) -> None:
        received.append(job)

    signals.job_enqueued.connect(on_enqueued)
    try:
        jobs = [noop.enqueue() for _ in range(3)]
    finally:
        signals.job_enqueued.disconnect(on_enqueued)
    assert [job.pk for job in received] == [job.pk for job in jobs]


# --- settings read once, read again when they change --------------------------------


def test_settings_changed_in_place_are_read_again() -> None:
    with override_settings(ARCATURE={"MAX_ATTEMPTS": 4}):
        assert get_settings().max_attempts == 4
        settings.ARCATURE["MAX_ATTEMPTS"] = 6
        assert get_settings().max_attempts == 6
        assert noop.enqueue().max_attempts == 6
    assert get_settings().max_attempts == 3


def test_an_invalid_setting_raises_every_time() -> None:
    with override_settings(ARCATURE={"MAX_ATTEMPTS": 0}):
        for _ in range(2):
            with pytest.raises(ImproperlyConfigured, match="MAX_ATTEMPTS"):
                get_settings()


def test_the_hint_folder_follows_its_setting() -> None:
    with override_settings(ARCATURE={"WAKE_HINT_DIR": "/tmp/arcature-hints-a"}):
        first = hint_directory("default")
    with override_settings(ARCATURE={"WAKE_HINT_DIR": "/tmp/arcature-hints-b"}):
        second = hint_directory("default")
    assert str(first).startswith("/tmp/arcature-hints-a/")
    assert str(second).startswith("/tmp/arcature-hints-b/")
    assert first.name == second.name
