"""The bulk insert's datetime text on MySQL/MariaDB and SQLite is the backends' own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone as django_timezone

from django_arcature.db.rows import _naive_datetime_text


def _recording(seen: list[Any]) -> Any:
    def general(value: Any) -> str:
        seen.append(value)
        return "general"

    return general


ZONES: list[Any] = [UTC, ZoneInfo("Europe/Paris"), timezone(timedelta(hours=5, minutes=30))]

MOMENTS = [
    datetime(2026, 12, 2, 19, 0, 0, tzinfo=UTC),
    datetime(2026, 3, 29, 1, 30, 0, 123, tzinfo=UTC),  # Paris moves its clocks at 2:00
    datetime(2026, 12, 2, 19, 0, 0, 5, tzinfo=ZoneInfo("America/New_York")),
    datetime(9999, 12, 31, 12, 0, tzinfo=UTC),
]


@pytest.mark.parametrize("zone", ZONES, ids=str)
def test_the_text_is_str_of_the_time_made_naive_in_the_connection_zone(zone: Any) -> None:
    general: list[Any] = []
    text = _naive_datetime_text(zone, _recording(general))
    for moment in MOMENTS:
        expected = str(django_timezone.make_naive(moment, zone))
        assert text(moment) == expected
        assert text(moment) == expected  # the kept text of the same object
    assert general == []


def test_two_converters_share_the_last_text_only_for_the_same_object_and_zone() -> None:
    paris, utc = ZoneInfo("Europe/Paris"), UTC
    in_paris = _naive_datetime_text(paris, lambda value: "general")
    in_utc = _naive_datetime_text(utc, lambda value: "general")
    moment = datetime(2026, 12, 2, 19, 0, tzinfo=UTC)
    assert in_paris(moment) == "2026-12-02 20:00:00"
    assert in_utc(moment) == "2026-12-02 19:00:00"  # not the other zone's kept text
    equal = datetime(2026, 12, 2, 19, 0, tzinfo=UTC)  # equal, but another object
    assert in_paris(equal) == "2026-12-02 20:00:00"


def test_anything_but_an_aware_datetime_goes_to_the_general_converter() -> None:
    seen: list[Any] = []
    text = _naive_datetime_text(UTC, _recording(seen))
    naive = datetime(2026, 1, 1)
    for value in (naive, None, "2026-01-01"):
        assert text(value) == "general"
    assert seen == [naive, None, "2026-01-01"]
