"""Where an eager enqueue made during a completion goes: to the eager drain running.

Under ``ARCATURE["EAGER"]`` an enqueue runs its job at once. A job enqueued by a
*completion* (a batch's callbacks, enqueued by its last member's fenced
completion) would then run inside that completion's transaction, in the middle
of the fan-in code, one level deeper per batch. So while the eager runner writes
a completion (:func:`completing`), an eager enqueue hands its jobs to the drain
running in this context (:func:`defer`), which runs them once the completion is
written. Jobs a *handler* enqueues still run at once, inside the handler.

Only context variables live here (no database, no models), so the manager's
enqueue, the worker's inline runner and the workflow builder can all share it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Protocol

__all__ = ["HandOff", "completing", "defer", "draining", "running"]


class HandOff(Protocol):
    """A drain that takes more jobs to run after the one it is running."""

    def add(self, job_ids: Iterable[uuid.UUID]) -> None: ...


#: The drain running in this context (innermost), if any.
_running: ContextVar[HandOff | None] = ContextVar("arcature_eager_drain", default=None)
#: Whether the eager runner is writing a completion in this context right now.
_completing: ContextVar[bool] = ContextVar("arcature_eager_completing", default=False)


def running() -> HandOff | None:
    return _running.get()


@contextlib.contextmanager
def draining(drain: HandOff) -> Iterator[None]:
    """``drain`` is the one running in this context until the block ends."""
    token = _running.set(drain)
    try:
        yield
    finally:
        _running.reset(token)


@contextlib.contextmanager
def completing() -> Iterator[None]:
    """Around the eager runner's completion write."""
    token = _completing.set(True)
    try:
        yield
    finally:
        _completing.reset(token)


def defer(job_ids: Iterable[uuid.UUID]) -> bool:
    """Whether the jobs of an eager enqueue were handed to the running drain (they
    were enqueued by a completion the eager runner is writing)."""
    drain = _running.get()
    if drain is None or not _completing.get():
        return False
    drain.add(job_ids)
    return True
