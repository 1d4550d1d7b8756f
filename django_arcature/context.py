"""What a running handler can learn about its own job: ``current_job()``.

A worker cannot stop a Python thread from the outside. When a job's claim is
lost (its lease was swept, an operator cancelled it), its attempt timed out,
or the worker is shutting down, the worker can only *tell* the handler, which
then decides to stop early. Long handlers should check ``current_job().cancelled``
between steps (or sleep with ``current_job().wait(seconds)``) so they stop
doing work whose result would be fenced out anyway.
"""

from __future__ import annotations

import contextvars
import threading
import uuid
from dataclasses import dataclass, field

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

    @property
    def cancelled(self) -> bool:
        """True once the worker has given up on this attempt: stop and return soon."""
        return self.cancel_event.is_set()

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
