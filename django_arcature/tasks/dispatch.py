"""Run one claimed django.tasks row and say how it went, as the framework documents it.

The worker claims the row, calls :func:`dispatch` (through
``backend.dispatch_task_job``), then decides and writes the outcome fenced, as
for any job. Here: find the Task (never anything else), check the arguments,
build the ``TaskContext``, run the function (a coroutine is cancelled when the
worker gives up on the attempt), and send ``task_started`` / ``task_finished`` with the
``TaskResult`` — ``task_finished`` from inside the ``except`` block on failure,
so receivers (Django's own logger included) see the exception.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from inspect import iscoroutinefunction
from typing import Any

from asgiref.sync import async_to_sync
from django.dispatch import Signal
from django.utils import timezone

from django_arcature.context import current_job
from django_arcature.core.decide import (
    DispatchOutcome,
    HandlerError,
    Malformed,
    Panic,
    Succeeded,
    Unknown,
    describe_exception,
    format_traceback,
    qualified_name,
)
from django_arcature.core.payloads import split_payload
from django_arcature.db import ClaimedJob
from django_arcature.exceptions import MalformedPayload

from .backend import resolve_task
from .compat import (
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_finished,
    task_started,
)
from .options import TaskOverrides
from .results import attempt_history

logger = logging.getLogger(__name__)

#: How often a running coroutine task looks at the worker's cancel flag.
CANCEL_POLL_SECONDS = 0.05


class AttemptCancelled(Exception):
    """The worker gave up on this attempt (timeout, claim lost, shutdown) while it ran."""


class ReturnValueNotJSON(TypeError):
    """The task returned something that cannot be stored as its result."""


def dispatch(
    claimed: ClaimedJob, *, worker_id: str, cancel_event: threading.Event | None
) -> DispatchOutcome:
    """Never raises: every failure is an outcome to record, a BaseException a panic."""
    try:
        return _dispatch(claimed, worker_id, cancel_event)
    except BaseException as exc:  # a signal receiver or the backend itself failed
        logger.exception(
            "job %s (%s): the backend failed around the task",
            claimed.id,
            claimed.task_name,
            extra=claimed.log_extra(),
        )
        return Panic.from_exception(exc)


def _dispatch(
    claimed: ClaimedJob, worker_id: str, cancel_event: threading.Event | None
) -> DispatchOutcome:
    try:
        args, kwargs = split_payload(claimed.payload)
    except MalformedPayload as exc:
        return Malformed(str(exc))
    found = resolve_task(claimed.task_name, claimed.backend)
    if isinstance(found, str):
        logger.error(
            "job %s: not running %s: %s",
            claimed.id,
            claimed.task_name,
            found,
            extra=claimed.log_extra(),
        )
        return Unknown(claimed.task_name, reason=found)
    task, backend = found.task, found.backend
    try:
        backend.check_arguments(task, args, kwargs)
    except MalformedPayload as exc:
        return Malformed(str(exc))
    result = _running_result(claimed, task, worker_id, args, kwargs)
    sender = type(backend)
    _send(task_started, sender, result)
    try:
        raw = _call(task, result, args, kwargs, cancel_event)
    except BaseException as exc:  # KeyboardInterrupt and SystemExit too: this attempt's panic
        outcome = _failure(exc)
        _record_failure(result, exc, final=_is_final(outcome, claimed))
        _send(task_finished, sender, result)
        return outcome
    try:
        value = normalize_json(raw)
    except (TypeError, ValueError) as exc:
        problem = ReturnValueNotJSON(
            f"{task.module_path} returned a {type(raw).__name__}, which cannot be stored as "
            f"JSON ({exc}); return JSON types only"
        )
        problem.__cause__ = exc
        _record_failure(result, problem, final=True)
        _send(task_finished, sender, result)
        # Returning the same value again cannot help: permanent, no retry.
        return HandlerError(
            message=describe_exception(problem),
            permanent=True,
            traceback=format_traceback(problem),
            exception_type=qualified_name(ReturnValueNotJSON),
        )
    object.__setattr__(result, "_return_value", value)
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    _send(task_finished, sender, result)
    return Succeeded(value)


def _send(signal: Signal, sender: type[Any], result: TaskResult[Any, Any]) -> None:
    """Send a worker-side signal; a failing receiver is logged, never the task's failure.

    A bug in a monitoring receiver must not turn every task into a dead one.
    ``send_robust`` logs the receiver's exception (logger ``django.dispatch``),
    and inside an ``except`` block receivers still see the task's exception in
    ``sys.exc_info()``.
    """
    signal.send_robust(sender=sender, task_result=result)


def _running_result(
    claimed: ClaimedJob,
    task: Task[Any, Any],
    worker_id: str,
    args: list[Any],
    kwargs: dict[str, Any],
) -> TaskResult[Any, Any]:
    """The TaskResult the task's context and the signals see during this attempt.

    Built from the claim alone (no extra query per task): ``worker_ids`` and
    ``errors`` come from the attempt log, so ``context.attempt`` is this
    attempt's number. ``enqueued_at`` is not part of a claim: call
    ``context.task_result.refresh()`` to load the stored fields.
    """
    history = attempt_history(claimed.attempt_log, claimed.attempts, running_worker=worker_id)
    now = timezone.now()
    return TaskResult(
        task=task,
        id=str(claimed.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=args,
        kwargs=kwargs,
        backend=claimed.backend,
        errors=history.errors,
        worker_ids=history.worker_ids,
    )


def _call(
    task: Task[Any, Any],
    result: TaskResult[Any, Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    cancel_event: threading.Event | None,
) -> Any:
    """Call the task; the worker bounds the attempt with its timeout around this call."""
    call_args = [TaskContext(task_result=result), *args] if task.takes_context else list(args)
    if iscoroutinefunction(task.func):
        return async_to_sync(_run_coroutine)(task.func, call_args, kwargs, cancel_event)
    return task.func(*call_args, **kwargs)


async def _run_coroutine(
    func: Callable[..., Any],
    args: list[Any],
    kwargs: dict[str, Any],
    cancel_event: threading.Event | None,
) -> Any:
    """Await the task, and cancel it when the worker raises the flag.

    The worker raises it when the attempt times out, its claim is lost or it
    shuts down; unlike a thread, a coroutine can really be stopped then.
    """
    if cancel_event is None:
        return await func(*args, **kwargs)
    work = asyncio.ensure_future(func(*args, **kwargs))
    watcher = asyncio.ensure_future(_until_set(cancel_event))
    try:
        await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if work.done():
        return work.result()
    work.cancel()
    await asyncio.wait({work}, timeout=1.0)  # let it run its finally blocks, briefly
    job = current_job()
    reason = job.cancel_reason if job is not None and job.cancel_reason else "cancelled"
    raise AttemptCancelled(f"the worker stopped this attempt while it ran ({reason})")


async def _until_set(event: threading.Event) -> None:
    while not event.is_set():
        await asyncio.sleep(CANCEL_POLL_SECONDS)


def _failure(exc: BaseException) -> DispatchOutcome:
    if isinstance(exc, Exception):
        return HandlerError.from_exception(exc)
    return Panic.from_exception(exc)


def _is_final(outcome: DispatchOutcome, claimed: ClaimedJob) -> bool:
    """Whether the worker's decision will be "dead" (no retry follows)."""
    match outcome:
        case HandlerError(permanent=True) | Panic() | Malformed() | Unknown():
            return True
    return claimed.attempts >= claimed.max_attempts


def _record_failure(result: TaskResult[Any, Any], exc: BaseException, *, final: bool) -> None:
    """FAILED if no attempt follows, else READY (to be run again), with this attempt's error."""
    result.errors.append(
        TaskError(exception_class_path=qualified_name(type(exc)), traceback=format_traceback(exc))
    )
    object.__setattr__(
        result, "status", TaskResultStatus.FAILED if final else TaskResultStatus.READY
    )
    if final:
        object.__setattr__(result, "finished_at", timezone.now())


# --- What the worker calls -------------------------------------------------------------


def dispatch_task_job(
    claimed: ClaimedJob, *, worker_id: str, cancel_event: threading.Event | None = None
) -> DispatchOutcome:
    """Run one claimed django.tasks row; the worker decides and writes what comes back."""
    return dispatch(claimed, worker_id=worker_id, cancel_event=cancel_event)


def task_overrides(claimed: ClaimedJob) -> TaskOverrides:
    """Timeout and retry policy for a claimed django.tasks row (for the worker's decide)."""
    found = resolve_task(claimed.task_name, claimed.backend)
    if isinstance(found, str):
        return TaskOverrides()
    return found.backend.overrides_for(found.task)
