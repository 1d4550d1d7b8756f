"""The one sanitizer for every text and JSON value the worker stores (issue 10, defect 1)."""

from __future__ import annotations

import math

import pytest

from django_arcature.core.text import JSON_MAX_DEPTH, UnstorableValue, clean_json, clean_text

R = "\ufffd"


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("plain", "plain"),
        ("a\x00b", f"a{R}b"),
        ("lone \ud800 high", f"lone {R} high"),
        ("lone \udfff low", f"lone {R} low"),
        ("paired \U0001f600", "paired \U0001f600"),
        ("", ""),
    ],
)
def test_clean_text_replaces_what_a_database_refuses(raw: str, stored: str) -> None:
    assert clean_text(raw) == stored


def test_clean_text_cuts_to_a_limit_on_a_character_boundary() -> None:
    cut = clean_text("é" * 100 + "\x00", 21)
    assert len(cut.encode()) <= 21
    assert cut.endswith("[truncated]")
    cut.encode("utf-8")  # a valid string: no half characters, no surrogates


def test_clean_json_cleans_every_string_and_key_and_keeps_the_rest() -> None:
    value = {"k\x00": ["a\ud800", 1, 2.5, True, None, {"n": -3}], "ok": "x"}
    assert clean_json(value) == {f"k{R}": [f"a{R}", 1, 2.5, True, None, {"n": -3}], "ok": "x"}
    assert list(clean_json((1, "t"))) == [1, "t"]  # stored as a JSON list either way


def test_clean_json_keeps_types_exactly() -> None:
    cleaned = clean_json([1, 1.0, True, 0, False])
    assert [type(item) for item in cleaned] == [int, float, bool, int, bool]


def test_clean_json_cuts_strings_to_a_limit() -> None:
    cleaned = clean_json({"traceback": "x" * 1000}, max_text_bytes=100)
    assert len(cleaned["traceback"].encode()) <= 100


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (math.nan, "nan"),
        ({"a": [1, math.inf]}, "['a'][1]"),
        ([-math.inf], "[0]"),
        (10**5000, "too long"),
        ({(1, 2): "x"}, "not a string"),
        ({"s": {1, 2}}, "set"),
    ],
    ids=["nan", "inf", "-inf", "huge-int", "tuple-key", "set"],
)
def test_clean_json_refuses_what_json_cannot_carry(value: object, said: str) -> None:
    with pytest.raises(UnstorableValue) as raised:
        clean_json(value)
    assert said in str(raised.value)


def test_clean_json_depth_limit_is_the_strictest_database() -> None:
    deepest: object = 1
    for _ in range(JSON_MAX_DEPTH):
        deepest = [deepest]
    assert clean_json(deepest) == deepest
    with pytest.raises(UnstorableValue, match="levels deep"):
        clean_json([deepest])


def test_clean_json_writes_scalar_keys_as_json_does() -> None:
    """Fast path (nothing to clean) and slow path (a key to clean) agree on non-str keys."""
    import json

    assert json.loads(json.dumps(clean_json({1: "a", 2.5: "b"}))) == {"1": "a", "2.5": "b"}
    assert clean_json({1: "a\x00", None: "b"}) == {"1": f"a{R}", "null": "b"}


def test_a_clean_value_comes_back_as_it_was_given() -> None:
    value = {"a": [1, 2.5, "x"]}
    assert clean_json(value) is value
