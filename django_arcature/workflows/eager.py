"""``ARCATURE["EAGER"]`` for workflows and batches: run what is ready, in order, until nothing is.

A plain eager enqueue runs its job at once through the installed eager runner
(``worker.inline.run_job``: claim, dispatch, fenced write). A workflow's nodes
cannot all run at once: most start ``waiting``, and only the fenced completion
of their upstream releases them, in its own transaction. So ``Workflow.enqueue()``
and ``Batch.enqueue()`` hand their ready jobs to a :class:`Drain`, which runs them
one by one through that same runner and, after each, reads which of the job's
dependents its completion released (``pending``) or let go (``cancelled``, whose
own dependents it then looks at: a ``when="always"`` node may follow a cancelled
one). Nothing here moves a node: the completion did, as in a worker.

It is a loop over a queue, never a recursion, so a 10,000-node chain runs in
constant stack depth.

A batch's callbacks, enqueued by its last member's completion, are handed to the
drain running (:mod:`django_arcature.core.eager_hand_off`) and run next, not inside
that completion's transaction.

As for a plain eager enqueue, each ready job runs one attempt: a node that fails
with attempts left (or snoozes) stays ``pending`` and its dependents stay
``waiting`` (``django_arcature.testing.drain()`` finishes them).
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from django_arcature.conf import get_settings
from django_arcature.core import eager_hand_off
from django_arcature.states import JobStatus

if TYPE_CHECKING:
    from django_arcature.models import Job

__all__ = ["Drain", "enabled", "run"]

logger = logging.getLogger(__name__)


def enabled() -> bool:
    return bool(get_settings().eager)


class Drain:
    """Jobs to run eagerly, in the order they became ready, and the graph that says
    which jobs to look at after each one (job id → its dependents' ids)."""

    def __init__(
        self, using: str, dependents: Mapping[uuid.UUID, Sequence[uuid.UUID]] | None = None
    ) -> None:
        self.using = using
        self.dependents = dependents or {}
        self.queue: deque[uuid.UUID] = deque()
        self.queued: set[uuid.UUID] = set()
        #: What each run returned (the job in its end state), by id.
        self.ran: dict[uuid.UUID, Job] = {}

    def add(self, job_ids: Iterable[uuid.UUID]) -> None:
        for job_id in job_ids:
            if job_id not in self.queued:
                self.queued.add(job_id)
                self.queue.append(job_id)

    def run(self) -> dict[uuid.UUID, Job]:
        """Run until nothing queued is left; what ran, by id."""
        with eager_hand_off.draining(self):
            while self.queue:
                job_id = self.queue.popleft()
                job = self._run_one(job_id)
                if job is None:
                    continue
                self.ran[job_id] = job
                if job_id in self.dependents:
                    self._look_after(job_id)
        return self.ran

    def _run_one(self, job_id: uuid.UUID) -> Job | None:
        from django_arcature.manager.enqueue import eager_runner
        from django_arcature.models import Job
        from django_arcature.worker.inline import JobNotPending

        job = Job(id=job_id)
        job._state.adding = False
        job._state.db = self.using
        try:
            return eager_runner()(job)
        except JobNotPending:
            # Cancelled, or already run, since it was queued (a handler cancelled
            # its workflow, or ran it itself): what it is now is its end state.
            logger.debug("eager: job %s is no longer pending, not run", job_id)
            return None

    def _look_after(self, job_id: uuid.UUID) -> None:
        """Queue the dependents ``job_id``'s completion released; through the ones it
        cancelled, look at theirs (a cancel releases a ``when="always"`` node)."""
        from django_arcature.models import Job

        look = list(self.dependents.get(job_id, ()))
        seen: set[uuid.UUID] = set(look)
        manager = Job.objects.db_manager(self.using)
        while look:
            statuses = dict(manager.filter(id__in=look).values_list("id", "status"))
            further: list[uuid.UUID] = []
            for node in look:  # in the graph's order, so a run is repeatable
                state = statuses.get(node)
                if state == JobStatus.PENDING:
                    self.add([node])
                elif state == JobStatus.CANCELLED:
                    for down in self.dependents.get(node, ()):
                        if down not in seen:
                            seen.add(down)
                            further.append(down)
            look = further


def run(
    using: str,
    ready: Iterable[uuid.UUID],
    dependents: Mapping[uuid.UUID, Sequence[uuid.UUID]] | None = None,
) -> dict[uuid.UUID, Job]:
    """Run ``ready`` and everything their completions release, until nothing is ready."""
    drain = Drain(using, dependents)
    drain.add(ready)
    return drain.run()
