"""Enqueueing through ``@job`` handles and ``Job.objects.enqueue``, on every database.

Validation happens at enqueue (nothing is written when it fails), the job rides
the caller's transaction, and what the worker path does with a payload that
slipped past validation (written by hand, or by an older deploy) is tested too.
"""

from __future__ import annotations

import enum
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections, transaction
from django.utils import timezone

from django_arcature import MalformedPayload, UnknownTask, signals
from django_arcature.models import Job, JobStatus
from django_arcature.testing import run_job
from django_arcature.worker.dispatch import process
from tests.integration import api_jobs
from tests.integration.api_jobs import add, fetch, greet, schedule, typed, when

pytestmark = pytest.mark.django_db


# --- the caller's transaction -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_rollback_of_the_enclosing_block_leaves_no_job() -> None:
    class Abort(Exception):
        pass

    def signup_that_fails() -> None:
        with transaction.atomic():
            User.objects.create(username="ada")
            add.enqueue(1, 2)
            assert Job.objects.count() == 1  # visible inside the transaction
            raise Abort

    with pytest.raises(Abort):
        signup_that_fails()

    assert Job.objects.count() == 0
    assert not User.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_commit_makes_the_job_claimable_by_another_connection() -> None:
    seen_before: list[bool] = []
    claimed_after: list[Any] = []

    def in_another_thread(work: Any) -> None:
        try:
            work()
        finally:
            connections.close_all()

    with transaction.atomic():
        job = add.enqueue(1, 2)
        # A read, not a claim: on SQLite a second writer would wait for our lock.
        thread = threading.Thread(
            target=in_another_thread,
            args=(lambda: seen_before.append(Job.objects.filter(pk=job.pk).exists()),),
        )
        thread.start()
        thread.join()
    assert seen_before == [False]  # uncommitted: no other connection sees it

    thread = threading.Thread(
        target=in_another_thread,
        args=(lambda: claimed_after.extend(Job.objects.claim("other", lease=30, batch=10)),),
    )
    thread.start()
    thread.join()
    assert [c.id for c in claimed_after] == [job.pk]
    assert claimed_after[0].payload == {"args": [1, 2], "kwargs": {}}


@pytest.mark.django_db(transaction=True)
def test_job_enqueued_is_sent_on_commit_only() -> None:
    received: list[Job] = []

    def receiver(sender: type[Job], job: Job, **kwargs: Any) -> None:
        received.append(job)

    signals.job_enqueued.connect(receiver)
    try:

        def enqueue_then_fail() -> None:
            with transaction.atomic():
                add.enqueue(1)
                raise RuntimeError("roll back")

        with pytest.raises(RuntimeError):
            enqueue_then_fail()
        assert received == []
        with transaction.atomic():
            job = add.enqueue(2)
            assert received == []
        assert [j.pk for j in received] == [job.pk]
    finally:
        signals.job_enqueued.disconnect(receiver)


# --- what a row holds --------------------------------------------------------------


def test_handle_enqueue_stores_the_call_and_the_job_defaults() -> None:
    job = greet.enqueue("Ada", greeting="Hi")
    job.refresh_from_db()
    assert job.task_name == "api.greet"
    assert job.payload == {"args": ["Ada"], "kwargs": {"greeting": "Hi"}}
    assert (job.queue, job.priority, job.max_attempts) == ("mail", 3, 5)
    assert job.status == JobStatus.PENDING
    assert job.attempts == 0
    assert job.unique_key is None


def test_handle_still_calls_the_function() -> None:
    assert add(2, 3) == 5
    assert greet("Ada") == "Hello, Ada!"
    assert Job.objects.count() == 0


def test_manager_enqueue_takes_a_registered_name_or_a_handle() -> None:
    by_name = Job.objects.enqueue("api.add", args=[1], kwargs={"b": 2}, priority=7)
    by_handle = Job.objects.enqueue(add, args=[3, 4], queue="bulk")
    assert by_name.task_name == by_handle.task_name == "api.add"
    assert (by_name.priority, by_name.queue) == (7, "default")
    assert (by_handle.priority, by_handle.queue) == (0, "bulk")


def test_options_never_collide_with_the_functions_own_keywords() -> None:
    job = schedule.using(delay=0, queue="slow", priority=9).enqueue(delay=60, queue="fast")
    job.refresh_from_db()
    assert job.queue == "slow"
    assert job.priority == 9
    assert job.payload == {"args": [], "kwargs": {"delay": 60, "queue": "fast"}}
    assert run_job(job).result == {"delay": 60, "queue": "fast", "priority": 0}


def test_using_returns_a_copy_and_leaves_the_handle_alone() -> None:
    urgent = greet.using(priority=100, queue="urgent")
    urgent.enqueue("Ada")
    plain = greet.enqueue("Bob")
    assert Job.objects.get(pk=plain.pk).priority == 3
    assert Job.objects.filter(priority=100, queue="urgent").count() == 1


def test_delay_and_run_at_schedule_the_job() -> None:
    before = timezone.now()
    delayed = add.using(delay=3600).enqueue(1)
    at = timezone.now() + timedelta(days=2)
    scheduled = add.using(run_at=at).enqueue(2)
    also_delayed = add.using(delay=timedelta(minutes=5)).enqueue(3)
    now_job = add.enqueue(4)

    assert delayed.available_at >= before + timedelta(seconds=3600)
    assert Job.objects.get(pk=scheduled.pk).available_at == at
    assert also_delayed.available_at >= before + timedelta(minutes=5)
    claimed = Job.objects.claim("w", lease=30, batch=10)
    assert [c.id for c in claimed] == [now_job.pk]


def test_later_using_replaces_delay_with_run_at() -> None:
    at = timezone.now() + timedelta(hours=1)
    job = add.using(delay=60).using(run_at=at).enqueue(1)
    assert job.available_at == at


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"delay": 1, "run_at": datetime(2030, 1, 1, tzinfo=UTC)}, "either delay or run_at"),
        ({"run_at": datetime(2030, 1, 1)}, "timezone-aware"),
        ({"delay": -5}, "delay must be from 0"),
        ({"max_attempts": 0}, "max_attempts must be a whole number, at least 1"),
        ({"unique_key": "k" * 256}, "unique_key must be a string of 1 to 255"),
        ({"queue": "q" * 101}, "queue must be a name of 1 to 100"),
    ],
)
def test_bad_options_are_refused_before_anything_is_written(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        Job.objects.enqueue(add, args=[1], **options)
    assert Job.objects.count() == 0


def test_enqueue_of_an_unknown_name_names_the_nearest_registered_ones() -> None:
    with pytest.raises(UnknownTask) as info:
        Job.objects.enqueue("api.ad", args=[1])
    message = str(info.value)
    assert "No job handler is registered under 'api.ad'" in message
    assert "Did you mean 'api.add'" in message
    assert Job.objects.count() == 0


def test_enqueue_of_a_bare_function_name_suggests_the_full_name() -> None:
    with pytest.raises(UnknownTask, match=r"Did you mean 'api\.greet'"):
        Job.objects.enqueue("greet", args=["Ada"])


def test_enqueue_refuses_something_that_is_not_a_job() -> None:
    with pytest.raises(TypeError, match="a @job handle or the name of a registered job"):
        Job.objects.enqueue(print, args=[1])


# --- each validation failure, and what it tells the caller to do ----------------------------


class Colour(enum.Enum):
    RED = "red"


@dataclass
class Point:
    x: int
    y: int


def _user() -> User:
    return User.objects.create(username="ada")


# (value passed as the only argument of api.when, what the message must say)
NOT_JSON: list[tuple[str, Any, str]] = [
    (
        "datetime",
        lambda: datetime(2030, 1, 2, 3, 4, tzinfo=UTC),
        "argument 'moment' is a datetime (datetime.datetime(2030, 1, 2, 3, 4, "
        "tzinfo=datetime.timezone.utc)), which JSON cannot carry unchanged: pass "
        "moment.isoformat() instead and parse it with datetime.fromisoformat().",
    ),
    ("date", lambda: date(2030, 1, 2), "pass moment.isoformat() instead"),
    (
        "model instance",
        _user,
        "argument 'moment' is a User instance (<User: ada>), which JSON cannot carry "
        "unchanged: pass its primary key (user.pk) instead and load the User in the job",
    ),
    (
        "queryset",
        lambda: User.objects.all(),
        "pass a list of primary keys instead: list(moment.values_list('pk', flat=True))",
    ),
    ("set", lambda: {"b", "a"}, "is a set ({"),
    ("set hint", lambda: {"b", "a"}, "pass a list instead, e.g. sorted(moment)"),
    ("frozenset", lambda: frozenset({1}), "pass a list instead, e.g. sorted(moment)"),
    ("tuple", lambda: (1, 2), "pass a list instead: list(moment)"),
    ("timedelta", lambda: timedelta(minutes=1), "pass moment.total_seconds() instead"),
    ("Decimal", lambda: Decimal("9.99"), "pass str(moment) instead and rebuild it with Decimal"),
    ("UUID", lambda: uuid.UUID(int=1), "pass str(moment) instead"),
    ("Path", lambda: Path("/tmp/x"), "pass str(moment) instead"),
    ("enum", lambda: Colour.RED, "pass moment.value instead"),
    ("bytes", lambda: b"\x00", "pass a str instead (decode text, or base64-encode binary data)"),
    ("NaN", lambda: float("nan"), "pass a finite number (JSON has no NaN or Infinity)"),
    ("infinity", lambda: float("inf"), "pass a finite number"),
    ("huge int", lambda: 2**80, "integers beyond 64 bits do not survive every database"),
    ("dataclass", lambda: Point(1, 2), "pass dataclasses.asdict(moment) instead"),
    ("function", lambda: print, "pass data, not code"),
    ("generator", lambda: (i for i in range(3)), "pass a list instead: list(moment)"),
    ("object", lambda: object(), "pass only JSON types"),
    (
        "nested datetime",
        lambda: {"start": [date(2030, 1, 1)]},
        "argument moment['start'][0] is a date",
    ),
    (
        "int dict key",
        lambda: {1: "one"},
        "argument 'moment' has the key 1 (int), but JSON object keys are strings and it "
        "would come back as '1': use str keys",
    ),
]


@pytest.mark.parametrize(
    ("value", "expected"), [(v, m) for _, v, m in NOT_JSON], ids=[n for n, _, _ in NOT_JSON]
)
def test_a_value_json_cannot_carry_is_refused_with_what_to_pass_instead(
    value: Any, expected: str
) -> None:
    argument = value()
    before = Job.objects.count()
    with pytest.raises(MalformedPayload) as info:
        when.enqueue(argument)
    message = str(info.value)
    assert message.startswith("cannot enqueue api.when: ")
    assert expected in message
    assert Job.objects.count() == before


def test_a_list_that_contains_itself_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(MalformedPayload, match="nested more than 20 levels deep"):
        when.enqueue(loop)  # type: ignore[arg-type]


def test_a_value_json_cannot_carry_is_refused_by_the_manager_too() -> None:
    with pytest.raises(MalformedPayload, match=r"argument 'a' is a datetime"):
        Job.objects.enqueue("api.add", args=[timezone.now()])


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((), {}, "the arguments do not fit add(a: int, b: int = 0): missing a required "),
        ((1, 2, 3), {}, "too many positional arguments"),
        ((1,), {"c": 3}, "got an unexpected keyword argument 'c'"),
        (("1",), {}, "argument 'a' of add must be int, got str '1'"),
        ((True,), {}, "argument 'a' of add must be int, got bool True"),
    ],
)
def test_arguments_that_do_not_fit_the_signature_are_refused(
    args: tuple[Any, ...], kwargs: dict[str, Any], expected: str
) -> None:
    with pytest.raises(MalformedPayload) as info:
        Job.objects.enqueue(add, args=args, kwargs=kwargs)
    assert expected in str(info.value)
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"ratio": "x"}, "argument 'ratio' of typed must be float, got str 'x'"),
        ({"label": 3}, "argument 'label' of typed must be str | None, got int 3"),
        ({"flags": [True, "no"]}, "argument 'flags' of typed must be list[bool]"),
        ({"scores": {"a": 1.5}}, "argument 'scores' of typed must be dict[str, int]"),
        ({"enabled": 1}, "argument 'enabled' of typed must be bool, got int 1"),
        ({"count": None}, "argument 'count' of typed must be int, got NoneType None"),
    ],
)
def test_simple_annotations_are_checked(kwargs: dict[str, Any], expected: str) -> None:
    good: dict[str, Any] = {
        "count": 1,
        "ratio": 2,  # an int is a fine float: JSON does not keep 2.0 apart from 2
        "label": None,
        "flags": [True],
        "scores": {"a": 1},
    }
    typed.enqueue(**good)  # fits
    with pytest.raises(MalformedPayload) as info:
        typed.enqueue(**{**good, **kwargs})
    assert expected in str(info.value)
    assert Job.objects.count() == 1


def test_the_backend_path_checks_json_only() -> None:
    """Rows for django.tasks are validated by the backend; JSON is still enforced here."""
    job = Job.objects.enqueue("some.module.task", args=[1], backend="default")
    assert job.task_name == "some.module.task"
    with pytest.raises(MalformedPayload, match=r"cannot enqueue some\.module\.task: args"):
        Job.objects.enqueue("some.module.task", args=[{1, 2}], backend="default")


# --- enqueue_many ----------------------------------------------------------------------


def test_enqueue_many_inserts_one_job_per_item_in_order() -> None:
    jobs = add.enqueue_many([(1, 2), {"a": 3}, ([4], {"b": 5}), [6], 7])
    assert [Job.objects.get(pk=j.pk).payload for j in jobs] == [
        {"args": [1, 2], "kwargs": {}},
        {"args": [], "kwargs": {"a": 3}},
        {"args": [4], "kwargs": {"b": 5}},
        {"args": [6], "kwargs": {}},
        {"args": [7], "kwargs": {}},
    ]
    assert Job.objects.count() == 5


def test_enqueue_many_with_options_and_batches() -> None:
    jobs = Job.objects.enqueue_many(
        "api.add", [(i,) for i in range(25)], queue="bulk", priority=2, batch_size=10
    )
    assert len(jobs) == 25
    assert Job.objects.filter(queue="bulk", priority=2, status=JobStatus.PENDING).count() == 25
    delayed = add.using(delay=600).enqueue_many([(1,), (2,)])
    assert all(j.available_at > timezone.now() + timedelta(seconds=500) for j in delayed)


def test_enqueue_many_inserts_nothing_when_one_item_is_bad() -> None:
    with pytest.raises(MalformedPayload, match="argument 'a' is a set"):
        add.enqueue_many([(1,), (2,), ({3},)])
    assert Job.objects.count() == 0


def test_enqueue_many_of_nothing_inserts_nothing() -> None:
    assert add.enqueue_many([]) == []


def test_enqueue_many_refuses_one_unique_key_for_many_jobs() -> None:
    with pytest.raises(ValueError, match="enqueue_many inserts many"):
        add.using(unique_key="k").enqueue_many([(1,), (2,)])


# --- results, async handlers, poison payloads ----------------------------------------------


def test_a_handlers_json_return_value_is_stored() -> None:
    job = run_job(greet.enqueue("Ada"))
    assert job.status == JobStatus.SUCCEEDED
    assert job.result == "Hello, Ada!"
    assert job.finished_at is not None
    assert job.claim_token is None


def test_a_return_value_json_cannot_carry_is_a_clear_error_on_the_job() -> None:
    job = run_job(api_jobs.returns_set.enqueue())
    assert job.status == JobStatus.DEAD
    assert job.error_kind == "permanent"
    assert "api.returns_set returned a value that cannot be stored" in job.last_error
    assert "is a set" in job.last_error
    assert job.result is None


def test_an_async_handler_runs_and_its_result_is_stored() -> None:
    job = run_job(fetch.enqueue("https://example.com/feed"))
    assert job.status == JobStatus.SUCCEEDED
    assert job.result == {"url": "https://example.com/feed", "status": 200}


def test_a_dated_argument_passed_as_iso_text_round_trips() -> None:
    moment = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    job = run_job(when.enqueue(moment.isoformat()))
    assert job.result == moment.isoformat()


def _write_directly(task_name: str, payload: Any) -> Job:
    """A row as an older deploy, a migration or a hand-written INSERT could leave it."""
    row = Job(
        task_name=task_name,
        payload=payload,
        available_at=timezone.now(),
        created_at=timezone.now(),
    )
    row.save(force_insert=True)
    return row


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"args": ["two", 3], "kwargs": {}}, "argument 'a' of add must be int, got str 'two'"),
        ({"args": [1], "kwargs": {"c": 1}}, "got an unexpected keyword argument 'c'"),
        ({"args": [], "kwargs": {}}, "missing a required argument: 'a'"),
        ({"args": {"a": 1}}, "payload['args'] is a dict, not a list"),
        ({"arguments": [1]}, "the payload has unexpected keys: ['arguments']"),
        ([1, 2], "the payload is a list, not an object with args and kwargs"),
    ],
)
def test_a_malformed_payload_written_to_the_table_ends_dead_malformed(
    payload: Any, reason: str
) -> None:
    poison = _write_directly("api.add", payload)
    job = run_job(poison)
    assert job.status == JobStatus.DEAD
    assert job.error_kind == "malformed"
    assert job.attempts == 1  # one look, no retry
    assert job.last_error.startswith("payload does not fit the handler: ")
    assert reason in job.last_error


def test_a_malformed_payload_dies_through_the_workers_claim_too() -> None:
    """The worker's own path: batch claim → dispatch.process → fenced complete_many."""
    poison = _write_directly("api.add", {"args": ["two", 3], "kwargs": {}})
    good = add.enqueue(1, 2)
    claimed = Job.objects.claim("worker-1", lease=30, batch=10)
    assert {c.id for c in claimed} == {poison.pk, good.pk}
    Job.objects.complete_many([process(c, worker_id="worker-1") for c in claimed])
    poison.refresh_from_db()
    good.refresh_from_db()
    assert (poison.status, poison.error_kind) == (JobStatus.DEAD, "malformed")
    assert "argument 'a' of add must be int, got str 'two'" in poison.last_error
    assert (good.status, good.result) == (JobStatus.SUCCEEDED, 3)


def test_an_unknown_task_name_in_the_table_ends_dead_unknown() -> None:
    job = run_job(_write_directly("api.removed_last_year", {"args": [], "kwargs": {}}))
    assert (job.status, job.error_kind) == (JobStatus.DEAD, "unknown")
    assert "api.removed_last_year" in job.last_error


@pytest.mark.parametrize(
    "payload",
    [
        "just text",
        "[1, 2]",
        7,
    ],
)
def test_a_payload_that_is_a_bare_json_scalar_dies_malformed_through_the_claim(
    payload: Any,
) -> None:
    poison = _write_directly("api.add", payload)
    claimed = Job.objects.claim("worker-1", lease=30, batch=10)
    assert [c.payload for c in claimed] == [payload]
    Job.objects.complete_many([process(c, worker_id="worker-1") for c in claimed])
    poison.refresh_from_db()
    assert (poison.status, poison.error_kind) == (JobStatus.DEAD, "malformed")
    assert f"the payload is a {type(payload).__name__}, not an object" in poison.last_error
