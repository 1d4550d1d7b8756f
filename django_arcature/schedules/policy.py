"""Which slots to fire now: the missed-slot policies, pure (no database, clock passed in).

A schedule remembers the last slot it fired (its *watermark*). Every slot after
the watermark and at or before the database's "now" is due; the policy decides
which of them become jobs:

- ``latest`` (default): only the most recent due slot, once. After downtime
  the job runs once, not once per missed slot.
- ``all``: every due slot, oldest first, but at most ``catch_up`` of them (the
  most recent ones): a week of downtime on a per-minute schedule does not
  flood the queue.
- ``skip``: only a slot that is on time (at most :data:`ON_TIME` old); after a
  longer outage nothing fires until the next slot.

Whatever the policy, the watermark then moves to the newest due slot, so a
skipped slot is never reconsidered.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .cron import slots_before

__all__ = ["ALL", "LATEST", "ON_TIME", "POLICIES", "SKIP", "Due", "due_slots"]

LATEST = "latest"
ALL = "all"
SKIP = "skip"
POLICIES = (LATEST, ALL, SKIP)

#: A slot evaluated within this long after its instant is on time (``skip`` fires it).
ON_TIME = timedelta(seconds=60)
#: The most slots ``all`` fires at once, whatever ``catch_up`` says.
MAX_CATCH_UP = 1000


@dataclass(frozen=True)
class Due:
    """What one evaluation decided: the slots to fire (ascending) and the new watermark."""

    fire: tuple[datetime, ...]
    watermark: datetime | None  # None: nothing was due, leave the watermark alone


def due_slots(
    expression: str,
    timezone: str,
    *,
    watermark: datetime,
    now: datetime,
    policy: str = LATEST,
    catch_up: int = 1,
) -> Due:
    """The slots in ``(watermark, now]`` that ``policy`` fires, and the watermark after them."""
    if policy not in POLICIES:
        raise ValueError(f"unknown missed-slot policy {policy!r}; use one of {POLICIES}")
    wanted = 1 if policy != ALL else max(1, min(catch_up, MAX_CATCH_UP))
    found: list[datetime] = []
    for instant in slots_before(expression, timezone, now):
        if instant <= watermark:
            break
        found.append(instant)
        if len(found) >= wanted:
            break
    if not found:
        return Due((), None)
    newest = found[0]
    if policy == SKIP and now - newest > ON_TIME:
        return Due((), newest)
    return Due(tuple(reversed(found)), newest)
