"""A worker's periodic duties: firing schedules and pruning finished jobs, on a timer.

They run on one daemon thread of their own, with their own database
connection, so a prune batch or a schedule evaluation never delays a claim or
a completion on the worker's main loop; the loop only starts and stops them.
A database fault here is logged and retried with backoff; it never stops the
worker, and it loses nothing (a slot not fired yet is fired by the next
evaluation, by this worker or another).
"""

from __future__ import annotations

import logging
import random
import threading
import time

from django.db import connections

logger = logging.getLogger(__name__)

__all__ = ["Duties"]

#: Pause between prune batches while a backlog remains (spreads the deletes out).
BACKLOG_PAUSE = 0.2
MAX_FAULT_PAUSE = 30.0


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

    def start(self) -> None:
        if self.runner is None and (self.retention is None or not self.retention.enabled):
            return
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        pause = 0.5
        try:
            while not self._stop.is_set():
                try:
                    wait = self.run_due()
                    pause = 0.5
                except Exception as exc:  # the database went away, a bad row: log, back off
                    logger.warning(
                        "periodic duties failed (%s: %s); retrying in %.1fs",
                        type(exc).__name__,
                        exc,
                        pause,
                    )
                    _close(self.using)
                    wait = pause
                    pause = min(pause * 2, MAX_FAULT_PAUSE)
                self._stop.wait(wait)
        finally:
            _close(self.using)

    def run_due(self) -> float:
        """Do whatever is due now; returns the seconds until something is due again."""
        now = time.monotonic()
        waits = [5.0]
        if self.runner is not None:
            if not self._synced:
                from django_arcature.schedules.sync import sync_code_schedules

                sync_code_schedules(self.using)
                self._synced = True
            if self.runner.due():
                self.runner.tick()
            waits.append(self.runner.next_at - time.monotonic())
        retention = self.retention
        if retention is not None and retention.enabled:
            if now >= self._next_prune:
                self._next_prune = now + self._prune_once()
            waits.append(self._next_prune - time.monotonic())
        return max(min(waits), 0.0)

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
