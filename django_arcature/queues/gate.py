"""The worker's claim, filtered by pause flags and capped by fleet-wide queue limits.

A queue with a limit is claimed on its own, in one transaction that

1. locks the queue's control row (``SELECT … FOR UPDATE`` on PostgreSQL and
   MySQL/MariaDB; on SQLite a no-op ``UPDATE`` of the row, which takes the
   database's single write lock),
2. counts the queue's running jobs (and the slots still held by handlers
   whose rows left ``running``) and its starts within the rate period,
3. claims at most what is left (the ordinary claim, limited to this queue),
4. records the new starts on the row, stamped with the database's clock read
   after the claim, and commits, releasing the lock.

Why it is race-free: every claim of a limited queue, by any worker on any
host, holds that row's lock from step 1 to its commit, so such claims run one
after another. Each one's count (step 2) runs after the previous holder
committed, and reads committed data with a fresh snapshot (READ COMMITTED on
PostgreSQL and MySQL, where the count is the first non-locking read after the
lock; SQLite's writer sees the latest commit), so it includes every job the
previous holders claimed. Nothing else makes a job of that queue ``running``.
What takes a job out of ``running`` while its handler may still run (a cancel,
the write-off of a timed-out thread that did not stop, a shutdown's release
after its timeout) first records a slot hold (:mod:`.occupancy`), counted
with the running rows until the handler has ended or its lease-like expiry
passes. So the number of handlers running never exceeds the limit, and the
recorded starts in any period never exceed the rate. Queues without limits
take the unchanged claim: a fleet with no limits pays nothing but a cached
read of the pause flags.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.db.models import F

from django_arcature.db import ClaimedJob, retry_on_lock_conflict
from django_arcature.db.clock import database_now

from .control import ensure_rows, paused_queues
from .limits import QueueLimit, read_limits
from .occupancy import count_held

if TYPE_CHECKING:
    from django_arcature.managers import JobManager

logger = logging.getLogger(__name__)

__all__ = ["QueueGate"]

#: Longest a limited queue that gave nothing is left alone (less with a shorter poll).
QUIET = 0.25


class QueueGate:
    """What one worker may claim: its queues, minus paused and excluded ones, within limits."""

    def __init__(
        self,
        using: str,
        *,
        queues: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        refresh_seconds: float = 1.0,
        limits: dict[str, QueueLimit] | None = None,
    ) -> None:
        self.using = using
        self.queues = list(queues) if queues else None
        self.exclude = set(exclude)
        self.refresh_seconds = refresh_seconds
        self.limits = read_limits() if limits is None else limits
        self._paused: set[str] = set()
        self._paused_read_at: float | None = None
        self._rows_ready = False
        self._turn = 0
        # A limited queue that gave nothing (full, or empty) is not asked again
        # until then: its lock and count are not repeated on every claim.
        self._quiet_until: dict[str, float] = {}

    def invalidate(self, pauses: bool = True) -> None:
        """A notification arrived: ask the quiet limited queues again at the next claim,
        and (``pauses``) read the pause flags again first."""
        if pauses:
            self._paused_read_at = None
        self._quiet_until.clear()

    def _current_pauses(self) -> set[str]:
        now = time.monotonic()
        if self._paused_read_at is None or now - self._paused_read_at >= self.refresh_seconds:
            self._paused = paused_queues(self.using)
            self._paused_read_at = now
        return self._paused

    def serves(self, queue: str) -> bool:
        return (self.queues is None or queue in self.queues) and queue not in self.exclude

    def claim(
        self, manager: JobManager, worker_id: str, lease: float | timedelta, want: int
    ) -> list[ClaimedJob]:
        """Claim up to ``want`` jobs from the queues this worker may take from now."""
        blocked = self._current_pauses() | self.exclude
        limited = [name for name in self.limits if self.serves(name) and name not in blocked]
        if not blocked and not self.limits:
            return manager.claim(worker_id, lease, want, self.queues)
        # Limited queues first (their share is capped anyway), so a backlog in
        # unlimited queues cannot starve them; then the rest of the batch.
        jobs = self._claim_limited_queues(manager, worker_id, lease, want, limited)
        if len(jobs) >= want:
            return jobs
        if self.queues is not None:
            plain = [q for q in self.queues if q not in blocked and q not in self.limits]
            if plain:
                jobs += manager.claim(worker_id, lease, want - len(jobs), plain)
        else:
            jobs += manager.claim(
                worker_id, lease, want - len(jobs), None, exclude=sorted(blocked | set(self.limits))
            )
        return jobs

    def _claim_limited_queues(
        self,
        manager: JobManager,
        worker_id: str,
        lease: float | timedelta,
        want: int,
        limited: list[str],
    ) -> list[ClaimedJob]:
        now = time.monotonic()
        ready = [name for name in limited if self._quiet_until.get(name, 0.0) <= now]
        if not ready:
            return []
        if not self._rows_ready:
            ensure_rows(limited, self.using)
            self._rows_ready = True
        jobs: list[ClaimedJob] = []
        # Take turns over the limited queues, so one busy queue does not starve the rest.
        self._turn = (self._turn + 1) % len(ready)
        for name in ready[self._turn :] + ready[: self._turn]:
            if len(jobs) >= want:
                break
            got = self._claim_limited(manager, worker_id, lease, want - len(jobs), name)
            if not got:
                self._quiet_until[name] = time.monotonic() + min(self.refresh_seconds, QUIET)
            jobs += got
        return jobs

    def _claim_limited(
        self, manager: JobManager, worker_id: str, lease: float | timedelta, want: int, name: str
    ) -> list[ClaimedJob]:
        limit = self.limits[name]

        def operation() -> list[ClaimedJob]:
            with transaction.atomic(using=self.using):
                starts = _lock_row(self.using, name)
                if starts is None:  # the row vanished (deleted in the admin): recreate next time
                    self._rows_ready = False
                    return []
                cap = want
                window_start = 0.0
                if limit.concurrency is not None:
                    cap = min(cap, limit.concurrency - _running(manager, name))
                if limit.rate is not None:
                    window_start = database_now(self.using).timestamp() - limit.per_seconds
                    starts = [t for t in starts if t > window_start]
                    cap = min(cap, limit.rate - len(starts))
                if cap <= 0:
                    return []
                jobs = manager.claim(worker_id, lease, cap, [name])
                if jobs and limit.rate is not None:
                    # Stamped after the claim: no job of this claim started later than this.
                    stamp = database_now(self.using).timestamp()
                    starts.extend([stamp] * len(jobs))
                    _save_starts(self.using, name, starts)
                return jobs

        return retry_on_lock_conflict(self.using, operation)


def _lock_row(using: str, name: str) -> list[float] | None:
    from .models import QueueState

    rows = QueueState.objects.using(using).filter(name=name)
    if connections[using].vendor == "sqlite":
        # No row locks: a write first takes SQLite's one write lock for the transaction.
        if not rows.update(paused=F("paused")):
            return None
    else:
        rows = rows.select_for_update()
    found = list(rows.values_list("recent_starts", flat=True))
    if not found:
        return None
    return [float(t) for t in (found[0] or []) if isinstance(t, int | float)]


def _running(manager: JobManager, name: str) -> int:
    """The slots taken: ``running`` rows, then handlers that hold a slot without one.

    In this order: a cancel or a write-off that commits between the two reads
    is then counted twice (one claim fewer, for one pass), never not at all.
    """
    from django_arcature.models import JobStatus

    rows = int(manager.filter(queue=name, status=JobStatus.RUNNING).count())
    return rows + count_held(manager.db, name)


def _save_starts(using: str, name: str, starts: list[Any]) -> None:
    from .models import QueueState

    QueueState.objects.using(using).filter(name=name).update(recent_starts=starts)
