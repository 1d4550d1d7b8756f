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


# --- the connection's own binding mode ------------------------------------------------


@pytest.mark.only_on("postgresql")
@pytest.mark.pgbouncer(False, reason="prepared statements live in one server session")
@pytest.mark.django_db(transaction=True)
def test_a_server_side_binding_connection_prepares_the_insert_and_writes_the_same_row() -> None:
    """With Django's ``server_side_binding`` and a ``prepare_threshold`` (settings a
    project chooses knowingly: no transaction pooling), the enqueue's INSERT goes
    through that connection's cursor and psycopg prepares it; the rows are the ones
    a default (client-side binding) connection writes."""
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    connection.close()
    options.update(server_side_binding=True, prepare_threshold=2)
    try:
        bound = [add.using(queue="q1", priority=3).enqueue(2, b=3) for _ in range(4)]
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
            prepared = [statement for (statement,) in cursor.fetchall()]
    finally:
        connection.close()
        options.clear()
        options.update(saved)
    assert any(s.startswith(f'INSERT INTO "{Job._meta.db_table}"') for s in prepared), prepared
    inlined = add.using(queue="q1", priority=3).enqueue(2, b=3)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (0,)  # Django's default: nothing prepared
    expected = {k: v for k, v in _stored(inlined).items() if k not in _PER_JOB}
    for job in bound:
        row = _stored(job)
        assert {k: v for k, v in row.items() if k not in _PER_JOB} == expected
        assert {name: getattr(job, name) for name in row} == row


@pytest.mark.only_on("postgresql")
@pytest.mark.pgbouncer(False, reason="prepared statements live in one server session")
@pytest.mark.django_db(transaction=True)
def test_a_prepare_threshold_alone_prepares_the_insert_and_wrappers_still_see_it() -> None:
    """``prepare_threshold`` without ``server_side_binding``: Django keeps binding on the
    client (nothing of the project's is prepared), while the enqueue's INSERT goes
    through a server-binding cursor of the same connection that psycopg prepares. An
    execute wrapper still sees that INSERT with its parameters; an enqueue that loses a
    held unique key still returns the holder (the server's error arrives as Django's
    IntegrityError); the rows are the ones a default connection writes."""
    from django.db import transaction

    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    seen: list[tuple[str, Any]] = []

    def spy(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql, params))
        return execute(sql, params, many, context)

    connection.close()
    options.update(prepare_threshold=1)
    try:
        with connection.execute_wrapper(spy):
            bound = [add.using(queue="q1", priority=3).enqueue(2, b=3) for _ in range(3)]
            with transaction.atomic():
                bound.append(add.using(queue="q1", priority=3).enqueue(2, b=3))
            for _ in range(3):  # the project's own statement, run as often
                Job.objects.filter(queue="q1").count()
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
            prepared = [statement for (statement,) in cursor.fetchall()]
        # A server error on that cursor is Django's (wrapped): the losing enqueue of a
        # held key catches IntegrityError under its savepoint and gets the holder. (The
        # savepoint's rollback makes psycopg deallocate what it prepared: it re-prepares.)
        with transaction.atomic():
            holder = noop.using(unique_key="taken").enqueue()
            for _ in range(3):
                assert noop.using(unique_key="taken").enqueue().pk == holder.pk
            assert Job.objects.filter(unique_key="taken").count() == 1  # still usable
    finally:
        connection.close()
        options.clear()
        options.update(saved)
    table = f'INSERT INTO "{Job._meta.db_table}"'
    assert [s for s in prepared if s.startswith(table)], prepared
    assert not [s for s in prepared if not s.startswith(table)], prepared  # client-bound
    inserts = [(sql, params) for sql, params in seen if sql.startswith(table)]
    assert len(inserts) == len(bound) == 4
    assert all("%s" in sql for sql, _ in inserts)  # the wrapper sees placeholders ...
    for job, (_, params) in zip(bound, inserts, strict=True):
        assert str(job.pk) in map(str, params)  # ... and each enqueue's own parameters
    inlined = add.using(queue="q1", priority=3).enqueue(2, b=3)
    expected = {k: v for k, v in _stored(inlined).items() if k not in _PER_JOB}
    for job in bound:
        row = _stored(job)
        assert {k: v for k, v in row.items() if k not in _PER_JOB} == expected
        assert {name: getattr(job, name) for name in row} == row


# --- statements kept between calls ----------------------------------------------------


def test_kept_statements_never_mix_the_values_of_different_enqueues() -> None:
    """The INSERT is worked out once per row shape and kept: every option that
    differs between two calls must still land in its own row."""
    from datetime import timedelta

    from django.utils import timezone

    at = timezone.now() + timedelta(hours=2)
    calls: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({}, {"queue": "default", "priority": 0, "unique_key": None}),
        ({"queue": "a"}, {"queue": "a", "priority": 0}),
        ({"queue": "b"}, {"queue": "b", "priority": 0}),
        ({"queue": "a", "priority": 7}, {"queue": "a", "priority": 7}),
        ({"max_attempts": 9}, {"max_attempts": 9, "queue": "default"}),
        ({"unique_key": "k1"}, {"unique_key": "k1"}),
        ({"unique_key": "k2"}, {"unique_key": "k2"}),
        ({}, {"unique_key": None, "max_attempts": 3}),
        ({"run_at": at}, {"available_at": at}),
        ({"delay": 30}, {}),
        ({"delay": 60}, {}),
    ]
    for _ in range(2):  # the second time round, every statement is a kept one
        Job.objects.all().delete()
        for options, expected in calls:
            job = noop.using(**options).enqueue()
            stored = _stored(job)
            assert {name: stored[name] for name in expected} == expected, options
            assert {name: getattr(job, name) for name in stored} == stored
            if "delay" in options:
                offset = (stored["available_at"] - stored["created_at"]).total_seconds()
                assert abs(offset - options["delay"]) < 1, (options, offset)
    assert [job.payload for job in (add.enqueue(1, b=2), add.enqueue(5))] == [
        {"args": [1], "kwargs": {"b": 2}},
        {"args": [5], "kwargs": {}},
    ]


def test_a_post_init_receiver_that_changes_a_row_is_honoured_after_statements_were_kept() -> None:
    from django.db.models.signals import post_init

    noop.using(queue="init-q").enqueue()  # the statement for this shape is kept

    def relabel(sender: type[Job], instance: Job, **kwargs: Any) -> None:
        if instance._state.adding and instance.queue == "init-q":
            instance.queue = "relabelled"

    post_init.connect(relabel, sender=Job)
    try:
        job = noop.using(queue="init-q").enqueue()
    finally:
        post_init.disconnect(relabel, sender=Job)
    assert _stored(job)["queue"] == "relabelled"
    assert _stored(noop.using(queue="init-q").enqueue())["queue"] == "init-q"


@pytest.mark.parametrize(
    "queue",
    ["plain-queue.v2", "it's", "back\\slash", "50%", "per%%cent%s", "ünïcode", "a b", "x" * 100],
)
def test_any_queue_name_is_stored_as_given_by_kept_statements(queue: str) -> None:
    """Plain names may be written into the kept SQL as literals; every other name
    travels as a parameter, so quotes, backslashes and percent signs arrive intact."""
    first, second = noop.using(queue=queue).enqueue(), noop.using(queue=queue).enqueue()
    assert [_stored(job)["queue"] for job in (first, second)] == [queue, queue]
    assert first.queue == second.queue == queue
