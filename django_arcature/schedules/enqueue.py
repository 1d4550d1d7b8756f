"""One job for a schedule, with the options its task would get from an ordinary enqueue.

A slot's job and the admin's "run now" both come through here. For a
``@job`` task the manager applies the handler's options itself. For a
django.tasks ``@task`` the backend's own resolution is used (issue 19, B2):
the row names the task by module path, the backend finds it exactly as its
worker will (refusing anything that is not one of its tasks), and the task's
priority, queue and attempts (its own fields, then ``TASK_OPTIONS``, then the
backend's ``OPTIONS``) apply as they would to ``task.enqueue()``. The
schedule's own ``queue`` and ``priority``, when set, override the task's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_arcature.models import Job

    from .models import Schedule

__all__ = ["enqueue_for_schedule"]


def task_options(schedule: Schedule) -> dict[str, Any]:
    """The manager's ``enqueue`` options for ``schedule``'s next job.

    Raises ``LookupError`` (with the backend's reason) for a row that names no
    task of its backend, and the backend's own exceptions for a task or
    arguments it refuses.
    """
    args = list(schedule.args or [])
    kwargs = dict(schedule.kwargs or {})
    options: dict[str, Any] = {
        "args": args,
        "kwargs": kwargs,
        "queue": schedule.queue or None,
        "priority": schedule.priority,
        "backend": schedule.backend,
    }
    if not schedule.backend:
        return options
    from django_arcature.tasks.backend import resolve_task

    found = resolve_task(schedule.task_name, schedule.backend)
    if isinstance(found, str):
        raise LookupError(found)
    backend = found.backend
    task = found.task
    changes: dict[str, Any] = {}
    if schedule.queue and schedule.queue != task.queue_name:
        changes["queue_name"] = schedule.queue
    if schedule.priority is not None and schedule.priority != task.priority:
        changes["priority"] = schedule.priority
    if changes:
        task = task.using(**changes)  # validated as the framework validates an override
    backend._ensure_configured()
    backend.validate_task(task)
    backend.check_arguments(task, args, kwargs)
    options.update(
        queue=task.queue_name,
        priority=task.priority,
        max_attempts=backend.overrides_for(task).max_attempts,
    )
    return options


def enqueue_for_schedule(schedule: Schedule, using: str, *, unique_key: str | None = None) -> Job:
    """Insert ``schedule``'s job on ``using`` (in the caller's transaction, if any)."""
    from django_arcature.models import Job

    return Job.objects.db_manager(using).enqueue(
        schedule.task_name, unique_key=unique_key, **task_options(schedule)
    )
