"""Bad payloads are refused at enqueue, identically on every database (issue 10, defect 9).

Each value below was once accepted by one database and refused (or changed) by
another: PostgreSQL refuses NUL and lone surrogates in JSON and turns ``1e16``
into an integer, MariaDB's JSON check refuses lone surrogates and nesting past
32 levels. Every enqueue path must now give the same answer on all three: a
``MalformedPayload`` (a ``ValueError``) before anything is written, with the
caller's transaction still usable, or a row whose payload reads back exactly
as it went in, types included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings

from django_arcature.exceptions import MalformedPayload
from django_arcature.models import Job
from tests.testapp import tasks as input_tasks
from tests.testapp.jobs import echo

pytestmark = pytest.mark.django_db

#: The documented limits (README, "Limits").
MAX_NESTING = 20
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024


def nested(levels: int) -> Any:
    """``levels`` lists, one inside the other, around a 0."""
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def nested_dicts(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = {"k": value}
    return value


REFUSED: dict[str, Any] = {
    "NUL in a string": "a\x00b",
    "NUL in a dict key": {"a\x00": 1},
    "NUL deep inside": {"outer": [1, {"inner": "x\x00"}]},
    "lone high surrogate": "\ud800",
    "lone low surrogate in a key": {"\udfff": 1},
    "lone surrogate in a list": ["ok", "x\udc80y"],
    "NaN": math.nan,
    "infinity": math.inf,
    "minus infinity": -math.inf,
    "an int above 64 bits": 2**64,
    "an int below -2**63": -(2**63) - 1,
    "negative zero (PostgreSQL keeps no sign on a zero)": -0.0,
    "lists nested past the limit": nested(MAX_NESTING + 1),
    "dicts nested past the limit": nested_dicts(MAX_NESTING + 1),
    "a string over the size limit": "x" * DEFAULT_MAX_PAYLOAD_BYTES,
    "escapes over the size limit": "\u00e9" * (DEFAULT_MAX_PAYLOAD_BYTES // 6 + 1),
}

ACCEPTED: dict[str, Any] = {
    "a float PostgreSQL once read back as an int": 1e16,
    "a float with a big exponent": 1e300,
    "a negative one": -1.5e300,
    "the smallest subnormal": 5e-324,
    "an integral float": 3.0,
    "the largest int": 2**64 - 1,
    "the smallest int": -(2**63),
    "lists nested to the limit": nested(MAX_NESTING),
    "dicts nested to the limit": nested_dicts(MAX_NESTING),
    "odd but valid Unicode": "\uffff\U0010ffff\ufeff\u200b\u0085 \u2028",
    "a surrogate pair spelled properly": "\U0001f600",
    "empty key and value": {"": ""},
    "almost a megabyte": "y" * (DEFAULT_MAX_PAYLOAD_BYTES - 1000),
    "mixed": {"list": [1, 2.5, None, True, "s"], "nested": {"a": {"b": [{}]}}},
}


def enqueue_with_manager(value: Any) -> Job:
    return Job.objects.enqueue("tests.echo", args=[value])


def enqueue_many_with_manager(value: Any) -> Job:
    return Job.objects.enqueue_many("tests.echo", [[1], [value]])[1]


def enqueue_with_handle(value: Any) -> Job:
    return echo.enqueue(value)


def enqueue_many_with_handle(value: Any) -> Job:
    return echo.enqueue_many([{"value": value}])[0]


def enqueue_with_kwargs(value: Any) -> Job:
    return Job.objects.enqueue("tests.echo", kwargs={"value": value})


def enqueue_with_django_tasks(value: Any) -> Job:
    result = input_tasks.echo.enqueue(value)
    return Job.objects.get(pk=result.id)


PATHS: dict[str, Callable[[Any], Job]] = {
    "manager.enqueue": enqueue_with_manager,
    "manager.enqueue(kwargs=)": enqueue_with_kwargs,
    "manager.enqueue_many": enqueue_many_with_manager,
    "@job.enqueue": enqueue_with_handle,
    "@job.enqueue_many": enqueue_many_with_handle,
    "django.tasks enqueue": enqueue_with_django_tasks,
}


def stored_argument(job: Job) -> Any:
    """The argument as the database gives it back (a fresh read, not the Python object)."""
    payload = Job.objects.values_list("payload", flat=True).get(pk=job.pk)
    args, kwargs = payload["args"], payload["kwargs"]
    return args[0] if args else kwargs["value"]


def same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down (1.0 is not 1, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("case", list(REFUSED))
def test_a_bad_value_is_refused_at_enqueue_and_the_transaction_goes_on(
    case: str, path: str
) -> None:
    with transaction.atomic():
        Job.objects.enqueue("tests.noop")
        with pytest.raises(MalformedPayload):
            PATHS[path](REFUSED[case])
        # The refusal came before any SQL: the transaction is usable, nothing was added.
        assert Job.objects.count() == 1
        Job.objects.enqueue("tests.noop")
    assert Job.objects.count() == 2


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("case", list(ACCEPTED))
def test_an_accepted_value_reads_back_exactly(case: str, path: str) -> None:
    value = ACCEPTED[case]
    job = PATHS[path](value)

    back = stored_argument(job)

    assert same(back, value), f"{case}: stored {back!r:.80} for {value!r:.80}"


def test_the_refusal_says_what_and_where() -> None:
    with pytest.raises(MalformedPayload) as nul:
        echo.enqueue({"name": "a\x00b"})
    with pytest.raises(MalformedPayload) as key:
        echo.enqueue({"\ud800": 1})
    with pytest.raises(MalformedPayload) as deep:
        echo.enqueue(nested(MAX_NESTING + 1))
    with pytest.raises(MalformedPayload) as big:
        echo.enqueue("x" * DEFAULT_MAX_PAYLOAD_BYTES)

    assert "NUL" in str(nul.value)
    assert "'name'" in str(nul.value)
    assert "surrogate" in str(key.value)
    assert f"nested more than {MAX_NESTING} levels" in str(deep.value)
    assert "MAX_PAYLOAD_BYTES" in str(big.value)
    assert f"{DEFAULT_MAX_PAYLOAD_BYTES}" in str(big.value)


@override_settings(ARCATURE={"MAX_PAYLOAD_BYTES": 4096})
def test_the_payload_limit_is_a_setting() -> None:
    echo.enqueue("x" * 4000)
    with pytest.raises(MalformedPayload, match="4096"):
        echo.enqueue("x" * 4096)


def test_a_bulk_enqueue_of_big_payloads_is_stored_whole() -> None:
    """Many payloads near the limit in one call: MariaDB's max_allowed_packet (16 MiB by
    default) must not refuse the multi-row INSERT that carries them."""
    big = "z" * (DEFAULT_MAX_PAYLOAD_BYTES - 1000)

    jobs = echo.enqueue_many([[big] for _ in range(40)])

    assert Job.objects.filter(pk__in=[job.pk for job in jobs]).count() == 40
    assert stored_argument(jobs[-1]) == big
