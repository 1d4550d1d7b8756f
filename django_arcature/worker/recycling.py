"""When a worker should end itself: ``--max-memory``, ``--max-runtime``, and drain mode.

Recycling ends the worker the clean way, as SIGTERM does (stop claiming, hand
unstarted jobs back, let running ones finish within the shutdown timeout), and
the process exits 0 so that its supervisor starts a fresh one.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

__all__ = ["Drain", "Recycler", "rss_mb"]

#: How often the resident memory is read (a /proc read, but not every loop turn).
MEMORY_CHECK_SECONDS = 1.0


def rss_mb() -> float:
    """This process's resident memory now, in MiB (peak RSS where /proc is missing)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1024 / 1024
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1024 / 1024 if sys.platform == "darwin" else peak / 1024


class Recycler:
    """Says why the worker should stop now, or None."""

    def __init__(
        self,
        *,
        max_memory_mb: float | None = None,
        max_runtime: float | None = None,
        memory: Callable[[], float] = rss_mb,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_memory_mb is not None and max_memory_mb <= 0:
            raise ValueError("max_memory_mb must be above 0")
        if max_runtime is not None and max_runtime <= 0:
            raise ValueError("max_runtime must be above 0")
        self.max_memory_mb = max_memory_mb
        self.max_runtime = max_runtime
        self._memory = memory
        self._clock = clock
        self._started = clock()
        self._next_memory_check = 0.0

    def reason(self) -> str | None:
        now = self._clock()
        if self.max_runtime is not None and now - self._started >= self.max_runtime:
            return f"ran for {now - self._started:.0f}s (--max-runtime {self.max_runtime:g}s)"
        if self.max_memory_mb is not None and now >= self._next_memory_check:
            self._next_memory_check = now + MEMORY_CHECK_SECONDS
            used = self._memory()
            if used >= self.max_memory_mb:
                return f"uses {used:.0f} MB (--max-memory {self.max_memory_mb:g} MB)"
        return None


class Drain:
    """``--drain``: run until no job the worker serves is pending, retries included.

    ``--burst`` stops at the first empty claim, so a job whose retry is due in a
    few seconds is left behind; draining waits for it (and for jobs enqueued
    with a delay), up to ``timeout`` seconds.
    """

    def __init__(self, timeout: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        if timeout is not None and timeout <= 0:
            raise ValueError("drain timeout must be above 0")
        self.timeout = timeout
        self._clock = clock
        self._started = clock()

    def timed_out(self) -> bool:
        return self.timeout is not None and self._clock() - self._started >= self.timeout


def pending_left(using: str, queues: list[str] | None, exclude: set[str]) -> int:
    """How many jobs the worker serves are still pending, due now or later."""
    from django_arcature.models import Job, JobStatus

    rows = Job.objects.using(using).filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
    if queues is not None:
        rows = rows.filter(queue__in=queues)
    if exclude:
        rows = rows.exclude(queue__in=exclude)
    return int(rows.count())
