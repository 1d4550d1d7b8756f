"""Payload checks: JSON round trip, signature binding, simple annotations (no database)."""

from __future__ import annotations

import inspect
import json
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, Union

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_arcature.core.payloads import (
    check_arguments,
    ensure_json,
    resolve_hints,
    split_payload,
    to_json_text,
)
from django_arcature.exceptions import MalformedPayload

if TYPE_CHECKING:
    from decimal import Decimal


def _check(func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    check_arguments(func, inspect.signature(func), resolve_hints(func), args, kwargs)


# Text every database stores (no NUL; st.text never makes lone surrogates), and
# floats other than -0.0 (PostgreSQL drops the sign of a zero).
storable_text = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f if f else 0.0)
    | storable_text,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(storable_text.filter(lambda k: len(k) <= 5), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_every_json_value_is_accepted_and_round_trips(value: object) -> None:
    ensure_json(value, "value")
    assert json.loads(json.dumps(value)) == value


@pytest.mark.parametrize(
    "value",
    [
        OrderedDict(a=1),  # a dict subclass comes back as a plain dict
        [1, (2, 3)],
        {"a": {"b": {1, 2}}},
        True.__class__.__mro__,  # a tuple of classes
    ],
)
def test_values_that_would_come_back_different_are_refused(value: object) -> None:
    with pytest.raises(MalformedPayload, match="which JSON cannot carry unchanged"):
        ensure_json(value, "value")


def test_the_path_to_the_bad_value_is_named() -> None:
    with pytest.raises(MalformedPayload, match=r"^args\[1\]\['when'\]\[0\] is a set"):
        ensure_json([1, {"when": [{1}]}], "args")


def test_a_str_subclass_is_refused_with_the_generic_hint() -> None:
    class Name(str):
        pass

    with pytest.raises(MalformedPayload, match="pass only JSON types"):
        ensure_json(Name("x"), "name")


def test_to_json_text_is_stable() -> None:
    assert to_json_text({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'


# --- binding and annotations ------------------------------------------------------------


def variadic(first: int, *rest: int, **options: str) -> None:
    return None


def test_var_positional_and_var_keyword_values_are_each_checked() -> None:
    _check(variadic, 1, 2, 3, colour="red")
    with pytest.raises(MalformedPayload, match=r"argument 'rest\[1\]' of variadic must be int"):
        _check(variadic, 1, 2, "3")
    with pytest.raises(MalformedPayload, match="argument 'colour' of variadic must be str"):
        _check(variadic, 1, colour=5)
    with pytest.raises(MalformedPayload, match=r"argument rest\[0\] is a set"):
        _check(variadic, 1, {2})


def old_style(a: Optional[int], b: Union[int, str], c: Annotated[int, "meta"]) -> None:  # noqa: UP007, UP045
    return None


def modern(
    level: Literal["low", "high"],
    anything: Any,
    maybe: list[int] | None = None,
    nested: dict[str, list[int]] | None = None,
) -> None:
    return None


@pytest.mark.parametrize(
    ("func", "kwargs", "ok"),
    [
        (old_style, {"a": None, "b": "x", "c": 1}, True),
        (old_style, {"a": 1, "b": 2, "c": 3}, True),
        (old_style, {"a": "1", "b": 2, "c": 3}, False),
        (old_style, {"a": 1, "b": 2.5, "c": 3}, False),
        (old_style, {"a": 1, "b": 2, "c": "3"}, False),
        (modern, {"level": "low", "anything": {"x": [1]}}, True),
        (modern, {"level": "medium", "anything": 1}, False),
        (modern, {"level": "high", "anything": None, "maybe": [1, 2]}, True),
        (modern, {"level": "high", "anything": None, "maybe": [1, "2"]}, False),
        (modern, {"level": "high", "anything": None, "nested": {"a": [1]}}, True),
        (modern, {"level": "high", "anything": None, "nested": {"a": ["x"]}}, False),
    ],
)
def test_simple_annotations(func: Callable[..., Any], kwargs: dict[str, Any], ok: bool) -> None:
    if ok:
        _check(func, **kwargs)
    else:
        with pytest.raises(MalformedPayload, match="must be"):
            _check(func, **kwargs)


def uses_type_checking_only_import(amount: Decimal, count: int) -> None:
    return None


def test_an_annotation_that_cannot_be_resolved_is_skipped_alone() -> None:
    hints = resolve_hints(uses_type_checking_only_import)
    assert "amount" not in hints
    assert hints["count"] is int
    with pytest.raises(MalformedPayload, match=r"argument 'count' of .* must be int"):
        _check(uses_type_checking_only_import, "1.5", "2")


def test_skip_first_leaves_out_a_context_parameter() -> None:
    def with_context(context: object, user_id: int) -> None:
        return None

    check_arguments(
        with_context,
        inspect.signature(with_context),
        resolve_hints(with_context),
        [3],
        {},
        skip_first=True,
    )


def test_the_signature_in_the_message_shows_resolved_annotations() -> None:
    with pytest.raises(MalformedPayload) as info:
        _check(variadic)
    assert "the arguments do not fit variadic(first: int, *rest: int, **options: str)" in str(
        info.value
    )


def greet(name: str, *, loud: bool = False) -> str:
    return name


def test_a_misspelled_keyword_is_named_instead_of_the_missing_one() -> None:
    # bind() reports the missing 'name' first, which hides the typo the caller made.
    with pytest.raises(MalformedPayload) as info:
        _check(greet, nom="Ada")
    assert str(info.value) == (
        "the arguments do not fit greet(name: str, *, loud: bool = False): "
        "got an unexpected keyword argument 'nom' (did you mean 'name'?)"
    )


def test_an_unknown_keyword_with_no_near_name_is_named_alone() -> None:
    with pytest.raises(MalformedPayload) as info:
        _check(greet, "Ada", priority=5)
    assert str(info.value).endswith("got an unexpected keyword argument 'priority'")


def test_a_handler_taking_any_keyword_still_reports_what_is_missing() -> None:
    def anything(name: str, **extra: object) -> None:
        return None

    with pytest.raises(MalformedPayload) as info:
        _check(anything, nom="Ada")
    assert str(info.value).endswith("missing a required argument: 'name'")


# --- split_payload ------------------------------------------------------------------------


def test_split_payload_accepts_missing_parts() -> None:
    assert split_payload({}) == ([], {})
    assert split_payload({"args": [1]}) == ([1], {})
    assert split_payload({"kwargs": {"a": 1}}) == ([], {"a": 1})


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("text", "the payload is a str, not an object with args and kwargs"),
        (None, "the payload is a NoneType"),
        ({"args": "1"}, r"payload\['args'\] is a str, not a list"),
        ({"kwargs": [1]}, r"payload\['kwargs'\] is a list, not an object"),
        ({"args": [], "extra": 1}, r"unexpected keys: \['extra'\]"),
    ],
)
def test_split_payload_refuses_other_shapes(payload: object, message: str) -> None:
    with pytest.raises(MalformedPayload, match=message):
        split_payload(payload)


def _charge_float(amount: float) -> None: ...


def _charge_optional_float(amount: float | None = None) -> None: ...


def _charge_str(amount: str) -> None: ...


def _charge_any(amount) -> None:  # type: ignore[no-untyped-def]
    ...


@pytest.mark.parametrize("func", [_charge_float, _charge_optional_float])
def test_the_decimal_hint_follows_a_float_annotation(func: Callable[..., Any]) -> None:
    """It said "pass str(amount) and rebuild it with Decimal(...)" to a handler that
    declares ``amount: float``, whose own annotation then refused the str."""
    from decimal import Decimal

    with pytest.raises(MalformedPayload) as refused:
        _check(func, Decimal("9.99"))
    message = str(refused.value)
    assert "float(amount)" in message
    assert "pass str(amount)" not in message
    _check(func, float(Decimal("9.99")))  # what the hint says is accepted


@pytest.mark.parametrize("func", [_charge_str, _charge_any])
def test_the_decimal_hint_without_a_float_annotation_keeps_every_digit(
    func: Callable[..., Any],
) -> None:
    from decimal import Decimal

    with pytest.raises(MalformedPayload, match=r"pass str\(amount\) instead"):
        _check(func, Decimal("9.99"))
    _check(func, str(Decimal("9.99")))
