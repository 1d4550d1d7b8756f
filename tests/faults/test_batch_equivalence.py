"""A batched write stores exactly what one-by-one writes store, for any value (issue 10).

Hypothesis draws results and error texts with NUL characters, lone surrogates,
NaN and infinities, huge integers, deep nesting and odd Unicode; each drawn
outcome is written twice, for two jobs: once through ``complete_batch`` (one
statement per transition) and once through ``complete_many`` (one statement per
row). Both rows must end the same — status, error kind, message, traceback,
result with its JSON types, attempt log — and refused values must end ``dead``
on both paths alike. ``ARCATURE_SOAK=1`` draws many more examples.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_arcature.models import Job
from django_arcature.transitions import CLAIM_MARKER, Completion

pytestmark = [pytest.mark.django_db, pytest.mark.heavy]

EXAMPLES = 300 if os.environ.get("ARCATURE_SOAK") == "1" else 20

#: Stands for an integer of 5,000 digits in a drawn value (Hypothesis could not print the
#: integer itself when reporting an example); ``materialize`` puts it in.
HUGE = "<an integer of 5000 digits>"

hostile_text = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\x00", "\ud800", "\udfff", "\u202e", "\ufeff", "é", "\U0001f600"]),
    ),
    max_size=40,
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.just(HUGE),
    st.floats(allow_nan=True, allow_infinity=True),
    hostile_text,
)
json_values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(hostile_text, children, max_size=4)
    ),
    max_leaves=12,
)


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


outcomes = st.one_of(
    st.tuples(st.just("succeeded"), st.one_of(json_values, st.sampled_from([deep(31), deep(40)]))),
    st.tuples(st.just("retry"), hostile_text),
    st.tuples(st.just("dead"), hostile_text),
)

examples_run = 0


def materialize(value: Any) -> Any:
    if value == HUGE:
        return 10**5000
    if isinstance(value, list):
        return [materialize(item) for item in value]
    if isinstance(value, dict):
        return {key: materialize(item) for key, item in value.items()}
    return value


def completion_for(job: Any, drawn: tuple[str, Any], retry_at: Any) -> Completion:
    kind, value = drawn
    value = materialize(value) if kind == "succeeded" else value
    log = [{"worker": "w1\x00", "error": None if kind == "succeeded" else {"traceback": value}}]
    if kind == "succeeded":
        return Completion(job.id, job.claim_token, kind, result=value, attempt_log=log)
    if kind == "retry":
        return Completion(
            job.id,
            job.claim_token,
            kind,
            available_at=retry_at,
            message=value,
            traceback=value,
            attempt_log=log,
        )
    return Completion(
        job.id,
        job.claim_token,
        kind,
        error_kind="permanent",
        message=value,
        traceback=value,
        attempt_log=log,
    )


REFUSED_CHARACTERS = re.compile("[\x00\ud800-\udfff]")


def strings(value: Any) -> Iterator[str]:
    """Every string in a stored value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key)
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


def stored(job_id: Any) -> tuple[Any, ...]:
    row = Job.objects.get(pk=job_id)
    log = [
        {key: value for key, value in entry.items() if key != CLAIM_MARKER}
        for entry in row.attempt_log
    ]
    result = row.result
    return (
        row.status,
        row.error_kind,
        row.last_error,
        row.last_traceback,
        repr(result),  # repr keeps the JSON types apart (1 and 1.0, True and 1)
        result,
        log,
        row.claim_token,
    )


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=st.lists(outcomes, min_size=1, max_size=6))
def batched_and_one_by_one_store_the_same(drawn: list[tuple[str, Any]]) -> None:
    global examples_run
    examples_run += 1
    count = len(drawn)
    Job.objects.enqueue_many("tests.noop", [()] * (2 * count))
    claimed = Job.objects.claim("w1", lease=60, batch=2 * count)
    assert len(claimed) == 2 * count
    batched, single = claimed[:count], claimed[count:]
    retry_at = timezone.now() + timedelta(minutes=5)

    Job.objects.complete_batch(
        [completion_for(job, item, retry_at) for job, item in zip(batched, drawn, strict=True)]
    )
    Job.objects.complete_many(
        [completion_for(job, item, retry_at) for job, item in zip(single, drawn, strict=True)]
    )

    for one, other, item in zip(batched, single, drawn, strict=True):
        first, second = stored(one.id), stored(other.id)
        assert first == second, item
        assert first[0] in {"succeeded", "pending", "dead"}
        assert first[-1] is None  # the claim is released either way
        refused = [text for text in strings(first) if REFUSED_CHARACTERS.search(text)]
        assert not refused, item


def test_batched_and_one_by_one_writes_store_the_same() -> None:
    global examples_run
    examples_run = 0
    batched_and_one_by_one_store_the_same()
    print(f"\nbatch-equivalence examples run on {connection.vendor}: {examples_run}")
    assert examples_run >= EXAMPLES // 2  # Hypothesis may stop early only on duplicates
