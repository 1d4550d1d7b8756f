"""``enqueue_many``'s fast insert (COPY on PostgreSQL, multi-row INSERT elsewhere), everywhere.

The bulk path writes rows without ``Model.save()`` or ``bulk_create``, so these
tests hold it to what the one-by-one path writes: the same stored columns
(read back raw, so JSON text is compared as the database holds it), the same
payloads through the ORM, the same transaction, the same validation and the
same wake-up for idle PostgreSQL workers.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, models, transaction

from django_arcature import MalformedPayload, job, signals
from django_arcature.models import Job, JobStatus
from tests.integration.api_jobs import add

pytestmark = pytest.mark.django_db


@job(name="bulk_tests.echo", queue="echoes", priority=4, max_attempts=7)
def echo(*args: Any, **kwargs: Any) -> None:
    """Takes any JSON, so payloads of every shape can be stored."""


#: Payload shapes whose storage differs most between databases and encoders.
PAYLOADS: list[tuple[list[Any], dict[str, Any]]] = [
    ([], {}),
    ([1, 2.5, -1.5e-7, True, False, None], {}),
    ([2**63 - 1, -(2**63), 2**53 + 1, 2**64 - 1], {"big": 2**63 + 5}),
    (["héllo wörld", "日本語", "emoji 🎉", 'quote " back\\slash', "tab\tnew\nline"], {}),
    ([{"nested": {"deeper": [1, {"deepest": [[], {}]}]}}], {"k": {"x": [None, "é"]}}),
    ([], {"percent": "100% %s %(name)s", "sql": "'; DROP TABLE x; --"}),
    (["\u2028 line separator \x7f"], {"ключ": "значение"}),
]

#: Columns that differ between any two jobs by design.
PER_JOB_COLUMNS = {"id", "created_at", "available_at"}


def stored(job_id: uuid.UUID, columns: list[str]) -> dict[str, Any]:
    """The row as the database returns it to a raw cursor (JSON columns as stored text)."""
    qn = connection.ops.quote_name
    pk = Job._meta.pk
    assert pk is not None
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(qn(c) for c in columns)} FROM {qn(Job._meta.db_table)} "
            f"WHERE {qn(pk.column or pk.attname)} = %s",
            [pk.get_db_prep_value(job_id, connection)],
        )
        row = cursor.fetchone()
    assert row is not None
    return dict(zip(columns, row, strict=True))


def all_columns() -> list[str]:
    return [field.column or field.attname for field in Job._meta.concrete_fields]


# --- the rows ------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "kwargs"), PAYLOADS)
def test_bulk_rows_are_the_rows_one_by_one_enqueue_writes(
    args: list[Any], kwargs: dict[str, Any]
) -> None:
    single = echo.enqueue(*args, **kwargs)
    many = echo.enqueue_many([(args, kwargs), (args, kwargs)])
    columns = [c for c in all_columns() if c not in PER_JOB_COLUMNS]
    expected = stored(single.id, columns)
    assert stored(many[0].id, columns) == expected
    assert stored(many[1].id, columns) == expected
    for job_id in (single.id, many[0].id, many[1].id):
        assert Job.objects.get(pk=job_id).payload == {"args": args, "kwargs": kwargs}


def test_bulk_rows_match_with_every_option_given() -> None:
    moment = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    options: dict[str, Any] = {
        "queue": "reports",
        "priority": -3,
        "run_at": moment,
        "max_attempts": 2,
    }
    single = Job.objects.enqueue("bulk_tests.echo", args=[1], kwargs={"a": "b"}, **options)
    (many,) = Job.objects.enqueue_many("bulk_tests.echo", [([1], {"a": "b"})], **options)
    columns = [c for c in all_columns() if c not in {"id", "created_at"}]
    assert stored(many.id, columns) == stored(single.id, columns)
    fresh = Job.objects.get(pk=many.id)
    assert (fresh.queue, fresh.priority, fresh.max_attempts, fresh.available_at) == (
        "reports",
        -3,
        2,
        moment,
    )
    assert (fresh.status, fresh.attempts, fresh.attempt_log, fresh.result) == (
        JobStatus.PENDING,
        0,
        [],
        None,
    )


def test_shared_values_with_quotes_and_percent_signs_are_stored_as_given() -> None:
    """MySQL/MariaDB get the values all rows share written into the statement once."""
    queue = "q 100% %s %(x)s 'single' \"double\" back\\slash; --"
    jobs = Job.objects.enqueue_many("bulk_tests.echo", [("%s",), ("%%",)], queue=queue)
    single = Job.objects.enqueue("bulk_tests.echo", args=["%s"], queue=queue)
    assert [Job.objects.get(pk=j.pk).queue for j in jobs] == [queue, queue]
    assert [Job.objects.get(pk=j.pk).args for j in jobs] == [["%s"], ["%%"]]
    columns = [c for c in all_columns() if c not in PER_JOB_COLUMNS]
    assert stored(jobs[0].id, columns) == stored(single.id, columns)


def test_a_delay_counts_from_each_rows_own_creation() -> None:
    jobs = add.using(delay=timedelta(minutes=10)).enqueue_many([(i,) for i in range(20)])
    for fresh in Job.objects.filter(pk__in=[j.pk for j in jobs]):
        assert fresh.available_at - fresh.created_at == timedelta(minutes=10)


def test_returned_jobs_line_up_with_the_input_and_are_the_stored_rows() -> None:
    jobs = add.enqueue_many([(i, i) for i in range(300)])
    assert len({j.id for j in jobs}) == 300
    assert all(isinstance(j.id, uuid.UUID) and j.id.version == 7 for j in jobs)
    assert [j.args for j in jobs] == [[i, i] for i in range(300)]
    by_id = {j.id: j for j in Job.objects.filter(pk__in=[j.pk for j in jobs])}
    for returned in jobs:
        fresh = by_id[returned.id]
        for field in Job._meta.concrete_fields:
            assert getattr(returned, field.attname) == getattr(fresh, field.attname), field.name
        assert returned._state.adding is False
        assert returned._state.db == "default"
    # Rows become available in the order given, so a worker takes them in that order.
    available = [j.available_at for j in jobs]
    assert available == sorted(available)
    # The returned objects are ordinary saved rows: they can be changed and saved.
    jobs[0].priority = 9
    jobs[0].save(update_fields=["priority"])
    assert Job.objects.get(pk=jobs[0].pk).priority == 9


def test_rows_do_not_share_mutable_values() -> None:
    first, second = add.enqueue_many([(1,), (1,)])
    assert first.attempt_log is not second.attempt_log
    assert first.payload is not second.payload
    first.attempt_log.append({"worker": "w"})
    assert second.attempt_log == []


def test_post_init_receivers_see_every_bulk_row() -> None:
    seen: list[Any] = []

    def receiver(sender: type[Job], instance: Job, **kwargs: Any) -> None:
        seen.append(instance)

    models.signals.post_init.connect(receiver, sender=Job)
    try:
        jobs = add.enqueue_many([(1,), (2,), (3,)])
    finally:
        models.signals.post_init.disconnect(receiver, sender=Job)
    assert all(any(s is j for s in seen) for j in jobs)
    assert [Job.objects.get(pk=j.pk).args for j in jobs] == [[1], [2], [3]]


def test_a_large_batch_is_stored_whole() -> None:
    count = 25_000
    jobs = add.enqueue_many([(i, count - i) for i in range(count)])
    assert len(jobs) == count
    assert Job.objects.filter(task_name="api.add", status=JobStatus.PENDING).count() == count
    assert len({j.id for j in jobs}) == count
    for index in (0, 1, count // 2, count - 1):
        assert Job.objects.get(pk=jobs[index].pk).payload == {
            "args": [index, count - index],
            "kwargs": {},
        }


# --- the caller's transaction ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_rollback_of_the_enclosing_block_leaves_no_bulk_job_and_no_event() -> None:
    received: list[Job] = []

    def receiver(sender: type[Job], job: Job, **kwargs: Any) -> None:
        received.append(job)

    class Abort(Exception):
        pass

    signals.job_enqueued.connect(receiver)
    try:

        def enqueue_then_fail() -> None:
            with transaction.atomic():
                add.enqueue_many([(i,) for i in range(500)])
                assert Job.objects.count() == 500  # visible inside the transaction
                raise Abort

        with pytest.raises(Abort):
            enqueue_then_fail()
        assert Job.objects.count() == 0
        assert received == []

        with transaction.atomic():
            jobs = add.enqueue_many([(i,) for i in range(500)])
            assert received == []  # not before the commit
        assert [j.pk for j in received] == [j.pk for j in jobs]
        assert Job.objects.count() == 500
    finally:
        signals.job_enqueued.disconnect(receiver)


@pytest.mark.django_db(transaction=True)
def test_a_bad_item_inserts_nothing_and_leaves_the_callers_transaction_usable() -> None:
    with transaction.atomic():
        kept = add.enqueue(0)
        with pytest.raises(MalformedPayload, match="argument 'a' is a set"):
            add.enqueue_many([(i,) for i in range(1000)] + [({1},)])
        with pytest.raises(MalformedPayload, match=r"cannot enqueue api\.add"):
            add.enqueue_many([(1,), ("x", "y", "z")])
        assert Job.objects.count() == 1
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]


def test_bad_options_insert_nothing() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        add.using(max_attempts=0).enqueue_many([(1,), (2,)])
    with pytest.raises(ValueError, match="either delay or run_at"):
        Job.objects.enqueue_many(add, [(1,)], delay=5, run_at=datetime(2030, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="batch_size"):
        Job.objects.enqueue_many(add, [(1,)], batch_size=0)
    assert Job.objects.count() == 0


def test_small_batches_store_every_row() -> None:
    jobs = Job.objects.enqueue_many(add, [(i,) for i in range(23)], batch_size=5)
    assert sorted(Job.objects.values_list("payload__args__0", flat=True)) == list(range(23))
    assert [j.args for j in jobs] == [[i] for i in range(23)]


def test_the_handle_takes_batch_size_too() -> None:
    # The guide tells MariaDB users to lower batch_size for large payloads; the handle
    # form (add.enqueue_many) refused the keyword while the manager form took it.
    jobs = add.using(queue="bulk").enqueue_many([(i,) for i in range(7)], batch_size=3)
    assert [j.args for j in jobs] == [[i] for i in range(7)]
    assert set(Job.objects.values_list("queue", flat=True)) == {"bulk"}
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        add.enqueue_many([(1,)], batch_size=0)


@pytest.mark.only_on("mysql", reason="batch_size sets rows per INSERT on MySQL/MariaDB only")
def test_the_handles_batch_size_sets_rows_per_insert_on_mysql() -> None:
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        add.enqueue_many([(i,) for i in range(7)], batch_size=3)
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 3  # 3 + 3 + 1 rows


# --- waking idle workers (PostgreSQL) ----------------------------------------------------


@pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY and its trigger exist there only")
@pytest.mark.django_db(transaction=True)
def test_a_bulk_enqueue_wakes_a_listener_once_committed() -> None:
    import psycopg

    from django_arcature.worker.wakeup import CHANNEL

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        with transaction.atomic():
            jobs = add.enqueue_many([(i,) for i in range(2000)])
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
        woken = list(listener.notifies(timeout=10, stop_after=1))
        assert [n.channel for n in woken] == [CHANNEL]
        # When it wakes, the rows are there for it to claim.
        row = listener.execute(
            f"SELECT COUNT(*) FROM {Job._meta.db_table} WHERE status = 'pending'"
        ).fetchone()
        assert row == (len(jobs),)


@pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY and its trigger exist there only")
@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_bulk_enqueue_wakes_nobody() -> None:
    import psycopg

    from django_arcature.worker.wakeup import CHANNEL

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")

        def enqueue_then_fail() -> None:
            with transaction.atomic():
                add.enqueue_many([(i,) for i in range(100)])
                raise RuntimeError("roll back")

        with pytest.raises(RuntimeError):
            enqueue_then_fail()
        assert list(listener.notifies(timeout=0.5, stop_after=1)) == []
