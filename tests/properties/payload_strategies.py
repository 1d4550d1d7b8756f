"""Hypothesis strategies for hostile JSON-ish values, and the oracle that says which to refuse.

The oracle is written from the documented rules (README, "Limits"), not from
the package's code, and knows nothing about databases: a value it accepts must
come back exactly on every database, a value it refuses must be refused at
enqueue on every database. Running the same property on SQLite, PostgreSQL and
MariaDB therefore proves they agree.

Profiles: ``HYPOTHESIS_PROFILE=soak`` (or ``ARCATURE_SOAK=1``, what ``make
soak`` sets) runs many more examples than the CI default.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: The documented limits.
MAX_NESTING = 20
MAX_PAYLOAD_BYTES = 1024 * 1024
INT_MIN, INT_MAX = -(2**63), 2**64 - 1

SOAK = os.environ.get("HYPOTHESIS_PROFILE") == "soak" or os.environ.get("ARCATURE_SOAK") == "1"

# CI: 8 examples per test and database (each waits for a worker process to start and
# drain: about 10 s each on a loaded 2-core host), new ones every run on each of the
# three databases; ``make soak`` (ARCATURE_SOAK=1) runs 200.
settings.register_profile(
    "arcature-payload-ci",
    max_examples=8,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "arcature-payload-soak",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
PROFILE = settings.get_profile("arcature-payload-soak" if SOAK else "arcature-payload-ci")

#: Text that has hurt a database, a driver or an HTML page before.
NASTY_TEXT = [
    "\x00",
    "a\x00b",
    "\ud800",
    "\udfff",
    "x\udc80y",
    "\ud83d\ude00",  # a surrogate pair written as two lone surrogates
    "\U0001f600",
    "\uffff",
    "\U0010ffff",
    "\ufeff",
    "\u202e",
    "\u0085\u2028\u2029",
    "<script>alert('arcature')</script>",
    "\"'&<>{{ x }}{% if %}",
    "%s %(x)s ?",
    "\\u0000",
    "",
    " ",
]

NASTY_NUMBERS: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    0.0,
    1e16,
    1e300,
    -1.5e308,
    5e-324,
    2.0**53 + 1,
    INT_MAX,
    INT_MAX + 1,
    INT_MIN,
    INT_MIN - 1,
    2**53 + 1,
    2**200,
    True,
    False,
]

any_char = st.characters(exclude_categories=())  # surrogates and controls included
text = st.one_of(st.text(any_char, max_size=30), st.sampled_from(NASTY_TEXT))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),  # NaN and infinities included
    st.sampled_from(NASTY_NUMBERS),
    text,
)


def nested(levels: int, kind: str, inner: Any) -> Any:
    value = inner
    for _ in range(levels):
        value = [value] if kind == "list" else {"k": value}
    return value


deep = st.builds(
    nested,
    st.integers(min_value=MAX_NESTING - 2, max_value=MAX_NESTING + 12),
    st.sampled_from(["list", "dict"]),
    scalars,
)
json_values = st.one_of(
    st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(text, children, max_size=4),
        ),
        max_leaves=12,
    ),
    deep,
)
#: Megabyte strings: near the limit from both sides, in 1-, 2-, 3- and 4-byte characters.
big_strings = st.builds(
    lambda char, size: char * size,
    st.sampled_from(["x", "\u00e9", "\u20ac", "\U0001f600", "<"]),
    st.sampled_from([MAX_PAYLOAD_BYTES // 6 - 100, MAX_PAYLOAD_BYTES - 100, MAX_PAYLOAD_BYTES]),
)


# --- the oracle --------------------------------------------------------------------------


def _bad_text(value: str) -> bool:
    return "\x00" in value or any("\ud800" <= ch <= "\udfff" for ch in value)


def refusal(value: Any) -> str | None:
    """Why the documented rules refuse ``value`` as a job's only argument, or None."""

    def walk(item: Any, depth: int) -> str | None:
        if item is None or isinstance(item, bool):
            return None
        if isinstance(item, int):
            return None if INT_MIN <= item <= INT_MAX else "int out of range"
        if isinstance(item, float):
            if not math.isfinite(item):
                return "not finite"
            if item == 0 and math.copysign(1, item) < 0:
                return "negative zero"
            return None
        if isinstance(item, str):
            return "NUL or lone surrogate" if _bad_text(item) else None
        if depth >= MAX_NESTING:
            return "too deep"
        if isinstance(item, list):
            for child in item:
                found = walk(child, depth + 1)
                if found:
                    return found
            return None
        if isinstance(item, dict):
            for key, child in item.items():
                if _bad_text(key):
                    return "NUL or lone surrogate"
                found = walk(child, depth + 1)
                if found:
                    return found
            return None
        return "not JSON"

    return walk(value, 0)


def size_band(value: Any) -> tuple[int, int]:
    """The payload's JSON size, compact with non-ASCII escaped, as a (low, high) band.

    The package writes large-exponent floats in full (``1e16`` as
    ``10000000000000000.0``) so that PostgreSQL reads them back as floats: the
    stored size is at least the plain size and at most a few hundred bytes more
    per float.
    """
    plain = len(json.dumps({"args": [value], "kwargs": {}}, separators=(",", ":")))
    floats = _count_floats(value)
    return plain, plain + 330 * floats


def _count_floats(value: Any) -> int:
    if isinstance(value, float):
        return 1
    if isinstance(value, list):
        return sum(_count_floats(v) for v in value)
    if isinstance(value, dict):
        return sum(_count_floats(v) for v in value.values())
    return 0


def same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (1.0 is not 1, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)
