"""Report dead jobs to Sentry (``pip install django-arcature[sentry]``), built on ``job_dead``.

Call :func:`install` once, e.g. in your AppConfig's ``ready()`` after
``sentry_sdk.init(...)``. Every job whose death was written (never one whose
write was fenced out: a stale worker's failure is not news) becomes one Sentry
event, level ``error``, with the job's id, task, queue, attempt, error kind and
the handler's traceback, tagged so issues group by task and error kind rather
than by message text. Retries are not reported: a job that will run again has
not failed yet. Receivers run after the write committed; a failing report is
logged by the signal machinery and never affects the job.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django_arcature import signals

logger = logging.getLogger(__name__)

_UID = "arcature-sentry-dead-jobs"


def report_dead_job(sender: Any, job_id: uuid.UUID, completion: Any, **kwargs: Any) -> None:
    """The ``job_dead`` receiver: one Sentry event per job that died."""
    import sentry_sdk

    from django_arcature.models import Job

    job = (
        Job.objects.filter(pk=job_id)
        .values("task_name", "queue", "attempts", "max_attempts", "locked_by")
        .first()
    ) or {"task_name": "?", "queue": "?", "attempts": 0, "max_attempts": 0, "locked_by": ""}
    task = job["task_name"]
    with sentry_sdk.new_scope() as scope:
        scope.set_tag("arcature.task", task)
        scope.set_tag("arcature.queue", job["queue"])
        scope.set_tag("arcature.error_kind", completion.error_kind)
        scope.set_context(
            "arcature job",
            {
                "id": str(job_id),
                "task": task,
                "queue": job["queue"],
                "attempt": job["attempts"],
                "max_attempts": job["max_attempts"],
                "worker": job["locked_by"],
                "error_kind": completion.error_kind,
                "error": completion.message,
                "traceback": completion.traceback,
            },
        )
        scope.fingerprint = ["arcature-dead-job", task, completion.error_kind]
        sentry_sdk.capture_message(
            f"job {task} dead ({completion.error_kind}): {completion.message}"[:1000],
            level="error",
        )


def install() -> None:
    """Connect :func:`report_dead_job` to ``job_dead`` (idempotent)."""
    signals.job_dead.connect(report_dead_job, dispatch_uid=_UID)


def uninstall() -> None:
    signals.job_dead.disconnect(report_dead_job, dispatch_uid=_UID)
