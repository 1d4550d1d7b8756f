"""OpenTelemetry traces from the request to the job (``pip install django-arcature[otel]``).

Call :func:`install` once per process (web and worker), e.g. in your AppConfig's
``ready()`` after configuring the SDK. Then:

* each enqueue call opens a PRODUCER span ``send {queue}`` (a child of whatever
  span is current, typically the web request's), and its trace context is stored
  with every job of the call (``Job.trace_context``, W3C ``traceparent``);
  the span ends when the insert has committed (``job_enqueued``), so an enqueue
  rolled back with its transaction is never reported as sent;
* each attempt runs inside a CONSUMER span ``process {queue}``, a child of the
  producer span, even in another process and on every retry; it is the current
  span while the handler runs, so the handler's own spans nest under it;
* the span ends when the attempt's outcome has been written: its status and
  ``arcature.outcome`` come from the landed write (succeeded, retried, dead)
  or say that the write was fenced out (``lost``) or the job handed back
  (``released``). Failures set the status to ERROR with ``error.type`` (the
  error kind) and an ``exception`` event carrying the handler's traceback.

Workflow nodes (``django_arcature.Workflow``) enqueued while tracing is on: a
node's attempt span carries a **link** to the attempt span of each of its
upstream nodes (at most :data:`MAX_UPSTREAM_LINKS`), so a trace viewer can walk
a fan-in back to every branch. The upstream attempt stores its span's context in
its own job row (``trace_context["arcature-process"]``, written under its claim
when it starts, so it is there before its completion can release a dependent);
the dependent reads them when its attempt starts. Plain jobs pay nothing for
this: only nodes marked at enqueue (``"arcature-node"``) read or write.

Attributes follow OpenTelemetry's messaging conventions (``messaging.system``,
``messaging.operation.type``/``.name``, ``messaging.destination.name``,
``messaging.message.id``, ``messaging.batch.message_count``,
``messaging.client.id``), plus ``arcature.task``, ``arcature.attempt`` and
``arcature.outcome``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider

from django_arcature import __version__, signals

SYSTEM = "arcature"
#: Producer spans whose enqueue has not committed yet; past this many (rolled-back
#: enqueues never commit) the oldest are forgotten without being exported.
MAX_PENDING_PRODUCERS = 10_000

#: Links from one node's attempt to its upstream attempts (the SDK keeps 128 by default).
MAX_UPSTREAM_LINKS = 128
#: Where a node's attempt stores its span's context for its dependents.
PROCESS_KEY = "arcature-process"
NODE_KEY = "arcature-node"

logger = logging.getLogger(__name__)

_UID = "arcature-otel"
_tracer: trace.Tracer | None = None
_lock = threading.Lock()
_producers: OrderedDict[str, Span] = OrderedDict()


@dataclass
class _Attempt:
    span: Span
    token: object | None
    ended_ns: int | None = None


_attempts: dict[tuple[uuid.UUID, uuid.UUID], _Attempt] = {}


def _get_tracer() -> trace.Tracer:
    return _tracer if _tracer is not None else trace.get_tracer(__name__, __version__)


# --- producer -------------------------------------------------------------------------


def _on_enqueuing(
    sender: Any, task_name: str, queue: str, count: int, **kwargs: Any
) -> dict[str, str]:
    """Open the producer span and return the carrier to store with the call's jobs."""
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": queue,
        "arcature.task": task_name,
    }
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    span = _get_tracer().start_span(f"send {queue}", kind=SpanKind.PRODUCER, attributes=attributes)
    carrier: dict[str, str] = {}
    inject(carrier, context=trace.set_span_in_context(span))
    key = carrier.get("traceparent", "")
    if key:
        with _lock:
            _producers[key] = span
            while len(_producers) > MAX_PENDING_PRODUCERS:
                _producers.popitem(last=False)
    return carrier


def _on_enqueued(sender: Any, job: Any, **kwargs: Any) -> None:
    carrier = getattr(job, "trace_context", None) or {}
    key = carrier.get("traceparent") if isinstance(carrier, dict) else None
    if not key:
        return
    with _lock:
        span = _producers.pop(key, None)
    if span is None:  # a later job of the same batch: the span has ended already
        return
    span.set_attribute("messaging.message.id", str(job.pk))
    span.end()


# --- consumer -------------------------------------------------------------------------


def _on_attempt_started(sender: Any, job: Any, worker_id: str = "", **kwargs: Any) -> None:
    carrier = job.trace_context if isinstance(getattr(job, "trace_context", None), dict) else {}
    parent = extract(carrier) if carrier else None
    flags = carrier.get(NODE_KEY, "")
    flags = flags if isinstance(flags, str) else ""
    span = _get_tracer().start_span(
        f"process {job.queue}",
        context=parent,
        links=_upstream_links(job.id) if "u" in flags else None,
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "messaging.client.id": worker_id,
            "arcature.task": job.task_name,
            "arcature.attempt": job.attempts,
            "arcature.max_attempts": job.max_attempts,
        },
    )
    token = otel_context.attach(trace.set_span_in_context(span))
    with _lock:
        _attempts[(job.id, job.claim_token)] = _Attempt(span, token)
    if "d" in flags:
        _store_for_dependents(job, carrier, span)


def _upstream_links(job_id: uuid.UUID) -> list[Link]:
    """Links to the attempt spans of this node's upstream nodes, as they stored them."""
    from django.db import DatabaseError

    from django_arcature.conf import job_database
    from django_arcature.models import Job
    from django_arcature.workflows.models import WorkflowEdge

    using = job_database()
    try:
        upstream = (
            WorkflowEdge.objects.using(using).filter(downstream_id=job_id).values("upstream_id")
        )
        carriers = list(
            Job.objects.using(using)
            .filter(id__in=upstream)
            .order_by("id")
            .values_list("trace_context", flat=True)[:MAX_UPSTREAM_LINKS]
        )
    except DatabaseError as exc:  # tracing never stops a job from running
        logger.warning("could not read the upstream spans of job %s: %s", job_id, exc)
        return []
    links = []
    for stored in carriers:
        parent = stored.get(PROCESS_KEY) if isinstance(stored, dict) else None
        if not isinstance(parent, str):
            continue
        context = trace.get_current_span(extract({"traceparent": parent})).get_span_context()
        if context.is_valid:
            links.append(Link(context, {"arcature.link": "upstream"}))
    return links


def _store_for_dependents(job: Any, carrier: dict[str, Any], span: Span) -> None:
    """Write this attempt's span context into its job row, under its claim."""
    from django.db import DatabaseError

    from django_arcature.conf import job_database
    from django_arcature.models import Job, JobStatus

    mine: dict[str, str] = {}
    inject(mine, context=trace.set_span_in_context(span))
    if "traceparent" not in mine:
        return
    try:
        Job.objects.using(job_database()).filter(
            id=job.id, claim_token=job.claim_token, status=JobStatus.RUNNING
        ).update(trace_context={**carrier, PROCESS_KEY: mine["traceparent"]})
    except DatabaseError as exc:
        logger.warning("could not store the span of job %s for its dependents: %s", job.id, exc)


def _on_attempt_finished(sender: Any, job: Any, **kwargs: Any) -> None:
    with _lock:
        attempt = _attempts.get((job.id, job.claim_token))
    if attempt is None:
        return
    if attempt.token is not None:
        otel_context.detach(attempt.token)  # type: ignore[arg-type]
        attempt.token = None
    attempt.ended_ns = time.time_ns()


def _end(key: tuple[uuid.UUID, uuid.UUID | None], outcome: str, completion: Any = None) -> None:
    with _lock:
        if key[1] is None:
            found = next((k for k in _attempts if k[0] == key[0]), None)
            attempt = _attempts.pop(found, None) if found else None
        else:
            attempt = _attempts.pop(key, None)  # type: ignore[arg-type]
    if attempt is None:
        return
    span = attempt.span
    span.set_attribute("arcature.outcome", outcome)
    if completion is not None and completion.kind in {"retry", "dead"}:
        error_kind = completion.error_kind or "retry"
        span.set_attribute("error.type", error_kind)
        span.set_status(Status(StatusCode.ERROR, completion.message[:500] or error_kind))
        span.add_event(
            "exception",
            {
                "exception.type": error_kind,
                "exception.message": completion.message,
                "exception.stacktrace": completion.traceback,
            },
        )
    elif outcome == "lost":
        span.set_status(Status(StatusCode.ERROR, "claim lost: the outcome was not written"))
    span.end(end_time=attempt.ended_ns)


def _on_outcome(sender: Any, job_id: uuid.UUID, completion: Any, **kwargs: Any) -> None:
    outcome = {"succeeded": "succeeded", "retry": "retried", "dead": "dead"}[completion.kind]
    _end((job_id, completion.claim_token), outcome, completion)


def _on_claim_lost(sender: Any, job_id: uuid.UUID, claim_token: uuid.UUID, **kwargs: Any) -> None:
    _end((job_id, claim_token), "lost")


def _on_released(sender: Any, job_id: uuid.UUID, **kwargs: Any) -> None:
    _end((job_id, kwargs.get("claim_token")), "released")


_RECEIVERS = (
    (signals.jobs_enqueuing, _on_enqueuing),
    (signals.job_enqueued, _on_enqueued),
    (signals.job_attempt_started, _on_attempt_started),
    (signals.job_attempt_finished, _on_attempt_finished),
    (signals.job_succeeded, _on_outcome),
    (signals.job_retried, _on_outcome),
    (signals.job_dead, _on_outcome),
    (signals.job_claim_lost, _on_claim_lost),
    (signals.job_released, _on_released),
)


def install(tracer_provider: TracerProvider | None = None) -> None:
    """Trace enqueues and attempts in this process (idempotent).

    ``tracer_provider`` defaults to the global one (``trace.set_tracer_provider``).
    """
    global _tracer
    _tracer = trace.get_tracer(__name__, __version__, tracer_provider=tracer_provider)
    for signal, receiver in _RECEIVERS:
        signal.connect(receiver, dispatch_uid=f"{_UID}:{receiver.__name__}:{id(signal)}")


def uninstall() -> None:
    global _tracer
    for signal, receiver in _RECEIVERS:
        signal.disconnect(receiver, dispatch_uid=f"{_UID}:{receiver.__name__}:{id(signal)}")
    with _lock:
        _producers.clear()
        _attempts.clear()
    _tracer = None
