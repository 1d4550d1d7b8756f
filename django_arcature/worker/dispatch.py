"""Run one claimed job and say what happened, without touching the job row.

``run_handler`` turns "a claimed row" into a :data:`~django_arcature.decide.DispatchOutcome`;
``process`` adds the decision and the attempt-log entry and returns the
:class:`~django_arcature.managers.Completion` the worker (or ``testing``) then
writes, fenced, through ``Job.objects.complete_many``. Nothing here writes to
the database, so a handler's failure can never leave a half-written row, and
the same code runs a job inside the worker and inline in a user's test.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import importlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.utils import timezone

from django_arcature import registry, signals
from django_arcature.conf import ArcatureSettings, default_retry_policy, get_settings
from django_arcature.context import JobContext, activate, deactivate
from django_arcature.core.decide import (
    Dead,
    DispatchOutcome,
    HandlerError,
    JobState,
    Malformed,
    Panic,
    Retry,
    Succeeded,
    Timeout,
    Unknown,
    decide,
    qualified_name,
)
from django_arcature.core.limits import MAX_TIMEOUT_SECONDS
from django_arcature.core.payloads import ensure_json, split_payload
from django_arcature.core.retry import RetryPolicy
from django_arcature.db import ClaimedJob
from django_arcature.exceptions import MalformedPayload, UnknownTask
from django_arcature.transitions import Completion

logger = logging.getLogger(__name__)

#: Rows enqueued through ``django.tasks`` run through this module, imported only when
#: such a row is claimed: it needs the tasks framework, which a project may not have.
TASKS_DISPATCH = "django_arcature.tasks.dispatch"

__all__ = [
    "AttemptPlan",
    "WorkerShutdown",
    "attempt_finished",
    "check_timeout",
    "plan_attempt",
    "process",
    "run_handler",
    "timeout_completion",
]


class WorkerShutdown(BaseException):
    """Kept for compatibility; nothing raises it any more.

    It used to pass through the dispatcher to stop a worker. Now every
    BaseException raised while a handler runs ends that attempt as ``panic``:
    only a signal sent to the worker process stops the worker.
    """


#: How long past its deadline an ``async def`` attempt may take to unwind after its
#: cancellation, before the thread waiting for it gives up on a loop that is blocked.
ASYNC_GRACE_SECONDS = 1.0

_UNSET: Any = object()


def check_timeout(timeout: object) -> None:
    """Refuse a timeout no attempt can be given: not a number, not above 0, or past the bound.

    Waiting on a thread for more than about 9.2e9 s overflows, which used to turn
    every attempt into a ``panic``; no job needs more than a week per attempt.
    """
    if timeout is None:
        return
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not 0 < timeout <= MAX_TIMEOUT_SECONDS
    ):
        raise ValueError(
            f"timeout must be None or a number of seconds above 0 and at most "
            f"{MAX_TIMEOUT_SECONDS} (a week), not {timeout!r}"
        )


@dataclass(frozen=True)
class _Resolved:
    spec: registry.JobSpec
    args: list[Any]
    kwargs: dict[str, Any]


def _resolve(claimed: ClaimedJob) -> _Resolved | DispatchOutcome:
    if claimed.undecodable:
        return Malformed(claimed.undecodable)
    try:
        spec = registry.get(claimed.task_name)
    except UnknownTask as exc:
        return Unknown(claimed.task_name, detail=str(exc))
    try:
        args, kwargs = split_payload(claimed.payload)
        spec.validate(args, kwargs)
    except MalformedPayload as exc:
        return Malformed(str(exc))
    return _Resolved(spec, args, kwargs)


def run_handler(
    claimed: ClaimedJob,
    *,
    timeout: float | None,
    cancel_event: threading.Event | None = None,
    worker_id: str = "",
    context: JobContext | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    supervised: bool = False,
) -> DispatchOutcome:
    """Run the handler for ``claimed`` and classify the result; never raises for the handler.

    Whatever the handler raises, ``KeyboardInterrupt`` and ``SystemExit``
    included, becomes an outcome: a BaseException is a :class:`Panic`.

    ``timeout`` bounds the attempt: past it the outcome is :class:`Timeout` and
    the handler is asked to stop (``current_job().cancelled``). An ``async def``
    handler is cancelled at its next ``await``; a handler that does not stop (a
    sync one ignoring the request, or an async one blocking its event loop)
    keeps its thread until it returns, but whatever it does then cannot complete
    the job. Unless ``supervised``, a timed attempt therefore runs on a thread of
    its own that the caller stops waiting for. ``supervised=True`` is for a
    caller that watches the deadline itself (the worker): the attempt runs on
    the calling thread, and an ``async def`` handler on ``loop``, an event loop
    this thread owns. ``context`` (or ``cancel_event``) is how the caller tells
    the handler its claim was lost.
    """
    check_timeout(timeout)
    if context is None:
        context = JobContext(
            job_id=claimed.id,
            task_name=claimed.task_name,
            queue=claimed.queue,
            attempt=claimed.attempts,
            max_attempts=claimed.max_attempts,
            worker_id=worker_id,
            cancel_event=cancel_event or threading.Event(),
            claim_token=claimed.claim_token,
        )
    if claimed.undecodable:
        return Malformed(claimed.undecodable)
    if claimed.backend:
        return _run_task_backend_job(claimed, timeout, context, supervised)
    resolved = _resolve(claimed)
    if not isinstance(resolved, _Resolved):
        return resolved
    return _run_resolved(resolved, timeout, context, loop, supervised)


def _run_resolved(
    resolved: _Resolved,
    timeout: float | None,
    context: JobContext,
    loop: asyncio.AbstractEventLoop | None,
    supervised: bool,
) -> DispatchOutcome:
    spec = resolved.spec
    if spec.is_async:
        return _run_async(resolved, timeout, context, loop, supervised)

    def call() -> DispatchOutcome:
        return _classify(spec.name, lambda: spec.func(*resolved.args, **resolved.kwargs))

    if timeout is None or supervised:
        return _in_context(context, call)
    return _with_timeout(context, call, timeout)


def _run_task_backend_job(
    claimed: ClaimedJob, timeout: float | None, context: JobContext, supervised: bool
) -> DispatchOutcome:
    """Rows enqueued through ``django.tasks`` are run by the backend module."""
    try:
        dispatch_task_job = importlib.import_module(TASKS_DISPATCH).dispatch_task_job
    except (ImportError, AttributeError):
        return Unknown(claimed.task_name)

    def call() -> DispatchOutcome:
        try:
            outcome: DispatchOutcome = dispatch_task_job(
                claimed, worker_id=context.worker_id, cancel_event=context.cancel_event
            )
        except Exception as exc:
            return HandlerError.from_exception(exc)
        except BaseException as exc:
            return Panic.from_exception(exc)
        return outcome

    if timeout is None or supervised:
        return _in_context(context, call)
    return _with_timeout(context, call, timeout)


def _classify(name: str, call: Callable[[], Any]) -> DispatchOutcome:
    """Call the handler; an ``Exception`` is its error, any other BaseException a panic.

    ``KeyboardInterrupt``, ``SystemExit`` and ``GeneratorExit`` raised by handler
    code end this attempt and nothing else: a worker runs handlers off its main
    thread, where no signal is ever delivered, so they cannot be the worker
    being stopped.
    """
    try:
        value = call()
    except Exception as exc:
        return HandlerError.from_exception(exc)
    except BaseException as exc:
        return Panic.from_exception(exc)
    return _succeeded(name, value)


def _succeeded(name: str, value: Any) -> DispatchOutcome:
    """A return value must be storable as JSON; anything else is a programming error.

    It is reported as permanent: the handler already ran to the end, and running
    its side effects again would not make the value any more JSON.
    """
    try:
        ensure_json(value, "the return value")
    except MalformedPayload as exc:
        return HandlerError(
            message=(
                f"{name} returned a value that cannot be stored: {exc} A job's return "
                "value is saved as JSON: return None, str, int, float, bool, or lists and "
                "dicts (with str keys) of those."
            ),
            permanent=True,
            exception_type=qualified_name(TypeError),
        )
    return Succeeded(value)


def _in_context(context: JobContext, call: Callable[[], DispatchOutcome]) -> DispatchOutcome:
    token = activate(context)
    try:
        return call()
    finally:
        deactivate(token)


def _with_timeout(
    context: JobContext,
    call: Callable[[], DispatchOutcome],
    timeout: float,
    grace: float = 0.0,
) -> DispatchOutcome:
    """Run ``call`` on its own thread and stop waiting for it after ``timeout`` seconds.

    Python cannot kill a thread, so an attempt that runs over is abandoned: the
    caller gets :class:`Timeout` at once, the handler is told through its
    context, and the thread ends whenever the handler returns. ``grace`` is
    extra time for an attempt that stops itself at its deadline (an async one).
    """
    box: list[DispatchOutcome] = []

    def target() -> None:
        try:
            box.append(_in_context(context, call))
        except BaseException as exc:  # ours, around the handler: still this attempt's panic
            box.append(Panic.from_exception(exc))
        finally:
            connections.close_all()  # this thread's connections die with it

    # The caller's context variables (a tracing span, for one) follow the handler.
    thread = threading.Thread(
        target=contextvars.copy_context().run,
        args=(target,),
        name=f"arcature-job-{context.job_id}",
        daemon=True,
    )
    thread.start()
    thread.join(timeout + grace)
    if thread.is_alive() or not box:
        context.cancel("timeout")
        logger.warning(
            "job %s (%s) passed its %gs timeout; the worker moves on and ignores its result",
            context.job_id,
            context.task_name,
            timeout,
            extra={
                "job_id": str(context.job_id),
                "task": context.task_name,
                "queue": context.queue,
                "attempt": context.attempt,
            },
        )
        return Timeout(timeout)
    return box[0]


#: How often an ``async def`` attempt looks at its cancel flag (the worker raises it
#: from another thread: a lost claim, an operator's cancel, the shutdown).
CANCEL_POLL_SECONDS = 0.05


class AttemptStopped(Exception):
    """An ``async def`` attempt cancelled because the worker raised its cancel flag."""


async def _until_cancelled(handler: Any, context: JobContext) -> Any:
    """Await ``handler`` as a task of its own, cancelled (``CancelledError`` inside it) once
    the worker raises the flag; the attempt then fails with :class:`AttemptStopped`."""
    work = asyncio.ensure_future(handler)
    watcher = asyncio.ensure_future(_flag_raised(context.cancel_event))
    try:
        await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # our own deadline (asyncio.timeout) cancelled us: stop it too
        work.cancel()
        raise
    finally:
        watcher.cancel()
    if work.done():
        return work.result()
    work.cancel()
    await asyncio.wait({work}, timeout=1.0)  # let it run its finally blocks, briefly
    reason = context.cancel_reason or "cancelled"
    raise AttemptStopped(f"the worker stopped this attempt while it ran ({reason})")


async def _flag_raised(event: threading.Event) -> None:
    while not event.is_set():
        await asyncio.sleep(CANCEL_POLL_SECONDS)


def _run_async(
    resolved: _Resolved,
    timeout: float | None,
    context: JobContext,
    loop: asyncio.AbstractEventLoop | None,
    supervised: bool,
) -> DispatchOutcome:
    """Run an ``async def`` handler so that neither its errors nor a blocked loop escape.

    The attempt is cancelled at its deadline (``asyncio.timeout``), which stops a
    handler that awaits. One that blocks its event loop never reaches an
    ``await``: unless the caller watches the deadline itself (``supervised``),
    a timed attempt runs on a loop in a thread of its own, which is abandoned
    when the deadline (plus a short grace) has passed.
    """
    spec = resolved.spec

    async def attempt() -> DispatchOutcome:
        # Everything is caught in here: a KeyboardInterrupt or SystemExit that
        # reached the event loop would stop the loop itself, not just this task.
        token = activate(context)  # this task's own copy of the context variables
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                value = await _until_cancelled(
                    spec.func(*resolved.args, **resolved.kwargs), context
                )
        except TimeoutError as exc:
            if timeout is not None and deadline.expired():  # ours, not the handler's own
                context.cancel("timeout")
                return Timeout(timeout)
            return HandlerError.from_exception(exc)
        except Exception as exc:
            return HandlerError.from_exception(exc)
        except BaseException as exc:
            return Panic.from_exception(exc)
        finally:
            deactivate(token)
        return _succeeded(spec.name, value)

    def on_fresh_loop() -> DispatchOutcome:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(attempt())
        # Called from inside a running loop (an async test): use a loop of our own.
        box: list[DispatchOutcome] = []

        def target() -> None:
            try:
                box.append(asyncio.run(attempt()))
            except BaseException as exc:
                box.append(Panic.from_exception(exc))

        helper = threading.Thread(target=target, name=f"arcature-async-{context.job_id}")
        helper.start()
        helper.join()
        return box[0]

    def run() -> DispatchOutcome:
        if loop is not None:
            if loop.is_running():  # a loop serving other threads (the old worker's way)
                return asyncio.run_coroutine_threadsafe(attempt(), loop).result()
            return loop.run_until_complete(attempt())
        if timeout is not None and not supervised:
            return _with_timeout(
                context, lambda: asyncio.run(attempt()), timeout, grace=ASYNC_GRACE_SECONDS
            )
        return on_fresh_loop()

    try:
        return run()
    except Exception as exc:
        return HandlerError.from_exception(exc)
    except BaseException as exc:
        return Panic.from_exception(exc)


# --- process: run, decide, and build the fenced write -----------------------------


def process(
    claimed: ClaimedJob,
    *,
    worker_id: str,
    now: datetime | None = None,
    policy: RetryPolicy | None = None,
    timeout: float | None = _UNSET,
    cancel_event: threading.Event | None = None,
    context: JobContext | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    settings: ArcatureSettings | None = None,
    supervised: bool = False,
    plan: AttemptPlan | None = None,
) -> Completion:
    """Run ``claimed`` and return the fenced completion to write for it.

    Stable entry point for the worker and for ``django_arcature.testing``:
    ``Job.objects.complete_many([process(job, worker_id=...)])`` runs a claimed
    job inline. ``now`` (default: when the handler returned) dates a retry;
    ``policy`` defaults to the job's ``@job(retry=...)`` or the ARCATURE
    backoff; ``timeout`` defaults to the job's ``@job(timeout=...)`` or
    ``ARCATURE['TIMEOUT']`` (pass ``None`` explicitly for no timeout).
    ``supervised`` and ``loop``: see :func:`run_handler`. ``plan``: the job's
    :func:`plan_attempt`, when the caller made it already (the worker does, to
    watch the deadline), so the registry and its declarations are read once a job.
    """
    check_timeout(None if timeout is _UNSET else timeout)
    if plan is None:
        plan = plan_attempt(claimed, settings or get_settings())
    if timeout is _UNSET:
        timeout = plan.timeout
    signals.notify(signals.job_attempt_started, ClaimedJob, job=claimed, worker_id=worker_id)
    started = time.perf_counter()
    outcome = run_handler(
        claimed,
        timeout=timeout,
        cancel_event=cancel_event,
        worker_id=worker_id,
        context=context,
        loop=loop,
        supervised=supervised,
    )
    seconds = time.perf_counter() - started
    completion = completion_for(
        claimed,
        outcome,
        worker_id=worker_id,
        now=now,
        policy=policy or plan.policy,
        spec=plan.spec,
    )
    if not supervised:  # a supervising worker reports the attempt once its deadline is settled
        attempt_finished(claimed, completion, seconds)
    return completion


def attempt_finished(claimed: ClaimedJob, completion: Completion, seconds: float) -> None:
    """Send ``job_attempt_finished`` for one attempt (what it came to, and how long it ran)."""
    signals.notify(
        signals.job_attempt_finished,
        ClaimedJob,
        job=claimed,
        completion=completion,
        seconds=seconds,
    )


@dataclass(frozen=True)
class AttemptPlan:
    """What a claimed job's attempt is allowed before it runs: its deadline and its backoff.

    The worker reads it to watch the deadline, and to decide a timeout itself
    when the attempt does not come back in time.
    """

    timeout: float | None
    policy: RetryPolicy | None
    spec: registry.JobSpec | None

    @property
    def is_async(self) -> bool:
        """An ``async def`` handler, which stops itself at its deadline if it awaits."""
        return self.spec is not None and self.spec.is_async


def plan_attempt(claimed: ClaimedJob, settings: ArcatureSettings) -> AttemptPlan:
    """The job's timeout (``@job``, the django.tasks backend's, or ``ARCATURE``) and backoff."""
    spec = None if claimed.undecodable else _spec_or_none(claimed)
    declared_timeout, declared_retry = (
        (None, None) if claimed.undecodable else _declared(claimed, spec)
    )
    return AttemptPlan(
        timeout=declared_timeout or settings.timeout, policy=declared_retry, spec=spec
    )


def timeout_completion(claimed: ClaimedJob, plan: AttemptPlan, *, worker_id: str) -> Completion:
    """The fenced write for an attempt whose deadline passed before it came back."""
    assert plan.timeout is not None
    return completion_for(
        claimed, Timeout(plan.timeout), worker_id=worker_id, policy=plan.policy, spec=plan.spec
    )


def _declared(
    claimed: ClaimedJob, spec: registry.JobSpec | None
) -> tuple[float | None, RetryPolicy | None]:
    """The job's own timeout and backoff: ``@job(...)``, or the django.tasks backend's."""
    if spec is not None:
        return spec.timeout, spec.retry
    if not claimed.backend:
        return None, None
    try:
        overrides = importlib.import_module(TASKS_DISPATCH).task_overrides(claimed)
    except (ImportError, AttributeError):
        return None, None
    return overrides.timeout, overrides.retry


def _spec_or_none(claimed: ClaimedJob) -> registry.JobSpec | None:
    if claimed.backend:
        return None
    try:
        return registry.get(claimed.task_name)
    except UnknownTask:
        return None


def completion_for(
    claimed: ClaimedJob,
    outcome: DispatchOutcome,
    *,
    worker_id: str,
    now: datetime | None = None,
    policy: RetryPolicy | None = None,
    spec: registry.JobSpec | None = None,
) -> Completion:
    """Decide what ``outcome`` means for ``claimed`` and build its fenced write."""
    if isinstance(outcome, HandlerError) and outcome.snooze is not None:
        snoozed = snooze_completion(claimed, outcome, worker_id=worker_id)
        if isinstance(snoozed, Completion):
            return snoozed
        outcome = snoozed
    if isinstance(outcome, Succeeded):
        decided: Succeeded | Retry | Dead = outcome
    else:
        if policy is None:
            policy = (spec.retry if spec else None) or default_retry_policy()
        state = JobState(attempts=claimed.attempts, max_attempts=claimed.max_attempts)
        now = now or timezone.now()
        decided = decide(state, outcome, policy, now)
    log = [*claimed.attempt_log, {"worker": worker_id, "error": attempt_error(outcome)}]
    match decided:
        case Succeeded(result=result):
            return Completion(
                claimed.id, claimed.claim_token, "succeeded", result=result, attempt_log=log
            )
        case Retry(available_at=available_at, message=message, traceback=tb):
            return Completion(
                claimed.id,
                claimed.claim_token,
                "retry",
                available_at=available_at,
                message=message,
                traceback=tb,
                attempt_log=log,
                # What is left of the backoff, not the instant: the write counts it on
                # the database's clock, which is the one the claim compares with.
                # (Measured against this host's clock now, since ``now`` may be when
                # the handler returned; only a difference of this host's readings.)
                retry_delay=(available_at - timezone.now()).total_seconds(),
                decided_monotonic=time.monotonic(),
            )
        case Dead(error_kind=kind, message=message, traceback=tb):
            return Completion(
                claimed.id,
                claimed.claim_token,
                "dead",
                error_kind=str(kind),
                message=message,
                traceback=tb,
                attempt_log=log,
            )
    raise TypeError(f"not an outcome: {decided!r}")  # pragma: no cover


def snooze_completion(
    claimed: ClaimedJob, outcome: HandlerError, *, worker_id: str
) -> Completion | HandlerError:
    """``raise Snooze(s)``: back to pending in ``s`` seconds with its attempt given back.

    Past ``ARCATURE["MAX_SNOOZES"]`` snoozes of this job (counted in its attempt
    log) the snooze is an ordinary error instead, which uses an attempt: a job
    cannot snooze forever without ending dead where someone sees it.
    """
    assert outcome.snooze is not None
    done = sum(1 for entry in claimed.attempt_log if isinstance(entry, dict) and "snoozed" in entry)
    limit = get_settings().max_snoozes
    if done >= limit:
        return dataclasses.replace(
            outcome,
            snooze=None,
            message=(
                f"{outcome.message}; the job has snoozed {done} times "
                f"(ARCATURE['MAX_SNOOZES'] = {limit}), so this snooze uses an attempt"
            ),
        )
    log = [*claimed.attempt_log, {"worker": worker_id, "error": None, "snoozed": outcome.snooze}]
    return Completion(
        claimed.id,
        claimed.claim_token,
        "retry",
        available_at=timezone.now() + timedelta(seconds=outcome.snooze),
        message=outcome.message,
        attempt_log=log,
        retry_delay=outcome.snooze,
        decided_monotonic=time.monotonic(),
        attempts=max(0, claimed.attempts - 1),
    )


def attempt_error(outcome: DispatchOutcome) -> dict[str, str] | None:
    """The attempt-log ``error`` for one outcome, shaped like django.tasks' TaskError."""
    match outcome:
        case Succeeded():
            return None
        case (
            HandlerError(exception_type=path, traceback=tb, message=message)
            | Panic(exception_type=path, traceback=tb, message=message)
        ):
            return {
                "exception_class_path": path or "builtins.Exception",
                "traceback": tb or message,
            }
        case Malformed(reason=reason):
            return {"exception_class_path": qualified_name(MalformedPayload), "traceback": reason}
        case Unknown():
            return {
                "exception_class_path": qualified_name(UnknownTask),
                "traceback": outcome.message,
            }
        case Timeout(seconds=seconds):
            return {
                "exception_class_path": qualified_name(TimeoutError),
                "traceback": f"the attempt exceeded its timeout of {seconds:g}s",
            }
    raise TypeError(f"not a dispatch outcome: {outcome!r}")  # pragma: no cover
