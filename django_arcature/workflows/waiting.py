"""``job.wait()``: block (or ``await``) until a job has finished.

On PostgreSQL the waiter is woken by a notification: the process's one LISTEN
connection (:mod:`~django_arcature.workflows.done_listener`) hears
``arcature_done`` for the jobs its waiters marked, so a waiter reads the job
once when it starts and once when told, and a completion nobody waits for
sends nothing. Elsewhere, behind a transaction-mode pooler, or while that
connection is down, it polls with backoff (5 ms doubling to 250 ms): one
indexed primary-key read per poll. Nobody waiting costs nothing on any database.

A waiter inside a transaction would never see the worker's commit (its
snapshot, or the rows it holds), so it is refused there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

from django.db import connections

from django_arcature.db.broken_connection import discard_broken_connection
from django_arcature.exceptions import JobWaitTimeout
from django_arcature.states import FINISHED_STATUSES

from .done_listener import DoneListener, Waiter, listener_for, mark_waited

if TYPE_CHECKING:
    from django_arcature.models import Job

FIRST_POLL = 0.005
LONGEST_POLL = 0.25
#: While notified, a waiter still reads its job this often, in case its
#: notification and the listener's own re-read are both lost (a half-open socket).
LISTENING_POLL = 2.0


def _alias(job: Job) -> str:
    return job._state.db or "default"


def _check(job: Job, timeout: float) -> None:
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout < 0:
        raise ValueError(f"timeout is a number of seconds, not {timeout!r}")
    if connections[_alias(job)].in_atomic_block:
        raise RuntimeError(
            "job.wait() inside a transaction would never see the job finish: the "
            "job is not even visible to a worker until this transaction commits"
        )
    # A thread of the caller's own, outside a request, may hold a connection the
    # server dropped since (:mod:`django_arcature.db.broken_connection`).
    discard_broken_connection(connections[_alias(job)])


def _finished(job: Job) -> bool:
    job.refresh_from_db()
    return job.status in FINISHED_STATUSES


def _look(job: Job, mark: bool) -> bool:
    """Read the job; first ``mark`` it (only ever with the listener LISTENing).

    Marking before reading is what closes the lost wake-up: a completion that
    commits after the mark notifies, one that committed before is read here.
    """
    if mark:
        mark_waited(job.pk, _alias(job))
    return _finished(job)


def _timed_out(job: Job, timeout: float) -> JobWaitTimeout:
    return JobWaitTimeout(f"job {job.id} ({job.task_name}) still {job.status} after {timeout:g}s")


class _Schedule:
    """When a waiter reads next: at once when woken, else by backoff or the safety poll."""

    def __init__(self, listener: DoneListener | None, deadline: float) -> None:
        self.listener = listener
        self.deadline = deadline
        self.pause = FIRST_POLL
        self.marked = False

    def mark_now(self) -> bool:
        """Whether this look should mark the job (the listener listens, not marked yet)."""
        listening = self.listener is not None and self.listener.listening
        if listening and not self.marked:
            self.marked = True
            return True
        return False

    def next_wait(self) -> float | None:
        """Seconds to sleep (unless woken) before the next look; None once past the deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return None
        if self.marked and self.listener is not None and self.listener.listening:
            return min(left, LISTENING_POLL)
        wait = min(self.pause, left)
        self.pause = min(self.pause * 2, LONGEST_POLL)
        return wait


def wait(job: Job, timeout: float = 30.0) -> Job:
    """Return ``job`` refreshed once it is succeeded, dead or cancelled; raise on timeout."""
    _check(job, timeout)
    schedule = _Schedule(listener_for(_alias(job)), time.monotonic() + timeout)
    waiter = Waiter(job.pk)
    if schedule.listener is not None:
        # Until it listens (the first wait of a process opens its connection) we
        # poll; it wakes every waiter once it does, to mark and look again.
        schedule.listener.register(waiter)
    try:
        while True:
            waiter.clear()
            if _look(job, schedule.mark_now()):
                return job
            pause = schedule.next_wait()
            if pause is None:
                raise _timed_out(job, timeout)
            waiter.event.wait(pause)
    finally:
        if schedule.listener is not None:
            schedule.listener.unregister(waiter)


async def async_wait(job: Job, timeout: float = 30.0) -> Job:
    """:func:`wait` for async views: the event loop runs on while the job is awaited.

    Database reads go through ``sync_to_async`` (the connection belongs to its
    thread): on PostgreSQL one when it starts and one per notification (plus a
    safety read every ``LISTENING_POLL`` seconds); the notification itself reaches
    the event loop from the listener's thread with no thread of its own.
    """
    from asgiref.sync import sync_to_async

    def prepare() -> DoneListener | None:
        _check(job, timeout)
        return listener_for(_alias(job))

    listener = await sync_to_async(prepare)()
    schedule = _Schedule(listener, time.monotonic() + timeout)
    waiter = Waiter(job.pk, asyncio.get_running_loop())
    assert waiter.async_event is not None
    if listener is not None:
        listener.register(waiter)
    try:
        while True:
            waiter.clear()
            if await sync_to_async(_look)(job, schedule.mark_now()):
                return job
            pause = schedule.next_wait()
            if pause is None:
                raise _timed_out(job, timeout)
            await _sleep_until(waiter.async_event, pause)
    finally:
        if listener is not None:
            listener.unregister(waiter)


async def _sleep_until(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
