"""Slot arithmetic on fixed instants, around real daylight-saving transitions (no database).

Europe/Paris springs forward on 2026-03-29 at 02:00 CET (01:00 UTC) to 03:00
CEST and falls back on 2026-10-25 at 03:00 CEST (01:00 UTC) to 02:00 CET.
America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC), 2026-11-01
02:00 EDT -> 01:00 EST (06:00 UTC).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from django_arcature.schedules.cron import (
    InvalidSchedule,
    local_to_instant,
    next_slots,
    slots_after,
    slots_before,
    validate_expression,
)
from django_arcature.schedules.keys import slot_key
from django_arcature.schedules.policy import ALL, LATEST, SKIP, due_slots

PARIS = ZoneInfo("Europe/Paris")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def between(expression: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    found = []
    for instant in slots_after(expression, zone, start):
        if instant > end:
            break
        found.append(instant)
    return found


# --- spring forward: local times that do not exist fire once, at the end of the gap ------


def test_daily_job_in_the_spring_gap_fires_once_at_the_end_of_the_gap() -> None:
    slots = between("30 2 * * *", "Europe/Paris", utc(2026, 3, 27), utc(2026, 3, 31))
    assert slots == [
        utc(2026, 3, 27, 1, 30),  # 02:30 CET
        utc(2026, 3, 28, 1, 30),
        utc(2026, 3, 29, 1, 0),  # 02:30 does not exist: 03:00 CEST, once
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
    ]


def test_several_gap_times_collapse_into_one_slot() -> None:
    slots = between("*/30 * * * *", "Europe/Paris", utc(2026, 3, 28, 23, 59), utc(2026, 3, 29, 2))
    # 01:00, 01:30 CET; 02:00, 02:30 (gap) and 03:00 CEST are one instant; 03:30, 04:00 CEST.
    assert slots == [
        utc(2026, 3, 29, 0, 0),
        utc(2026, 3, 29, 0, 30),
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 29, 1, 30),
        utc(2026, 3, 29, 2, 0),
    ]


def test_hourly_at_half_past_fires_once_for_the_missing_hour() -> None:
    slots = between("30 * * * *", "Europe/Paris", utc(2026, 3, 29, 0), utc(2026, 3, 29, 2))
    assert slots == [utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 30)]


def test_new_york_spring_gap() -> None:
    slots = between("15 2 * * *", "America/New_York", utc(2026, 3, 7), utc(2026, 3, 10))
    assert slots == [utc(2026, 3, 7, 7, 15), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 15)]


# --- fall back: local times that occur twice fire once, at their first occurrence ---------


def test_daily_job_in_the_repeated_hour_fires_once() -> None:
    slots = between("30 2 * * *", "Europe/Paris", utc(2026, 10, 24), utc(2026, 10, 27))
    assert slots == [
        utc(2026, 10, 24, 0, 30),  # 02:30 CEST
        utc(2026, 10, 25, 0, 30),  # the first 02:30 (CEST); the second (01:30 UTC) does not fire
        utc(2026, 10, 26, 1, 30),  # 02:30 CET
    ]


def test_hourly_job_skips_the_second_pass_of_the_repeated_hour() -> None:
    slots = between("0 * * * *", "Europe/Paris", utc(2026, 10, 24, 21, 30), utc(2026, 10, 25, 3))
    assert slots == [
        utc(2026, 10, 24, 22),  # 00:00 CEST
        utc(2026, 10, 24, 23),  # 01:00 CEST
        utc(2026, 10, 25, 0),  # 02:00 CEST
        utc(2026, 10, 25, 2),  # 03:00 CET (02:00 CET at 01:00 UTC is the same wall time again)
        utc(2026, 10, 25, 3),
    ]


def test_every_quarter_hour_through_the_fold() -> None:
    slots = between("*/15 * * * *", "Europe/Paris", utc(2026, 10, 24, 23, 50), utc(2026, 10, 25, 2))
    assert slots == [
        utc(2026, 10, 25, 0, 0),
        utc(2026, 10, 25, 0, 15),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 0, 45),
        utc(2026, 10, 25, 2, 0),
    ]


def test_new_york_fall_back() -> None:
    slots = between("30 1 * * *", "America/New_York", utc(2026, 10, 31), utc(2026, 11, 3))
    assert slots == [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]


def test_local_to_instant_rules() -> None:
    assert local_to_instant(datetime(2026, 3, 29, 2, 30), PARIS) == utc(2026, 3, 29, 1)
    assert local_to_instant(datetime(2026, 10, 25, 2, 30), PARIS) == utc(2026, 10, 25, 0, 30)
    assert local_to_instant(datetime(2026, 6, 1, 12), PARIS) == utc(2026, 6, 1, 10)


# --- walking backwards agrees with walking forwards -------------------------------------------


@pytest.mark.parametrize(
    ("expression", "zone", "day"),
    [
        ("*/20 * * * *", "Europe/Paris", utc(2026, 3, 28, 22)),
        ("*/20 * * * *", "Europe/Paris", utc(2026, 10, 24, 22)),
        ("30 2 * * *", "Europe/Paris", utc(2026, 10, 23)),
        ("0 * * * *", "America/New_York", utc(2026, 11, 1, 3)),
        ("*/7 * * * * *", "Europe/Paris", utc(2026, 10, 25, 0, 55)),
    ],
)
def test_latest_slot_before_any_instant_matches_the_forward_walk(
    expression: str, zone: str, day: datetime
) -> None:
    start = day - timedelta(days=2)
    forward = between(expression, zone, start, day + timedelta(hours=6))
    probe = day
    while probe < day + timedelta(hours=5):
        expected = max(slot for slot in forward if slot <= probe)
        assert next(slots_before(expression, zone, probe)) == expected, probe
        probe += timedelta(minutes=7, seconds=13)


def test_slots_before_includes_the_instant_itself() -> None:
    assert next(slots_before("* * * * *", "UTC", utc(2026, 1, 1, 12, 0))) == utc(2026, 1, 1, 12)


# --- expressions -----------------------------------------------------------------------------


def test_six_fields_mean_seconds_first() -> None:
    assert next_slots("*/15 * * * * *", "UTC", utc(2026, 1, 1), 3) == [
        utc(2026, 1, 1, 0, 0, 15),
        utc(2026, 1, 1, 0, 0, 30),
        utc(2026, 1, 1, 0, 0, 45),
    ]


@pytest.mark.parametrize("expression", ["", "61 * * * *", "* * *", "0 0 30 2 *"])
def test_bad_expressions_are_refused(expression: str) -> None:
    with pytest.raises(InvalidSchedule):
        validate_expression(expression)


def test_unknown_zone_is_refused() -> None:
    with pytest.raises(InvalidSchedule, match="unknown time zone"):
        next_slots("* * * * *", "Mars/Olympus_Mons", utc(2026, 1, 1), 1)


# --- missed-slot policies ------------------------------------------------------------------


def test_latest_fires_the_newest_missed_slot_once() -> None:
    due = due_slots(
        "* * * * *", "UTC", watermark=utc(2026, 1, 1, 10), now=utc(2026, 1, 1, 10, 5, 30)
    )
    assert due.fire == (utc(2026, 1, 1, 10, 5),)
    assert due.watermark == utc(2026, 1, 1, 10, 5)


def test_all_fires_every_missed_slot_up_to_the_bound_oldest_first() -> None:
    watermark, now = utc(2026, 1, 1, 10), utc(2026, 1, 1, 10, 5, 30)
    assert due_slots(
        "* * * * *", "UTC", watermark=watermark, now=now, policy=ALL, catch_up=10
    ).fire == tuple(utc(2026, 1, 1, 10, minute) for minute in range(1, 6))
    bounded = due_slots("* * * * *", "UTC", watermark=watermark, now=now, policy=ALL, catch_up=2)
    assert bounded.fire == (utc(2026, 1, 1, 10, 4), utc(2026, 1, 1, 10, 5))
    assert bounded.watermark == utc(2026, 1, 1, 10, 5)  # the older ones are given up


def test_skip_fires_only_an_on_time_slot() -> None:
    late = due_slots(
        "0 * * * *", "UTC", watermark=utc(2026, 1, 1, 8), now=utc(2026, 1, 1, 10, 5), policy=SKIP
    )
    assert late.fire == ()
    assert late.watermark == utc(2026, 1, 1, 10)  # never reconsidered
    on_time = due_slots(
        "0 * * * *",
        "UTC",
        watermark=utc(2026, 1, 1, 8),
        now=utc(2026, 1, 1, 10, 0, 40),
        policy=SKIP,
    )
    assert on_time.fire == (utc(2026, 1, 1, 10),)


def test_nothing_due_leaves_the_watermark_alone() -> None:
    due = due_slots(
        "0 * * * *",
        "UTC",
        watermark=utc(2026, 1, 1, 10),
        now=utc(2026, 1, 1, 10, 59),
        policy=LATEST,
    )
    assert (due.fire, due.watermark) == ((), None)


def test_latest_across_the_spring_gap_fires_the_collapsed_slot_once() -> None:
    due = due_slots(
        "*/30 * * * *",
        "Europe/Paris",
        watermark=utc(2026, 3, 29, 0, 30),
        now=utc(2026, 3, 29, 1, 10),
        policy=ALL,
        catch_up=10,
    )
    assert due.fire == (utc(2026, 3, 29, 1),)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="policy"):
        due_slots("* * * * *", "UTC", watermark=utc(2026, 1, 1), now=utc(2026, 1, 2), policy="x")


# --- slot keys -------------------------------------------------------------------------------


def test_slot_key_is_the_same_whatever_the_zone_of_the_instant() -> None:
    instant = utc(2026, 3, 29, 1)
    assert slot_key("nightly", instant) == slot_key("nightly", instant.astimezone(PARIS))
    assert slot_key("nightly", instant) == "arcature:schedule:nightly@2026-03-29T01:00:00.000000Z"
    assert slot_key("nightly", instant) != slot_key("nightly", instant + timedelta(seconds=1))
    assert slot_key("other", instant) != slot_key("nightly", instant)


def test_slot_key_of_a_long_name_fits_the_column() -> None:
    key = slot_key("x" * 300, utc(2026, 1, 1))
    assert len(key) <= 255
    assert key != slot_key("x" * 299, utc(2026, 1, 1))
