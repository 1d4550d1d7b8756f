"""``plain_call_check``: a quick yes for arguments ``check_arguments`` surely accepts.

It may say "not sure" (False) whenever it likes, but never yes where
``check_arguments`` refuses: every annotation and value here is tried both ways.
"""

from __future__ import annotations

import enum
import inspect
import itertools
import typing
from decimal import Decimal
from typing import Any

import pytest

from django_arcature.core.payloads import check_arguments, plain_call_check
from django_arcature.exceptions import MalformedPayload

EMPTY = inspect.Parameter.empty


class Colour(enum.StrEnum):
    RED = "red"


ANNOTATIONS: list[Any] = [
    EMPTY,
    Any,
    object,
    str,
    int,
    float,
    bool,
    None,
    str | None,
    int | float,
    typing.Optional[int],  # noqa: UP045 (the typing spelling is a Union too)
    list[int],
    typing.Literal["a"],
    typing.Annotated[str, "meta"],
    str | list[int],
]

VALUES: list[Any] = [
    "text",
    "",
    "nul\x00",
    "lone \ud800",
    0,
    -(2**63),
    2**70,
    True,
    False,
    1.5,
    0.0,
    -0.0,
    float("nan"),
    float("inf"),
    None,
    [1],
    {"a": 1},
    Decimal("1.5"),
    Colour.RED,
    b"bytes",
]


def _signature(*annotations: Any, defaults: int = 0) -> inspect.Signature:
    count = len(annotations)
    return inspect.Signature(
        [
            inspect.Parameter(
                f"p{index}",
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=annotation,
                default=0 if index >= count - defaults else EMPTY,
            )
            for index, annotation in enumerate(annotations)
        ]
    )


def _hints(signature: inspect.Signature) -> dict[str, Any]:
    return {
        name: param.annotation
        for name, param in signature.parameters.items()
        if param.annotation is not EMPTY
    }


def _accepted(signature: inspect.Signature, args: list[Any]) -> bool:
    try:
        check_arguments(len, signature, _hints(signature), args, {})
    except MalformedPayload:
        return False
    return True


@pytest.mark.parametrize("annotation", ANNOTATIONS, ids=repr)
def test_a_yes_is_never_given_where_check_arguments_refuses(annotation: Any) -> None:
    signature = _signature(annotation)
    fits = plain_call_check(signature, _hints(signature))
    for value in VALUES:
        if fits is not None and fits([value]):
            assert _accepted(signature, [value]), (annotation, value)


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (EMPTY, "text"),
        (Any, 1.5),
        (str, "text"),
        (int, 2**62),
        (float, 3),
        (bool, True),
        (None, None),
        (str | None, None),
        (int | float, 2.5),
    ],
)
def test_plain_values_of_simple_annotations_are_a_yes(annotation: Any, value: Any) -> None:
    signature = _signature(annotation)
    fits = plain_call_check(signature, _hints(signature))
    assert fits is not None
    assert fits([value]) is True
    assert _accepted(signature, [value])


@pytest.mark.parametrize("annotation", [list[int], typing.Literal["a"], str | list[int]])
def test_other_annotations_get_no_quick_check(annotation: Any) -> None:
    signature = _signature(annotation)
    assert plain_call_check(signature, _hints(signature)) is None


def test_counts_follow_the_defaults() -> None:
    signature = _signature(str, int, float, defaults=1)
    fits = plain_call_check(signature, _hints(signature))
    assert fits is not None
    for count in range(5):
        args: list[Any] = ["a", 1, 2.0, "extra"][:count]
        assert fits(args) is (count in (2, 3))
        assert _accepted(signature, args) is (count in (2, 3))


def test_pairs_of_values_never_get_a_wrong_yes() -> None:
    signature = _signature(str, int | None)
    fits = plain_call_check(signature, _hints(signature))
    assert fits is not None
    for first, second in itertools.product(VALUES, repeat=2):
        if fits([first, second]):
            assert _accepted(signature, [first, second]), (first, second)


def test_variadic_and_keyword_only_handlers_get_no_quick_check() -> None:
    def star(*args: str) -> None: ...

    def keyword(*, name: str) -> None: ...

    for func in (star, keyword):
        signature = inspect.signature(func)
        assert plain_call_check(signature, typing.get_type_hints(func)) is None
