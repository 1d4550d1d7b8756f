"""Limits on options, names and settings, the same on every database (issue 10, defect 9).

Before: ``priority=2**31`` was stored by SQLite and refused by PostgreSQL and
MariaDB (after aborting the caller's transaction); MariaDB's case-insensitive
collation made a worker for ``email`` also take ``Email`` jobs and made the
unique keys ``Order-1`` and ``order-1`` one key; two long task names sharing
their first 180 characters shared their unique keys.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import Count

from django_arcature import job, registry
from django_arcature.conf import validate as validate_settings
from django_arcature.models import Job
from tests.testapp.jobs import echo, noop

pytestmark = pytest.mark.django_db

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


def refused_cleanly(call: Any, *exceptions: type[BaseException]) -> BaseException:
    """Run ``call`` inside a transaction that must stay usable after it raises."""
    with transaction.atomic():
        before = Job.objects.count()
        with pytest.raises(exceptions or (ValueError, TypeError)) as caught:
            call()
        assert Job.objects.count() == before
    return caught.value


# --- priority and max_attempts fit a 32-bit column everywhere ------------------------------


@pytest.mark.parametrize("priority", [INT32_MIN, -1, 0, 100, INT32_MAX])
def test_priorities_a_32_bit_column_holds_are_stored(priority: int) -> None:
    job_ = noop.using(priority=priority).enqueue()
    assert Job.objects.values_list("priority", flat=True).get(pk=job_.pk) == priority


@pytest.mark.parametrize("priority", [INT32_MIN - 1, INT32_MAX + 1, 2**63, -(2**70)])
def test_priorities_beyond_32_bits_are_refused_on_every_path(priority: int) -> None:
    error = refused_cleanly(lambda: noop.using(priority=priority).enqueue(), ValueError)
    assert "priority" in str(error)
    refused_cleanly(lambda: Job.objects.enqueue("tests.noop", priority=priority), ValueError)
    refused_cleanly(
        lambda: Job.objects.enqueue_many("tests.noop", [[]], priority=priority), ValueError
    )
    with pytest.raises(ImproperlyConfigured, match="priority"):
        job(name="tests.too_high", priority=priority)(lambda: None)


@pytest.mark.parametrize("attempts", [1, 1000, INT32_MAX])
def test_max_attempts_a_32_bit_column_holds_are_stored(attempts: int) -> None:
    job_ = noop.using(max_attempts=attempts).enqueue()
    assert Job.objects.values_list("max_attempts", flat=True).get(pk=job_.pk) == attempts


@pytest.mark.parametrize("attempts", [INT32_MAX + 1, 2**63])
def test_max_attempts_beyond_32_bits_are_refused_on_every_path(attempts: int) -> None:
    error = refused_cleanly(lambda: noop.using(max_attempts=attempts).enqueue(), ValueError)
    assert "max_attempts" in str(error)
    refused_cleanly(
        lambda: Job.objects.enqueue_many("tests.noop", [[]], max_attempts=attempts), ValueError
    )
    with pytest.raises(ImproperlyConfigured, match="max_attempts"):
        job(name="tests.too_many", max_attempts=attempts)(lambda: None)


# --- queue names -------------------------------------------------------------------------

BAD_QUEUES = [
    "",
    "q" * 101,
    "nul\x00",
    "\ud800",
    " email",
    "email ",
    "tab\tbed",
    "line\nbreak",
    "zero\u200bwidth",
]


@pytest.mark.parametrize("queue", BAD_QUEUES)
def test_bad_queue_names_are_refused_on_every_path(queue: str) -> None:
    refused_cleanly(lambda: noop.using(queue=queue).enqueue(), ValueError)
    refused_cleanly(lambda: Job.objects.enqueue_many("tests.noop", [[]], queue=queue), ValueError)
    with pytest.raises(ImproperlyConfigured, match="queue"):
        job(name="tests.bad_queue", queue=queue)(lambda: None)
    assert any("DEFAULT_QUEUE" in p for p in validate_settings({"DEFAULT_QUEUE": queue}))


@pytest.mark.parametrize(
    "queue", ["email", "Email", "q" * 100, "reports.daily", "émail", "a-b:c/d"]
)
def test_good_queue_names_are_stored_as_given(queue: str) -> None:
    job_ = noop.using(queue=queue).enqueue()
    assert Job.objects.values_list("queue", flat=True).get(pk=job_.pk) == queue


def test_a_worker_for_one_queue_takes_only_that_exact_name() -> None:
    """MariaDB's default collation compares case-insensitively: 'email' matched 'Email'."""
    lower = noop.using(queue="email").enqueue()
    upper = noop.using(queue="Email").enqueue()
    accented = noop.using(queue="émail").enqueue()

    claimed = Job.objects.claim("w1", lease=60, batch=10, queues=["email"])

    assert [c.id for c in claimed] == [lower.id]
    assert {j.status for j in Job.objects.filter(pk__in=[upper.pk, accented.pk])} == {"pending"}


def test_queue_counts_keep_names_that_differ_only_in_case_apart() -> None:
    noop.using(queue="email").enqueue()
    noop.using(queue="Email").enqueue()
    noop.using(queue="Email").enqueue()

    counts = dict(Job.objects.values_list("queue").order_by("queue").annotate(n=Count("id")))

    assert counts == {"Email": 2, "email": 1}


# --- unique keys --------------------------------------------------------------------------


def test_unique_keys_that_differ_only_in_case_are_different_keys() -> None:
    first = Job.objects.enqueue("tests.noop", unique_key="Order-1")
    second = Job.objects.enqueue("tests.noop", unique_key="order-1")
    third = Job.objects.enqueue("tests.noop", unique_key="order-1")

    assert first.pk != second.pk
    assert third.pk == second.pk


@pytest.mark.parametrize("key", ["", "k" * 256, "nul\x00", "\udc80"])
def test_bad_unique_keys_are_refused(key: str) -> None:
    refused_cleanly(lambda: Job.objects.enqueue("tests.noop", unique_key=key), ValueError)


@pytest.fixture
def two_long_names() -> Iterator[tuple[Any, Any]]:
    """Two unique jobs whose names share their first 200 characters."""
    stem = "tests.long." + "n" * 189
    names = [stem + "_first", stem + "_second"]
    handles = [job(name=name, unique=True)(lambda value: value) for name in names]
    yield handles[0], handles[1]
    for name in names:
        registry.unregister(name)


def test_long_task_names_never_share_a_unique_key(two_long_names: tuple[Any, Any]) -> None:
    first, second = two_long_names

    a = first.enqueue(1)
    b = second.enqueue(1)

    assert a.pk != b.pk
    assert a.unique_key != b.unique_key
    assert len(a.unique_key) <= 255
    assert first.enqueue(1).pk == a.pk


def test_a_short_names_key_keeps_its_readable_form() -> None:
    from tests.testapp.jobs import unique_echo

    created = unique_echo.enqueue(5)

    assert created.unique_key.startswith("tests.unique_echo:")


# --- task names ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nul\x00name", "\ud800", "line\nbreak", " padded", "n" * 256, ""])
def test_bad_job_names_are_refused_where_declared(name: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="name"):
        job(name=name)(lambda: None)


@pytest.mark.parametrize("name", ["tests.nul\x00", "\udc80", "x" * 300])
def test_a_bad_name_given_to_enqueue_is_refused_cleanly(name: str) -> None:
    refused_cleanly(lambda: Job.objects.enqueue(name), LookupError, ValueError)


# --- numeric settings have upper bounds ----------------------------------------------------

TOO_BIG: dict[str, Any] = {
    "POLL_INTERVAL": 1e12,
    "MAX_ATTEMPTS": INT32_MAX + 1,
    "TIMEOUT": 1e10,
    "RETRY_BASE_SECONDS": 1e12,
    "RETRY_FACTOR": 1e6,
    "MESSAGE_MAX_BYTES": 10**9,
    "TRACEBACK_MAX_BYTES": 10**9,
    "SWEEP_INTERVAL": 1e9,
    "SHUTDOWN_TIMEOUT": 1e10,
    "MAX_PAYLOAD_BYTES": 10**9,
}


@pytest.mark.parametrize("key", list(TOO_BIG))
def test_numeric_settings_have_an_upper_bound_and_say_what_to_use(key: str) -> None:
    problems = validate_settings({key: TOO_BIG[key]})

    assert len(problems) == 1
    assert f"ARCATURE[{key!r}]" in problems[0]
    assert " to " in problems[0]  # "use ... from X to Y"


@pytest.mark.parametrize("value", [0, 100, -1, 1.5, math.nan, "1MiB", True])
def test_a_bad_payload_limit_is_refused(value: Any) -> None:
    assert validate_settings({"MAX_PAYLOAD_BYTES": value})


def test_the_default_payload_limit_is_documented() -> None:
    from django_arcature.conf import DEFAULTS

    assert DEFAULTS["MAX_PAYLOAD_BYTES"] == 1024 * 1024


def test_huge_timeouts_are_refused_where_declared() -> None:
    with pytest.raises(ImproperlyConfigured, match="timeout"):
        job(name="tests.forever", timeout=1e10)(lambda: None)


def test_echo_is_registered() -> None:  # the handler the payload suites use
    assert registry.get("tests.echo").func is echo.__wrapped__
