"""Observer events. Each is sent only after the write it reports actually landed.

A fenced write that affected no row (the claim was lost) sends
``job_claim_lost`` instead of its own event: a stale worker's success must not
look like a success to anyone listening.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

#: A job row was inserted. kwargs: ``job``.
job_enqueued = Signal()
#: A worker's fenced success landed. kwargs: ``job_id``, ``completion``.
job_succeeded = Signal()
#: A worker's fenced retry landed; the job is pending again. kwargs: ``job_id``, ``completion``.
job_retried = Signal()
#: A worker's fenced death landed. kwargs: ``job_id``, ``completion`` (with ``error_kind``).
job_dead = Signal()
#: A worker's write was fenced out. kwargs: ``job_id``, ``claim_token``, ``attempted``.
job_claim_lost = Signal()
#: Expired leases were swept. kwargs: ``job_ids``, ``requeued``, ``dead``.
jobs_swept = Signal()
#: A running job was handed back unfinished (graceful shutdown). kwargs: ``job_id``.
job_released = Signal()
#: An operator cancelled a job. kwargs: ``job_id``.
job_cancelled = Signal()
#: An operator requeued a dead job. kwargs: ``job_id``.
job_requeued = Signal()

# --- Events for metrics and traces (django_arcature.contrib) ------------------------------
# The claim is a landed write like the others; the attempt events are sent by the
# thread that runs the handler, before and after it runs, and report no write:
# an observer learns the attempt's outcome only from the landed-write events above.

#: One enqueue call is about to build its rows. kwargs: ``task_name``, ``queue``,
#: ``count``. A receiver may return a dict of strings (a trace context carrier),
#: stored with every job of the call as ``Job.trace_context``.
jobs_enqueuing = Signal()
#: A claim landed, sent once it has committed (a limited queue's claim runs in a
#: transaction of its own, a caller's may surround it). kwargs: ``jobs`` (the
#: :class:`~django_arcature.db.ClaimedJob` list), ``worker_id``.
jobs_claimed = Signal()
#: A handler is about to run, in this thread (sender: ClaimedJob). kwargs: ``job``, ``worker_id``.
job_attempt_started = Signal()
#: The handler has returned or raised and its outcome is decided, not yet written.
#: kwargs: ``job``, ``completion``, ``seconds`` (how long the handler ran).
job_attempt_finished = Signal()


def notify(signal: Signal, sender: type[Any], **kwargs: Any) -> list[tuple[Any, Any]]:
    """Send an observer event; a receiver that raises is logged, never propagated.

    Metrics, tracing and error reporting must not be able to break the write
    path or the worker. ``send_robust`` logs a failing receiver's exception
    with its traceback (logger ``django.dispatch``) and returns it in place of
    its response.
    """
    # ``receivers`` empty (the usual worker: no metrics, no tracing) answers without
    # ``has_listeners``, which takes the signal's lock and walks its list: twice a job.
    if not signal.receivers or not signal.has_listeners(sender):
        return []
    return signal.send_robust(sender, **kwargs)
