"""Helpers for your own test suite: run jobs inline, drain the queue, assert what was enqueued.

Every helper goes through the real path: jobs are claimed with a fresh token,
their payload is checked against the handler, the outcome is decided with the
job's retry policy, and the result is written with the same fenced update a
worker makes. Only the worker process is left out::

    from django_arcature.testing import assert_enqueued, drain

    def test_signup_sends_welcome(client):
        client.post("/signup/", {"email": "ada@example.com"})
        job = assert_enqueued(send_welcome, User.objects.get().pk)
        assert drain().succeeded == 1

For a whole test (or suite) where ``.enqueue()`` should run the job at once,
use ``@override_settings(ARCATURE={"EAGER": True})``: the row is still
inserted and validated, then run inline, and ``.enqueue()`` returns it in its
end state.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from . import registry
from .db import DatabaseNow
from .models import Job, JobStatus
from .worker.inline import JobNotPending, run_job

__all__ = [
    "DrainSummary",
    "JobNotPending",
    "assert_enqueued",
    "assert_not_enqueued",
    "drain",
    "enqueued_jobs",
    "run_job",
]


@dataclass(frozen=True)
class DrainSummary:
    """What :func:`drain` did: how many attempts it ran and where the jobs ended.

    ``succeeded``, ``dead``, ``cancelled`` and ``pending`` count the jobs it
    touched by their final status; ``retried`` counts attempts that ended in a
    retry (a job that failed twice and then succeeded adds 2 and 1 succeeded).
    """

    runs: int
    succeeded: int = 0
    dead: int = 0
    cancelled: int = 0
    pending: int = 0
    retried: int = 0
    job_ids: list[Any] = field(default_factory=list, repr=False)
    dead_reasons: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def jobs(self) -> list[Job]:
        """The jobs :func:`drain` ran, reloaded, in the order they first ran."""
        by_id = {job.pk: job for job in Job.objects.filter(pk__in=self.job_ids)}
        return [by_id[job_id] for job_id in self.job_ids if job_id in by_id]

    def __str__(self) -> str:
        return (
            f"{self.runs} run(s): {self.succeeded} succeeded, {self.dead} dead, "
            f"{self.retried} retried, {self.pending} still pending"
        )


def drain(
    queue: str | None = None,
    *,
    due_only: bool = False,
    limit: int = 1000,
    using: str | None = None,
) -> DrainSummary:
    """Run pending jobs (all queues, or ``queue``) until none are left; return a summary.

    Jobs run one at a time, highest priority first, each through
    :func:`run_job`. Retries run as soon as the previous attempt failed, and
    jobs scheduled in the future run too, so every job ends succeeded or dead
    (unless ``due_only=True``: then only jobs whose ``available_at`` has
    passed run, and a retry waits for its backoff). Jobs that the drained jobs
    enqueue are drained as well; ``limit`` stops a job that re-enqueues itself
    forever.
    """
    using = using or Job.objects.db
    runs = 0
    retried = 0
    seen: dict[Any, None] = {}
    while True:
        candidates = Job.objects.using(using).filter(status=JobStatus.PENDING)
        if queue is not None:
            candidates = candidates.filter(queue=queue)
        if due_only:
            candidates = candidates.filter(available_at__lte=DatabaseNow())
        next_id = (
            candidates.order_by("-priority", "available_at", "created_at")
            .values_list("pk", flat=True)
            .first()
        )
        if next_id is None:
            break
        if runs >= limit:
            raise RuntimeError(
                f"drain() ran {limit} attempts and jobs are still pending: does a job "
                "enqueue itself? Raise limit= if the queue really is that long."
            )
        seen.setdefault(next_id, None)
        job = Job.objects.using(using).get(pk=next_id)
        try:
            job = run_job(job)
        except JobNotPending:  # taken by something else in the meantime
            continue
        runs += 1
        if job.status == JobStatus.PENDING:
            retried += 1
    job_ids = list(seen)
    finished = Job.objects.using(using).filter(pk__in=job_ids)
    statuses = Counter(finished.values_list("status", flat=True))
    dead_reasons = {
        str(pk): f"{kind}: {error}"
        for pk, kind, error in finished.filter(status=JobStatus.DEAD).values_list(
            "pk", "error_kind", "last_error"
        )
    }
    return DrainSummary(
        runs=runs,
        succeeded=statuses[JobStatus.SUCCEEDED],
        dead=statuses[JobStatus.DEAD],
        cancelled=statuses[JobStatus.CANCELLED],
        pending=statuses[JobStatus.PENDING],
        retried=retried,
        job_ids=job_ids,
        dead_reasons=dead_reasons,
    )


def enqueued_jobs(task: Any, *args: Any, **kwargs: Any) -> list[Job]:
    """Jobs of ``task`` (a handle or a name) in any status, newest first.

    With arguments, only jobs enqueued with an equal call: ``f(1)``,
    ``f(a=1)`` and ``f(1, b=<default>)`` count as equal. Without any, every
    job of the task matches.
    """
    spec = _spec_for(task)
    jobs = list(Job.objects.filter(task_name=spec.name).order_by("-created_at"))
    if not args and not kwargs:
        return jobs
    wanted = spec.canonical_arguments(args, kwargs)
    return [job for job in jobs if spec.canonical_arguments(job.args, job.kwargs) == wanted]


def assert_enqueued(task: Any, *args: Any, **kwargs: Any) -> Job:
    """Fail unless a job of ``task`` was enqueued with these arguments; return the newest."""
    matches = enqueued_jobs(task, *args, **kwargs)
    if matches:
        return matches[0]
    spec = _spec_for(task)
    others = Job.objects.filter(task_name=spec.name).order_by("-created_at")[:10]
    seen = "\n".join(f"  {_call(spec.name, job.args, job.kwargs)} [{job.status}]" for job in others)
    raise AssertionError(
        f"{_call(spec.name, list(args), kwargs)} was not enqueued; "
        + (f"jobs of that task:\n{seen}" if seen else "no job of that task was enqueued at all.")
    )


def assert_not_enqueued(task: Any, *args: Any, **kwargs: Any) -> None:
    """Fail if a job of ``task`` was enqueued with these arguments (any job, without any)."""
    matches = enqueued_jobs(task, *args, **kwargs)
    if matches:
        spec = _spec_for(task)
        found = "\n".join(
            f"  {_call(spec.name, job.args, job.kwargs)} [{job.status}] {job.pk}"
            for job in matches[:10]
        )
        raise AssertionError(f"expected no such job, found {len(matches)}:\n{found}")


def _spec_for(task: Any) -> registry.JobSpec:
    if isinstance(task, registry.JobHandle):
        return task.spec
    if isinstance(task, str):
        return registry.get(task)
    raise TypeError(f"pass a @job handle or the name of a registered job, not {task!r}")


def _call(name: str, args: list[Any], kwargs: dict[str, Any]) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"
