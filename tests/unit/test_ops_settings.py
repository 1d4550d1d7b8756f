"""Parsing durations, ``ARCATURE["QUEUES"]`` limits and ``ARCATURE["RETENTION"]`` (no database)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_arcature.core.durations import parse_duration
from django_arcature.queues.limits import QueueLimit, parse_limits
from django_arcature.retention.rules import PruneRule, parse_retention


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        (90, 90),
        (1.5, 1.5),
        ("90", 90),
        ("90s", 90),
        ("15m", 900),
        ("12h", 43200),
        ("7d", 604800),
        ("2w", 1209600),
        (timedelta(minutes=2), 120),
        ("0", 0),
    ],
)
def test_durations(raw: object, seconds: float) -> None:
    assert parse_duration(raw).total_seconds() == seconds


@pytest.mark.parametrize("raw", ["", "7 days", "-1", -5, True, None, "1y", float("nan")])
def test_bad_durations(raw: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(raw)


def test_queue_limits() -> None:
    limits = parse_limits(
        {"email": {"concurrency": 5, "rate": "100/m"}, "api": {"rate": "3/15m"}, "big": {}}
    )
    assert limits["email"] == QueueLimit(concurrency=5, rate=100, per_seconds=60)
    assert limits["api"] == QueueLimit(concurrency=None, rate=3, per_seconds=900)
    assert limits["big"] == QueueLimit()
    assert "at most 5 running" in limits["email"].describe()


@pytest.mark.parametrize(
    "raw",
    [
        [],
        {"email": {"concurrency": 0}},
        {"email": {"concurrency": True}},
        {"email": {"rate": "100"}},
        {"email": {"rate": "0/m"}},
        {"email": {"rate": "10/fortnight"}},
        {"email": {"burst": 3}},
    ],
)
def test_bad_queue_limits(raw: object) -> None:
    with pytest.raises(ValueError, match="QUEUES"):
        parse_limits(raw)


def test_retention_rules_with_queue_overrides() -> None:
    conf = parse_retention(
        {"succeeded": "7d", "dead": "30d", "queues": {"email": {"succeeded": "1d", "dead": None}}}
    )
    assert conf.rules() == [
        PruneRule("succeeded", timedelta(days=1), queues=("email",)),
        PruneRule("succeeded", timedelta(days=7), except_queues=("email",)),
        # email keeps its dead jobs forever; every other queue for 30 days
        PruneRule("dead", timedelta(days=30), except_queues=("email",)),
    ]
    assert conf.batch_size == 1000
    assert conf.interval == timedelta(seconds=60)


def test_no_retention_means_nothing_is_pruned() -> None:
    assert parse_retention(None).rules() == []
    assert not parse_retention({}).enabled


@pytest.mark.parametrize(
    "raw",
    [
        {"pending": "1d"},
        {"running": "1d"},
        {"succeeded": "soon"},
        {"queues": {"email": {"pending": "1d"}}},
        {"batch_size": 0},
        {"interval": 0},
        "7d",
    ],
)
def test_bad_retention(raw: object) -> None:
    with pytest.raises(ValueError, match="RETENTION"):
        parse_retention(raw)
