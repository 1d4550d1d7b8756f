"""``job.wait()``: block (or ``await``) until a job has finished.

Polling with backoff (5 ms doubling to 250 ms): one indexed primary-key read
per poll, and nothing at all while nobody waits. A waiter inside a transaction
would never see the worker's commit (its snapshot, or the rows it holds), so it
is refused there.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from django.db import connections

from django_arcature.exceptions import JobWaitTimeout
from django_arcature.states import FINISHED_STATUSES

if TYPE_CHECKING:
    from django_arcature.models import Job

FIRST_POLL = 0.005
LONGEST_POLL = 0.25


def _check(job: Job, timeout: float) -> None:
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout < 0:
        raise ValueError(f"timeout is a number of seconds, not {timeout!r}")
    if connections[job._state.db or "default"].in_atomic_block:
        raise RuntimeError(
            "job.wait() inside a transaction would never see the job finish: the "
            "job is not even visible to a worker until this transaction commits"
        )


def _finished(job: Job) -> bool:
    job.refresh_from_db()
    return job.status in FINISHED_STATUSES


def _timed_out(job: Job, timeout: float) -> JobWaitTimeout:
    return JobWaitTimeout(f"job {job.id} ({job.task_name}) still {job.status} after {timeout:g}s")


def wait(job: Job, timeout: float = 30.0) -> Job:
    """Return ``job`` refreshed once it is succeeded, dead or cancelled; raise on timeout."""
    _check(job, timeout)
    deadline = time.monotonic() + timeout
    pause = FIRST_POLL
    while not _finished(job):
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(job, timeout)
        time.sleep(min(pause, left))
        pause = min(pause * 2, LONGEST_POLL)
    return job


async def async_wait(job: Job, timeout: float = 30.0) -> Job:
    """:func:`wait` for async views: the event loop runs on while the job is polled."""
    from asgiref.sync import sync_to_async

    # Through sync_to_async like every read: the connection belongs to its thread.
    await sync_to_async(_check)(job, timeout)
    deadline = time.monotonic() + timeout
    pause = FIRST_POLL
    while not await sync_to_async(_finished)(job):
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(job, timeout)
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, LONGEST_POLL)
    return job
