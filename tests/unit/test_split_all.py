"""``split_all`` (the items of a bulk enqueue) gives what ``split_arguments`` gives."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from django_arcature.enqueueing import split_all, split_arguments


class Args(list[Any]):
    """A list subclass: not taken by the exact-type shortcut."""


ITEMS: list[Any] = [
    [],
    [1, "a"],
    [[1, 2], {"k": 1}],  # a list of two, not an (args, kwargs) pair
    ([1, 2], {"k": 1}),  # a pair
    ((1,), OrderedDict(k=2)),
    (1, 2),
    {"k": "v"},
    OrderedDict(a=1),
    Args([1, 2]),
    "text",
    7,
    None,
]


def test_every_kind_of_item_splits_as_split_arguments_splits_it() -> None:
    assert split_all(ITEMS) == [split_arguments(item) for item in ITEMS]
    assert [type(args) for args, _ in split_all(ITEMS)] == [list] * len(ITEMS)
    assert [type(kwargs) for _, kwargs in split_all(ITEMS)] == [dict] * len(ITEMS)


def test_the_arguments_are_copies_of_the_callers_lists() -> None:
    shared: list[Any] = [1]
    first, second = split_all([shared, shared])
    shared.append(2)
    first[0].append(3)
    assert first == ([1, 3], {})
    assert second == ([1], {})


def test_a_generator_is_read_once() -> None:
    assert split_all([i] for i in range(3)) == [([0], {}), ([1], {}), ([2], {})]
