"""What a running handler can learn about its own job: ``current_job()``.

A worker cannot stop a Python thread from the outside. When a job's claim is
lost (its lease was swept, an operator cancelled it), its attempt timed out,
or the worker is shutting down, the worker can only *tell* the handler, which
then decides to stop early. Long handlers should check ``current_job().cancelled``
between steps (or sleep with ``current_job().wait(seconds)``) so they stop
doing work whose result would be fenced out anyway.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JobContext", "current_job"]

#: Why a handler was asked to stop.
CANCEL_REASONS = ("lost", "timeout", "shutdown")


@dataclass
class JobContext:
    """The job a handler is running, and a flag the worker raises to ask it to stop."""

    job_id: uuid.UUID
    task_name: str
    queue: str
    attempt: int
    max_attempts: int
    worker_id: str = ""
    cancel_event: threading.Event = field(default_factory=threading.Event, repr=False)
    #: ``"lost"``, ``"timeout"`` or ``"shutdown"`` once cancelled, else ``""``.
    cancel_reason: str = ""
    #: The claim this attempt runs under: what :meth:`progress` is fenced on.
    claim_token: uuid.UUID | None = None
    #: When progress was last written (monotonic), for the throttle.
    _progress_at: float = field(default=-1e18, repr=False)

    @property
    def cancelled(self) -> bool:
        """True once the worker has given up on this attempt: stop and return soon."""
        return self.cancel_event.is_set()

    @property
    def cancel_requested(self) -> bool:
        """True once the job was cancelled (an operator, its workflow or batch), its claim
        lost, its attempt timed out or the worker is stopping: stop and return soon.

        An operator's cancel is seen at the worker's next heartbeat, which finds
        the claim gone; whatever the handler returns then is fenced out.
        """
        return self.cancel_event.is_set()

    def upstream(self) -> dict[str, Any]:
        """``{node name: result}`` of this workflow node's direct dependencies.

        Only nodes that succeeded have a result (others map to None). The total
        size is bounded by ``ARCATURE["UPSTREAM_MAX_BYTES"]``; past it this
        raises instead of loading a fan-in's every result into memory.
        """
        from django_arcature.workflows.results import upstream_results

        _refuse_on_event_loop("upstream")
        return upstream_results(self.job_id)

    async def aupstream(self) -> dict[str, Any]:
        """:meth:`upstream` for ``async def`` handlers (one read in a worker thread)."""
        return await _off_the_loop(self.upstream)

    def progress(self, fraction: float, message: str = "") -> bool:
        """Report how far the job is (0.0 to 1.0) with a short message; fenced and throttled.

        Written at most once per ``ARCATURE["PROGRESS_INTERVAL"]`` seconds (a tight
        loop cannot flood the database; 1.0 is always written), and only while
        this attempt still holds its claim. Returns whether it was written.
        """
        from django_arcature.workflows.results import write_progress

        if not 0.0 <= float(fraction) <= 1.0:
            raise ValueError(f"progress is a fraction from 0.0 to 1.0, not {fraction!r}")
        _refuse_on_event_loop("progress")
        now = time.monotonic()
        if not write_progress(self, float(fraction), str(message), now, self._progress_at):
            return False
        self._progress_at = now
        return True

    async def aprogress(self, fraction: float, message: str = "") -> bool:
        """:meth:`progress` for ``async def`` handlers (the write in a worker thread)."""
        return await _off_the_loop(self.progress, fraction, message)

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def cancel(self, reason: str) -> None:
        """Raise the flag (called by the worker, not by handlers)."""
        if not self.cancel_reason:
            self.cancel_reason = reason
        self.cancel_event.set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early if cancelled; returns ``cancelled``."""
        return self.cancel_event.wait(seconds)


async def _off_the_loop[T](func: Callable[..., T], *args: Any) -> T:
    """Run ``func`` in a pool thread, closing that thread's connections after it.

    A pool thread's connection would otherwise outlive the attempt, unseen by the
    worker's own connection handling (one more session per worker, held for good).
    Reports are throttled, so a connection per call costs little.
    """
    from asgiref.sync import sync_to_async
    from django.db import connections

    def call() -> T:
        try:
            return func(*args)
        finally:
            connections.close_all()

    return await sync_to_async(call, thread_sensitive=False)()


def _refuse_on_event_loop(name: str) -> None:
    """Say which call to make instead of Django's generic SynchronousOnlyOperation.

    ``upstream()`` and ``progress()`` query the database, which Django refuses on an
    event loop, and an ``async def`` handler runs on one.
    """
    if os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE"):
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    from django.core.exceptions import SynchronousOnlyOperation

    raise SynchronousOnlyOperation(
        f"current_job().{name}() queries the database, which Django refuses on an event "
        f"loop: in an async def handler, use await current_job().a{name}(...)"
    )


_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "arcature_current_job", default=None
)


def current_job() -> JobContext | None:
    """The job the calling handler is running, or None outside a job."""
    return _current.get()


def activate(context: JobContext) -> contextvars.Token[JobContext | None]:
    return _current.set(context)


def deactivate(token: contextvars.Token[JobContext | None]) -> None:
    _current.reset(token)
