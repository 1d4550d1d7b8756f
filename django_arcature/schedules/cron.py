"""Cron expressions on the wall clock of an IANA time zone, turned into UTC slot instants.

The matching of an expression is cronsim's (an optional dependency: install
``django-arcature[schedules]``). What this module adds is the one rule cron
implementations disagree on, made explicit: how a *wall-clock* time maps to an
instant when daylight saving moves the clock.

- A local time that occurs twice (the clock falls back) fires once, at its
  first occurrence.
- A local time that does not exist (the clock springs forward) fires once, at
  the end of the gap; several such times collapse into that one instant.

cronsim is iterated on naive local times (no zone), so it only ever answers
"which wall-clock times match"; the mapping below is then monotonic, which is
what lets :func:`slots_after` and :func:`slots_before` walk in either direction
and drop duplicates by comparing with the previous instant.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "CronUnavailable",
    "InvalidSchedule",
    "cron_available",
    "local_to_instant",
    "next_slots",
    "slots_after",
    "slots_before",
    "validate_expression",
    "zone",
]

#: The extra that brings the cron library.
EXTRA_HINT = "pip install 'django-arcature[schedules]' (which installs cronsim)"


class InvalidSchedule(ValueError):
    """A cron expression or time zone that cannot be evaluated."""


class CronUnavailable(ImportError):
    """Schedules are used but the optional cron library is not installed."""


def cron_available() -> bool:
    """True when cronsim can be imported (without importing it)."""
    return importlib.util.find_spec("cronsim") is not None


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError as exc:  # pragma: no cover - exercised by the system check test
        raise CronUnavailable(f"periodic schedules need cronsim: {EXTRA_HINT}") from exc
    return cronsim


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``, or :class:`InvalidSchedule`."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidSchedule(f"unknown time zone {name!r}") from exc


def validate_expression(expression: str) -> None:
    """Raise :class:`InvalidSchedule` unless ``expression`` is a cron expression we can run.

    Five fields (minute first) or six (seconds first, as cronsim reads them).
    """
    cronsim = _cronsim()
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidSchedule("a cron expression is required")
    try:
        iterator = cronsim.CronSim(expression, datetime(2000, 1, 1))
        next(iterator)
    except cronsim.CronSimError as exc:
        raise InvalidSchedule(f"invalid cron expression {expression!r}: {exc}") from exc
    except StopIteration as exc:
        raise InvalidSchedule(f"cron expression {expression!r} never fires") from exc


def _walk(expression: str, start: datetime, *, reverse: bool = False) -> Iterator[datetime]:
    """cronsim's walk over naive wall-clock times; a bad expression is InvalidSchedule."""
    cronsim = _cronsim()
    try:
        walker = cronsim.CronSim(expression, start, reverse=reverse)
    except cronsim.CronSimError as exc:
        raise InvalidSchedule(f"invalid cron expression {expression!r}: {exc}") from exc
    return iter(walker)


def local_to_instant(naive: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant at which the wall-clock time ``naive`` fires in ``tz``.

    Ambiguous times take their first occurrence (``fold=0``); nonexistent ones
    the first instant after the gap, found by bisection between the two
    readings of the offset (a gap is at most a few hours, so ~15 steps).
    """
    first = naive.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) == naive:
        return first
    # Nonexistent: fold=0 reads the offset from before the jump (an instant after
    # the gap), fold=1 the one from after it (an instant before the gap).
    other = naive.replace(tzinfo=tz, fold=1).astimezone(UTC)
    low, high = min(first, other), max(first, other)
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(tz).replace(tzinfo=None) >= naive:
            high = middle
        else:
            low = middle
    # Zone transitions happen on whole seconds: snap to the second.
    snapped = high.replace(microsecond=0)
    if snapped.astimezone(tz).replace(tzinfo=None) < naive:
        snapped += timedelta(seconds=1)
    return snapped


def _local_naive(instant: datetime, tz: ZoneInfo) -> datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def _fold_shift(instant: datetime, tz: ZoneInfo) -> timedelta:
    """How far the wall clock went back, if ``instant`` is in a repeated hour's second pass."""
    local = instant.astimezone(tz)
    naive = local.replace(tzinfo=None)
    before = naive.replace(tzinfo=tz, fold=0).utcoffset()
    after = naive.replace(tzinfo=tz, fold=1).utcoffset()
    if before is None or after is None or before == after or local.fold == 0:
        return timedelta(0)
    return abs(before - after)


def slots_after(expression: str, timezone: str, after: datetime) -> Iterator[datetime]:
    """Every slot instant strictly after ``after`` (aware), ascending, without duplicates."""
    tz = zone(timezone)
    after = after.astimezone(UTC)
    previous = after
    for naive in _walk(expression, _local_naive(after, tz)):
        instant = local_to_instant(naive, tz)
        if instant > previous:
            previous = instant
            yield instant


def slots_before(expression: str, timezone: str, until: datetime) -> Iterator[datetime]:
    """Every slot instant at or before ``until`` (aware), descending, without duplicates."""
    tz = zone(timezone)
    until = until.astimezone(UTC)
    # In the second pass of a repeated hour, wall-clock times up to an hour ahead
    # still map to first-pass instants before ``until``: start the walk there.
    start = _local_naive(until, tz) + _fold_shift(until, tz)
    previous: datetime | None = None
    # cronsim's reverse walk is exclusive unless the start has microseconds.
    for naive in _walk(expression, start + timedelta(microseconds=1), reverse=True):
        instant = local_to_instant(naive, tz)
        if instant > until:
            continue
        if previous is None or instant < previous:
            previous = instant
            yield instant


def next_slots(expression: str, timezone: str, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` slot instants after ``after`` (for listings and the admin)."""
    slots: list[datetime] = []
    for instant in slots_after(expression, timezone, after):
        slots.append(instant)
        if len(slots) >= count:
            break
    return slots
