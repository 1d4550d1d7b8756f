"""A job row seen as a django.tasks ``TaskResult``: status, return value, attempts and errors.

The worker appends one ``attempt_log`` entry per finished attempt
(``{"worker": id, "error": None | {"exception_class_path", "traceback"}}``).
An attempt whose worker died leaves no entry, only an ``attempts`` count that
is one higher; such attempts are reported as :class:`LeaseExpired` errors so
that ``len(worker_ids) == attempts`` and every failed attempt has its
``TaskError``, as the framework promises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_arcature.core.attempt_log import dropped_count, is_marker
from django_arcature.core.decide import qualified_name
from django_arcature.exceptions import MalformedPayload, Permanent, UnknownTask

from .compat import Task, TaskError, TaskResult, TaskResultStatus

if TYPE_CHECKING:
    from django_arcature.models import Job

#: Shown in ``worker_ids`` for an attempt whose worker died before reporting.
LOST_WORKER_ID = "(lost)"
#: Shown in ``worker_ids`` for an attempt whose entry the bounded attempt log dropped.
DROPPED_WORKER_ID = "(dropped)"
_DROPPED_ENTRY = {
    "worker": DROPPED_WORKER_ID,
    "error": {
        "exception_class_path": qualified_name(Exception),
        "traceback": "this failed attempt's entry was dropped: the attempt log keeps "
        "only the first and the latest entries",
    },
}


class LeaseExpired(Exception):
    """The worker running this attempt stopped (crashed or was killed); its lease expired."""


class TaskCancelled(Exception):
    """An operator cancelled the task while this attempt ran; its result was not kept."""


_LEASE_EXPIRED_TEXT = "the lease expired while running (the worker stopped heartbeating)"

#: Job states as django.tasks reports them.
STATUS_FOR = {
    "pending": TaskResultStatus.READY,
    # A workflow node still waiting for its dependencies: not started, as READY says.
    "waiting": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}

#: For a dead job whose last attempt left no error entry: which exception explains it.
_CLASS_FOR_KIND = {
    "unknown": qualified_name(UnknownTask),
    "malformed": qualified_name(MalformedPayload),
    "timeout": qualified_name(TimeoutError),
    "permanent": qualified_name(Permanent),
    "exhausted": qualified_name(LeaseExpired),
    "panic": qualified_name(BaseException),
}


@dataclass(frozen=True)
class History:
    worker_ids: list[str]
    errors: list[TaskError]


def task_error(entry: object) -> TaskError | None:
    """A stored ``{"exception_class_path", "traceback"}`` as a TaskError (None if absent)."""
    if not isinstance(entry, dict):
        return None
    return TaskError(
        exception_class_path=str(entry.get("exception_class_path") or qualified_name(Exception)),
        traceback=str(entry.get("traceback") or ""),
    )


def attempt_history(
    log: Sequence[Any],
    attempts: int,
    *,
    running_worker: str | None = None,
    last_logged: bool = False,
    last_unlogged: tuple[str, TaskError] | None = None,
    dead_kind: str = "",
    dead_message: str = "",
) -> History:
    """``worker_ids`` and ``errors`` for a job after ``attempts`` claims.

    ``running_worker`` is the worker of an attempt still in progress (it has
    no entry yet). ``last_logged`` says the job's last attempt wrote its own
    entry (a worker finished it), so attempts lost to dead workers came before
    it; otherwise ``last_unlogged`` may say who ran the last, unlogged attempt
    and how it ended. ``dead_kind``/``dead_message`` explain a dead job's last
    attempt when its entry has no error.
    """
    finished = max(attempts - (1 if running_worker is not None else 0), 0)
    entries: list[dict[str, Any]] = []
    for e in log:
        if is_marker(e):  # entries dropped by the bounded log: failed attempts, in order
            entries.extend([_DROPPED_ENTRY] * min(dropped_count([e]), finished))
        elif isinstance(e, dict):
            entries.append(e)
    entries = entries[:finished]
    logged = [(str(e.get("worker") or LOST_WORKER_ID), task_error(e.get("error"))) for e in entries]
    lost: list[tuple[str, TaskError | None]] = [
        (LOST_WORKER_ID, _error(LeaseExpired, _LEASE_EXPIRED_TEXT))
        for _ in range(finished - len(entries))
    ]
    if lost and last_unlogged is not None and not last_logged:
        lost[-1] = last_unlogged
    ordered = logged[:-1] + lost + logged[-1:] if last_logged else logged + lost
    if dead_kind and last_logged and ordered and ordered[-1][1] is None:
        kind_class = _CLASS_FOR_KIND.get(dead_kind, qualified_name(Exception))
        ordered[-1] = (
            ordered[-1][0],
            TaskError(exception_class_path=kind_class, traceback=dead_message),
        )
    worker_ids = [worker for worker, _ in ordered]
    if running_worker is not None:
        worker_ids.append(running_worker)
    return History(worker_ids, [error for _, error in ordered if error is not None])


def _error(cls: type[BaseException], text: str) -> TaskError:
    return TaskError(exception_class_path=qualified_name(cls), traceback=text)


def _last_unlogged(job: Job) -> tuple[str, TaskError] | None:
    """Who ran a finished job's last attempt, and how it ended, when no worker logged it.

    Two writers end a job without an attempt-log entry, and both leave
    ``locked_by`` as it was: the sweep (the worker died; dead ``exhausted``)
    and an operator's cancel of a running job (its worker's completion is then
    fenced out). A sweep that requeues clears ``locked_by``.
    """
    worker = job.locked_by or LOST_WORKER_ID
    if job.status == "dead" and _died_in_sweep(job):
        return worker, _error(LeaseExpired, job.last_error)
    if job.status == "cancelled" and job.locked_by:
        return worker, _error(TaskCancelled, "cancelled by an operator while this attempt ran")
    return None


def _died_in_sweep(job: Job) -> bool:
    """A dead job whose last attempt was lost: the sweep wrote no attempt-log entry."""
    return job.error_kind == "exhausted" and "lease expired" in job.last_error


def result_from_job(job: Job, task: Task[Any, Any]) -> TaskResult[Any, Any]:
    """The TaskResult for a job row (``get_result``/``refresh``)."""
    status = STATUS_FOR[job.status]
    history = attempt_history(
        job.attempt_log if isinstance(job.attempt_log, list) else [],
        job.attempts,
        running_worker=(job.locked_by or LOST_WORKER_ID) if job.status == "running" else None,
        last_logged=job.status == "succeeded" or (job.status == "dead" and not _died_in_sweep(job)),
        last_unlogged=_last_unlogged(job),
        dead_kind=job.error_kind if job.status == "dead" else "",
        dead_message=job.last_traceback or job.last_error,
    )
    last_attempted_at: datetime | None = job.locked_at if job.attempts else None
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(job.id),
        status=status,
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at if status in _FINISHED else None,
        last_attempted_at=last_attempted_at,
        args=job.args,
        kwargs=job.kwargs,
        backend=job.backend,
        errors=history.errors,
        worker_ids=history.worker_ids,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result


_FINISHED = {TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED}
