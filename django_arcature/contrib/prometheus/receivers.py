"""Signal receivers that turn landed writes into counter and histogram updates.

Outcome events carry only the job id and its completion, so the queue and task
of each attempt are remembered from the claim (``jobs_claimed``) under the key
``(job id, claim token)`` until its outcome lands, is fenced out, or the job is
released. Keyed by the token, a stale completion of an earlier claim of the
same job can never be counted against the current one.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from django_arcature import signals

from . import metrics

_OUTCOMES = {"succeeded": "succeeded", "retry": "retried", "dead": "dead"}


@dataclass
class _Attempt:
    queue: str
    task: str
    seconds: float | None = None


_attempts: dict[tuple[uuid.UUID, uuid.UUID], _Attempt] = {}
_lock = threading.Lock()
_installed = False
_UID = "arcature-prometheus"


def _on_enqueued(sender: Any, job: Any, **kwargs: Any) -> None:
    metrics.ENQUEUED.labels(job.queue, job.task_name).inc()


def _on_claimed(sender: Any, jobs: Any, **kwargs: Any) -> None:
    now = time.time()
    with _lock:
        for job in jobs:
            _attempts[(job.id, job.claim_token)] = _Attempt(job.queue, job.task_name)
    for job in jobs:
        metrics.STARTED.labels(job.queue, job.task_name).inc()
        available_at = getattr(job, "available_at", None)
        if available_at is not None:
            wait = max(0.0, now - available_at.timestamp())
            metrics.QUEUE_WAIT_SECONDS.labels(job.queue, job.task_name).observe(wait)


def _on_attempt_finished(sender: Any, job: Any, seconds: float, **kwargs: Any) -> None:
    with _lock:
        attempt = _attempts.get((job.id, job.claim_token))
        if attempt is not None:
            attempt.seconds = seconds


def _pop(job_id: uuid.UUID, claim_token: uuid.UUID | None) -> _Attempt | None:
    with _lock:
        if claim_token is not None:
            return _attempts.pop((job_id, claim_token), None)
        for key in [key for key in _attempts if key[0] == job_id]:
            return _attempts.pop(key)
    return None


def _on_outcome(sender: Any, job_id: uuid.UUID, completion: Any, **kwargs: Any) -> None:
    attempt = _pop(job_id, completion.claim_token)
    queue, task = (attempt.queue, attempt.task) if attempt else ("", "")
    error_kind = completion.error_kind if completion.kind == "dead" else ""
    metrics.FINISHED.labels(queue, task, _OUTCOMES[completion.kind], error_kind).inc()
    if attempt is not None and attempt.seconds is not None:
        metrics.RUN_SECONDS.labels(queue, task).observe(attempt.seconds)


def _on_claim_lost(
    sender: Any, job_id: uuid.UUID, claim_token: uuid.UUID, attempted: str = "", **kwargs: Any
) -> None:
    # Counted once per attempt: a heartbeat that finds the claim gone counts it,
    # and the attempt's own completion, fenced out later, then finds no entry.
    attempt = _pop(job_id, claim_token)
    if attempt is not None:
        metrics.FINISHED.labels(attempt.queue, attempt.task, "lost", "").inc()


def _on_released(sender: Any, job_id: uuid.UUID, **kwargs: Any) -> None:
    attempt = _pop(job_id, kwargs.get("claim_token"))
    if attempt is not None:
        metrics.RELEASED.labels(attempt.queue, attempt.task).inc()


def _on_swept(sender: Any, requeued: int = 0, dead: int = 0, **kwargs: Any) -> None:
    if requeued:
        metrics.SWEPT.labels("requeued").inc(requeued)
    if dead:
        metrics.SWEPT.labels("dead").inc(dead)


_RECEIVERS = (
    (signals.job_enqueued, _on_enqueued),
    (signals.jobs_claimed, _on_claimed),
    (signals.job_attempt_finished, _on_attempt_finished),
    (signals.job_succeeded, _on_outcome),
    (signals.job_retried, _on_outcome),
    (signals.job_dead, _on_outcome),
    (signals.job_claim_lost, _on_claim_lost),
    (signals.job_released, _on_released),
    (signals.jobs_swept, _on_swept),
)


def install() -> None:
    """Connect the receivers (idempotent). The worker's ``--metrics-port`` calls this."""
    global _installed
    for signal, receiver in _RECEIVERS:
        signal.connect(receiver, dispatch_uid=f"{_UID}:{receiver.__name__}:{id(signal)}")
    _installed = True


def uninstall() -> None:
    """Disconnect the receivers (for tests and benchmarks measuring their cost)."""
    global _installed
    for signal, receiver in _RECEIVERS:
        signal.disconnect(receiver, dispatch_uid=f"{_UID}:{receiver.__name__}:{id(signal)}")
    with _lock:
        _attempts.clear()
    _installed = False
