"""A worker's periodic duties: firing schedules and pruning finished jobs, on a timer.

They run on one daemon thread of their own, with their own database
connection, so a prune batch or a schedule evaluation never delays a claim or
a completion on the worker's main loop; the loop only starts and stops them.
A database fault here is logged and retried with backoff; it never stops the
worker, and it loses nothing (a slot not fired yet is fired by the next
evaluation, by this worker or another).

Each duty (syncing ``@periodic`` declarations, firing schedules, pruning)
fails on its own: a schedule this host cannot evaluate, or a sync that keeps
failing, never keeps retention from running, nor the reverse (issue 19, B12).
Each backs off on its own too.

Once the worker is asked to stop, no schedule fires here any more (issue 19,
B16): the worker may still wait a while for its running jobs, and a slot due
meanwhile belongs to a worker that keeps running (or to the next one).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError, connections

logger = logging.getLogger(__name__)

__all__ = ["Duties"]

#: Pause between prune batches while a backlog remains (spreads the deletes out).
BACKLOG_PAUSE = 0.2
MAX_FAULT_PAUSE = 30.0


@dataclass
class _Backoff:
    """One duty's own fault backoff (monotonic times)."""

    pause: float = 0.5
    until: float = 0.0

    def failed(self, now: float) -> float:
        self.until = now + self.pause
        wait = self.pause
        self.pause = min(self.pause * 2, MAX_FAULT_PAUSE)
        return wait

    def succeeded(self) -> None:
        self.pause = 0.5
        self.until = 0.0


class Duties:
    """Schedules and retention for one worker process."""

    def __init__(self, using: str, *, schedules: bool = True, retention: bool = True) -> None:
        from django_arcature.retention.rules import read_retention
        from django_arcature.schedules.firing import ScheduleRunner

        self.using = using
        self.runner = ScheduleRunner(using) if schedules else None
        self.retention = read_retention() if retention else None
        self._next_prune = time.monotonic() + random.uniform(0, 5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="arcature-duties", daemon=True)
        self._synced = False
        self._backoff = {name: _Backoff() for name in ("sync", "schedules", "prune")}

    def start(self) -> None:
        if self.runner is None and (self.retention is None or not self.retention.enabled):
            return
        self._thread.start()

    def request_stop(self) -> None:
        """From now on fire no schedule and start no duty (the thread ends soon after)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                wait = self.run_due()
                self._stop.wait(wait)
        finally:
            _close(self.using)

    def run_due(self) -> float:
        """Do whatever is due now, each duty on its own; the seconds until something is due."""
        waits = [5.0]
        if self.runner is not None:
            if not self._synced:
                self._guarded("sync", self._sync)
            runner = self.runner
            if runner.due():
                self._guarded("schedules", lambda: runner.tick(self._stop.is_set))
            waits.append(max(runner.next_at, self._backoff["schedules"].until) - time.monotonic())
        retention = self.retention
        if retention is not None and retention.enabled:
            if time.monotonic() >= self._next_prune:
                self._guarded("prune", self._prune_due)
            waits.append(self._next_prune - time.monotonic())
        return max(min(waits), 0.0)

    def _sync(self) -> None:
        from django_arcature.schedules.sync import sync_code_schedules

        sync_code_schedules(self.using)
        self._synced = True

    def _prune_due(self) -> None:
        self._next_prune = time.monotonic() + self._prune_once()

    def _guarded(self, duty: str, action: Callable[[], object]) -> bool:
        """Run one duty unless stopping or backing off; a failure is logged and backs it off."""
        backoff = self._backoff[duty]
        now = time.monotonic()
        if self._stop.is_set() or now < backoff.until:
            return False
        try:
            action()
        except Exception as exc:  # the database went away, a bad row, no cron library: log
            wait = backoff.failed(now)
            if duty == "prune":
                self._next_prune = backoff.until
            logger.warning(
                "periodic duty %s failed (%s: %s); retrying in %.1fs",
                duty,
                type(exc).__name__,
                exc,
                wait,
            )
            if isinstance(exc, DatabaseError):
                _close(self.using)  # a broken connection must not be reused
            return False
        backoff.succeeded()
        return True

    def _prune_once(self) -> float:
        """One batch per rule; the delay before the next round."""
        from django_arcature.retention.prune import prune_batch

        assert self.retention is not None
        batch = self.retention.batch_size
        backlog = False
        for rule in self.retention.rules():
            deleted = prune_batch(rule, self.using, batch)
            if deleted:
                logger.info("pruned %d job(s): %s", deleted, rule.describe())
            backlog = backlog or deleted >= batch
        if backlog:
            return BACKLOG_PAUSE
        interval = self.retention.interval.total_seconds()
        return interval * random.uniform(0.9, 1.1)  # workers drift apart instead of in step


def _close(using: str) -> None:
    """Close this thread's connection; a broken one may fail to close, which is fine."""
    try:
        connections[using].close()
    except Exception:
        logger.debug("closing the duties connection failed", exc_info=True)
