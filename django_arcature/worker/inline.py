"""Run one chosen job now, in this process, through the worker's own path.

Shared by ``django_arcature.testing.run_job`` and ``ARCATURE["EAGER"]``: the
job is claimed (fenced, with a fresh token), run by ``dispatch.process`` (the
payload check, the handler, the decision, the attempt log) and completed with
the same fenced write a worker makes. Nothing is skipped, so what a test sees
is what production would do.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections import deque
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from django_arcature.conf import get_settings
from django_arcature.core import eager_hand_off

from . import dispatch

if TYPE_CHECKING:
    from django_arcature.models import Job

__all__ = ["JobNotPending", "run_job"]


class JobNotPending(ValueError):
    """``run_job`` was given a job that is not pending (already run, running or cancelled)."""


def inline_worker_id() -> str:
    return f"inline-{os.getpid()}"


def run_job(
    job: Job | uuid.UUID | str,
    *,
    timeout: float | None = None,
    now: datetime | None = None,
    worker_id: str | None = None,
) -> Job:
    """Run the pending ``job`` once, now, whatever its ``available_at``; return it reloaded.

    One call is one attempt: a job that fails with attempts left comes back
    ``pending`` (its ``last_error`` set, ``available_at`` after the backoff).
    ``timeout`` is off by default: a timed attempt runs on another thread with
    its own database connection, which cannot see the rows a test made inside
    its (uncommitted) transaction. Pass ``timeout=`` to exercise a timeout.
    """
    from django_arcature.models import Job

    if isinstance(job, Job):
        job_id, using = job.pk, job._state.db or Job.objects.db
    else:
        job_id, using = uuid.UUID(str(job)), Job.objects.db
    manager = Job.objects.db_manager(using)
    worker = worker_id or inline_worker_id()
    claimed = manager.claim_job(job_id, worker, get_settings().lease_seconds)
    if claimed is None:
        status = manager.filter(pk=job_id).values_list("status", flat=True).first()
        state = f"is {status}" if status else "does not exist"
        raise JobNotPending(f"job {job_id} {state}; only a pending job can be run")
    completion = dispatch.process(claimed, worker_id=worker, now=now, timeout=timeout)
    # Under EAGER, what the completion enqueues (a batch's callbacks) runs after it:
    # in the drain running, or in one of its own here.
    own = _AfterCompletion(using) if eager_hand_off.running() is None else None
    handing_off = eager_hand_off.draining(own) if own is not None else contextlib.nullcontext()
    with handing_off, eager_hand_off.completing():
        manager.complete_many([completion])
    if own is not None:
        own.run()
    if claimed.undecodable:
        # Written off as malformed: loading the columns that could not be read would
        # fail again, so they are left to load (and fail) only if asked for.
        return manager.defer(*_UNREADABLE_COLUMNS).get(pk=job_id)
    return manager.get(pk=job_id)


class _AfterCompletion:
    """The jobs an eager completion enqueued when no drain was running: run in turn
    (a loop, and their own completions' jobs join it), once that completion is written."""

    def __init__(self, using: str) -> None:
        self.using = using
        self.queue: deque[uuid.UUID] = deque()

    def add(self, job_ids: Iterable[uuid.UUID]) -> None:
        self.queue.extend(job_ids)

    def run(self) -> None:
        from django_arcature.manager.enqueue import eager_runner
        from django_arcature.models import Job

        with eager_hand_off.draining(self):
            while self.queue:
                job = Job(id=self.queue.popleft())
                job._state.adding = False
                job._state.db = self.using
                eager_runner()(job)


#: The columns a claimed row may hold in a form this process cannot decode.
_UNREADABLE_COLUMNS = ("task_name", "queue", "payload", "backend")
