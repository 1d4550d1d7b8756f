"""The named transitions: what each fenced outcome writes, built in one place each.

A completion is a ``Completion`` (which outcome, for which claim); its fields
come from ``transition_fields`` and nowhere else, so no caller can mix fields of
two outcomes. ``announce`` sends the one observer event a fenced write earns:
its own if it landed, ``job_claim_lost`` if it was fenced out, never both.
"""

from __future__ import annotations

import enum
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F
from django.db.models.functions import Coalesce

from . import signals
from .conf import MAX_LEASE_SECONDS, get_settings
from .core.decide import ErrorKind as DecidedErrorKind
from .core.text import truncate_for_storage
from .db import DatabaseNow
from .states import JobStatus

__all__ = [
    "ClaimTransition",
    "Completion",
    "announce",
    "claimed_fields",
    "dead_fields",
    "lease_fields",
    "retry_fields",
    "succeeded_fields",
    "transition_fields",
    "whole_seconds",
]


class ClaimTransition(enum.Enum):
    """Whether a fenced write changed the row (``UPDATED``) or was fenced out (``LOST``)."""

    UPDATED = "updated"
    LOST = "lost"

    @classmethod
    def from_rowcount(cls, rows: int) -> ClaimTransition:
        return cls.UPDATED if rows > 0 else cls.LOST


@dataclass(frozen=True)
class Completion:
    """One fenced write for :meth:`JobManager.complete_many`.

    ``kind`` is ``"succeeded"``, ``"retry"`` or ``"dead"``; the other fields are
    those the matching ``mark_*`` method takes.
    """

    job_id: uuid.UUID
    claim_token: uuid.UUID
    kind: str
    result: Any = None
    available_at: datetime | None = None
    error_kind: str = ""
    message: str = ""
    traceback: str = ""
    attempt_log: list[Any] | None = None
    #: A retry's wait in seconds, counted on the database's clock when the write lands
    #: (``available_at`` is then only the worker's estimate, for observers). Without
    #: it, a retry is written for ``available_at`` as given.
    retry_delay: float | None = None
    #: ``time.monotonic()`` when ``retry_delay`` was decided: a batched write that lands
    #: later waits only what is left of the backoff, still on the database's clock.
    decided_monotonic: float | None = None


def lease_fields(lease_seconds: int) -> dict[str, Any]:
    """A fresh lease from the database's now: what a claim and a heartbeat both stamp."""
    return {
        "locked_at": DatabaseNow(),
        "lease_seconds": lease_seconds,
        "lease_expires_at": DatabaseNow(lease_seconds),
    }


def claimed_fields(token: Any, worker_id: str, lease_seconds: int) -> dict[str, Any]:
    """pending → running under a new claim token (``token`` may be a per-row CASE)."""
    return {
        "status": JobStatus.RUNNING,
        "attempts": F("attempts") + 1,
        "claim_token": token,
        "locked_by": worker_id,
        "started_at": Coalesce("started_at", DatabaseNow()),
        **lease_fields(lease_seconds),
    }


def succeeded_fields(result: Any) -> dict[str, Any]:
    return {
        "status": JobStatus.SUCCEEDED,
        "claim_token": None,
        "unique_key": None,
        "lease_expires_at": None,
        "finished_at": DatabaseNow(),
        "result": result,
    }


def retry_fields(
    available_at: datetime | DatabaseNow, message: str, traceback: str
) -> dict[str, Any]:
    return {
        "status": JobStatus.PENDING,
        "claim_token": None,
        "lease_expires_at": None,
        "available_at": available_at,
        "last_error": message,
        "last_traceback": traceback,
    }


def dead_fields(error_kind: str, message: str, traceback: str) -> dict[str, Any]:
    return {
        "status": JobStatus.DEAD,
        "claim_token": None,
        "unique_key": None,
        "lease_expires_at": None,
        "error_kind": str(error_kind),
        "last_error": message,
        "last_traceback": traceback,
        "failed_at": DatabaseNow(),
        "finished_at": DatabaseNow(),
    }


def known_error_kind(value: str) -> str:
    try:
        return DecidedErrorKind(value).value
    except ValueError:
        known = ", ".join(kind.value for kind in DecidedErrorKind)
        raise ValueError(f"unknown error kind {value!r}; use one of {known}") from None


def announce(sender: type[Any], completion: Completion, outcome: ClaimTransition) -> None:
    """Send the observer event for a fenced write: its own event if it landed,
    ``job_claim_lost`` if it was fenced out (and never both)."""
    if outcome is ClaimTransition.LOST:
        signals.job_claim_lost.send(
            sender=sender,
            job_id=completion.job_id,
            claim_token=completion.claim_token,
            attempted=completion.kind,
        )
        return
    signal = {
        "succeeded": signals.job_succeeded,
        "retry": signals.job_retried,
        "dead": signals.job_dead,
    }[completion.kind]
    signal.send(sender=sender, job_id=completion.job_id, completion=completion)


def whole_seconds(lease: float | timedelta) -> int:
    seconds = lease.total_seconds() if isinstance(lease, timedelta) else float(lease)
    if not 1 <= seconds <= MAX_LEASE_SECONDS:  # also refuses NaN
        raise ValueError(f"a lease must be from 1 to {MAX_LEASE_SECONDS} seconds, not {lease!r}")
    return round(seconds)


def transition_fields(completion: Completion) -> dict[str, Any]:
    """The fields one fenced completion writes: its named transition, texts cut to size."""
    conf = get_settings()
    if completion.kind == "succeeded":
        fields = succeeded_fields(completion.result)
    elif completion.kind == "retry":
        when: datetime | DatabaseNow
        if completion.retry_delay is not None:
            waited = 0.0
            if completion.decided_monotonic is not None:
                waited = time.monotonic() - completion.decided_monotonic
            when = DatabaseNow(max(0.0, completion.retry_delay - waited))
        elif completion.available_at is not None:
            when = completion.available_at
        else:
            raise ValueError("a retry needs retry_delay or available_at")
        fields = retry_fields(
            when,
            truncate_for_storage(completion.message, conf.message_max_bytes),
            truncate_for_storage(completion.traceback, conf.traceback_max_bytes),
        )
    elif completion.kind == "dead":
        fields = dead_fields(
            known_error_kind(completion.error_kind),
            truncate_for_storage(completion.message, conf.message_max_bytes),
            truncate_for_storage(completion.traceback, conf.traceback_max_bytes),
        )
    else:
        raise ValueError(f"unknown completion kind {completion.kind!r}")
    if completion.attempt_log is not None:
        fields["attempt_log"] = completion.attempt_log
    return fields
