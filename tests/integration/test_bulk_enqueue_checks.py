"""``enqueue_many`` of a handler with plain positional parameters: most items take the
quick check (``plain_call_check``), and any item it is not sure of gets the full one,
which refuses it with the words a one-by-one enqueue uses."""

from __future__ import annotations

from typing import Any

import pytest

from django_arcature import MalformedPayload, job
from django_arcature.models import Job

pytestmark = pytest.mark.django_db


@job(name="bulk_checks.greet")
def greet(name: str, times: int = 1, ratio: float | None = None) -> None:
    """Plain parameters: the quick check applies."""


GOOD: list[Any] = [["Ada"], ["Bo", 2], ["Cy", 3, 0.5], ["Di", 4, None], ("Ed", 5), {"name": "Fa"}]

BAD: list[Any] = [
    ["nul\x00"],
    ["x", True],  # a bool is not an int here
    ["x", 2**70],
    ["x", 1, float("nan")],
    ["x", 1, -0.0],
    [1],
    [],
    ["x", 1, 2.0, "extra"],
    ["x", "1"],
]


def test_plain_items_are_stored_as_given() -> None:
    made = greet.enqueue_many(GOOD)
    stored = {row.pk: row.payload for row in Job.objects.all()}
    assert [stored[row.pk] for row in made] == [
        {"args": ["Ada"], "kwargs": {}},
        {"args": ["Bo", 2], "kwargs": {}},
        {"args": ["Cy", 3, 0.5], "kwargs": {}},
        {"args": ["Di", 4, None], "kwargs": {}},
        {"args": ["Ed", 5], "kwargs": {}},
        {"args": [], "kwargs": {"name": "Fa"}},
    ]


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_an_item_the_quick_check_is_not_sure_of_is_refused_as_enqueue_refuses_it(
    bad: list[Any],
) -> None:
    with pytest.raises(MalformedPayload) as alone:
        greet.enqueue(*bad)
    with pytest.raises(MalformedPayload) as bulk:
        greet.enqueue_many([["first"], *GOOD, bad, ["last"]])
    assert str(bulk.value) == str(alone.value)
    assert Job.objects.count() == 0
