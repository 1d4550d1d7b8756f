"""Evaluating schedules and firing their due slots, exactly once per slot.

Any number of workers may call :meth:`ScheduleRunner.tick` at the same time.
For each schedule with due slots, one transaction

1. moves the schedule's watermark (``last_slot_at``) from the value this worker
   read to the newest due slot, with a compare-and-set ``UPDATE … WHERE
   last_slot_at = <read value>``, and
2. only if that UPDATE changed the row, inserts the slot's job, whose
   ``unique_key`` is derived from (schedule, slot instant).

Two workers that read the same watermark both try step 1; the row lock
(PostgreSQL, MySQL/MariaDB) or the single writer (SQLite) orders them, and
the second one's compare sees the new watermark and changes nothing, so it
inserts nothing. The watermark makes the guarantee hold after the slot's job
has finished (when its unique key is released); the unique key is a second,
independent guard against a double insert while the job is live. No leader
election is involved.

The compare-and-set covers every column that decides which slots are due
(``last_slot_at``, ``enabled``, ``enabled_at``, ``cron``, ``timezone``,
``missed``, ``catch_up``): an evaluation that read the row before an operator
disabled and re-enabled it, or changed its expression, fires nothing, and the
next evaluation decides again on the row as it is.

"Now" is always the database's clock; a worker's own clock only decides when
to look again. :meth:`ScheduleRunner.plan` takes the instant as an argument
so that the model tests (``tests/properties/test_schedules_model.py``) can walk
through days and daylight-saving changes; production reads the database's clock.

One schedule that cannot be evaluated or fired (an expression this host's cron
library cannot read, a task that is gone, a row the database refuses) is
logged with its name and skipped; the others still fire (issue 19, B12). A
lost connection is not one schedule's problem: it ends the tick, and the
duties thread backs off.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import InterfaceError, OperationalError, transaction

from django_arcature.db import DatabaseNow, retry_on_lock_conflict
from django_arcature.db.clock import database_now

from .cron import next_slots
from .enqueue import enqueue_for_schedule
from .keys import slot_key
from .periodic import declared
from .policy import Due, due_slots

logger = logging.getLogger(__name__)

__all__ = ["Fired", "Planned", "ScheduleRunner", "fire_schedule"]

#: The longest a runner waits before looking again (edits in the admin show up by then).
REFRESH_SECONDS = 15.0
#: How long a schedule whose job cannot be enqueued is left alone before the next try.
BROKEN_BACKOFF_SECONDS = 60.0


@dataclass(frozen=True)
class Fired:
    schedule: str
    slot: datetime
    job_id: uuid.UUID


@dataclass(frozen=True)
class Planned:
    """One schedule's due slots, as decided from the row this worker read."""

    schedule: Any
    due: Due


#: Errors that mean the connection, not one schedule, is broken: they end the tick.
CONNECTION_ERRORS = (OperationalError, InterfaceError)
#: Errors that mean the schedule itself cannot fire (its expression, zone, task, or
#: arguments): it is left alone for :data:`BROKEN_BACKOFF_SECONDS`.
BROKEN_ERRORS = (ValueError, LookupError, TypeError, ImportError)
#: The columns an evaluation's compare-and-set checks: everything that decides the slots.
DECIDING_FIELDS = ("last_slot_at", "enabled_at", "cron", "timezone", "missed", "catch_up")


def _unchanged(rows: Any, schedule: Any) -> Any:
    for name in DECIDING_FIELDS:
        value = getattr(schedule, name)
        rows = rows.filter(**({f"{name}__isnull": True} if value is None else {name: value}))
    return rows


def fire_schedule(schedule: Any, due: Due, using: str) -> list[Fired]:
    """Advance ``schedule``'s watermark by compare-and-set and enqueue the due slots' jobs.

    Returns the jobs this call inserted; an empty list when another worker won,
    or when the row changed since ``schedule`` was read (see the module's doc).
    """
    from .models import Schedule

    if due.watermark is None:
        return []

    def operation() -> list[Fired]:
        with transaction.atomic(using=using):
            rows = _unchanged(
                Schedule.objects.using(using).filter(pk=schedule.pk, enabled=True), schedule
            )
            won = rows.update(
                last_slot_at=due.watermark,
                **({"last_fired_at": DatabaseNow()} if due.fire else {}),
            )
            if not won:
                return []
            fired = []
            for slot in due.fire:
                job = enqueue_for_schedule(
                    schedule, using, unique_key=slot_key(schedule.name, slot)
                )
                fired.append(Fired(schedule.name, slot, job.pk))
            if fired:
                Schedule.objects.using(using).filter(pk=schedule.pk).update(
                    last_job_id=fired[-1].job_id
                )
            return fired

    return retry_on_lock_conflict(using, operation)


def _never() -> bool:
    return False


class ScheduleRunner:
    """Decides, for one worker, when to evaluate schedules again and fires what is due."""

    def __init__(self, using: str, refresh_seconds: float = REFRESH_SECONDS) -> None:
        self.using = using
        self.refresh_seconds = refresh_seconds
        self.next_at = 0.0  # time.monotonic() of the next evaluation
        self._broken: dict[str, float] = {}

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    def tick(self, stopping: Callable[[], bool] = _never) -> list[Fired]:
        """Fire every due slot of every enabled schedule this worker may fire.

        ``stopping`` is asked before each schedule fires: a worker that was told
        to stop leaves the rest to the next evaluation (by another worker).
        """
        started = time.monotonic()
        now = database_now(self.using)
        return self.fire(self.plan(now, started=started), now, started=started, stopping=stopping)

    def plan(self, now: datetime, *, started: float | None = None) -> list[Planned]:
        """Read the enabled schedules and decide each one's due slots as of ``now``.

        ``now`` is the database's clock in production (:meth:`tick` reads it).
        """
        from .models import Schedule, ScheduleSource

        started = time.monotonic() if started is None else started
        code = declared()
        planned: list[Planned] = []
        for schedule in Schedule.objects.using(self.using).filter(enabled=True):
            if schedule.source == ScheduleSource.CODE and schedule.name not in code:
                continue  # declared by other code (a rolling deploy): its workers fire it
            if self._broken.get(schedule.name, 0.0) > started:
                continue
            try:
                due = due_slots(
                    schedule.cron,
                    schedule.timezone,
                    watermark=schedule.window_start(),
                    now=now,
                    policy=schedule.missed,
                    catch_up=schedule.catch_up,
                )
            except Exception as exc:
                self._failed(schedule.name, exc, started)
                continue
            planned.append(Planned(schedule, due))
        return planned

    def fire(
        self,
        planned: list[Planned],
        now: datetime,
        *,
        started: float | None = None,
        stopping: Callable[[], bool] = _never,
    ) -> list[Fired]:
        """Fire what :meth:`plan` decided (each schedule on its own), and set ``next_at``."""
        started = time.monotonic() if started is None else started
        fired: list[Fired] = []
        soonest: datetime | None = None
        for item in planned:
            if stopping():
                break
            schedule = item.schedule
            try:
                fired += fire_schedule(schedule, item.due, self.using)
                upcoming = next_slots(schedule.cron, schedule.timezone, now, 1)
            except CONNECTION_ERRORS:
                raise
            except Exception as exc:
                self._failed(schedule.name, exc, started)
                continue
            if upcoming and (soonest is None or upcoming[0] < soonest):
                soonest = upcoming[0]
        wait = self.refresh_seconds
        if soonest is not None:
            wait = min(wait, max((soonest - now).total_seconds(), 0.0))
        # Wake just after the slot on the database's clock, measured from when we read it.
        self.next_at = started + wait + 0.005
        for done in fired:
            logger.info(
                "schedule %s fired slot %s as job %s", done.schedule, done.slot, done.job_id
            )
        return fired

    def _failed(self, name: str, exc: Exception, started: float) -> None:
        """Log one schedule's failure; a schedule that is itself broken is left alone a while."""
        if isinstance(exc, BROKEN_ERRORS):
            # A bad expression, no cron library, an unknown task, arguments that do not bind.
            logger.error("schedule %r cannot fire: %s", name, exc)
            self._broken[name] = started + BROKEN_BACKOFF_SECONDS
        else:  # a row the database refused, a bug: the next evaluation tries again
            logger.error(
                "schedule %r cannot fire: %s: %s", name, type(exc).__name__, exc, exc_info=exc
            )
