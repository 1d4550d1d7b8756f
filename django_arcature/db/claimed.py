"""What a claim hands a worker: the job's identity, payload and the token that fences it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class ClaimedJob:
    """What a worker needs to run a job it now owns, and to fence its writes."""

    id: uuid.UUID
    task_name: str
    queue: str
    priority: int
    payload: Any
    attempts: int
    max_attempts: int
    claim_token: uuid.UUID
    lease_seconds: int
    backend: str = ""
    attempt_log: list[Any] = field(default_factory=list)
    #: When the job became claimable (for the queue-wait metric).
    available_at: datetime | None = None
    #: The enqueuing span's context, when tracing is on (django_arcature.contrib.otel).
    trace_context: dict[str, Any] = field(default_factory=dict)

    def log_extra(self) -> dict[str, Any]:
        """The ``extra`` fields of every log record about this job (job id, task, queue,
        attempt), for JSON formatters and structlog (docs/observability.md)."""
        return {
            "job_id": str(self.id),
            "task": self.task_name,
            "queue": self.queue,
            "attempt": self.attempts,
        }


CLAIM_COLUMNS = (
    "id",
    "task_name",
    "queue",
    "priority",
    "payload",
    "attempts",
    "max_attempts",
    "claim_token",
    "lease_seconds",
    "backend",
    "attempt_log",
    "available_at",
    "trace_context",
)


def as_uuid(value: object) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _as_datetime(value: object) -> datetime | None:
    """A raw SQLite row carries the timestamp as text, in UTC; the others a datetime."""
    if value is None or isinstance(value, datetime):
        moment = value
    else:
        moment = datetime.fromisoformat(str(value))
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def _as_json(value: object) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def claimed_from_row(row: Sequence[Any], *, json_decoded: bool = False) -> ClaimedJob:
    """Build the claimed job from a row of ``CLAIM_COLUMNS``.

    Rows from a raw cursor carry JSON columns as text (Django has the drivers
    leave decoding to the field); rows from ``values_list`` are decoded already,
    and decoding those again would turn a payload that is a bare JSON string
    into something else, or fail. ``json_decoded`` says which kind this is.
    """
    values = dict(zip(CLAIM_COLUMNS, row, strict=True))
    decode = (lambda value: value) if json_decoded else _as_json
    log = decode(values["attempt_log"])
    trace_context = decode(values["trace_context"])
    return ClaimedJob(
        id=as_uuid(values["id"]),
        task_name=values["task_name"],
        queue=values["queue"],
        priority=values["priority"],
        payload=decode(values["payload"]),
        attempts=values["attempts"],
        max_attempts=values["max_attempts"],
        claim_token=as_uuid(values["claim_token"]),
        lease_seconds=values["lease_seconds"],
        backend=values["backend"] or "",
        attempt_log=log if isinstance(log, list) else [],
        available_at=_as_datetime(values["available_at"]),
        trace_context=trace_context if isinstance(trace_context, dict) else {},
    )
