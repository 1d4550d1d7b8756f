"""RetryPolicy: a table with pinned randomness, and properties over the whole parameter space."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_arcature.conf import default_retry_policy
from django_arcature.core.retry import MAX_DELAY_SECONDS, RetryPolicy


def constant(value: float) -> RetryPolicy:
    """A policy whose random source always draws ``value``."""
    return RetryPolicy(base_seconds=2, factor=2, max_seconds=600, jitter=0.5, random=lambda: value)


@pytest.mark.parametrize(
    ("policy", "attempt", "seconds"),
    [
        # No jitter: the plain exponential, then the cap.
        (RetryPolicy(jitter=0), 0, 2),  # attempt 0 is treated as the first
        (RetryPolicy(jitter=0), 1, 2),
        (RetryPolicy(jitter=0), 2, 4),
        (RetryPolicy(jitter=0), 3, 8),
        (RetryPolicy(jitter=0), 9, 512),
        (RetryPolicy(jitter=0), 10, 600),  # 1024 capped
        (RetryPolicy(jitter=0), 10_000, 600),  # overflow stays at the cap
        (RetryPolicy(jitter=0), 10**9, 600),  # and is not slow either
        (RetryPolicy(base_seconds=1.5, factor=1, jitter=0), 50, 1.5),  # factor 1: constant
        (RetryPolicy(base_seconds=0, jitter=0), 10**9, 0),  # base 0: always 0
        (RetryPolicy(base_seconds=5, max_seconds=3, jitter=0), 1, 3),  # cap below base
        (RetryPolicy(base_seconds=0.001, factor=10, max_seconds=1, jitter=0), 3, 0.1),
        # Jitter only shortens: delay * (1 - jitter * draw).
        (constant(0.0), 3, 8),
        (constant(1.0), 3, 4),
        (constant(0.5), 3, 6),
        (constant(1.0), 20, 300),  # jitter applies to the capped delay
        # A misbehaving random source is clamped, never breaks the bounds.
        (constant(7.0), 3, 4),
        (constant(-3.0), 3, 8),
        (constant(math.nan), 3, 8),
    ],
)
def test_delay_table(policy: RetryPolicy, attempt: int, seconds: float) -> None:
    assert policy.delay_for(attempt) == timedelta(seconds=seconds)


def test_jitter_uses_the_injected_source_once_per_delay() -> None:
    draws = [0.0, 1.0, 0.5]
    policy = RetryPolicy(base_seconds=10, factor=1, jitter=0.2, random=lambda: draws.pop(0))
    assert [policy.delay_for(1) for _ in range(3)] == [
        timedelta(seconds=10),
        timedelta(seconds=8),
        timedelta(seconds=9),
    ]
    assert draws == []


def test_without_jitter_the_source_is_never_called() -> None:
    def forbidden() -> float:
        raise AssertionError("drew a random number with jitter=0")

    assert RetryPolicy(jitter=0, random=forbidden).delay_for(4) == timedelta(seconds=16)


def test_policies_compare_by_parameters_not_by_random_source() -> None:
    assert RetryPolicy(random=lambda: 0.1) == RetryPolicy(random=lambda: 0.9)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_seconds": -1}, "must not be negative"),
        ({"max_seconds": -0.5}, "must not be negative"),
        ({"factor": 0.9}, "factor must be at least 1"),
        ({"factor": 0}, "factor must be at least 1"),
        ({"jitter": -0.1}, "jitter must be between 0 and 1"),
        ({"jitter": 1.5}, "jitter must be between 0 and 1"),
        ({"base_seconds": math.nan}, "base_seconds must be a finite number"),
        ({"factor": math.inf}, "factor must be a finite number"),
        ({"max_seconds": math.inf}, "max_seconds must be a finite number"),
        ({"jitter": math.nan}, "jitter must be a finite number"),
        ({"max_seconds": MAX_DELAY_SECONDS + 1}, "max_seconds must be at most"),
    ],
)
def test_invalid_parameters_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_default_policy_reads_the_arcature_setting(settings: object) -> None:
    settings.ARCATURE = {  # type: ignore[attr-defined]
        "RETRY_BASE_SECONDS": 3,
        "RETRY_FACTOR": 4,
        "RETRY_MAX_SECONDS": 100,
        "RETRY_JITTER": 0,
    }
    policy = default_retry_policy()
    assert policy == RetryPolicy(base_seconds=3, factor=4, max_seconds=100, jitter=0)
    assert [policy.delay_for(n).total_seconds() for n in (1, 2, 3, 4)] == [3, 12, 48, 100]


# --- Properties -----------------------------------------------------------------------

bases = st.floats(min_value=0, max_value=10_000, allow_nan=False)
factors = st.floats(min_value=1, max_value=50, allow_nan=False)
caps = st.floats(min_value=0, max_value=MAX_DELAY_SECONDS, allow_nan=False)
jitters = st.floats(min_value=0, max_value=1, allow_nan=False)
draws = st.floats(min_value=0, max_value=1, allow_nan=False)
attempts = st.integers(min_value=0, max_value=100_000)


@given(bases, factors, caps, jitters, draws, attempts)
def test_delay_is_never_negative_and_never_above_the_cap(
    base: float, factor: float, cap: float, jitter: float, draw: float, attempt: int
) -> None:
    policy = RetryPolicy(base, factor, cap, jitter, random=lambda: draw)
    delay = policy.delay_for(attempt)
    assert timedelta(0) <= delay <= timedelta(seconds=cap)


@given(bases, factors, caps, jitters, draws, attempts)
def test_jitter_stays_within_its_fraction_of_the_delay(
    base: float, factor: float, cap: float, jitter: float, draw: float, attempt: int
) -> None:
    policy = RetryPolicy(base, factor, cap, jitter, random=lambda: draw)
    plain = RetryPolicy(base, factor, cap, 0).delay_for(attempt)
    shortest = timedelta(seconds=plain.total_seconds() * (1 - jitter))
    assert shortest - timedelta(microseconds=1) <= policy.delay_for(attempt) <= plain


@given(bases, factors, caps, st.integers(min_value=0, max_value=2_000))
def test_without_jitter_the_delay_never_decreases(
    base: float, factor: float, cap: float, attempt: int
) -> None:
    policy = RetryPolicy(base, factor, cap, jitter=0)
    assert policy.delay_for(attempt) <= policy.delay_for(attempt + 1)


@given(
    st.floats(min_value=0.001, max_value=1000),
    st.floats(min_value=1.01, max_value=10),
    st.floats(min_value=0.001, max_value=MAX_DELAY_SECONDS),
)
def test_without_jitter_the_delay_grows_strictly_until_it_reaches_the_cap(
    base: float, factor: float, cap: float
) -> None:
    policy = RetryPolicy(base, factor, cap, jitter=0)
    previous = policy.raw_delay_seconds(1)
    for attempt in range(2, 5_000):
        current = policy.raw_delay_seconds(attempt)
        if previous >= cap:
            assert current == cap, "left the cap once it was reached"
            break
        assert current > previous, f"stopped growing below the cap at attempt {attempt}"
        previous = current
    else:
        pytest.fail("never reached the cap")
    assert policy.delay_for(10**6) == timedelta(seconds=cap)
