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

"Now" is always the database's clock; a worker's own clock only decides when
to look again.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from django_arcature.db import DatabaseNow, retry_on_lock_conflict
from django_arcature.db.clock import database_now

from .cron import next_slots
from .keys import slot_key
from .periodic import declared
from .policy import Due, due_slots

logger = logging.getLogger(__name__)

__all__ = ["Fired", "ScheduleRunner", "fire_schedule"]

#: The longest a runner waits before looking again (edits in the admin show up by then).
REFRESH_SECONDS = 15.0
#: How long a schedule whose job cannot be enqueued is left alone before the next try.
BROKEN_BACKOFF_SECONDS = 60.0


@dataclass(frozen=True)
class Fired:
    schedule: str
    slot: datetime
    job_id: uuid.UUID


def fire_schedule(schedule: Any, due: Due, using: str) -> list[Fired]:
    """Advance ``schedule``'s watermark by compare-and-set and enqueue the due slots' jobs.

    Returns the jobs this call inserted; an empty list when another worker won.
    """
    from django_arcature.models import Job

    from .models import Schedule

    if due.watermark is None:
        return []

    def operation() -> list[Fired]:
        with transaction.atomic(using=using):
            rows = Schedule.objects.using(using).filter(pk=schedule.pk, enabled=True)
            if schedule.last_slot_at is None:
                rows = rows.filter(last_slot_at__isnull=True)
            else:
                rows = rows.filter(last_slot_at=schedule.last_slot_at)
            won = rows.update(
                last_slot_at=due.watermark,
                **({"last_fired_at": DatabaseNow()} if due.fire else {}),
            )
            if not won:
                return []
            fired = []
            manager = Job.objects.db_manager(using)
            for slot in due.fire:
                job = manager.enqueue(
                    schedule.task_name,
                    args=list(schedule.args or []),
                    kwargs=dict(schedule.kwargs or {}),
                    queue=schedule.queue or None,
                    priority=schedule.priority,
                    unique_key=slot_key(schedule.name, slot),
                    backend=schedule.backend,
                )
                fired.append(Fired(schedule.name, slot, job.pk))
            if fired:
                Schedule.objects.using(using).filter(pk=schedule.pk).update(
                    last_job_id=fired[-1].job_id
                )
            return fired

    return retry_on_lock_conflict(using, operation)


class ScheduleRunner:
    """Decides, for one worker, when to evaluate schedules again and fires what is due."""

    def __init__(self, using: str, refresh_seconds: float = REFRESH_SECONDS) -> None:
        self.using = using
        self.refresh_seconds = refresh_seconds
        self.next_at = 0.0  # time.monotonic() of the next evaluation
        self._broken: dict[str, float] = {}

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    def tick(self) -> list[Fired]:
        """Fire every due slot of every enabled schedule this worker may fire."""
        from .models import Schedule, ScheduleSource

        now = database_now(self.using)
        started = time.monotonic()
        code = declared()
        fired: list[Fired] = []
        soonest: datetime | None = None
        for schedule in Schedule.objects.using(self.using).filter(enabled=True):
            if schedule.source == ScheduleSource.CODE and schedule.name not in code:
                continue  # declared by other code (a rolling deploy): its workers fire it
            if self._broken.get(schedule.name, 0.0) > started:
                continue
            try:
                watermark = schedule.last_slot_at or schedule.created_at
                due = due_slots(
                    schedule.cron,
                    schedule.timezone,
                    watermark=watermark,
                    now=now,
                    policy=schedule.missed,
                    catch_up=schedule.catch_up,
                )
                fired += fire_schedule(schedule, due, self.using)
                upcoming = next_slots(schedule.cron, schedule.timezone, now, 1)
            except (ValueError, LookupError, TypeError) as exc:
                # A bad expression, an unknown task, arguments that do not bind:
                # say so, and leave this schedule alone for a while.
                logger.error("schedule %r cannot fire: %s", schedule.name, exc)
                self._broken[schedule.name] = started + BROKEN_BACKOFF_SECONDS
                continue
            if upcoming and (soonest is None or upcoming[0] < soonest):
                soonest = upcoming[0]
        wait = self.refresh_seconds
        if soonest is not None:
            wait = min(wait, max((soonest - now).total_seconds(), 0.0))
        # Wake just after the slot on the database's clock, measured from when we read it.
        self.next_at = started + wait + 0.005
        for item in fired:
            logger.info(
                "schedule %s fired slot %s as job %s", item.schedule, item.slot, item.job_id
            )
        return fired
