"""The ARCATURE setting: every key's good and bad values, and what the error tells you."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_arcature.conf import (
    DEFAULTS,
    MAX_LEASE_SECONDS,
    ArcatureSettings,
    configured,
    get_settings,
)
from django_arcature.conf import validate as validate_settings
from django_arcature.core.retry import MAX_DELAY_SECONDS

# Per key: values that must be accepted, and values that must be refused.
GOOD: dict[str, list[Any]] = {
    "LEASE_SECONDS": [1, 30, MAX_LEASE_SECONDS],
    "POLL_INTERVAL": [0.01, 1, 2.5],
    "BATCH_SIZE": [1, 50, 10_000],
    "BATCH_SIZE_MAX": [None, 1, 200, 10_000],
    "CONCURRENCY": [1, 8, 1024],
    "MAX_ATTEMPTS": [1, 3, 100],
    "TIMEOUT": [None, 0.5, 60, 7 * 24 * 3600],
    "MAX_ABANDONED_THREADS": [0, 10, 10_000],
    "RETRY_BASE_SECONDS": [0, 0.5, 2],
    "RETRY_FACTOR": [1, 1.5, 3],
    "RETRY_MAX_SECONDS": [600, 3600.0, MAX_DELAY_SECONDS],
    "RETRY_JITTER": [0, 0.1, 1],
    "MESSAGE_MAX_BYTES": [64, 2048, 10**6],
    "TRACEBACK_MAX_BYTES": [64, 32768],
    "SWEEP_INTERVAL": [0.1, 5],
    "SHUTDOWN_TIMEOUT": [0, 30.0],
    "DEFAULT_QUEUE": ["default", "email", "q" * 100],
    "USE_LISTEN_NOTIFY": [True, False],
    "DATABASE": [None, "default"],
    "LISTEN_DATABASE": [None, "default"],
    "WAKE_HINTS": [True, False],
    "WAKE_HINT_DIR": [None, "/tmp/arcature", "/run/arcature-wake"],
    "EAGER": [True, False],
    "MAX_PAYLOAD_BYTES": [1024, 1024 * 1024, 4 * 1024 * 1024],
    "QUEUES": [None, {}, {"email": {"concurrency": 5, "rate": "100/m"}}],
    "RETENTION": [None, {}, {"succeeded": "7d", "dead": 86400, "queues": {"x": {"dead": None}}}],
    "ADMIN_SEARCH_WINDOW": [None, 1, 100_000, 100_000_000],
    "WORKFLOW_MAX_NODES": [1, 10_000, 10_000_000],
    "WORKFLOW_MAX_EDGES_PER_NODE": [1, 10_000],
    "BATCH_MAX_MEMBERS": [1, 100_000],
    "UPSTREAM_MAX_BYTES": [1024, 1024 * 1024],
    "MAX_SNOOZES": [0, 100],
    "PROGRESS_INTERVAL": [0, 0.5, 1.0, 3600],
    "DURABLE_CLAIMS": [True, False],
}
BAD: dict[str, list[Any]] = {
    "MAX_PAYLOAD_BYTES": [0, 1023, 4 * 1024 * 1024 + 1, 1.5, "1MiB", True, None],
    "LEASE_SECONDS": [0, -5, 0.5, 30.0, "30", True, None, MAX_LEASE_SECONDS + 1],
    "POLL_INTERVAL": [0, -1, -0.5, "1", None, math.nan, math.inf, False],
    "BATCH_SIZE": [0, -1, 10_001, 2.0, "50", True],
    "BATCH_SIZE_MAX": [0, -1, 10_001, 200.0, "200", True],
    "CONCURRENCY": [0, 1025, 1.5, None],
    "MAX_ATTEMPTS": [0, -1, 2.5, "3", True],
    "TIMEOUT": [0, -1, "60", math.inf, math.nan, 7 * 24 * 3600 + 1, 1e10],
    "MAX_ABANDONED_THREADS": [-1, 10_001, 2.0, "10", True, None],
    "RETRY_BASE_SECONDS": [-1, "2", None, math.nan],
    "RETRY_FACTOR": [0.5, 0, -2, "2", math.inf],
    "RETRY_MAX_SECONDS": [-1, MAX_DELAY_SECONDS + 1, math.inf, None],
    "RETRY_JITTER": [-0.1, 1.1, "0.1", math.nan],
    "MESSAGE_MAX_BYTES": [63, 0, 2048.0, None],
    "TRACEBACK_MAX_BYTES": [10, -1, "big"],
    "SWEEP_INTERVAL": [0, -5, None],
    "SHUTDOWN_TIMEOUT": [-1, None, math.nan],
    "DEFAULT_QUEUE": ["", "q" * 101, None, 3],
    "USE_LISTEN_NOTIFY": [1, 0, "yes", None],
    "DATABASE": ["no-such-alias", "", 1],
    "LISTEN_DATABASE": ["no-such-alias", "", 1],
    "WAKE_HINTS": [1, "yes", None],
    "WAKE_HINT_DIR": ["relative/dir", "", "/" + "x" * 90, 3],
    "EAGER": [1, "False", None],
    "QUEUES": [[], {"email": {"concurrency": 0}}, {"email": {"rate": "lots"}}],
    "RETENTION": ["7d", {"pending": "1d"}, {"succeeded": "soon"}],
    "ADMIN_SEARCH_WINDOW": [0, -1, 100_000_001, 1000.0, "100000", True],
    "WORKFLOW_MAX_NODES": [0, -1, 10_000_001, 10.0, "10000", True, None],
    "WORKFLOW_MAX_EDGES_PER_NODE": [0, 1.5, None],
    "BATCH_MAX_MEMBERS": [0, "1", None],
    "UPSTREAM_MAX_BYTES": [1023, 64 * 1024 * 1024 + 1, None],
    "MAX_SNOOZES": [-1, 1.0, None, True],
    "PROGRESS_INTERVAL": [-0.1, 3601, float("nan"), None, "1"],
    "DURABLE_CLAIMS": [1, 0, "True", None],
}


def test_every_key_has_good_and_bad_examples() -> None:
    assert set(GOOD) == set(DEFAULTS) == set(BAD)


def test_defaults_are_valid_and_typed() -> None:
    assert validate_settings(dict(DEFAULTS)) == []
    assert validate_settings(None) == []
    assert validate_settings({}) == []
    conf = ArcatureSettings()
    for key, value in DEFAULTS.items():
        assert getattr(conf, key.lower()) == value


@pytest.mark.parametrize(("key", "value"), [(k, v) for k, vs in GOOD.items() for v in vs])
def test_good_value_is_accepted(key: str, value: Any) -> None:
    assert validate_settings({key: value}) == []
    with override_settings(ARCATURE={key: value}):
        assert getattr(get_settings(), key.lower()) == value


@pytest.mark.parametrize(("key", "value"), [(k, v) for k, vs in BAD.items() for v in vs])
def test_bad_value_is_refused_saying_what_to_use(key: str, value: Any) -> None:
    problems = validate_settings({key: value})
    assert len(problems) == 1
    assert problems[0].startswith(f"ARCATURE[{key!r}] = {value!r} is invalid: use ")
    with (
        override_settings(ARCATURE={key: value}),
        pytest.raises(ImproperlyConfigured, match=rf"ARCATURE\['{key}'\]"),
    ):
        get_settings()


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("LEASE_SECOND", "LEASE_SECONDS"),
        ("lease_seconds", "LEASE_SECONDS"),
        ("POLL_INTERVALL", "POLL_INTERVAL"),
        ("RETRY_MAX", "RETRY_MAX_SECONDS"),
    ],
)
def test_misspelt_key_is_refused_with_a_suggestion(key: str, suggestion: str) -> None:
    (problem,) = validate_settings({key: 1})
    assert f"ARCATURE[{key!r}] is not a known setting." in problem
    assert f"Did you mean {suggestion!r}?" in problem
    assert "Known keys: ADMIN_SEARCH_WINDOW, BATCH_MAX_MEMBERS, BATCH_SIZE, " in problem


def test_unrelated_key_is_refused_without_a_guess() -> None:
    (problem,) = validate_settings({"COLOUR": "blue"})
    assert "is not a known setting." in problem
    assert "Did you mean" not in problem


def test_every_problem_is_reported_at_once() -> None:
    problems = validate_settings({"LEASE_SECONDS": 0, "POLL_INTERVAL": -1, "NOPE": 1})
    assert len(problems) == 3


def test_setting_must_be_a_dict() -> None:
    assert validate_settings([("LEASE_SECONDS", 3)]) == ["ARCATURE must be a dict, not list."]
    with override_settings(ARCATURE="LEASE_SECONDS=3"), pytest.raises(ImproperlyConfigured):
        get_settings()


def test_retry_cap_below_base_is_refused() -> None:
    (problem,) = validate_settings({"RETRY_BASE_SECONDS": 10, "RETRY_MAX_SECONDS": 5})
    assert "RETRY_MAX_SECONDS" in problem
    assert "raise the cap or lower the base" in problem
    # Against the default base (2 s) too.
    assert validate_settings({"RETRY_MAX_SECONDS": 1}) != []


def test_get_settings_merges_over_the_defaults() -> None:
    with override_settings(ARCATURE={"LEASE_SECONDS": 7, "DEFAULT_QUEUE": "mail"}):
        conf = get_settings()
    assert conf.lease_seconds == 7
    assert conf.default_queue == "mail"
    assert conf.batch_size == DEFAULTS["BATCH_SIZE"]


def test_configured_tells_a_key_set_to_its_default_from_one_left_out() -> None:
    """The snapshot cannot: ``BATCH_SIZE = 50`` and no ``BATCH_SIZE`` read the same there."""
    with override_settings(ARCATURE={"BATCH_SIZE": DEFAULTS["BATCH_SIZE"]}):
        assert configured("BATCH_SIZE")
        assert not configured("BATCH_SIZE_MAX")
        assert get_settings().batch_size == DEFAULTS["BATCH_SIZE"]
    with override_settings(ARCATURE={"LEASE_SECONDS": 7}):
        assert not configured("BATCH_SIZE")
    with override_settings(ARCATURE=None):
        assert not configured("BATCH_SIZE")


def test_get_settings_reads_the_setting_each_time() -> None:
    with override_settings(ARCATURE={"MAX_ATTEMPTS": 9}):
        assert get_settings().max_attempts == 9
    with override_settings(ARCATURE=None):
        assert get_settings() == ArcatureSettings()
